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
        "300",
        "--skip",
        "bench-epoch",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((out / "gpu_check.json").read_text())
    steps = {s["name"]: s for s in report["steps"]}
    would = next(line for line in steps["install"]["output_tail"] if line.startswith("Would install"))
    assert would.split()[2:] == ["gnnsys-0.1.0", "gnnsys_check_probe-1.0"]
    assert "tqdm is already importable" in r.stdout
    assert list(steps) == ["install", "smoke", "gpu-tests", "kernel-tests", "memcheck", "bench-gather", "bench-epoch"]
    install = steps["install"]
    assert install["status"] == "passed" and "--dry-run" in install["command"] and "--no-index" in install["command"]
    assert {steps[n]["status"] for n in ("smoke", "gpu-tests", "kernel-tests", "bench-gather")} == {"planned"}
    assert steps["memcheck"]["status"] in ("planned", "skipped") and steps["bench-epoch"]["status"] == "skipped"
    assert report["dry_run"] and report["passed"] and report["budget_s"] == 300
    assert report["machine"]["executable"] == sys.executable
    assert importlib.util.find_spec("gnnsys_check_probe") is None  # nothing was installed


@pytest.mark.parametrize(
    "args,message",
    [
        (["--budget", "soon"], "--budget must be a whole number of seconds > 0, got 'soon'"),
        (["--frobnicate"], "unknown argument '--frobnicate'"),
        (
            ["--skip", "smoke,lunch"],
            "--skip: unknown step 'lunch' (steps: install smoke gpu-tests kernel-tests memcheck "
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


def test_help_names_the_steps():
    r = gpu_check("--help")
    assert r.returncode == 0 and "Steps, in order" in r.stdout and "--dry-run" in r.stdout
    assert not r.stdout.startswith("#")
