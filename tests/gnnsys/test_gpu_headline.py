"""benchmarks/gpu_headline.sh on this CPU machine: --dry-run plans every step
within the 8-minute budget (a step whose script is not in the checkout is
"missing", not fatal), refuses limits over the budget, and the epoch steps'
commands are ones bench_epoch_gpu.py accepts; bad arguments are one line.
The real run needs a GPU."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_headline.sh"
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_epoch_gpu  # noqa: E402

STEPS = ["install", "facts", "prepare", "gather", "sweep", "epoch-products", "epoch-papers", "ssd", "pyg-peer"]
STEPS += ["summary"]


def headline(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_dry_run_plans_every_step_within_eight_minutes(tmp_path):
    r = headline("--dry-run", "--python", sys.executable, "--skip", "install", cwd=tmp_path)
    report = json.loads((tmp_path / "gpu-headline-out" / "gpu_headline.json").read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert list(steps) == STEPS and report["budget_s"] == 480 and report["dry_run"]
    assert "plan: the steps' limits add up to 415s of the 480s budget" in r.stdout
    absent = {
        name for name, s in steps.items() if script_of(s["command"]) and not (ROOT / script_of(s["command"])).is_file()
    }
    assert set(report["missing"]) == absent
    assert r.returncode == (3 if absent else 0), r.stdout + r.stderr
    assert {s["status"] for n, s in steps.items() if n not in absent | {"install"}} == {"planned"}
    assert "--quick --out" in steps["gather"]["command"] and "--quick --out" in steps["sweep"]["command"]
    peer = shlex.split(steps["pyg-peer"]["command"])
    assert peer[2].endswith("/products-0.1") and " ".join(peer[3:]) == "--device cuda --epochs 2 --workers 8"
    assert report["machine"]["executable"] == sys.executable


def script_of(command: str) -> str | None:
    """The Python script a planned step runs (its second word), if any."""
    words = command.split()
    return words[1] if len(words) > 1 and words[1].endswith(".py") else None


def test_the_epoch_steps_are_commands_bench_epoch_gpu_accepts(tmp_path):
    headline("--dry-run", "--python", sys.executable, "--skip", "install", "--out", str(tmp_path))
    report = json.loads((tmp_path / "gpu_headline.json").read_text())
    epoch = {s["name"]: s["command"] for s in report["steps"] if "bench_epoch_gpu.py" in s["command"]}
    assert list(epoch) == ["prepare", "epoch-products", "epoch-papers", "ssd"]
    args = {name: bench_epoch_gpu.parse_args(shlex.split(command)[2:]) for name, command in epoch.items()}
    limits = {s["name"]: s["limit_s"] for s in report["steps"]}
    prepare = args["prepare"]
    assert prepare.prepare_only and prepare.graph == ["products", "papers"] and prepare.products_scales == [0.25, 0.1]
    for name in ("epoch-products", "epoch-papers"):
        a = args[name]
        assert a.features == ["gpu", "pinned", "cpu-gather"] and a.sampler == ["gpu", "cpu"]
        assert a.precision == ["32", "bf16-mixed"] and a.graph == [name.removeprefix("epoch-")]
        assert a.time_budget == limits[name] - 10 and a.epochs == 3
        first = [(c["sampler"], c["features"]) for c in bench_epoch_gpu.plan(a)[:8]]  # pinned vs GPU-resident
        assert {f for _, f in first} == {"gpu", "pinned"} and {s for s, _ in first} == {"gpu", "cpu"}
    assert args["epoch-products"].eval == "layerwise" and args["epoch-papers"].eval == "sampled"
    ssd = args["ssd"]
    assert ssd.features == ["pinned", "gpu", "packed", "ssd"] and ssd.cache_frac == 0.1 and ssd.graph == ["products"]
    assert ssd.time_budget == limits["ssd"] - 10 and ssd.precision == ["32"] and ssd.products_scale == 0.1
    assert {a.root for a in args.values()} == {prepare.root}  # every step reads what prepare made
    assert args["epoch-products"].products_scale == 0.25 and {a.papers_scale for a in args.values()} == {0.03}
    peer = shlex.split(next(s["command"] for s in report["steps"] if s["name"] == "pyg-peer"))[2]
    assert peer == str(prepare.root / "products-0.1")  # the graph of the ssd step's gnnsys cases


def test_dry_run_refuses_limits_over_the_budget(tmp_path):
    r = headline("--dry-run", "--python", sys.executable, "--out", str(tmp_path), "--budget", "470")
    assert r.returncode == 2 and "limits add up to 430s, over --budget 470s with a 10% margin" in r.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["--budget", "8min"], "--budget must be a whole number of seconds > 0, got '8min'"),
        (["--fast"], "unknown argument '--fast'"),
        (["--skip", "sweep,lunch"], f"--skip: unknown step 'lunch' (steps: {' '.join(STEPS)})"),
    ],
)
def test_bad_arguments_are_one_line_errors(args, message):
    r = headline("--dry-run", *args)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"gpu_headline: {message} (see --help)\n"


def test_help_names_the_steps():
    r = headline("--help")
    assert r.returncode == 0 and "Steps, in order" in r.stdout and "pyg-peer" in r.stdout
    assert not r.stdout.startswith("#")
