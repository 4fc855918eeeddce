"""benchmarks/bench_papers_scale.py: its child trains its own batches through
the random-read SSD tier it measures against the disk's floor, never
through packing (whose plans are the loader's epochs, not these batches)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_papers_scale  # noqa: E402

from gnnsys.datasets import PrepareOptions  # noqa: E402


def test_the_child_reads_rows_at_random_through_the_ssd_tier(make_dataset):
    ds, _ = make_dataset(num_nodes=400, num_edges=2000, dim=16, options=PrepareOptions(progress=False, align=512))
    argv = [str(ds.path), "--first", "1", "--steady", "1", "--batch-size", "32", "--hidden", "8", "--fanouts", "4,3"]
    args = bench_papers_scale.parse_args([*argv, "--cache-frac", "0.1", "--child", "uniform"])
    record = bench_papers_scale.child(args)
    for phase in record["phases"].values():
        assert "packed" not in phase["tiers"] and phase["tiers"]["ssd"]["unique_rows"] > 0
