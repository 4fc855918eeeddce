"""One run per checkpoint directory: `checkpoint_lock` holds the directory
and what lies below it (flock on LOCK, which holds the holder's pid), so
two runs never write into one; `run_lock` is the lock a run's starting
process takes."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from pathlib import Path

from gnnsys.errors import ConfigError, naming
from gnnsys.training.outputs import check_output_dir

LOCK = ".lock"  # held by the run writing into the directory (checkpoint_lock)


def run_lock(options):
    """`checkpoint_lock` of options.checkpoint_dir for the process that starts
    a run (under torchrun, rank 0 alone: the ranks may share the directory)."""
    from gnnsys.parallel.distributed import torchrun_env

    env = torchrun_env()
    return checkpoint_lock(options.checkpoint_dir if env is None or env.rank == 0 else None)


@contextlib.contextmanager
def checkpoint_lock(directory):
    """Hold the checkpoint directory for one run: made and probed for writing
    (check_output_dir), then locked (flock on LOCK inside it, which holds the
    holder's pid). The lock covers the directory's subdirectories too (a
    run's run-NN and workerR/slotS): ConfigError naming the other run's pid
    when another run holds the directory, a directory above it
    (`ck/run-01` while a run holds `ck`) or one below it within
    NESTED_DEPTH levels (`ck` while a run holds `ck/run-01`). A LOCK that is
    a symbolic link or not a regular file is refused, never followed. The
    lock file, and the directory when this made it and left it empty, are
    removed at the end. `directory` None: nothing to hold."""
    if directory is None:
        yield
        return
    path, lock = Path(directory), Path(directory) / LOCK
    made = not path.exists()
    fd = -1
    try:
        check_output_dir(path, "checkpoint_dir")
        with naming(lock, "lock"):
            fd = _acquire(lock)
            _check_nested(path)  # after taking ours: of two runs starting together, one sees the other
    except BaseException:
        if fd >= 0:
            _release(lock, fd)
        _remove_if_empty(path, made)
        raise
    try:
        yield
    finally:
        _release(lock, fd)
        _remove_if_empty(path, made)


NESTED_DEPTH = 2  # the deepest a run writes checkpoints below its directory (gnnpipe's workerR/slotS)


def _check_nested(path: Path):
    """ConfigError when another run holds a directory above `path` or one
    within NESTED_DEPTH levels below it (whose LOCK is flocked)."""
    real = Path(os.path.realpath(path))
    for above in real.parents:
        holder = _holder(above / LOCK)
        if holder is not None:
            raise ConfigError(
                "checkpoint_dir",
                f"{path} is inside {above}, which another gnnsys run writes checkpoints into "
                f"(pid {holder}); wait for it or choose a directory outside it",
            )
    level = [real]
    for _ in range(NESTED_DEPTH):
        level = [Path(e.path) for d in level for e in _subdirectories(d)]
        for below in level:
            holder = _holder(below / LOCK)
            if holder is not None:
                raise ConfigError(
                    "checkpoint_dir",
                    f"{path} holds {below}, which another gnnsys run writes checkpoints into "
                    f"(pid {holder}); wait for it or choose another directory",
                )


def _subdirectories(folder: Path) -> list:
    """The directories in `folder` (links not followed); none when it cannot be listed."""
    try:
        with os.scandir(folder) as entries:
            return [e for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _holder(lock: Path) -> str | None:
    """The pid written in `lock` when another process holds its flock; None
    when nobody does (or it is missing, a link, or cannot be opened)."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.read(fd, 32).decode(errors="replace").strip() or "unknown"
    except OSError:
        return None
    finally:
        os.close(fd)  # drops our shared lock, if taken
    return None


def _release(lock: Path, fd: int):
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lock)  # before the unlock: a run waiting on this file retries on a new one (_acquire)
    os.close(fd)


def _remove_if_empty(path: Path, made: bool):
    """Remove the directory `path` when this run `made` it and wrote nothing into it."""
    if made:
        with contextlib.suppress(OSError):
            path.rmdir()


def _acquire(lock: Path) -> int:
    """An open descriptor of `lock` holding its exclusive flock, our pid
    written in it; ConfigError when another run holds it, or when `lock` is
    a symbolic link or not a regular file (opened without following links)."""
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise ConfigError(
                "checkpoint_dir", f"{lock} is a symbolic link; a lock file is never followed: remove it"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ConfigError("checkpoint_dir", f"{lock} is not a regular file; a lock file must be one: remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(
                "checkpoint_dir",
                f"{lock.parent} is in use by another gnnsys run "
                f"(pid {holder}); wait for it or choose another directory",
            ) from None
        if os.path.exists(lock) and os.stat(lock).st_ino == os.fstat(fd).st_ino:  # not unlinked meanwhile
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)
