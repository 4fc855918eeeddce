"""Where streaming inference (gnnsys.inference.layerwise) reads its input rows
and writes each layer's output: `FileRows` (block-aligned reads of a rows
file, O_DIRECT where the file system allows it, one range read ahead),
`SourceRows` (ranges gathered from any FeatureSource), `ScratchRows` (a
layer's output in a memory-mapped scratch file whose space is reserved up
front), `ArraySink` (the last layer's rows into an array)."""

from __future__ import annotations

import contextlib
import errno
import math
import os
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from gnnsys.datasets.features_file import DTYPES, decode_rows, encode_rows
from gnnsys.errors import ConfigError, GnnsysError
from gnnsys.identity import check_identity
from gnnsys.scratch import owned_temporary_directory
from gnnsys.storage.direct_io import BLOCKS, aligned, open_rows_file, short_read

OUTPUT_DTYPES = tuple(DTYPES)  # how a hidden layer's output is stored in its scratch file


class NoSpaceError(GnnsysError, OSError):
    """A disk cannot hold a file about to be written: names the file, what
    it is for, the bytes needed and free, and the remedy."""

    def __init__(self, path, needed: int, free: int, what: str, remedy: str):
        self.path, self.needed, self.free = str(path), needed, free
        super().__init__(f"{self.path}: not enough {what}: needs {needed:,} bytes, {free:,} free ({remedy})")


class ScratchSpaceError(NoSpaceError):
    """The scratch directory cannot hold a layer's output."""

    def __init__(self, path, needed: int, free: int):
        super().__init__(
            path, needed, free, "scratch space for a layer's output", "choose another scratch_dir, or a 16-bit dtype"
        )


class FileRows:
    """Rows [num_rows, stride] of a file read as float32 row ranges with
    block-aligned reads (O_DIRECT where the file system allows it);
    `bytes_read` counts the bytes the reads returned. `identity` (a
    datasets FileIdentity): the file opened must be that one (DatasetError). `read_async` reads the
    next range on a background thread while the caller computes."""

    def __init__(self, path, num_rows: int, stride: int, dim: int, dtype: torch.dtype, identity=None):
        self.path, self.num_rows, self.stride, self.dim, self.dtype = Path(path), num_rows, stride, dim, dtype
        self.file = open_rows_file(path, direct=None)
        try:
            check_identity(path, identity, self.file.fd)  # the file the run loaded, or one line
        except BaseException:
            os.close(self.file.fd)
            raise
        self.align_rows = align_rows(stride)
        self.bytes_read = 0
        self._buffers, self._floats, self._next = [], [], 0
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="gnnsys-inference-read")

    @property
    def row_bytes(self) -> int:
        """Bytes each row takes in the file."""
        return self.stride

    def reserve(self, rows: int):
        """Make room to read `rows` rows at a time: two buffers (one read
        ahead), and two of their float32 rows where the file holds another
        dtype, so that no read allocates."""
        size = rows * self.stride + 2 * BLOCKS[-1]
        self._buffers = [aligned(size), aligned(size)]
        self._floats = [] if self.dtype == torch.float32 else [torch.empty(rows, self.dim) for _ in range(2)]

    def share_buffers(self, other: FileRows):
        """Read into the buffers `other` reserved, for rows of the same layout
        (stride, dim, dtype) and reads that never overlap other's (wait for
        one's last before the other's first)."""
        if (other.stride, other.dim, other.dtype) != (self.stride, self.dim, self.dtype):
            raise ValueError(f"{self.path}: its rows cannot share the buffers of {other.path}'s, laid out otherwise")
        self._buffers, self._floats = other._buffers, other._floats

    def read(self, lo: int, hi: int) -> torch.Tensor:
        """Rows lo:hi as float32 [hi - lo, dim] (valid until the next read but one)."""
        start, end = lo * self.stride, hi * self.stride
        first = start - start % self.file.block
        length = -(-(end - first) // self.file.block) * self.file.block
        which = self._next
        buf = self._buffers[which]
        if length > len(buf):
            raise ValueError(f"rows {lo}:{hi} do not fit the buffers reserved (reserve more rows)")
        self._next ^= 1
        got = os.preadv(self.file.fd, [memoryview(buf)[:length]], first)
        if got < min(length, self.file.size - first):
            raise short_read(self.path, self.file, got, min(length, self.file.size - first), first)
        self.bytes_read += got
        raw = np.frombuffer(buf, np.uint8, count=end - start, offset=start - first).reshape(hi - lo, self.stride)
        rows = decode_rows(raw, self.dim, _dtype_name(self.dtype))
        return rows if not self._floats else self._floats[which][: hi - lo].copy_(rows)

    def read_async(self, lo: int, hi: int):
        """A future of `read(lo, hi)`."""
        return self._thread.submit(self.read, lo, hi)

    def close(self):
        """Close the file and the reading thread."""
        self._thread.shutdown()
        if self.file.fd >= 0:
            os.close(self.file.fd)
            self.file.fd = -1


def align_rows(stride: int) -> int:
    """Rows of `stride` bytes whose ranges, on this grid, start on a block of any size FileRows reads in."""
    return BLOCKS[-1] // math.gcd(stride, BLOCKS[-1])


def planned_rows(num_rows: int, dim: int, dtype: str) -> SimpleNamespace:
    """The shape of a ScratchRows not made yet, as FileRows will read it (num_rows, dim, row_bytes,
    align_rows): what planning a later layer needs."""
    stride = dim * DTYPES[dtype].itemsize
    return SimpleNamespace(num_rows=num_rows, dim=dim, row_bytes=stride, align_rows=align_rows(stride))


class SourceRows:
    """Row ranges of a FeatureSource (an in-memory table, a placement) as
    float32 CPU rows, gathered range by range; `bytes_read` counts the row
    bytes gathered."""

    align_rows = 1

    def __init__(self, source):
        self.source = source
        self.num_rows, self.dim = source.shape
        self.row_bytes = self.dim * source.dtype.itemsize
        self.bytes_read = 0

    def reserve(self, rows: int):
        """Nothing to set up: a gather allocates its rows."""

    def read(self, lo: int, hi: int) -> torch.Tensor:
        """Rows lo:hi as float32 [hi - lo, dim] on the CPU."""
        self.bytes_read += (hi - lo) * self.row_bytes
        return self.source.gather(torch.arange(lo, hi, device=self.source.device)).float().cpu()

    def read_async(self, lo: int, hi: int):
        """`read(lo, hi)`, already done (a gather of memory is no I/O to overlap)."""
        future = Future()
        future.set_result(self.read(lo, hi))
        return future

    def close(self):
        """Nothing to close."""


def _dtype_name(dtype: torch.dtype) -> str:
    return next(k for k, v in DTYPES.items() if v == dtype)


def reserve_space(path, nbytes: int, refuse=ScratchSpaceError):
    """Give the existing file `path` `nbytes` of allocated space
    (posix_fallocate, or a free-space check where the file system cannot
    preallocate), so writing its memory map cannot fail half way (a sparse
    map on a full disk is a SIGBUS). refuse(path, needed, free) is raised
    when the space is not there (default: ScratchSpaceError)."""
    fd = os.open(path, os.O_RDWR)
    try:
        try:
            os.posix_fallocate(fd, 0, max(nbytes, 1))
        except OSError as e:
            free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
            if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                raise refuse(path, nbytes, free) from None
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            if free < nbytes:
                raise refuse(path, nbytes, free) from None
            os.ftruncate(fd, nbytes)
    finally:
        os.close(fd)


class ScratchRows:
    """A layer's output rows for every node, in a file of `directory` holding
    `dtype` ("float32", "bfloat16" or "float16") values; its space is
    reserved when made (ScratchSpaceError, and no file left, when it does not
    fit). `write(start, rows)` stores rows with pwrite (not through a memory
    map, whose dirty pages would count in the process's resident memory until
    written back); `rows()` opens the finished file for reading (a FileRows);
    `remove()` deletes it."""

    def __init__(self, directory, name: str, num_rows: int, dim: int, dtype: str = "float32"):
        self.path, self.num_rows, self.dim, self.dtype = Path(directory) / name, num_rows, dim, dtype
        self.stride = dim * DTYPES[dtype].itemsize
        self.path.touch()
        try:
            reserve_space(self.path, num_rows * self.stride)
            self._fd = os.open(self.path, os.O_WRONLY)
        except BaseException:
            self.path.unlink(missing_ok=True)
            raise

    def write(self, start: int, rows: torch.Tensor):
        """Store float `rows` from row `start` on."""
        data = memoryview(encode_rows(rows.numpy(), self.dtype)).cast("B")
        offset = start * self.stride
        while data.nbytes:
            done = os.pwrite(self._fd, data, offset)
            data, offset = data[done:], offset + done

    def rows(self) -> FileRows:
        """The finished file as a FileRows (its pages written back and dropped from the page cache)."""
        os.fdatasync(self._fd)
        os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_DONTNEED)
        self._close()
        return FileRows(self.path, self.num_rows, self.stride, self.dim, DTYPES[self.dtype])

    def remove(self):
        """Delete the file."""
        self._close()
        self.path.unlink(missing_ok=True)

    def _close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class ArraySink:
    """The last layer's rows written into `array` (a numpy array or memmap),
    each block through `transform` (e.g. argmax for labels) first."""

    def __init__(self, array, transform=None):
        self.array, self.transform = array, transform

    def write(self, start: int, rows: torch.Tensor):
        """Store `rows` (transformed) from row `start` on."""
        rows = rows if self.transform is None else self.transform(rows)
        self.array[start : start + rows.shape[0]] = rows.numpy()


def input_rows(dataset, features=None):
    """The first layer's input as row ranges: a FileRows over the dataset's
    features.bin when `features` (default the dataset's own) are its
    memory-mapped table or the SSD tier over that file; else a SourceRows
    gathering ranges of `features`."""
    from gnnsys.storage.ssd import SSDFeatures

    source = dataset.features if features is None else features
    on_file = isinstance(source, SSDFeatures) or (source is dataset.features and dataset.features.mapped)
    if on_file and dataset.path is not None:
        f = dataset.meta["features"]
        file, identity = Path(dataset.path) / f["file"], dataset.features.identity
        return FileRows(file, dataset.num_nodes, f["row_stride"], f["dim"], DTYPES[f["dtype"]], identity)
    return SourceRows(source)


@contextlib.contextmanager
def scratch_directory(scratch_dir=None):
    """A new directory under `scratch_dir` (default tempfile.gettempdir()),
    removed with everything in it after (and by a later run if this one is
    killed: gnnsys.scratch)."""
    if scratch_dir is not None and not Path(scratch_dir).is_dir():
        raise ConfigError("scratch_dir", f"{scratch_dir} is not a directory")
    with owned_temporary_directory("gnnsys-inference-", scratch_dir) as path:
        yield path


def done_with(source, scratch: Path):
    """Close a layer's input after its last read; delete it when it is a
    previous layer's output in the `scratch` directory."""
    source.close()
    if isinstance(source, FileRows) and source.path.parent == scratch:
        source.path.unlink()
