"""Reading arrays in .npy format, a .npy file or a member of an .npz
(compressed or not), in slices, shared by the ogb, arrays and npz readers.

`NpyArray` parses the header with numpy.lib.format and reads rows from the
file or zip member handle, so memory is bounded by the slice and not by the
array; it never unpickles (an array of Python objects is refused).
`integer_labels` and `mask_ids` turn what they read into labels and node ids.
"""

from __future__ import annotations

import contextlib
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from gnnsys.errors import DatasetError

from .csv_reader import CHUNK_BYTES


def npz_keys(path) -> list[str]:
    """The array names in an .npz archive."""
    path = Path(path)
    with _guard(path):
        with zipfile.ZipFile(path) as zf:
            return [n[:-4] for n in zf.namelist() if n.endswith(".npy")]


@contextlib.contextmanager
def _guard(label):
    """Turn a failure to read a file or archive member into a DatasetError."""
    try:
        yield
    except FileNotFoundError:
        raise DatasetError(label, "file not found") from None
    except IsADirectoryError:
        raise DatasetError(label, "is a directory, expected a file") from None
    except zipfile.BadZipFile as e:
        raise DatasetError(label, f"not a valid npz/zip archive or corrupt ({e})") from None
    except (zlib.error, EOFError) as e:
        raise DatasetError(label, f"corrupt or truncated compressed data ({e})") from None
    except (OSError, ValueError) as e:
        raise DatasetError(label, f"cannot read ({e})") from None


class NpyArray:
    """One array in .npy format (a .npy file, or the member `key` of an .npz),
    read whole or in slices without loading the rest.

    `label` names it in errors ("data.npz[edge_index]"); `shape`, `dtype` and
    `fortran_order` come from the header.
    """

    def __init__(self, path, key: str | None = None):
        self.path = Path(path)
        self.key = key
        self.label = str(self.path) if key is None else f"{self.path}[{key}]"
        if key is not None and key not in npz_keys(self.path):
            raise DatasetError(self.label, f"no array {key!r} in the archive (has {', '.join(npz_keys(self.path))})")
        with self._open() as f:
            self.offset = f.tell()
        if self.dtype.hasobject:
            raise DatasetError(self.label, "holds Python objects; expected a numeric array")

    def __len__(self):
        return self.shape[0] if self.shape else 1

    @contextlib.contextmanager
    def _open(self):
        """A binary handle positioned at the start of the data."""
        with _guard(self.label), contextlib.ExitStack() as stack:
            if self.key is None:
                f = stack.enter_context(open(self.path, "rb"))
            else:
                zf = stack.enter_context(zipfile.ZipFile(self.path))
                f = stack.enter_context(zf.open(self.key + ".npy"))
            version = np.lib.format.read_magic(f)
            read_header = {
                (1, 0): np.lib.format.read_array_header_1_0,
                (2, 0): np.lib.format.read_array_header_2_0,
            }.get(version)
            if read_header is None:
                raise DatasetError(self.label, f"unsupported .npy format version {version}")
            self.shape, self.fortran_order, self.dtype = read_header(f)
            yield f

    def _read(self, f, count: int) -> np.ndarray:
        out = np.empty(count, self.dtype)
        view = memoryview(out).cast("B")
        done = 0
        while done < view.nbytes:
            got = f.readinto(view[done:])
            if not got:
                raise DatasetError(self.label, f"truncated: {done} of {view.nbytes} bytes of data")
            done += got
        return out

    def read(self) -> np.ndarray:
        """The whole array (for the small ones: labels, masks, counts)."""
        with self._open() as f:
            flat = self._read(f, int(np.prod(self.shape)))
        return flat.reshape(self.shape, order="F" if self.fortran_order else "C")

    def row_chunks(self, rows: int | None = None) -> Iterator[np.ndarray]:
        """Slices [k, *shape[1:]] along the first axis, in order."""
        row_items = int(np.prod(self.shape[1:]))
        if self.fortran_order and len(self.shape) > 1 and row_items > 1:
            raise DatasetError(
                self.label,
                "is stored in Fortran order; save it in C order (numpy.ascontiguousarray) to read it in row slices",
            )
        rows = rows or max(1, CHUNK_BYTES // max(1, row_items * self.dtype.itemsize))
        with self._open() as f:
            for start in range(0, len(self), rows):
                k = min(rows, len(self) - start)
                yield self._read(f, k * row_items).reshape((k,) + tuple(self.shape[1:]))

    def pair_layout(self, prefer: str = "rows") -> str:
        """pair_layout of this array's shape."""
        return pair_layout(self.shape, self.label, prefer)

    def pair_chunks(self, layout: str, count: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(a, b) slices of a 2-column ("rows", [E, 2]) or 2-row ("columns", [2, E])
        array, `count` pairs at a time; in C or Fortran order."""
        n = self.shape[0] if layout == "rows" else self.shape[1]
        count = count or max(1, CHUNK_BYTES // (2 * self.dtype.itemsize))
        interleaved = (layout == "rows") != self.fortran_order
        if interleaved:
            with self._open() as f:
                for start in range(0, n, count):
                    pairs = self._read(f, 2 * min(count, n - start)).reshape(-1, 2)
                    yield pairs[:, 0], pairs[:, 1]
            return
        with self._open() as first, self._open() as second:
            _skip(second, n * self.dtype.itemsize)
            for start in range(0, n, count):
                k = min(count, n - start)
                yield self._read(first, k), self._read(second, k)


def pair_layout(shape, label: str, prefer: str = "rows") -> str:
    """ "rows" for an [E, 2] edge array, "columns" for [2, E]; `prefer` settles [2, 2]."""
    if len(shape) != 2 or 2 not in shape:
        raise DatasetError(label, f"shape {tuple(shape)}, expected [E, 2] or [2, E]")
    if shape[0] == shape[1] == 2:
        return prefer
    return "rows" if shape[1] == 2 else "columns"


def _skip(f, nbytes: int):
    """Advance a handle by `nbytes`. A zip member is read through in bounded
    pieces (ZipExtFile.seek would read up to 16 MiB at once)."""
    if not isinstance(f, zipfile.ZipExtFile):
        f.seek(nbytes, 1)
        return
    while nbytes > 0 and (got := len(f.read(min(nbytes, CHUNK_BYTES)))):
        nbytes -= got


def integer_labels(values: np.ndarray, label: str, num_nodes: int) -> np.ndarray:
    """Labels as int64 [num_nodes]: [N] or [N, 1], integers or integral floats,
    NaN (OGB's mark for no label) becoming -1."""
    values = np.asarray(values)
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.shape != (num_nodes,):
        raise DatasetError(label, f"shape {values.shape}, expected [{num_nodes}] (one label per node)")
    if values.dtype.kind == "f":
        known = ~np.isnan(values)
        bad = np.flatnonzero(known & ((values != np.round(values)) | ~np.isfinite(values)))
        if bad.size:
            raise DatasetError(label, f"label {values[bad[0]]:g} is not an integer", row=int(bad[0]))
        return np.where(known, values, -1).astype(np.int64)
    if values.dtype.kind not in "iu":
        raise DatasetError(label, f"labels must be integers, got {values.dtype}")
    return values.astype(np.int64)


def mask_ids(mask: np.ndarray, label: str, num_nodes: int) -> np.ndarray:
    """Node ids where a boolean (or 0/1) mask of length num_nodes is set."""
    mask = np.asarray(mask)
    if mask.shape != (num_nodes,):
        raise DatasetError(label, f"mask shape {mask.shape}, expected [{num_nodes}]")
    if mask.dtype != bool:
        if mask.dtype.kind not in "iu" or not np.isin(mask, (0, 1)).all():
            raise DatasetError(label, f"expected a boolean mask, got {mask.dtype} values")
    return np.flatnonzero(mask).astype(np.int64)
