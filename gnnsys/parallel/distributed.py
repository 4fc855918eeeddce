"""Process groups for multi-process training, and what happens when one fails.

Two ways to start W workers that run `fn(ctx, *args)`:

- `launch(fn, world_size, args)`: from Python, with torch.multiprocessing
  (spawn). The parent hosts the TCPStore that the workers rendezvous on and
  watches them; it returns when all finish, and otherwise raises `WorkerError`
  naming the worker and the cause.
- `run_from_env(fn, *args)` under `torchrun` (env:// rendezvous: RANK,
  WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK).

Each worker's device is cuda:LOCAL_RANK on CUDA (`gnnsys.parallel.ranks.rank_device`),
and its backend NCCL there and gloo on the CPU; the worker's function gets a
`gnnsys.parallel.ranks.Ranks` (`ctx.ranks`) that owns the groups and the collectives.
Fault handling has three layers, so nothing hangs:
1. a worker whose `fn` raises writes "worker R: Type: message" to the store
   under `ERROR_KEY` before exiting with status 1 (the first report wins:
   peers that then lose their connection to it do not overwrite it);
2. every worker runs a watchdog thread that polls that key (and the store
   itself) and exits the process with status 1 within `poll_s` once another
   worker has failed or the store has gone away; the parent does the same and
   terminates the rest (SIGTERM, then SIGKILL after `grace_s`);
3. collectives and point-to-point waits time out after `timeout_s` (a worker
   that hangs without dying). A worker that dies without reporting (a signal,
   `os._exit`) is named by its exit code / signal by `launch`.

What the user sees: under `launch`, one `WorkerError` (a GnnsysError, so the
CLI prints it as one line); the workers print nothing (the survivors'
lost-connection errors are consequences), and the launcher prints a
traceback only for an unexpected error (not a GnnsysError) of the root cause,
which its worker left in the store under `TRACEBACK_KEY` + rank. Under
torchrun, which has no such parent, each worker prints its traceback and
why it stopped.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from tqdm import tqdm

from gnnsys import environment
from gnnsys.errors import ConfigError, GnnsysError
from gnnsys.parallel.ranks import Ranks, backend_for, rank_device

ERROR_KEY = "gnnsys/error"
TRACEBACK_KEY = "gnnsys/traceback/"  # + rank


class WorkerError(GnnsysError, RuntimeError):
    """A worker failed: `rank` and a one-line `cause` (exception or exit status)."""

    def __init__(self, rank: int, cause: str):
        self.rank, self.cause = rank, cause
        super().__init__(f"worker {rank} failed: {cause}")


@dataclass
class WorkerContext:
    """What a worker's function receives: its rank, the world size, the
    backend ("gloo" or "nccl"), its device, and `ranks`, the strategy object
    every collective goes through."""

    rank: int
    world_size: int
    backend: str
    device: torch.device
    ranks: Ranks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


class _Watchdog:
    """A thread that exits this process (status 1) when another worker reported
    a failure or the store stopped answering, saying why on stderr unless
    `quiet`; `stop()` ends it and waits, so that no store call is in flight
    while the process group and interpreter shut down."""

    def __init__(self, store, rank: int, poll_s: float, quiet: bool):
        self.store, self.rank, self.poll_s, self.quiet = store, rank, poll_s, quiet
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gnnsys-watchdog", daemon=True)
        self._thread.start()

    def _watch(self):
        while not self._stop.wait(self.poll_s):
            try:
                failed = self.store.check([ERROR_KEY])
                cause = self.store.get(ERROR_KEY).decode() if failed else None
            except Exception as e:  # noqa: BLE001 - any store failure means the group is gone
                cause = f"lost the rendezvous store ({_describe(e)})"
            if cause is not None and not self._stop.is_set():
                if not self.quiet:
                    print(f"gnnsys worker {self.rank}: stopping: {cause}", file=sys.stderr, flush=True)
                os._exit(1)

    def stop(self):
        """End the watch and join the thread."""
        self._stop.set()
        self._thread.join()


def _run(fn, args, rank, world_size, backend, device, pg_store, watch_store, timeout_s, poll_s, quiet):
    """Set up the process group, run fn, report a failure to the store; print
    its traceback too unless `quiet` (under `launch`, which tells the user)."""
    # tqdm's default lock holds a multiprocessing semaphore that a worker ending by
    # os._exit or a signal never releases (the resource tracker then warns of a leak
    # at exit); a worker shares no bar with another process, so a thread lock does.
    tqdm.set_lock(threading.RLock())
    _stop_on_signals(rank)
    try:
        dist.init_process_group(
            backend,
            store=dist.PrefixStore("pg", pg_store),
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        watchdog = _Watchdog(watch_store, rank, poll_s, quiet)
        ranks = Ranks.join(rank, world_size, device, backend)
        fn(WorkerContext(rank, world_size, backend, device, ranks), *args)
        dist.barrier()
        watchdog.stop()
    except BaseException as e:
        _report(watch_store, rank, e)
        if not quiet:
            traceback.print_exc()
            sys.stderr.flush()
        os._exit(1)  # skip destroy/atexit hooks that could block on dead peers
    dist.destroy_process_group()


def _stop_on_signals(rank: int) -> None:
    """SIGTERM or SIGINT ends this worker at once with one line on stderr
    ("gnnsys worker R: stopped by SIGTERM") and the signal's own exit status:
    no Python or c10d C++ traces from a collective cut short; the launcher's
    or torchrun's fault handling stops the other workers."""

    def stop(signum, frame):
        line = f"gnnsys worker {rank}: stopped by {signal.Signals(signum).name}\n"
        sys.stderr.flush()
        os.write(2, line.encode())  # one write: ranks sharing a stderr pipe never interleave within a line
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)


def _report(store, rank: int, exc: BaseException):
    """The traceback of an unexpected error (not a GnnsysError, not an
    interrupt) under TRACEBACK_KEY + rank, then "worker R: Type: message"
    under ERROR_KEY unless a failure was reported before (the first report wins)."""
    try:
        if isinstance(exc, Exception) and not isinstance(exc, GnnsysError):
            store.set(f"{TRACEBACK_KEY}{rank}", "".join(traceback.format_exception(exc)))
        store.compare_set(ERROR_KEY, "", f"worker {rank}: {_describe(exc)}")
    except Exception:  # noqa: BLE001 - the store may be gone; exiting non-zero still tells the launcher
        pass


def _spawned(rank, fn, args, world_size, device, host, port, timeout_s, poll_s):
    dev = rank_device(device, rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
    watch = dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
    _run(fn, args, rank, world_size, backend_for(dev), dev, store, watch, timeout_s, poll_s, quiet=True)


def launch(
    fn,
    world_size: int,
    args: tuple = (),
    *,
    device: str = "cpu",
    timeout_s: float = 120.0,
    deadline_s: float | None = None,
    poll_s: float = 0.2,
    grace_s: float = 5.0,
) -> None:
    """Run `fn(ctx, *args)` in `world_size` spawned processes and wait.

    Raises WorkerError (rank and cause) as soon as one worker fails, after
    terminating the others; TimeoutError when `deadline_s` passes. fn and args
    must be picklable (fn a module-level function)."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    host, port = "127.0.0.1", _free_port()
    store = dist.TCPStore(
        host, port, world_size, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=timeout_s)
    )
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(
            target=_spawned,
            name=f"gnnsys-worker-{r}",
            daemon=False,
            args=(r, fn, args, world_size, device, host, port, timeout_s, poll_s),
        )
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    try:
        _watch(procs, store, deadline_s, poll_s)
    finally:
        _stop(procs, grace_s)


def _exit_cause(code: int) -> str:
    if code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exited with status {code}"


def _watch(procs, store, deadline_s, poll_s):
    start = time.monotonic()
    while True:
        reported = store.check([ERROR_KEY])
        codes = [p.exitcode for p in procs]
        if reported or any(c not in (None, 0) for c in codes):
            time.sleep(2 * poll_s)  # let exit codes and a report in flight settle
            _raise_root_cause(procs, store)
        if all(c == 0 for c in codes):
            return
        if deadline_s is not None and time.monotonic() - start > deadline_s:
            running = [r for r, c in enumerate(codes) if c is None]
            raise TimeoutError(f"workers {running} still running after {deadline_s:.0f} s; terminated")
        time.sleep(poll_s)


def _raise_root_cause(procs, store):
    """A worker that died without reporting (a signal, or a status other than
    the 1 of a reported failure) is the root cause: its peers' reports only
    say that the connection to it broke. Otherwise the first report wins,
    after its worker's traceback of an unexpected error (on stderr)."""
    codes = {r: p.exitcode for r, p in enumerate(procs)}
    silent = [r for r, c in codes.items() if c not in (None, 0, 1)]
    if silent:
        first = min(silent, key=lambda r: (codes[r] >= 0, r))  # signals before statuses
        raise WorkerError(first, _exit_cause(codes[first]))
    if store.check([ERROR_KEY]):
        worker, _, cause = store.get(ERROR_KEY).decode().partition(": ")
        rank = int(worker.split()[-1])
        if store.check([f"{TRACEBACK_KEY}{rank}"]):
            print(store.get(f"{TRACEBACK_KEY}{rank}").decode(), end="", file=sys.stderr, flush=True)
        raise WorkerError(rank, cause)
    first = min(r for r, c in codes.items() if c not in (None, 0))
    raise WorkerError(first, _exit_cause(codes[first]))


def _stop(procs, grace_s):
    """SIGTERM every live worker, SIGKILL what is left after grace_s."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    end = time.monotonic() + grace_s
    for p in procs:
        p.join(max(end - time.monotonic(), 0))
        if p.is_alive():
            p.kill()
            p.join()


@dataclass(frozen=True)
class TorchrunEnv:
    """What torchrun told this process: its rank among world_size, its
    local rank on this machine, and where rank 0's store listens."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int


def torchrun_env() -> TorchrunEnv | None:
    """The torchrun variables of this process, checked before any
    rendezvous; None when torchrun did not start it (no TORCHELASTIC_RUN_ID).
    ConfigError naming the variable that is missing, not an integer, or out
    of range (RANK and LOCAL_RANK in [0, WORLD_SIZE), MASTER_PORT in 1..65535)."""
    if environment.value(environment.TORCHRUN) is None:
        return None
    world = _required("WORLD_SIZE")
    rank = _below_world("RANK", _required("RANK"), world)
    local = environment.value("LOCAL_RANK")
    local = rank if local is None else _below_world("LOCAL_RANK", local, world)
    return TorchrunEnv(rank, world, local, _required("MASTER_ADDR"), _required("MASTER_PORT"))


def _required(name: str):
    """environment.value(name), which torchrun always sets."""
    found = environment.value(name)
    if found is None:
        raise ConfigError(
            name, f"is not set, but {environment.TORCHRUN} is: start the workers with torchrun, which sets both"
        )
    return found


def _below_world(name: str, number: int, world: int) -> int:
    if number >= world:
        raise ConfigError(name, f"must be an integer in 0..{world - 1} (below WORLD_SIZE {world}), got '{number}'")
    return number


def run_from_env(fn, *args, device: str = "cpu", timeout_s: float = 120.0, poll_s: float = 0.2) -> None:
    """Run `fn(ctx, *args)` as one worker started by torchrun (env://),
    its variables checked first (`torchrun_env`); WorkerError when the
    other workers do not all join within timeout_s. On failure the process
    exits with status 1 after reporting to the store, and torchrun stops the
    other workers (their watchdogs do too)."""
    env = torchrun_env()
    if env is None:
        raise ConfigError("TORCHELASTIC_RUN_ID", "is not set: run_from_env runs a worker started by torchrun")
    rank, world_size = env.rank, env.world_size
    dev = rank_device(device, env.local_rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        store, _, _ = next(dist.rendezvous("env://", rank, world_size, timeout=timeout))
        watch = dist.TCPStore(env.master_addr, env.master_port, world_size, is_master=False, timeout=timeout)
    except (RuntimeError, OSError) as e:  # DistStoreError and DistNetworkError are RuntimeErrors
        raise WorkerError(
            rank,
            f"rendezvous of {world_size} workers at {env.master_addr}:{env.master_port} failed "
            f"within {timeout_s:g} s ({_describe(e)}): is every worker started, and rank 0 "
            "reachable there?",
        ) from None
    _run(fn, args, rank, world_size, backend_for(dev), dev, store, watch, timeout_s, poll_s, quiet=False)
