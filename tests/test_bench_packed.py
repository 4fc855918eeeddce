"""benchmarks/bench_packed.py: the flags of each mode, a real child run of
each mode on a tiny dataset (its epochs, bytes and peaks recorded, packed
batches taken where asked), and the summary's medians, floor and targets."""

import sys
from pathlib import Path

import pytest

from gnnsys.datasets import PrepareOptions

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_packed  # noqa: E402


def test_each_mode_trains_with_its_flags():
    args = bench_packed.parse_args(["DIR", "--cache-gb", "0.5", "--host-mem-budget", "2"])
    assert bench_packed.mode_flags("memory", args) == []
    assert bench_packed.mode_flags("ssd", args)[-6:-4] == ["--scratch-gb", "0"]
    packed = ["--features", "ssd", "--host-mem-budget", "2.0", "--cache-gb", "0.5"]
    assert bench_packed.mode_flags("packed", args) == packed
    args = bench_packed.parse_args(["DIR", "--cache-gb", "0.5", "--host-mem-budget", "2", "--packed-cache", "budget"])
    assert bench_packed.mode_flags("packed", args) == packed[:-2]
    assert bench_packed.mode_flags("ssd", args)[:8] == [*packed, "--scratch-gb", "0"]


@pytest.mark.parametrize("mode", ["packed", "ssd"])
def test_a_child_run_records_its_epochs_bytes_and_peaks(make_dataset, tmp_path, mode):
    ds, _ = make_dataset(num_nodes=400, num_edges=2000, dim=16, options=PrepareOptions(progress=False, align=512))
    argv = [str(ds.path), "--epochs", "2", "--fanouts", "4,3", "--hidden", "8", "--batch-size", "32"]
    args = bench_packed.parse_args([*argv, "--cache-gb", "0.00001", "--scratch-dir", str(tmp_path)])
    run = bench_packed.run_mode(mode, args, tmp_path)
    assert run["mode"] == mode and len(run["epoch_s"]) == 2 and run["peak_rss_anon_mib"] > 0
    tier = run["tiers"][1]
    assert ("packed" in tier) == (mode == "packed") and "ssd" in tier
    if mode == "packed":
        assert tier["packed"]["unplanned"] == 0 and tier["packed"]["batches"] > 0


def run(mode, epochs, read=0):
    packed = {"bytes_read": read, "pack_s": 1.0, "unplanned": 0, "packed_bytes": read, "windows_packed": 1}
    tiers = [{"packed": packed}] * len(epochs) if read else [{}] * len(epochs)
    measured = dict(wall_s=1.0, read_bytes=5, write_bytes=6, peak_rss_anon_mib=7.0, peak_disk_bytes=8)
    return {"mode": mode, "epoch_s": epochs, "tiers": tiers, **measured}


def test_the_summary_takes_medians_and_marks_the_targets():
    runs = [
        run("memory", [12.0, 10.0, 10.0, 9.0]),
        run("packed", [20.0, 11.0, 11.0, 10.0], read=2e9),
        run("memory", [14.0, 10.0, 12.0, 9.0]),
        run("packed", [30.0, 13.0, 13.0, 10.0], read=4e9),
    ]
    s = bench_packed.summarize(runs, {"seq_bytes_per_s": 1e9, "file_bytes": 1e9})
    memory, packed = s["memory"], s["packed"]
    assert memory["first_s"] == 13.0 and memory["steady_s"] == 10.5 and memory["epochs_s"] == 34.0
    assert packed["steady_s"] == 12.0 and packed["read_floor_s"] == 3.0 and packed["floor_s"] == 10.5
    assert packed["device_floor_s"] == 7.0 and packed["device_floor_with_packing_s"] == 10.5  # 2 x 3 GB + 1 GB scan
    assert packed["steady_over_memory"] == pytest.approx(12 / 10.5) and packed["steady_target_met"]
    assert packed["epochs_over_memory"] == pytest.approx(49 / 34) and packed["epochs_target_met"]


def test_a_steady_epoch_packs_the_runs_mean_window():
    """A window that ends in the epoch after the one it ran beside counts there: the first
    epoch shows two windows, the second none, the third one; each packed 4 GB in 8 s."""
    two = {"bytes_read": 2e9, "pack_s": 16.0, "unplanned": 0, "packed_bytes": 8e9, "windows_packed": 2}
    none = dict(two, pack_s=0.0, packed_bytes=0, windows_packed=0)
    one = dict(two, pack_s=8.0, packed_bytes=4e9, windows_packed=1)
    tiers = [{"packed": t} for t in (two, none, one, none)]
    packed = dict(run("packed", [20.0, 11.0, 11.0, 10.0], read=2e9), tiers=tiers)
    s = bench_packed.summarize([packed], {"seq_bytes_per_s": 1e9, "file_bytes": 1e9})["packed"]
    assert s["pack_s_steady"] == 8.0 and s["moved_bytes_steady"] == 2e9 + 4e9 + 1e9
