"""benchmarks/gpu_threads.sh on this CPU machine: --dry-run plans every core
count within its budget with commands bench_roofline.py accepts; a tiny run
measures the core counts this machine has (the others "skipped") and
benchmarks/threads_summary.py tabulates the split; bad input is one line."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_threads.sh"
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_roofline  # noqa: E402
import threads_summary  # noqa: E402

STEPS = ["install", "prepare", "cores-2", "cores-4", "cores-8", "cores-16", "summary"]


def threads(*args, cwd=ROOT, **env) -> subprocess.CompletedProcess:
    command = ["bash", str(SCRIPT), "--python", sys.executable, "--skip", "install", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd, env=os.environ | env)


def test_dry_run_plans_every_core_count_with_commands_bench_roofline_accepts(tmp_path):
    r = threads("--dry-run", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "plan: the steps' limits add up to 70s of the 90s budget" in r.stdout
    report = json.loads((tmp_path / "gpu_threads.json").read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert list(steps) == STEPS and report["budget_s"] == 90
    assert {s["status"] for n, s in steps.items() if n != "install"} == {"planned"}
    dataset = tmp_path / "arxiv"  # bench_roofline.py reads the dataset's meta.json
    dataset.mkdir()
    (dataset / "meta.json").write_text('{"kind": "homogeneous"}')
    for n, counts in ((2, [2, 1]), (4, [4, 2]), (8, [8, 6]), (16, [16, 14])):
        words = shlex.split(steps[f"cores-{n}"]["command"])
        assert words[:2] == ["taskset", "-c"] and words[3:5] == ["env", f"NUMBA_NUM_THREADS={n}"]
        assert words[5:7] == [sys.executable, "benchmarks/bench_roofline.py"] and words[7].endswith("/arxiv-0.1")
        args = bench_roofline.parse_args([str(dataset), *words[8:]])
        assert args.threads == counts and args.prefetch == [4, 0] and args.precisions == ["32"]
        assert args.out == str(tmp_path / f"cores-{n}")


def test_dry_run_refuses_limits_over_the_budget_and_a_bad_scale(tmp_path):
    r = threads("--dry-run", "--out", str(tmp_path), "--budget", "60")
    assert r.returncode == 2 and "limits add up to 70s, over --budget 60s with a 10% margin" in r.stderr
    r = threads("--dry-run", "--out", str(tmp_path), GPU_THREADS_SCALE="10")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "gpu_threads: GPU_THREADS_SCALE must be a scale in (0, 1], got '10'\n"


@pytest.mark.slow
def test_a_tiny_run_measures_the_cores_this_machine_has(tmp_path):
    r = threads("--out", str(tmp_path), GPU_THREADS_SCALE="0.005")
    report = json.loads((tmp_path / "gpu_threads.json").read_text())
    status = {s["name"]: s["status"] for s in report["steps"]}
    assert r.returncode == 0, r.stdout + r.stderr
    cores = len(os.sched_getaffinity(0))
    assert status["cores-2"] == "passed" and all(
        status[f"cores-{n}"] == ("passed" if n <= cores else "skipped") for n in (4, 8, 16)
    )
    summary = json.loads((tmp_path / "threads_summary.json").read_text())
    two = [row for row in summary["runs"] if row["cores"] == 2]
    assert {(row["torch_threads"], row["prefetch"]) for row in two} == {(2, 4), (1, 4), (2, 0), (1, 0)}
    assert {row["numba_threads"] for row in two} == {2} and all(row["epoch_s"] > 0 for row in two)
    assert all(row["loader_threads"] == [] for row in two if row["prefetch"] == 0)


def test_the_summary_needs_a_record(tmp_path, capsys):
    assert threads_summary.main([str(tmp_path / "absent")]) == 2
    assert capsys.readouterr().err == f"threads_summary: needs one results folder, got {tmp_path / 'absent'}\n"
    (tmp_path / "cores-4").mkdir()
    (tmp_path / "cores-4" / "roofline_arxiv-0.1.json").write_text('{"runs": [')  # cut short mid-write
    assert threads_summary.main([str(tmp_path)]) == 1
    assert "no cores-N/roofline_*.json with runs under" in capsys.readouterr().err
