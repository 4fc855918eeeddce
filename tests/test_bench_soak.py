"""benchmarks/bench_soak.py: how a run is judged against the targets, the
per-epoch peaks it samples, and its refusals of bad arguments."""

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_soak  # noqa: E402
from peaks import Peaks  # noqa: E402

MB = 10**6


def test_flat_run_meets_both_targets_and_growth_misses():
    flat = [500 * MB + (i % 3) * MB // 10 for i in range(500)]
    judged = bench_soak.judge(flat)
    assert abs(judged["growth_mb_per_epoch"]) < 0.01
    assert (judged["growth_target"], judged["peak_target"]) == ("met", "met")
    growing = [500 * MB + 2 * i * MB for i in range(120)]  # +2 MB an epoch
    judged = bench_soak.judge(growing)
    assert judged["growth_mb_per_epoch"] == pytest.approx(2.0)
    assert judged["growth_target"] == "missed"
    assert judged["peak_over_peak_at_50"] == pytest.approx(growing[-1] / growing[49])
    assert judged["peak_target"] == "short, missed"  # 120 epochs cannot judge the 500-epoch target


def test_short_runs_say_so():
    assert bench_soak.judge([MB] * 30)["growth_target"] == "short, met"
    assert bench_soak.judge([MB] * 30)["peak_target"] == "n/a"
    assert bench_soak.judge([MB] * 3)["growth_mb_per_epoch"] is None


def test_peaks_take_returns_the_peak_since_the_last_take():
    values = iter([5, 9, 2, 3, 1, 1, 1, 1])
    peaks = Peaks({"v": lambda: next(values, 0)}, period=3600)  # only take() samples
    assert peaks.take() == {"v": 5}
    assert peaks.take() == {"v": 9}
    assert peaks.take() == {"v": 2}
    assert peaks.stop() == {"v": 3}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--configs", "minibatch,nope"], "--configs: unknown ['nope']"),
        (["--precisions", "64"], "--precisions: unknown ['64']"),
        (["--epochs", "0"], "--epochs: must be >= 1"),
        (["--configs", "hetero"], "--configs: hetero needs --mag"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(tmp_path, capsys, argv, message):
    (tmp_path / "meta.json").write_text("{}")
    with pytest.raises(SystemExit) as exit_:
        bench_soak.parse_args(["run", "--products", str(tmp_path), *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_a_directory_without_a_dataset_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench_soak.parse_args(["run", "--products", str(tmp_path)])
    assert "--products: " in capsys.readouterr().err


def test_plot_refuses_a_missing_result_file(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench_soak.parse_args(["plot", str(tmp_path / "soak_x.json"), "--out", str(tmp_path / "x.png")])
    assert "results: no such file" in capsys.readouterr().err
