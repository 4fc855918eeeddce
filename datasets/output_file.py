"""Files written front to back, with their space reserved before the first
byte and their sha256 taken from the bytes as they are written (so a
dataset's checksums cost no second read). Writes are ordinary `write` calls,
never stores through a memory map: a full disk is an error naming the file,
not a SIGBUS.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import queue
import shutil
import threading

import numpy as np

from gnnsys.errors import DatasetError, PathError, os_reason

_NO_RESERVE = (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS)


def write_error(path, err: OSError) -> PathError:
    """The one-line error for a write to `path` that failed with `err`."""
    return PathError(path, err, "write")


def npy_header(dtype, count: int | tuple) -> bytes:
    """The .npy (version 1.0) header of a C-order array of `dtype`: 1-D of
    `count` values, or of shape `count` when it is a tuple."""
    shape = tuple(int(k) for k in count) if isinstance(count, tuple) else (int(count),)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
    )
    return buf.getvalue()


def write_npy(path, array: np.ndarray) -> str:
    """Write an array (C order) as .npy, hashed as written; its sha256."""
    header = npy_header(array.dtype, tuple(array.shape))
    out = OutputFile(path, len(header) + array.nbytes)
    try:
        out.write(header)
        out.write(np.ascontiguousarray(array))
    except BaseException:
        out.abandon()
        raise
    return out.close()


class OutputFile:
    """`path` opened for writing from its start, `size` bytes reserved with
    posix_fallocate when given (refused with one line if the file system
    cannot hold them); `write(data)` appends and hashes; `close()` truncates
    to what was written and returns the sha256 hex digest."""

    def __init__(self, path, size: int | None = None):
        self.path = os.fspath(path)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        except OSError as e:
            raise write_error(self.path, e) from None
        self._sha = hashlib.sha256()
        self.written = 0
        if size:
            self._reserve(size)

    def _reserve(self, size: int):
        try:
            os.posix_fallocate(self._fd, 0, size)
        except OSError as e:
            if e.errno not in _NO_RESERVE:
                self.abandon()
                free = shutil.disk_usage(os.path.dirname(self.path)).free
                raise DatasetError(
                    self.path, f"cannot reserve {size / 1e9:.2f} GB: {os_reason(e)}, {free / 1e9:.2f} GB free"
                ) from None

    def write(self, data) -> None:
        """Append `data` (bytes or a C-contiguous array) and hash it."""
        view = memoryview(data).cast("B")
        self._sha.update(view)
        try:
            while view:
                done = os.pwrite(self._fd, view, self.written)
                view = view[done:]
                self.written += done
        except OSError as e:
            raise write_error(self.path, e) from None

    def close(self) -> str:
        """Truncate to the bytes written, close, and return their sha256."""
        try:
            os.ftruncate(self._fd, self.written)
        except OSError as e:
            raise write_error(self.path, e) from None
        finally:
            self.abandon()
        return self._sha.hexdigest()

    def abandon(self) -> None:
        """Close without finishing (the caller removes the file); no-op once closed."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class BackgroundWriter:
    """Runs an OutputFile's writes (and hashing) on a thread, `depth` buffers
    behind the caller, so producing the next buffer overlaps writing the last.
    An error of the thread is raised by the next `write` or by `close`."""

    def __init__(self, out: OutputFile, depth: int = 2):
        self.out = out
        self._queue: queue.Queue = queue.Queue(depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="gnnsys-writer", daemon=True)
        self._thread.start()

    def _run(self):
        while (data := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self.out.write(data)
                except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                    self._error = e

    def _raise(self):
        if self._error is not None:
            raise self._error

    def write(self, data) -> None:
        """Queue `data` (not to be modified afterwards) for writing."""
        self._raise()
        self._queue.put(data)

    def close(self) -> str:
        """Wait for every queued write, then close the file; its sha256."""
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            self.out.abandon()
            raise self._error
        return self.out.close()

    def abandon(self) -> None:
        """Stop without finishing (after an error of the caller)."""
        self._queue.put(None)
        self._thread.join()
        self.out.abandon()
