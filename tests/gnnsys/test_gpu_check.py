"""benchmarks/gpu_check.sh on this CPU machine: --dry-run runs the install step
with pip's --dry-run (nothing is installed) and plans every other step; bad
arguments are one-line errors with exit status 2; the step runner it shares
with gpu_headline.sh (benchmarks/gpu_steps.sh) runs, cuts and reports steps;
the `cases` step's cases (benchmarks/gpu_smoke.py) rehearse on the CPU. The
real run needs a GPU."""

import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_smoke  # noqa: E402


def gpu_check(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def pure_wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel holding the empty module `name`."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/__init__.py", "")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def test_dry_run_installs_nothing_and_plans_every_step(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    pure_wheel(wheels, "gnnsys_check_probe", "1.0")  # a module this Python lacks: carried, pip would install it
    pure_wheel(wheels, "tqdm", "0.0.1")  # one it has: left out, its own tqdm untouched
    pure_wheel(wheels, "gnnsys_other_probe", "1.0").rename(  # built for another CPython: left out
        wheels / "gnnsys_other_probe-1.0-cp299-cp299-linux_x86_64.whl"
    )
    out = tmp_path / "out"
    r = gpu_check(
        "--dry-run",
        "--python",
        sys.executable,
        "--wheels",
        str(wheels),
        "--out",
        str(out),
        "--budget",
        "400",
        "--skip",
        "bench-epoch",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((out / "gpu_check.json").read_text())
    steps = {s["name"]: s for s in report["steps"]}
    would = next(line for line in steps["install"]["output_tail"] if line.startswith("Would install"))
    assert would.split()[2:] == ["gnnsys-0.1.0", "gnnsys_check_probe-1.0"]
    assert "tqdm-0.0.1-py3-none-any.whl is left out: tqdm is already importable" in r.stdout
    assert (
        "gnnsys_other_probe-1.0-cp299-cp299-linux_x86_64.whl is left out: this Python cannot install it"
        " (built for cp299)" in r.stdout
    )
    assert list(steps) == [
        "install",
        "smoke",
        "cases",
        "gpu-tests",
        "kernel-tests",
        "memcheck",
        "bench-gather",
        "bench-epoch",
    ]
    assert "plan: the steps' limits add up to 320s of the 400s budget" in r.stdout
    install = steps["install"]
    assert install["status"] == "passed" and "--dry-run" in install["command"] and "--no-index" in install["command"]
    assert {steps[n]["status"] for n in ("smoke", "cases", "gpu-tests", "kernel-tests", "bench-gather")} == {"planned"}
    assert steps["memcheck"]["status"] in ("planned", "skipped") and steps["bench-epoch"]["status"] == "skipped"
    assert report["dry_run"] and report["passed"] and report["budget_s"] == 400
    assert report["machine"]["executable"] == sys.executable
    assert len(report["machine"]["commit"]) == 40 and {"gpu", "torch", "triton", "cuda"} <= set(report["machine"])
    assert importlib.util.find_spec("gnnsys_check_probe") is None  # nothing was installed


@pytest.mark.parametrize(
    "args,message",
    [
        (["--budget", "soon"], "--budget must be a whole number of seconds > 0, got 'soon'"),
        (["--frobnicate"], "unknown argument '--frobnicate'"),
        (
            ["--skip", "smoke,lunch"],
            "--skip: unknown step 'lunch' (steps: install smoke cases gpu-tests kernel-tests memcheck "
            "bench-gather bench-epoch)",
        ),
        (["--python", "/nonexistent/python3"], "--python: no interpreter '/nonexistent/python3'"),
        (["--out"], "--out needs a directory"),
    ],
)
def test_bad_arguments_are_one_line_errors(args, message):
    r = gpu_check("--dry-run", *args)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"gpu_check: {message} (see --help)\n"


def test_an_interpreter_without_torch_is_one_line(tmp_path):
    no_torch = tmp_path / "python"
    no_torch.write_text("#!/bin/sh\nexit 1\n")
    no_torch.chmod(0o755)
    r = gpu_check("--dry-run", "--python", str(no_torch))
    assert r.returncode == 2 and r.stdout == ""
    why = "cannot import torch (give the interpreter of your CUDA torch)"
    assert r.stderr == f"gpu_check: --python: '{no_torch}' {why} (see --help)\n"


def test_help_names_the_steps():
    r = gpu_check("--help")
    assert r.returncode == 0 and "Steps, in order" in r.stdout and "--dry-run" in r.stdout
    assert not r.stdout.startswith("#")


def test_dry_run_refuses_limits_over_the_budget(tmp_path):
    """The steps' limits (360 s) with a 10% margin fit the 400 s budget of a lent GPU machine, not 390 s."""
    r = gpu_check("--dry-run", "--python", sys.executable, "--out", str(tmp_path), "--budget", "390")
    assert r.returncode == 2 and "limits add up to 360s, over --budget 390s with a 10% margin" in r.stderr
    fits = gpu_check("--dry-run", "--python", sys.executable, "--out", str(tmp_path), "--budget", "400")
    assert fits.returncode == 0, fits.stdout + fits.stderr
    planned = [line.split()[1] for line in fits.stdout.splitlines() if line.startswith("plan: ") and "(at most" in line]
    steps = ["smoke", "cases", "gpu-tests", "kernel-tests", "memcheck", "bench-gather", "bench-epoch"]
    assert planned == [s for s in steps if s != "memcheck" or "memcheck (at most" in fits.stdout]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    epoch = next(s["command"] for s in report["steps"] if s["name"] == "bench-epoch").split()
    import bench_epoch_gpu

    args = bench_epoch_gpu.parse_args(epoch[2:])  # flags the benchmark accepts
    assert args.precision == ["32"] and args.features == ["gpu", "pinned"] and args.time_budget == 30


def test_gpu_smoke_lists_every_case():
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_smoke.py"), "--list"], capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout.split() == [
        "tiers_cpu_sampler",
        "tiers_gpu_sampler",
        "fp32",
        "bf16_mixed",
        "fp16_mixed",
        "labor_gpu_sampler",
        "gpu_pinned_sampler",
        "cache_gather",
        "shared_cache_one_rank",
        "data_parallel_w2",
        "shared_cache_w2",
        "gnnpipe_w2",
    ]


def test_the_cases_cover_every_cuda_path():
    """On CUDA: the SSD tier under a cache with victim buffer and lookahead (both samplers), fp32, bf16-mixed
    and 16-mixed, LABOR on the GPU sampler and the gpu-pinned sampler; on the CPU, their CPU counterparts."""
    options = {name: gpu_smoke.case_options(name, "cuda") for name in gpu_smoke.TRAIN_CASES}
    tiers = [o for o in options.values() if o["features"] == "ssd"]
    assert {o["sampler"] for o in tiers} == {"cpu", "gpu"}
    assert all(o["cache_gb"] and o["victim_rows"] and o["lookahead"] for o in tiers)
    assert {o["precision"] for o in options.values()} == {"32", "bf16-mixed", "16-mixed"}
    assert any(o.get("sampling") == "labor" and o["sampler"] == "gpu" for o in options.values())
    assert any(o["sampler"] == "gpu-pinned" for o in options.values())
    on_cpu = gpu_smoke.case_options("fp16_mixed", "cpu")
    assert on_cpu == {"precision": "32", "sampler": "cpu", "features": "cpu-gather"}
    assert gpu_smoke.case_options("cache_gather", "cuda") is None


def test_the_cases_rehearse_on_the_cpu(tmp_path):
    """Every case's code runs on the CPU (its CUDA-only values replaced), so a change elsewhere that breaks
    a case fails here rather than on a lent GPU; each record names its device, precision, GPU, torch, Triton."""
    out = tmp_path / "cases.jsonl"
    argv = [sys.executable, str(ROOT / "benchmarks" / "gpu_smoke.py"), "--device", "cpu", "--root", str(tmp_path)]
    r = subprocess.run([*argv, "--out", str(out)], capture_output=True, text=True, timeout=240, cwd=ROOT)
    records = {c["case"]: c for c in map(json.loads, out.read_text().splitlines())}
    assert r.returncode == 0, r.stdout + r.stderr
    assert list(records) == gpu_smoke.CASES
    for name, c in records.items():
        assert c["device"] == "cpu" and {"gpu", "torch", "triton", "cuda", "precision", "options"} <= set(c), name
        want = "skipped" if name in gpu_smoke.MULTI_ARGS else "passed"
        assert c["status"] == want, (name, c["detail"])
    bf16 = records["bf16_mixed"]
    assert bf16["options"]["precision"] == "bf16-mixed" and bf16["precision"] in ("bf16-mixed", "32")  # as trained
    assert records["fp16_mixed"]["precision"] == "32" and records["fp32"]["precision"] == "32"
    assert records["tiers_cpu_sampler"]["options"]["features"] == "ssd" and records["cache_gather"]["precision"] is None
    assert records["gnnpipe_w2"]["detail"] == gpu_smoke.REHEARSAL


def test_a_failing_case_is_recorded_and_the_next_runs(tmp_path, monkeypatch):
    monkeypatch.setitem(gpu_smoke.GATHER_CASES, "cache_gather", lambda path, device: 1 / 0)
    out = tmp_path / "cases.jsonl"
    facts = {"gpu": None, "torch": "t", "triton": None, "cuda": None}
    failed = gpu_smoke.run_case("cache_gather", tmp_path, out, "cpu", facts)
    skipped = gpu_smoke.run_case("gnnpipe_w2", tmp_path, out, "cpu", facts)
    assert failed["status"] == "failed" and "ZeroDivisionError" in failed["detail"] and skipped["status"] == "skipped"
    assert [json.loads(line)["case"] for line in out.read_text().splitlines()] == ["cache_gather", "gnnpipe_w2"]


RUNNER = """set -euo pipefail
ROOT={root}
CHECK=probe
SCRIPT=$0
STEPS=(quick slow absent late)
declare -A LIMIT=([quick]=5 [slow]=1 [absent]=5 [late]=5)
OUT_DIR=""
BUDGET=60
source "$ROOT/benchmarks/gpu_steps.sh"
steps_parse_args "$@"
steps_start
run_step quick true
run_step slow sleep 5
script_step absent benchmarks/no_such_script.py --flag
MIN_STEP_S=1000  # less of the budget is left than a step must get
run_step late true
steps_finish
"""


@pytest.mark.parametrize("skip,rc", [("", 1), ("slow", 3)])
def test_the_step_runner_reports_each_step(tmp_path, skip, rc):
    """A step past its own limit is a timeout (exit 1), a missing script is reported and the next step runs,
    a step the budget has no time left for is incomplete (exit 3 when nothing failed)."""
    runner = tmp_path / "runner.sh"
    runner.write_text(RUNNER.format(root=ROOT))
    argv = ["bash", str(runner), "--python", sys.executable, "--out", str(tmp_path / "out")]
    r = subprocess.run([*argv, *(["--skip", skip] if skip else [])], capture_output=True, text=True, timeout=60)
    assert r.returncode == rc, r.stdout + r.stderr
    report = json.loads((tmp_path / "out" / "probe.json").read_text())
    status = {s["name"]: s["status"] for s in report["steps"]}
    assert status == {
        "quick": "passed",
        "slow": "skipped" if skip else "timeout",
        "absent": "missing",
        "late": "incomplete",
    }
    assert report["missing"] == ["absent"] and report["incomplete"] == ["late"]
    assert report["failed"] == ([] if skip else ["slow"]) and not report["passed"]
    assert "== absent: missing, benchmarks/no_such_script.py is not in this checkout" in r.stdout


@pytest.mark.parametrize("name", list(gpu_smoke.MULTI_ARGS))
def test_the_two_rank_cases_are_arguments_gnnsys_accepts(tmp_path, name):
    """Only two GPUs run them: their flags are checked here by gnnsys's own parser."""
    from gnnsys.cli import build_parser

    args = build_parser().parse_args(gpu_smoke.train_argv(tmp_path, name))
    assert args.workers == 2 and args.precision == "32" and args.device == "cuda"
