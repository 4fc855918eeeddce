"""benchmarks/sweep_gather_gpu.py without a GPU: its flags, the configs it
would time (tiles that fit, the default always), the plan (--dry-run), the
fastest per row size as a tuning file gather_rows reads and as lines of
code; with a GPU, a tiny real run (marked `gpu`, skipped without one)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gnnsys.storage.gather_plan import LaunchConfig, default_config, parse_tuning, read_tuning, tuning_document

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import sweep_gather_gpu  # noqa: E402


def test_help_lists_the_flags():
    r = subprocess.run(
        [sys.executable, str(BENCHMARKS / "sweep_gather_gpu.py"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0
    for flag in ("--rows", "--warps", "--threads-per-sm", "--tuning-dir", "--no-install", "--quick", "--dry-run"):
        assert flag in r.stdout


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--rows", "8,12"], "argument --rows: 12 is not a power of two"),
        (["--warps", "32"], "argument --warps: 32 is not in 1..16"),
        (["--threads-per-sm", "16"], "argument --threads-per-sm: 16 is not in 32..65536"),
        (["--tuning-dir", "x", "--no-install"], "argument --no-install: not allowed with argument --tuning-dir"),
        (["--repeats", "0"], "--repeats: 0 must be >= 1"),
    ],
)
def test_bad_flags_are_one_line_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        sweep_gather_gpu.parse_args(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and message in err[-1] and err[-1].startswith("sweep_gather_gpu.py: error: ")


def test_configs_whose_tiles_fit_and_the_default():
    args = sweep_gather_gpu.parse_args(["--rows", "4,8,16,128", "--warps", "4", "--threads-per-sm", "1024"])
    configs = sweep_gather_gpu.configs_for(4096, args)  # 4 warps hold at most 8 rows of 4 KiB
    assert configs == [LaunchConfig(4, 4, 1024), LaunchConfig(8, 4, 1024), default_config(4096)]
    full = sweep_gather_gpu.parse_args([])
    assert default_config(512) in sweep_gather_gpu.configs_for(512, full)
    assert len(sweep_gather_gpu.configs_for(512, full)) == (5 + 6) * 3  # 128 rows of 512 B need 8 warps


def test_dry_run_prints_the_plan_within_a_minute(capsys):
    assert sweep_gather_gpu.main(["--quick", "--dry-run"]) == 0
    out = capsys.readouterr().out.rstrip().splitlines()
    assert out[0].startswith("   512 B: 16 configs") and out[-1].startswith("plan: 26 configs")
    quick = sweep_gather_gpu.plan(sweep_gather_gpu.parse_args(["--quick"]))
    assert quick["compiles"] == 8 + 5 + 2 and quick["estimate_s"] <= 60


def test_the_fastest_config_of_each_row_size_becomes_the_tuning_file(tmp_path):
    def m(row_bytes, rows, seconds):
        return {
            "row_bytes": row_bytes,
            "rows": rows,
            "warps": 4,
            "threads_per_sm": 1024,
            "sort": False,
            "seconds": seconds,
        }

    fastest = sweep_gather_gpu.best([m(512, 8, 2.0), m(512, 32, 1.0), m(512, 64, 1.5), m(4096, 4, 3.0)])
    assert {r: x["rows"] for r, x in fastest.items()} == {512: 32, 4096: 4}
    assert (
        sweep_gather_gpu.code_lines(fastest)[0]
        == "    512: LaunchConfig(rows=32, warps=4, threads_per_sm=1024, sort=False),"
    )
    tuned = {r: LaunchConfig(x["rows"], x["warps"], x["threads_per_sm"], x["sort"]) for r, x in fastest.items()}
    assert parse_tuning(tuning_document("GPU", tuned), "f.json") == tuned


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_without_a_gpu_nothing_is_measured(capsys, tmp_path):
    assert sweep_gather_gpu.main(["--quick", "--tuning-dir", str(tmp_path)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out and not list(tmp_path.iterdir())


@pytest.mark.gpu
def test_a_tiny_sweep_on_a_gpu(tmp_path):
    argv = ["--table-mib", "64", "--batch", "5000", "--row-bytes", "512", "--rows", "8,16", "--warps", "4"]
    argv += ["--threads-per-sm", "1024", "--calls", "2", "--repeats", "1", "--tuning-dir", str(tmp_path)]
    assert sweep_gather_gpu.main([*argv, "--out", str(tmp_path / "sweep.json")]) == 0
    report = json.loads((tmp_path / "sweep.json").read_text())
    assert len(report["measured"]) == 3 + 1 and report["fastest"][0]["row_bytes"] == 512
    assert list(read_tuning(report["machine"]["gpu"], tmp_path)) == [512]
