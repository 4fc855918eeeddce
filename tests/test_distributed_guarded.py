"""How ranks talk, decided by gnnsys.parallel.ranks and checked on the CPU.

The multi-process runs here execute under tests/distributed_guard.py with the
device logic set to CUDA: every worker asks for NCCL (really gloo), and a
host tensor handed to the group it believes is NCCL, or a CUDA tensor handed
to gloo, fails the worker. Data-parallel training with the shared cache (over
a table and over the SSD tier, layer-wise and sampled evaluation), GNNPipe and
the shared cache alone must run to their usual results under it.
"""

import ast
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from gnnsys.parallel.distributed import launch
from gnnsys.parallel.ranks import Ranks, all_gather_into, rank_device
from gnnsys.trainers.fullgraph import train_fullgraph
from gnnsys.trainers.minibatch import train
from tests.distributed_guard import GuardError, check_tensors, guarded_workers
from tests.gnnsys.test_data_parallel import (
    OPTIONS,
    dataset_dir,  # noqa: F401 - a fixture
    trajectory,
)
from tests.gnnsys.test_gnnpipe import FAST, tiny_dataset
from tests.storage.fakes import RecordingStreams

ROOT = Path(__file__).resolve().parents[1]


class Placed:
    """A stand-in tensor on `device` (only its device is read)."""

    def __init__(self, device):
        self.device = torch.device(device)


def test_every_rank_of_a_cuda_run_gets_its_own_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    for asked in ("cuda", "cuda:0", torch.device("cuda", 0)):
        assert [rank_device(asked, r) for r in range(3)] == [torch.device("cuda", r) for r in range(3)]
    assert rank_device("cpu", 2) == torch.device("cpu")


def test_host_tensors_go_to_gloo_and_gpu_tensors_to_the_default_group():
    host = object()
    nccl = Ranks(0, 2, "cuda:1", "nccl", host_group=host)
    assert nccl.group_for(Placed("cpu")) is host
    assert nccl.group_for(Placed("cuda:1")) is None  # the default group: NCCL
    gloo = Ranks(0, 2, "cpu", "gloo")
    assert gloo.group_for(Placed("cpu")) is None  # the default group is gloo itself


def test_the_guard_refuses_what_a_backend_cannot_take():
    with pytest.raises(GuardError, match="a cpu tensor handed to an NCCL group"):
        check_tensors("all_reduce", "nccl", [Placed("cpu")])
    with pytest.raises(GuardError, match="a CUDA tensor handed to a gloo group"):
        check_tensors("isend", "gloo", [Placed("cuda:0")])
    check_tensors("all_reduce", "nccl", [Placed("cuda:0")])
    check_tensors("all_reduce", "gloo", [Placed("cpu")])


def test_one_rank_needs_no_process_group():
    one = Ranks.single("cpu")
    rows = torch.arange(6.0).view(3, 2)
    assert one.all_gather_rows(rows) is rows and one.all_reduce([1.5, 2.0], "max") == [1.5, 2.0]
    assert one.mean(3.0) == 3.0 and one.broadcast_object("x") == "x" and one.all_gather_object(1) == [1]


def gather_without_the_new_name(ctx):
    """all_gather_into on torch releases with and without each collective name (this worker only)."""
    rows = torch.full((2, 3), float(ctx.rank))
    for name in ("all_gather_single", "all_gather_into_tensor"):  # removed one after the other
        out = torch.empty(4, 3)
        all_gather_into(out, rows)
        assert out[:2].eq(0).all() and out[2:].eq(1).all()
        if hasattr(dist, name):
            delattr(dist, name)
    out = torch.empty(4, 3)
    all_gather_into(out, rows)
    assert out[:2].eq(0).all() and out[2:].eq(1).all()


def test_the_compatibility_helper_works_without_the_new_collective_name():
    launch(gather_without_the_new_name, 2, timeout_s=60)


def _distributed_calls(path: Path) -> list[str]:
    """The `dist.<name>(...)` / `torch.distributed.<name>(...)` calls of a source file."""
    calls = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            if owner in ("dist", "torch.distributed"):
                calls.append(node.func.attr)
    return calls


COLLECTIVES = {"all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "isend", "irecv", "send", "recv"}
COLLECTIVES |= {"all_gather_object", "broadcast_object_list", "barrier", "all_gather_single", "reduce_scatter_tensor"}


def test_trainers_talk_through_ranks_only():
    """Collectives of the trainers go through gnnsys.parallel.ranks (the shared cache, a
    storage tier below the trainers, uses its own gloo group directly)."""
    trainers = [*ROOT.joinpath("gnnsys").rglob("*.py")]
    offenders = {
        str(p.relative_to(ROOT)): sorted(set(_distributed_calls(p)) & COLLECTIVES)
        for p in trainers
        if p.name not in ("ranks.py", "distributed.py") and set(_distributed_calls(p)) & COLLECTIVES
    }
    assert offenders == {}


def guarded_runs(monkeypatch):
    return guarded_workers(monkeypatch, "nccl")


def test_data_parallel_with_the_shared_cache_under_the_guard(dataset_dir, monkeypatch):  # noqa: F811
    reference = train(dataset_dir, batch_size=4, workers=2, **OPTIONS)
    with guarded_runs(monkeypatch):
        table = train(dataset_dir, batch_size=4, workers=2, cache_rows=10, cache_policy="lru", **OPTIONS)
        ssd = train(
            dataset_dir,
            batch_size=4,
            workers=2,
            cache_rows=10,
            features="ssd",
            scratch_gb=0.0,
            **dict(OPTIONS, epochs=1),
        )
    assert trajectory(table.to_dict()) == trajectory(reference.to_dict())
    assert ssd.epochs[0]["tiers"]["cache"]["remote_hits"] > 0


def test_gnnpipe_under_the_guard(monkeypatch):
    ds = tiny_dataset()
    one = train_fullgraph(ds, workers=1, chunks=3, **FAST)
    with guarded_runs(monkeypatch):
        two = train_fullgraph(ds, workers=2, chunks=3, **FAST)
    for a, b in zip(trajectory(one.to_dict()), trajectory(two.to_dict()), strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)


def host_traffic_to_the_default_group(ctx):
    dist.all_reduce(torch.ones(1))  # the default group: NCCL, as the worker believes


def test_the_guard_stops_a_host_tensor_sent_to_nccl(monkeypatch):
    from gnnsys.parallel.distributed import WorkerError

    with guarded_runs(monkeypatch), pytest.raises(WorkerError, match="a cpu tensor handed to an NCCL group"):
        launch(host_traffic_to_the_default_group, 2, timeout_s=60)


def shared_cache_orders_its_stream(ctx):
    """A CUDA-like base: the exchange waits for the caller's stream and the caller's stream for the exchange."""
    from gnnsys.storage.cache import SharedCachedFeatures
    from tests.storage.test_shared_cache import CountingRows

    x = torch.arange(40.0).view(20, 2)
    streams = RecordingStreams()
    cache = SharedCachedFeatures(CountingRows(x), 4, "lru", streams=streams)
    assert dist.get_backend(cache.group) == "gloo"
    ids = torch.tensor([1, 2, 3, 7, 8, 9]) + ctx.rank
    rows = cache.gather_async(ids).wait()
    assert torch.equal(rows, x[ids])
    cache.close()
    log = [e[:3] for e in streams.log if e[0] in ("record", "wait_event", "use")]
    called, exchange, done = log[0][1], log[1][1], log[3][1]
    assert log[0] == ("record", called, "default@MainThread")  # after the caller's work on ids
    assert log[1][0] == "use" and log[1][2].startswith("gnnsys-shared-cache")  # the exchange thread's stream
    assert log[2:] == [
        ("wait_event", exchange, called),
        ("record", done, exchange),
        ("wait_event", "default@MainThread", done),  # the caller's stream waits for the rows
    ]


def test_the_shared_cache_orders_its_exchange_stream_with_the_callers(monkeypatch):
    with guarded_runs(monkeypatch):
        launch(shared_cache_orders_its_stream, 2, timeout_s=60)
