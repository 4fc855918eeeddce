"""benchmarks/bench_gather_gpu.py without a GPU: its flags and presets, the
one-line errors, the plan (--dry-run) and its estimate; with a GPU, a tiny
real run (marked `gpu`, skipped without one)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_gather_gpu  # noqa: E402
import gather_common  # noqa: E402


def test_help_lists_the_flags():
    r = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_gather_gpu.py"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0
    for flag in ("--row-bytes", "--layouts", "--table-mib", "--calls", "--quick", "--dry-run", "--max-programs"):
        assert flag in r.stdout


def test_presets_fill_what_is_not_given():
    full, quick = bench_gather_gpu.parse_args([]), bench_gather_gpu.parse_args(["--quick", "--calls", "7"])
    assert full.row_bytes == [256, 512, 1024, 2048, 4096] and full.table_mib == 1024 and full.batch == 200_000
    assert (full.calls, full.repeats, quick.calls, quick.repeats) == (20, 5, 7, 3)
    assert bench_gather_gpu.parse_args(["--layouts", "packed", "--row-bytes", "2432"]).layouts == ["packed"]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--row-bytes", "512,abc"], "argument --row-bytes: 'abc' is not an integer"),
        (["--row-bytes", "510"], "argument --row-bytes: 510 is not in 16..65536, a multiple of 4"),
        (["--row-bytes", "512,512"], "argument --row-bytes: 512,512 repeats a value"),
        (["--layouts", "aligned,diagonal"], "argument --layouts: 'aligned,diagonal': give distinct names among"),
        (["--table-mib", "10"], "--table-mib: 10 MiB is below 64"),
        (["--calls", "0"], "--calls: 0 must be >= 1"),
        (["--max-programs", "0"], "--max-programs: 0 must be >= 1"),
    ],
)
def test_bad_flags_are_one_line_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        bench_gather_gpu.parse_args(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and message in err[-1] and err[-1].startswith("bench_gather_gpu.py: error: ")


def test_the_plan_has_a_table_per_case():
    args = bench_gather_gpu.parse_args(["--layouts", "aligned,offset,packed", "--row-bytes", "512,2408"])
    cases = {(c["row_bytes"], c["layout"]): c for c in bench_gather_gpu.plan(args)["cases"]}
    assert len(cases) == 6
    assert cases[512, "aligned"]["stride"] == cases[512, "offset"]["stride"] == 512
    assert cases[2408, "aligned"]["stride"] == 2432 and cases[2408, "aligned"]["dim"] == 602
    assert cases[512, "packed"]["stride"] == 508 and cases[512, "packed"]["dim"] == 127
    assert cases[512, "offset"]["rows"] == ((1024 << 20) - 64) // 512 < cases[512, "aligned"]["rows"]
    assert cases[512, "aligned"]["gathered_bytes"] == 200_000 * 512
    offset = gather_common.shape(512, "offset")
    assert (offset.offset, offset.stride) == (gather_common.OFFSET_BYTES, 512)


def test_dry_run_prints_the_plan_within_a_minute(capsys):
    assert bench_gather_gpu.main(["--quick", "--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 11 and lines[-1].startswith("plan: 10 cases, tables of 1024 MiB, batches of 200000")
    assert bench_gather_gpu.plan(bench_gather_gpu.parse_args(["--quick"]))["estimate_s"] <= 90


def test_the_target_is_judged_on_aligned_512_byte_rows():
    def case(row_bytes, layout, ratio):
        return {"row_bytes": row_bytes, "layout": layout, "vs_memcpy": {"zero-copy": ratio}}

    results = [case(512, "offset", 0.95), case(512, "aligned", 0.85), case(256, "aligned", 1.0)]
    assert bench_gather_gpu.target(results) == {**bench_gather_gpu.TARGET, "measured": 0.85, "met": False}
    assert bench_gather_gpu.target(results[2:]) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_without_a_gpu_nothing_is_measured(capsys, tmp_path):
    assert bench_gather_gpu.main(["--quick", "--out", str(tmp_path / "r.json")]) == 2
    assert capsys.readouterr().out.strip().splitlines() == [
        "bench_gather_gpu: needs a CUDA GPU (torch.cuda.is_available() is False); nothing measured"
    ]
    assert not (tmp_path / "r.json").exists()


@pytest.mark.gpu
def test_a_tiny_run_on_a_gpu(tmp_path):
    out = tmp_path / "r.json"
    argv = ["--table-mib", "64", "--batch", "5000", "--row-bytes", "256,2408", "--layouts", "aligned,offset,packed"]
    assert bench_gather_gpu.main([*argv, "--calls", "2", "--repeats", "1", "--no-plot", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["machine"]["gpu"] and report["machine"]["triton"] and len(report["results"]) == 6
    aligned = [r for r in report["results"] if r["layout"] == "aligned"]
    assert all(r["base_mod_128"] == 0 and r["seconds"]["zero-copy"] > 0 for r in aligned)
    assert {r["launch"]["ROTATE"] for r in report["results"] if r["layout"] == "offset"} == {True}
