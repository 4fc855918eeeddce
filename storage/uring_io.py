"""io_uring reads of one file into a staging buffer: the engine under
`storage.ssd.SSDFeatures` that keeps `depth` reads in flight from one thread,
with the contract and errors of `direct_io.ReadPool`.

The ring is driven through the kernel's io_uring ABI: io_uring_setup and
io_uring_enter through libc's syscall() (ctypes releases the GIL while the
thread waits), the rings mapped with mmap and read and written as numpy
arrays, so a batch of reads is queued and its completions harvested with a
few array operations, and every read lands straight in the staging buffer at
its planned offset. Plain stores into the shared rings reach the kernel in
program order only under x86-64's store ordering, so other machines report
io_uring as unavailable. `uring_available()` says, once per process, whether
a ring can be created here and a probe read through it returns a file's bytes.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import mmap
import os
import platform
import tempfile

import numpy as np

from gnnsys.errors import DatasetError

from .direct_io import RowsFile, aligned, read_failed, short_read

MAX_DEPTH = 32768  # the kernel's limit on ring entries
_SETUP, _ENTER = 425, 426  # syscall numbers of io_uring_setup and io_uring_enter
_ENTER_GETEVENTS = 1
_FEAT_SINGLE_MMAP = 1  # Linux 5.4: one mapping holds both rings
_OFF_SQES = 0x10000000  # mmap offset of the submission queue entries
_OP_READ = 22  # IORING_OP_READ, Linux 5.6
_U32 = 0xFFFFFFFF  # ring head and tail counters wrap at 2**32
_SQE = np.dtype(
    {
        "names": ["opcode", "fd", "off", "addr", "len", "user_data"],
        "formats": ["u1", "i4", "u8", "u8", "u4", "u8"],
        "offsets": [0, 4, 8, 16, 24, 32],
        "itemsize": 64,
    }
)
_CQE = np.dtype({"names": ["user_data", "res"], "formats": ["u8", "i4"], "offsets": [0, 8], "itemsize": 16})
_HINTS = {
    errno.EPERM: "forbidden by kernel.io_uring_disabled or a seccomp filter",
    errno.ENOSYS: "the kernel has no io_uring",
}

_syscall = ctypes.CDLL(None, use_errno=True).syscall
_syscall.restype = ctypes.c_long


def _u32_fields(*names):
    return [(name, ctypes.c_uint32) for name in names]


class _SQOffsets(ctypes.Structure):
    _fields_ = _u32_fields("head", "tail", "ring_mask", "ring_entries", "flags", "dropped", "array", "resv1") + [
        ("user_addr", ctypes.c_uint64)
    ]


class _CQOffsets(ctypes.Structure):
    _fields_ = _u32_fields("head", "tail", "ring_mask", "ring_entries", "overflow", "cqes", "flags", "resv1") + [
        ("user_addr", ctypes.c_uint64)
    ]


class _Params(ctypes.Structure):
    _fields_ = _u32_fields(
        "sq_entries", "cq_entries", "flags", "sq_thread_cpu", "sq_thread_idle", "features", "wq_fd"
    ) + [("resv", ctypes.c_uint32 * 3), ("sq_off", _SQOffsets), ("cq_off", _CQOffsets)]


def _setup(entries: int) -> tuple[int, mmap.mmap, mmap.mmap, _Params]:
    """(ring fd, rings mapping, entries mapping, parameters) of a new ring with
    `entries` submission slots; OSError if the kernel refuses one."""
    params = _Params()
    fd = _syscall(ctypes.c_long(_SETUP), ctypes.c_long(entries), ctypes.byref(params))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"io_uring_setup: {os.strerror(err)}")
    maps = []
    try:
        if not params.features & _FEAT_SINGLE_MMAP:
            raise OSError(errno.ENOSYS, "io_uring_setup: no single ring mapping (Linux older than 5.4)")
        size = max(params.sq_off.array + 4 * params.sq_entries, params.cq_off.cqes + _CQE.itemsize * params.cq_entries)
        shared = dict(flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        maps.append(mmap.mmap(fd, size, **shared))
        maps.append(mmap.mmap(fd, _SQE.itemsize * params.sq_entries, offset=_OFF_SQES, **shared))
    except BaseException:
        for m in maps:
            m.close()
        os.close(fd)
        raise
    return fd, maps[0], maps[1], params


class UringReader:
    """Runs reads of one file on an io_uring with `depth` reads in flight into
    a staging buffer, raising DatasetError on a failed or short read (a file
    truncated after open); takes over `file` and closes it with close()."""

    def __init__(self, path, file: RowsFile, depth: int):
        self.path, self.file, self.depth = path, file, depth
        try:
            self._fd, rings, sqes, params = _setup(depth)
        except BaseException:
            os.close(file.fd)
            raise
        self._maps = (rings, sqes)
        self._words = np.frombuffer(rings, np.uint32)
        sq, cq = params.sq_off, params.cq_off
        self._sq_tail, self._cq_head, self._cq_tail = sq.tail // 4, cq.head // 4, cq.tail // 4
        self._sq_mask, self._cq_mask = int(self._words[sq.ring_mask // 4]), int(self._words[cq.ring_mask // 4])
        self._words[sq.array // 4 : sq.array // 4 + params.sq_entries] = np.arange(params.sq_entries)  # slot i: entry i
        self._sqes = np.frombuffer(sqes, _SQE)
        self._cqes = np.frombuffer(rings, _CQE, count=params.cq_entries, offset=cq.cqes)
        self._batch = np.zeros(depth, _SQE)
        self._batch["opcode"], self._batch["fd"] = _OP_READ, file.fd
        self._tail = int(self._words[self._sq_tail])
        self._refill = max(1, depth // 8)  # completions to wait for before queueing more
        self._pending = self._inflight = 0  # queued but not yet taken by the kernel; queued but not completed

    def run(self, staging: memoryview, offset, length, need, dest) -> int:
        """Read length[i] bytes at file offset[i] into staging[dest[i]:] for
        every i (int64 arrays), `depth` at a time; returns the bytes read.
        Every read has completed before an error propagates."""
        target = np.frombuffer(staging, np.uint8)
        addr, n, queued, total, error = target.ctypes.data, len(offset), 0, 0, None
        try:
            while self._inflight or (queued < n and error is None):
                if error is None and queued < n:
                    k = min(self.depth - self._inflight, n - queued)
                    self._queue(addr, offset, length, dest, queued, k)
                    queued += k
                last = queued == n or error is not None
                self._enter(self._inflight if last else min(self._inflight, self._refill))
                user, res = self._harvest()
                total += int(res[res > 0].sum())
                if not self.file.direct:
                    for u in user.tolist():
                        os.posix_fadvise(self.file.fd, int(offset[u]), int(length[u]), os.POSIX_FADV_DONTNEED)
                error = error or self._failure(user, res, offset, length, need)
        except BaseException:
            self._drain()
            raise
        if error is not None:
            raise error
        return total

    def _queue(self, addr: int, offset, length, dest, lo: int, k: int):
        """Put reads lo..lo+k into free submission slots (0 <= k <= depth - in flight)."""
        batch = self._batch[:k]
        batch["off"], batch["len"] = offset[lo : lo + k], length[lo : lo + k]
        batch["addr"], batch["user_data"] = dest[lo : lo + k] + addr, np.arange(lo, lo + k)
        self._sqes[(self._tail + np.arange(k)) & self._sq_mask] = batch
        self._tail = (self._tail + k) & _U32
        self._words[self._sq_tail] = self._tail  # after the entries: the kernel reads them once it sees the tail
        self._pending += k
        self._inflight += k

    def _enter(self, wait: int):
        """Hand the pending reads to the kernel and wait for `wait` completions."""
        while True:
            taken = _syscall(
                ctypes.c_long(_ENTER),
                ctypes.c_long(self._fd),
                ctypes.c_long(self._pending),
                ctypes.c_long(wait),
                ctypes.c_long(_ENTER_GETEVENTS),
                None,
                ctypes.c_long(0),
            )
            if taken >= 0:
                self._pending -= taken
                return
            err = ctypes.get_errno()
            if err != errno.EINTR:
                raise OSError(err, f"io_uring_enter: {os.strerror(err)}")

    def _harvest(self) -> tuple[np.ndarray, np.ndarray]:
        """(read numbers, results) of the completions in the ring, which it frees."""
        head = int(self._words[self._cq_head])
        count = (int(self._words[self._cq_tail]) - head) & _U32
        done = self._cqes[(head + np.arange(count)) & self._cq_mask]
        self._words[self._cq_head] = (head + count) & _U32
        self._inflight -= count
        return done["user_data"].astype(np.int64), done["res"].astype(np.int64)

    def _failure(self, user, res, offset, length, need) -> DatasetError | None:
        """The DatasetError of the first (in plan order) of these completions that
        failed or returned fewer bytes than the file had, else None."""
        bad = user[res < need[user]]
        if not bad.size:
            return None
        u = int(bad.min())
        got = int(res[user == u][0])
        if got < 0:
            return read_failed(self.path, int(length[u]), int(offset[u]), os.strerror(-got))
        return short_read(self.path, self.file, got, int(need[u]), int(offset[u]))

    def _drain(self):
        """Wait for every read in flight, so that the staging buffer is free."""
        while self._inflight:
            self._enter(self._inflight)
            self._harvest()

    def host_bytes(self) -> dict:
        """{"uring": bytes} of the rings, submission entries and the batch being queued."""
        return {"uring": sum(len(m) for m in self._maps) + self._batch.nbytes}

    def close(self):
        """Close the ring and the file."""
        self._words = self._sqes = self._cqes = None  # the arrays hold the mappings open
        for m in self._maps:
            m.close()
        os.close(self._fd)
        os.close(self.file.fd)


def probe() -> tuple[bool, str]:
    """(True, what) if a ring can be created here and a read through it returns
    a file's bytes, else (False, why); uring_available() caches it."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return False, f"io_uring is driven only on Linux x86-64, this is {platform.system()} {platform.machine()}"
    payload = bytes(range(256)) * 16
    staging = aligned(len(payload))
    try:
        with tempfile.TemporaryFile() as f:
            f.write(payload)
            f.flush()
            reader = UringReader("io_uring probe file", RowsFile(os.dup(f.fileno()), len(payload), 512, False), 2)
            try:
                reader.run(memoryview(staging), *(np.array([v]) for v in (0, len(payload), len(payload), 0)))
            finally:
                reader.close()
    except OSError as e:
        hint = _HINTS.get(e.errno)
        return False, f"{e.strerror}" + (f" ({hint})" if hint else "")
    except DatasetError as e:
        return False, f"a probe read through io_uring failed: {e}"
    if staging[:] != payload:
        return False, "a probe read through io_uring returned other bytes than the file's"
    return True, f"io_uring works here (Linux {platform.release()})"


@functools.cache
def uring_available() -> tuple[bool, str]:
    """(True, what) when io_uring reads work in this process, else (False, why); probed once per process."""
    return probe()
