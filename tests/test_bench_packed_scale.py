"""benchmarks/bench_packed_scale.py: the epoch rows it reads, and a real
child run stopped after the epochs measured, before its evaluation."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_packed_scale  # noqa: E402

from gnnsys.datasets import PrepareOptions  # noqa: E402


@pytest.mark.parametrize(
    "line, row",
    [
        ("    1    4.8937       -       -       -    10.08", (1, 10.08)),
        ("   12*   2.4762  0.7258  0.6651  0.6769     4.21", (12, 4.21)),
        (" epoch     loss   train   valid    test   time_s", None),
        ("test acc 0.6769 at best validation epoch 5", None),
    ],
)
def test_the_epoch_rows_of_the_trainers_table_are_read(line, row):
    assert bench_packed_scale.epoch_row(line) == row


def test_a_child_is_stopped_after_the_epochs_measured(make_dataset, tmp_path):
    ds, _ = make_dataset(num_nodes=400, num_edges=2000, dim=16, options=PrepareOptions(progress=False, align=512))
    argv = [str(ds.path), "--epochs", "2", "--fanouts", "4,3", "--hidden", "8", "--batch-size", "32"]
    args = bench_packed_scale.parse_args([*argv, "--cache-gb", "0.00001", "--host-mem-budget", "1"])
    command = bench_packed_scale.train_argv(args)
    assert command[command.index("--epochs") + 1] == "3" and command[command.index("--eval-every") + 1] == "3"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    run = bench_packed_scale.measure([*command, "--scratch-dir", str(scratch)], 2, scratch)
    assert len(run["epoch_s"]) == 2 and run["note"].startswith("features ssd: packed batches")
    assert run["peak_rss_anon_gb"] > 0 and run["write_bytes"] > 0
    assert list(scratch.iterdir()) == []  # the stopped child removed its packs
