"""Chunked reading of numeric CSV files (plain or gzipped), as OGB ships them.

Every reader that takes CSV input goes through `csv_chunks`: pandas' C parser
reads a bounded number of rows at a time, and each chunk is checked before it
is handed on, so that a bad file ends in one `DatasetError` naming the file,
the data row (0-based, header excluded) and the problem: a missing file, a
.gz that is not gzip or is truncated, a row with the wrong number of fields,
an empty or non-numeric field, a non-integer where an integer is needed.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

CHUNK_BYTES = 32 << 20  # parsed values held at once: chunk rows = CHUNK_BYTES // (8 * columns)
_NAN_TEXT = ["nan", "NaN", "NAN", "-nan", "-NaN"]
_LINE = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


def _pandas_errors():
    import pandas as pd

    return pd.errors.ParserError, pd.errors.EmptyDataError


def _io_problem(err: BaseException) -> str:
    """The one-line description of a read failure below the CSV parser."""
    import gzip

    if isinstance(err, FileNotFoundError):
        return "file not found"
    if isinstance(err, IsADirectoryError):
        return "is a directory, expected a file"
    if isinstance(err, gzip.BadGzipFile):
        return f"not a valid gzip file ({err})"
    if isinstance(err, EOFError):
        return "truncated: the compressed data ends early"
    if isinstance(err, zlib.error):
        return f"corrupt compressed data ({err})"
    if isinstance(err, UnicodeDecodeError):
        return "not a text file"
    return f"cannot read ({err})"


def _reader(path: Path, header: bool, chunk_rows: int, nrows=None, dtype=None):
    import pandas as pd

    return pd.read_csv(
        path,
        header=None,
        skiprows=1 if header else 0,
        chunksize=chunk_rows,
        nrows=nrows,
        dtype=dtype,
        engine="c",
        keep_default_na=False,
        na_values=_NAN_TEXT,
        skip_blank_lines=False,
        compression="infer",
    )


def _guarded(path: Path, header: bool, chunk_rows: int, nrows=None, dtype=None, allow_empty: bool = False) -> Iterator:
    """pandas DataFrame chunks of `path`, every parser and I/O failure turned
    into a DatasetError (rows counted from 0 after the header); an empty
    file is one unless `allow_empty` (then it yields nothing)."""
    ParserError, EmptyDataError = _pandas_errors()
    try:
        yield from _reader(path, header, chunk_rows, nrows, dtype)
    except EmptyDataError:
        if allow_empty:
            return
        raise DatasetError(path, "empty file") from None
    except ParserError as e:
        m = _LINE.search(str(e))
        if m is None:
            raise DatasetError(path, f"cannot parse ({str(e).strip()})") from None
        want, line, saw = (int(g) for g in m.groups())
        raise DatasetError(path, f"{saw} fields, expected {want}", row=line - 1 - int(header)) from None
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        raise DatasetError(path, _io_problem(e)) from None


def _first_row(path: Path, header: bool) -> list:
    for frame in _guarded(path, header, 1, nrows=1):
        return frame.iloc[0].tolist()
    raise DatasetError(path, "no data rows")


def has_header(path) -> bool:
    """Whether the first line of `path` holds a non-numeric field (a header)."""
    path = Path(path)
    for value in _first_row(path, header=False):
        try:
            float(value)
        except (TypeError, ValueError):
            return True
    return False


def count_columns(path, header: bool = False) -> int:
    """The number of fields on the first data row of `path`."""
    return len(_first_row(Path(path), header))


def _numeric(frame, path: Path, first_row: int, dtype) -> np.ndarray:
    """The chunk as a [rows, columns] array of `dtype`; raises on an empty,
    non-numeric or (for integer dtypes) non-integer field."""
    import pandas as pd

    integer = np.issubdtype(dtype, np.integer)
    for c, name in enumerate(frame.columns):
        col = frame[name]
        if pd.api.types.is_numeric_dtype(col.dtype) and col.dtype != object:
            values = col.to_numpy()
        else:
            values = pd.to_numeric(col, errors="coerce").to_numpy(np.float64)
            bad = np.flatnonzero(np.isnan(values) & col.notna().to_numpy())
            if bad.size:
                text = col.iloc[bad[0]]
                problem = "empty or missing field" if str(text).strip() == "" else f"non-numeric field {text!r}"
                raise DatasetError(path, f"{problem} in column {c + 1}", row=first_row + int(bad[0]))
        if integer and values.dtype.kind == "f":
            bad = np.flatnonzero(~np.isfinite(values) | (values != np.round(values)) | (np.abs(values) >= 2**62))
            if bad.size:
                raise DatasetError(
                    path,
                    f"column {c + 1} holds {float(values[bad[0]]):g}, expected an integer",
                    row=first_row + int(bad[0]),
                )
        if integer and values.dtype.kind in "iu" and values.size:
            limits = np.iinfo(dtype)
            bad = np.flatnonzero((values < limits.min) | (values > limits.max))
            if bad.size:
                raise DatasetError(
                    path,
                    f"column {c + 1} holds {int(values[bad[0]])}, beyond {dtype} ({limits.min}..{limits.max})",
                    row=first_row + int(bad[0]),
                )
    return frame.to_numpy(dtype=dtype)


def csv_chunks(
    path, *, columns: int, dtype, header: bool = False, chunk_rows: int | None = None, allow_empty: bool = False
) -> Iterator[np.ndarray]:
    """Yield [rows, columns] arrays of `dtype` covering `path` in order.

    `header` skips the first line; `chunk_rows` defaults to a chunk of about
    CHUNK_BYTES of parsed values. A row with another number of fields than
    `columns` is an error, as is any field that is empty or not a number,
    and a file without rows unless `allow_empty` (a relation with no edges).
    """
    path = Path(path)
    dtype = np.dtype(dtype)
    chunk_rows = chunk_rows or max(1, CHUNK_BYTES // (8 * columns))
    row = 0
    for frame in _guarded(path, header, chunk_rows, allow_empty=allow_empty):
        if frame.shape[1] != columns:
            raise DatasetError(path, f"{frame.shape[1]} fields, expected {columns}", row=row)
        yield _numeric(frame, path, row, dtype)
        row += frame.shape[0]
    if row == 0 and not allow_empty:
        raise DatasetError(path, "no data rows")


def read_csv(path, *, columns: int = 1, dtype=np.int64, header: bool = False) -> np.ndarray:
    """The whole of a small CSV file: [rows] if `columns` is 1, else [rows, columns]."""
    data = np.concatenate(list(csv_chunks(path, columns=columns, dtype=dtype, header=header)))
    return data[:, 0] if columns == 1 else data


def read_text_rows(path, max_rows: int = 1 << 16) -> list[list[str]]:
    """Every row of a small CSV file (plain or gzipped) as stripped strings,
    header lines included: OGB's tables of names (num-node-dict.csv.gz,
    triplet-type-list.csv.gz). Rows must all have the first row's number of
    fields; more than `max_rows` rows is an error."""
    path = Path(path)
    rows = [
        [str(v).strip() for v in row]
        for frame in _guarded(path, False, max_rows + 1, nrows=max_rows + 1, dtype=str)
        for row in frame.itertuples(index=False)
    ]
    if not rows:
        raise DatasetError(path, "no data rows")
    if len(rows) > max_rows:
        raise DatasetError(path, f"more than {max_rows} rows; expected a small table of names")
    return rows


def read_count(path) -> int:
    """The single non-negative integer of a one-graph OGB count file
    (num-node-list.csv.gz, num-edge-list.csv.gz)."""
    values = read_csv(path)
    if values.size != 1:
        raise DatasetError(path, f"{values.size} rows, expected one count (a single graph)")
    if values[0] < 0:
        raise DatasetError(path, f"negative count {values[0]}", row=0)
    return int(values[0])
