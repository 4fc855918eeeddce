"""benchmarks/bench_precision.py: the targets it marks met or missed from a
summary (speed-ups only where bf16 ran natively, accuracy against an earlier
run), its refusals of bad arguments, and its plot of whichever half it has."""

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_precision  # noqa: E402
from plotting import can_plot  # noqa: E402


def summary(epochs: dict, precision: dict) -> dict:
    return {name: {"epoch_s": s, "precision": precision.get(name, [])} for name, s in epochs.items()}


def accuracy(**means) -> dict:
    return {p.replace("_", "-"): {"test_mean": m, "test_stdev": None, "tests": [m]} for p, m in means.items()}


@pytest.mark.parametrize("native", [True, False])
def test_speed_targets_against_dgl_count_bf16_only_where_it_ran(native):
    ran = ["bf16-mixed"] if native else ["32"]
    s = summary(
        {"gnnsys-fp32": 10.0, "gnnsys-bf16": 5.0, "gnnsys-auto": 4.0, "dgl-fp32": 30.0},
        {"gnnsys-fp32": ["32"], "gnnsys-bf16": ran, "gnnsys-auto": ran},
    )
    t = bench_precision.targets(s, {})
    assert t["fp32_vs_dgl_fp32"] == {"target": 2.5, "measured": 3.0, "met": True}
    if native:
        assert t["auto_vs_dgl_fp32"] == {"target": 5.0, "measured": 7.5, "met": True}
        assert t["bf16_vs_gnnsys_fp32"]["measured"] == 2.0
    else:
        assert t["auto_vs_dgl_fp32"]["met"] is None and t["bf16_vs_dgl_fp32"]["met"] is None
    assert t["auto_over_fp32_epoch"] == {"target": 1.05, "measured": 0.4, "met": True}


def test_accuracy_targets_compare_precisions_and_an_earlier_run():
    acc = accuracy(**{"32": 0.870, "bf16_mixed": 0.866})
    reference = accuracy(**{"32": 0.8788, "bf16_mixed": 0.8787})
    t = bench_precision.targets({}, acc, reference)
    assert t["accuracy_points"]["measured"] == pytest.approx(0.4) and t["accuracy_points"]["met"] is True
    assert t["accuracy_vs_reference"]["measured"] == pytest.approx(0.0127)
    assert t["accuracy_vs_reference"]["met"] is False
    assert bench_precision.targets({}, acc)["accuracy_vs_reference"]["met"] is None


@pytest.mark.parametrize(
    "argv, problem",
    [
        (["--peers", "mxnet"], "--peers: unknown peer 'mxnet'"),
        (["--acc-precisions", "fp8"], "--acc-precisions: choose from 32, bf16-mixed, auto"),
        (["--acc-reference", "missing.json"], "--acc-reference: missing.json: not a results file"),
    ],
)
def test_bad_arguments_are_one_line(tmp_path, monkeypatch, capsys, argv, problem):
    (tmp_path / "meta.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        bench_precision.parse_args([str(tmp_path), "--peers", "", *argv])
    assert exit_.value.code == 2
    assert problem in capsys.readouterr().err


def test_a_peer_without_its_environment_is_refused_naming_the_setup(tmp_path, monkeypatch, capsys):
    (tmp_path / "meta.json").write_text("{}")
    monkeypatch.setitem(bench_precision.SYSTEMS, "pyg", (tmp_path / "no-python", tmp_path / "pyg_epoch.py"))
    with pytest.raises(SystemExit):
        bench_precision.parse_args([str(tmp_path), "--peers", "pyg"])
    assert "run benchmarks/setup_peers.sh pyg first" in capsys.readouterr().err


@pytest.mark.skipif(not can_plot(Path("x.png")), reason="matplotlib is not installed")
@pytest.mark.parametrize("with_epochs, with_accuracy", [(True, False), (False, True), (True, True)])
def test_the_plot_draws_the_halves_it_has(tmp_path, with_epochs, with_accuracy):
    result = {
        "dataset": "tiny",
        "config": {"acc_epochs": 2},
        "summary": {"gnnsys-fp32": {"epoch_s": 1.0, "floor_s": 0.5}} if with_epochs else {},
        "accuracy": accuracy(**{"32": 0.8}) if with_accuracy else {},
    }
    bench_precision.plot(result, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 0
    json.dumps(result)
