"""Benchmarks without matplotlib: benchmarks/plotting.py's can_plot is the one
guard, and bench_shared_cache.py writes its results and says the figure is
left out instead of crashing."""

import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_bench_shared_cache_runs_without_matplotlib(make_dataset, monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_shared_cache

    ds, _ = make_dataset(num_nodes=120, num_edges=900, dim=4)
    out = tmp_path / "shared_cache"
    argv = [str(ds.path), "--workers", "1,2", "--policies", "lru", "--epochs", "2", "--presample-epochs", "1"]
    bench_shared_cache.main([*argv, "--fanouts", "3,2", "--batch-size", "16", "--out", str(out)])
    assert set(json.loads(out.with_suffix(".json").read_text())["workers"]) == {"1", "2"}
    assert not out.with_suffix(".png").exists()
    assert f"{out.with_suffix('.png')}: not drawn, matplotlib is not installed" in capsys.readouterr().out


def test_every_benchmark_that_plots_asks_can_plot_first():
    """Each benchmark drawing a figure (with its own plot function) guards it with can_plot."""
    unguarded = []
    for path in sorted(BENCHMARKS.glob("*.py")):
        text = path.read_text()
        if path.name in ("plotting.py", "plot_minibatch.py") or "import matplotlib" not in text:
            continue
        if "can_plot(" not in text:
            unguarded.append(path.name)
    assert unguarded == []
