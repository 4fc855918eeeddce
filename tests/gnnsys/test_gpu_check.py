"""benchmarks/gpu_check.sh on this CPU machine: --dry-run runs the install step
with pip's --dry-run (nothing is installed) and plans every other step; bad
arguments are one-line errors with exit status 2. The real run needs a GPU."""

import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


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
    assert "tqdm is already importable" in r.stdout
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


def test_gpu_smoke_lists_every_case():
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_smoke.py"), "--list"], capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout.split() == [
        "tiers_cpu_sampler",
        "tiers_gpu_sampler",
        "bf16_mixed",
        "fp16_mixed",
        "cache_gather",
        "shared_cache_one_rank",
        "data_parallel_w2",
        "shared_cache_w2",
        "gnnpipe_w2",
    ]
