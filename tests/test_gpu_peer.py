"""The GPU peer: benchmarks/peers/pyg_epoch.py's --device and --workers (bad
values refused in one line; the CPU epoch on a tiny graph where a sampling
library is at hand, the CUDA epoch on a GPU; the record printed after each
epoch, so a run cut short keeps its finished epochs), and the wheels
benchmarks/make_gpu_wheels.sh carries for it (make_gpu_peer_wheels.sh: bad
arguments refused, built wheels put in the folder within its 64 MiB)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gnnsys.cli import main as gnnsys_main

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
PEER = BENCHMARKS / "peers" / "pyg_epoch.py"
PEER_WHEELS = BENCHMARKS / "make_gpu_peer_wheels.sh"
sys.path[:0] = [str(BENCHMARKS), str(BENCHMARKS / "peers")]

import pyg_epoch  # noqa: E402
from helpers import SYSTEMS  # noqa: E402

TINY = ["--fanouts", "4,3", "--batch-size", "32", "--hidden", "16", "--epochs", "1", "--eval"]


def has_sampling_library(python: Path | str) -> bool:
    """Whether `python` has torch-sparse or pyg-lib (NeighborLoader samples with either)."""
    code = "import importlib.util as u, sys; sys.exit(not (u.find_spec('torch_sparse') or u.find_spec('pyg_lib')))"
    return Path(python).exists() and subprocess.run([str(python), "-c", code]).returncode == 0


def peer(python, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), str(PEER), *map(str, args)], capture_output=True, text=True, timeout=240)


def record_of(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def arxiv(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("peer") / "arxiv"  # 169 nodes
    argv = ["prepare", "synthetic", "--like", "ogbn-arxiv", "--scale", "0.001", "--no-progress", "--out", str(out)]
    assert gnnsys_main(argv) == 0
    return out


def arguments(monkeypatch, *argv):
    monkeypatch.setattr(sys, "argv", ["pyg_epoch.py", "dataset", *argv])
    return pyg_epoch.arguments()


def test_device_and_workers_default_to_the_cpu_path(monkeypatch):
    args = arguments(monkeypatch)
    assert (args.device, args.workers, args.fanouts, args.batch_size, args.hidden) == ("cpu", 0, [15, 10, 5], 1024, 256)
    args = arguments(monkeypatch, "--device", "cuda", "--workers", "3")
    assert (args.device, args.workers) == ("cuda", 3)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
        (["--workers", "-1"], "argument --workers: must be a whole number >= 0, got '-1'"),
        (["--workers", "two"], "argument --workers: must be a whole number >= 0, got 'two'"),
    ],
)
def test_bad_options_are_refused(monkeypatch, capsys, argv, message):
    with pytest.raises(SystemExit) as exit:
        arguments(monkeypatch, *argv)
    assert exit.value.code == 2 and message in capsys.readouterr().err.strip().splitlines()[-1]


def test_cuda_without_a_gpu_is_one_line(monkeypatch):
    assert pyg_epoch.training_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit:
        pyg_epoch.training_device("cuda")
    assert str(exit.value) == f"pyg_epoch: --device cuda: torch {torch.__version__} sees no CUDA GPU here"


def test_sampling_libraries_are_recorded_or_missing_in_one_line(monkeypatch):
    def only(present: dict, error: Exception):
        def import_module(name):
            if name in present:
                return SimpleNamespace(__version__=present[name])
            raise error

        monkeypatch.setattr(pyg_epoch.importlib, "import_module", import_module)

    only({"torch_sparse": "0.6.18"}, ImportError("No module named 'pyg_lib'"))
    assert pyg_epoch.sampling_libraries() == {"torch_sparse": "0.6.18"}
    only({}, OSError("libtorch_sparse.so: undefined symbol: _ZN3c10\nsecond line"))  # built for another torch
    with pytest.raises(SystemExit) as exit:
        pyg_epoch.sampling_libraries()
    message = str(exit.value)
    assert "\n" not in message and message.startswith("pyg_epoch: NeighborLoader needs torch-sparse or pyg-lib")
    assert "(torch_sparse: libtorch_sparse.so: undefined symbol: _ZN3c10; pyg_lib: libtorch_sparse.so" in message


def check_record(record: dict, arxiv: Path, device: str, workers: int):
    """A tiny run's record: the device, the configuration, every train seed in
    batches of 32 in both epochs, a finite loss and scores."""
    meta = json.loads((arxiv / "meta.json").read_text())
    batches = math.ceil(len(np.load(arxiv / meta["splits"]["train"])) / 32)
    assert record["device"] == record["config"]["device"] == device and record["config"]["workers"] == workers
    assert record["config"]["fanouts"] == [4, 3] and record["dataset"] == meta["name"]
    assert record["sampling"]["batches"] == batches and "loss" not in record["sampling"]
    [epoch] = record["epochs"]
    assert epoch["batches"] == batches and math.isfinite(epoch["loss"]) and epoch["loss"] > 0
    assert record["metric"] == "acc" and 0 <= record["valid"] <= 1 and 0 <= record["test"] <= 1
    assert "torch_sparse" in record["machine"] or "pyg_lib" in record["machine"]


def test_each_epoch_but_the_last_prints_the_record_so_far(capsys):
    """A peer killed for time (the headline's step limit) leaves the epochs it finished on its last line."""
    import common

    step = lambda batch, x: torch.tensor(0.5)  # noqa: E731
    args = SimpleNamespace(epochs=3, eval=False)
    common.train_and_report({"system": "t"}, args, torch.nn.Linear(1, 1), [1, 2], lambda b: b, step, None, None, {})
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [len(line["epochs"]) for line in lines] == [1, 2, 3] and all(e["batches"] == 2 for e in lines[-1]["epochs"])
    assert [line.get("partial") for line in lines] == [True, True, None]


@pytest.mark.parametrize("workers", [0, 1])
def test_cpu_epoch_on_a_tiny_graph(arxiv, workers):
    python = next((p for p in (sys.executable, SYSTEMS["pyg"][0]) if has_sampling_library(p)), None)
    if python is None:
        pytest.skip("no Python here with torch-sparse or pyg-lib: benchmarks/setup_peers.sh pyg builds one")
    record = record_of(peer(python, arxiv, *TINY, "--workers", workers))
    check_record(record, arxiv, "cpu", workers)
    assert "gpu" not in record["machine"]


@pytest.mark.gpu
def test_cuda_epoch_on_a_tiny_graph(arxiv, monkeypatch, capsys):
    """In this process (CUDA and the imports are warm): PyG's GPU training where
    the sampling library is installed, as gpu_check.sh installs the carried wheels."""
    if not has_sampling_library(sys.executable):
        pytest.skip("needs torch-sparse or pyg-lib: install the wheels benchmarks/make_gpu_wheels.sh makes")
    monkeypatch.setattr(sys, "argv", ["pyg_epoch.py", str(arxiv), *TINY, "--device", "cuda"])
    pyg_epoch.main()
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    check_record(record, arxiv, "cuda", 0)
    machine = record["machine"]
    assert (machine["gpu"], machine["torch"], machine["cuda"]) == (
        torch.cuda.get_device_name(),
        torch.__version__,
        torch.version.cuda,
    )
    assert record["epochs"][0]["breakdown"]["gather_s"] > 0


def peer_wheels(*args, **env) -> subprocess.CompletedProcess:
    command = ["bash", str(PEER_WHEELS), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env={**os.environ, **env})


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--fast"], {}, "unknown option '--fast' (usage: make_gpu_peer_wheels.sh [DIR])"),
        (["a", "b"], {}, "one DIR at most, got 2 arguments"),
        ([], {"GPU_TORCH": "2.11"}, "GPU_TORCH must be a torch release like 2.11.0, got '2.11'"),
    ],
)
def test_peer_wheels_refuse_bad_arguments(args, env, message):
    done = peer_wheels(*args, **env)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [f"make_gpu_peer_wheels: {message}"]


def test_make_gpu_wheels_refuses_bad_arguments():
    script = BENCHMARKS / "make_gpu_wheels.sh"
    done = subprocess.run(["bash", str(script), "--no-peer", "--fast"], capture_output=True, text=True, timeout=60)
    usage = "(usage: make_gpu_wheels.sh [--no-peer] [DIR])"
    assert done.returncode == 2 and done.stderr.strip() == f"make_gpu_wheels: unknown option '--fast' {usage}"


def fake_wheel(folder: Path, name: str, size: int) -> Path:
    """A file named as a wheel, `size` bytes long (sparse)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def test_checked_wheels_replace_the_old_ones_within_64_mib(tmp_path):
    """Wheels already built and checked (the cache) go into the folder without a
    rebuild, in place of older torch_scatter/torch_sparse wheels; a folder they
    would take past 64 MiB is left as it was."""
    cache = tmp_path / "cache"
    built = cache / "cp312-torch2.11.0"
    fake_wheel(built, "torch_scatter-2.1.2-cp312-cp312-linux_x86_64.whl", 3 << 20)
    fake_wheel(built, "torch_sparse-0.6.18-cp312-cp312-linux_x86_64.whl", 5 << 20)
    wheels = tmp_path / "wheels"
    fake_wheel(wheels, "tqdm-4.0-py3-none-any.whl", 1000)
    fake_wheel(wheels, "torch_sparse-0.6.17-cp312-cp312-linux_x86_64.whl", 1000)
    done = peer_wheels(wheels, GPU_PEER_CACHE=str(cache))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in wheels.iterdir()) == [
        "torch_scatter-2.1.2-cp312-cp312-linux_x86_64.whl",
        "torch_sparse-0.6.18-cp312-cp312-linux_x86_64.whl",
        "tqdm-4.0-py3-none-any.whl",
    ]
    assert f"{(8 << 20) + 1000} bytes in {wheels}" in done.stdout and "reusing the checked wheels" in done.stdout

    fake_wheel(wheels, "big-1.0-py3-none-any.whl", 57 << 20)
    before = sorted(wheels.iterdir())
    done = peer_wheels(wheels, GPU_PEER_CACHE=str(cache))
    assert done.returncode == 1 and "over the 64 MiB a device run carries; nothing changed" in done.stderr
    assert sorted(wheels.iterdir()) == before
