"""benchmarks/bench_epoch_gpu.py on the CPU: its flags (each refused in one line
when wrong), the cases it plans and the options each trains with, the ratios
it records, the graphs it prepares without a GPU; and
benchmarks/gpu_figures.py, the headline figures against their targets."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_epoch_gpu  # noqa: E402
import gpu_figures  # noqa: E402


def run(*args, cwd=None) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(BENCHMARKS / "bench_epoch_gpu.py"), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--precision", "fp32"], "--precision: 'fp32' is not one of 32, bf16-mixed, 16-mixed, auto"),
        (["--features", "gpu,host"], "--features: 'host' is not one of gpu, pinned, cpu-gather, ssd"),
        (["--sampler", ""], "--sampler: '' is not one of gpu, gpu-pinned, cpu"),
        (["--cache-frac", "0.1"], "--cache-frac sizes the SSD tier's cache; add ssd to --features"),
        (["--features", "ssd", "--cache-frac", "1"], "--cache-frac must be in (0, 1), got 1"),
        (["--epochs", "1"], "--epochs must be >= 2 (the first is dropped), got 1"),
        (["--papers-scale", "0"], "--papers-scale must be in (0, 1], got 0"),
        (["--graph", "arxiv"], "argument --graph: invalid choice: 'arxiv' (choose from products, papers)"),
    ],
)
def test_bad_flags_are_one_line(capsys, args, message):
    with pytest.raises(SystemExit) as e:
        bench_epoch_gpu.parse_args(args)
    err = capsys.readouterr().err
    assert (
        e.value.code == 2 and err.replace("'products', 'papers'", "products, papers") == f"bench_epoch_gpu: {message}\n"
    )


def test_the_cases_run_sampler_first_then_placement_then_precision():
    args = bench_epoch_gpu.parse_args(["--features", "gpu,pinned", "--sampler", "gpu,cpu"])
    assert args.precision == ["32", "bf16-mixed"] and args.graph == ["products"]
    order = [(c["sampler"], c["features"], c["precision_asked"]) for c in bench_epoch_gpu.plan(args)]
    assert order[:4] == [("gpu", "gpu", "32"), ("gpu", "gpu", "bf16-mixed"), ("gpu", "pinned", "32")] + [
        ("gpu", "pinned", "bf16-mixed")
    ]
    assert len(order) == 8 and {s for s, _, _ in order[4:]} == {"cpu"}


def test_each_case_trains_with_its_placement_sampler_and_precision():
    args = bench_epoch_gpu.parse_args(["--features", "ssd,pinned", "--cache-frac", "0.1", "--precision", "32"])
    ssd, pinned = [bench_epoch_gpu.train_options(c, 3, 1000, args.cache_frac) for c in bench_epoch_gpu.plan(args)[:2]]
    assert ssd["features"] == "ssd" and ssd["cache_rows"] == 100 and ssd["scratch_gb"] == 0
    assert pinned["features"] == "pinned" and "cache_rows" not in pinned and pinned["precision"] == "32"
    assert pinned["eval"] == "layerwise" and pinned["eval_every"] == 3 and pinned["device"] == "cuda"
    from gnnsys.training.options import MinibatchOptions

    MinibatchOptions(**(ssd | {"device": "cpu", "sampler": "cpu"}))  # options train() accepts


def case(features, sampler, precision, epoch_s):
    return {"features": features, "sampler": sampler, "precision_asked": precision, "epoch_s": epoch_s}


def test_ratios_compare_within_a_sampler_and_precision():
    cases = [
        case("gpu", "gpu", "32", 1.0),
        case("pinned", "gpu", "32", 1.1),
        case("cpu-gather", "gpu", "32", 2.0),
        case("ssd", "gpu", "32", 1.65),
        case("pinned", "gpu", "bf16-mixed", 0.8),
        case("gpu", "cpu", "32", None),
    ]
    bench_epoch_gpu.add_ratios(cases)
    assert cases[1]["vs_gpu_resident"] == pytest.approx(1.1) and cases[2]["vs_gpu_resident"] == pytest.approx(2.0)
    assert cases[3]["vs_in_memory"] == pytest.approx(1.5) and cases[3]["in_memory_features"] == "pinned"
    assert cases[4]["vs_gpu_resident"] is None  # no GPU-resident case at bf16-mixed
    assert "vs_gpu_resident" not in cases[5]


def test_without_cuda_it_measures_nothing_in_one_line(tmp_path):
    r = run("--root", str(tmp_path), "--out", str(tmp_path / "out.json"))
    assert r.returncode == 2 and r.stdout == "" and not (tmp_path / "out.json").exists()
    assert r.stderr == "bench_epoch_gpu: needs a CUDA GPU (torch.cuda.is_available() is False); nothing measured\n"


def test_prepare_only_makes_the_graphs_at_once_without_a_gpu(tmp_path, capsys):
    scales = ["--root", str(tmp_path), "--products-scale", "0.0005", "--papers-scale", "0.00002", "--prepare-only"]
    assert bench_epoch_gpu.main(["--graph", "products", "--graph", "papers", *scales]) == 0
    out = capsys.readouterr().out
    for graph, scale in (("products", "0.0005"), ("papers", "2e-05")):
        meta = json.loads((tmp_path / f"{graph}-{scale}" / "meta.json").read_text())
        assert meta["num_nodes"] > 0 and f"{graph}: {tmp_path / f'{graph}-{scale}'}" in out
    assert bench_epoch_gpu.main(["--graph", "products", *scales]) == 0
    assert "preparing" not in capsys.readouterr().out  # made once


def epoch_report(graph, cases, facts=None):
    facts = facts or {"gpu": "NVIDIA H100", "torch": "2.11", "triton": "3.6", "cuda": "13.0"}
    return {"graphs": {graph: {"cases": [c | {"precision": c["precision_asked"]} | facts for c in cases]}}}


def test_the_headline_figures_against_their_targets(tmp_path, capsys):
    products = [case("gpu", "gpu", "32", 1.0), case("pinned", "gpu", "32", 1.1), case("cpu-gather", "gpu", "32", 2.0)]
    ssd = [case("ssd", "gpu", "32", 1.6), case("pinned", "gpu", "32", 1.0)]
    for cases in (products, ssd):
        bench_epoch_gpu.add_ratios(cases)
    (tmp_path / "epoch_products.json").write_text(json.dumps(epoch_report("products", products)))
    (tmp_path / "epoch_ssd.json").write_text(json.dumps(epoch_report("products", ssd)))
    (tmp_path / "pyg_peer_products.json").write_text(json.dumps({"epochs": [{"time_s": 9.0}, {"time_s": 4.0}]}))
    assert gpu_figures.main([str(tmp_path)]) == 0
    figures = json.loads((tmp_path / "headline_figures.json").read_text())["figures"]
    got = {(f["figure"], f.get("graph")): (f["value"], f["met"]) for f in figures}
    assert got[("pinned_vs_gpu_resident", "products")] == (pytest.approx(1.1), True)
    assert got[("pinned_vs_gpu_resident", "papers")] == (None, None)  # not measured
    assert got[("ssd_vs_in_memory", "products")] == (pytest.approx(1.6), False)
    assert got[("gnnsys_vs_pyg", "products")] == (pytest.approx(0.25), True)  # 1.0 s against 4.0 s
    assert all(f["gpu"] == "NVIDIA H100" for f in figures if f["value"] is not None)
    out = capsys.readouterr().out
    assert "ssd_vs_in_memory (graph products, sampler gpu, precision 32): 1.60 (target <= 1.5: MISSED)" in out
    assert "pinned_vs_gpu_resident (graph papers): not measured" in out


def test_the_figures_need_a_results_folder(tmp_path, capsys):
    assert gpu_figures.main([str(tmp_path / "absent")]) == 2
    assert capsys.readouterr().err == f"gpu_figures: needs one results folder, got {tmp_path / 'absent'}\n"


def test_a_case_records_its_epochs_precision_and_tiers(make_dataset):
    """bench_case on the CPU (the options' device and sizes changed): the record the GPU run writes."""
    from gnnsys.datasets import PrepareOptions

    ds, _ = make_dataset(num_nodes=400, num_edges=2000, dim=16, options=PrepareOptions(progress=False, align=512))
    case = {"features": "ssd", "sampler": "cpu", "precision_asked": "32"}
    small = {"device": "cpu", "fanouts": (4, 3), "hidden": 8, "batch_size": 64}
    record = bench_epoch_gpu.bench_case(ds.path, case, bench_epoch_gpu.train_options(case, 2, 400, 0.1) | small)
    assert record["precision"] == "32" and record["epoch_s"] > 0 and len(record["epoch_times_s"]) == 1
    assert record["cache_rows"] == 40 and record["tiers_last"] and record["machine"]["device"] == "cpu"
    gpu_only = {"features": "pinned", "sampler": "cpu", "precision_asked": "32"}
    failed = bench_epoch_gpu.bench_case(ds.path, gpu_only, bench_epoch_gpu.train_options(gpu_only, 2, 400, 0.1) | small)
    assert failed["epoch_s"] is None and failed["error"].startswith("GPUUnavailableError: placement 'pinned'")
