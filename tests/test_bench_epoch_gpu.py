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
        (["--features", "gpu,host"], "--features: 'host' is not one of gpu, pinned, cpu-gather, packed, ssd"),
        (["--sampler", ""], "--sampler: '' is not one of gpu, gpu-pinned, cpu"),
        (["--cache-frac", "0.1"], "--cache-frac sizes the SSD tier's cache; add packed or ssd to --features"),
        (["--features", "ssd", "--cache-frac", "1"], "--cache-frac must be in (0, 1), got 1"),
        (["--epochs", "1"], "--epochs must be >= 2 (the first is dropped), got 1"),
        (["--papers-scale", "0"], "--papers-scale must be in (0, 1], got 0"),
        (["--products-scale", "0.25,x"], "--products-scale: 'x' is not a number"),
        (["--products-scale", "0.25,2"], "--products-scale must be in (0, 1], got 2"),
        (
            ["--products-scale", "0.25,0.1"],
            "--products-scale: one scale to run cases on, got 0.25,0.1 (several with --prepare-only)",
        ),
        (["--eval", "full"], "argument --eval: invalid choice: 'full' (choose from layerwise, sampled)"),
        (["--graph", "arxiv"], "argument --graph: invalid choice: 'arxiv' (choose from products, papers)"),
    ],
)
def test_bad_flags_are_one_line(capsys, args, message):
    with pytest.raises(SystemExit) as e:
        bench_epoch_gpu.parse_args(args)
    err = capsys.readouterr().err
    for quoted in ("'products', 'papers'", "'layerwise', 'sampled'"):  # as Python 3.12+ writes choices
        err = err.replace(quoted, quoted.replace("'", ""))
    assert e.value.code == 2 and err == f"bench_epoch_gpu: {message}\n"


def test_the_cases_run_sampler_first_then_placement_then_precision_and_the_baseline_last():
    args = bench_epoch_gpu.parse_args(["--features", "cpu-gather,gpu,pinned", "--sampler", "gpu,cpu"])
    assert args.precision == ["32", "bf16-mixed"] and args.graph == ["products"]
    order = [(c["sampler"], c["features"], c["precision_asked"]) for c in bench_epoch_gpu.plan(args)]
    assert order[:4] == [("gpu", "gpu", "32"), ("gpu", "gpu", "bf16-mixed"), ("gpu", "pinned", "32")] + [
        ("gpu", "pinned", "bf16-mixed")
    ]
    assert {s for s, _, _ in order[4:8]} == {"cpu"} and {f for _, f, _ in order[:8]} == {"gpu", "pinned"}
    assert order[8:] == [("gpu", "cpu-gather", "32"), ("cpu", "cpu-gather", "32")] + [
        ("gpu", "cpu-gather", "bf16-mixed"),
        ("cpu", "cpu-gather", "bf16-mixed"),
    ]


def test_a_case_is_expected_to_take_as_long_as_the_longest_with_its_sampler():
    assert bench_epoch_gpu.expected_seconds([], "gpu") == 0
    assert bench_epoch_gpu.expected_seconds([("gpu", 19.0)], "cpu") == 19.0  # only the first, compilations and all
    took = [("gpu", 19.0), ("gpu", 6.0), ("gpu", 7.0)]
    assert bench_epoch_gpu.expected_seconds(took, "gpu") == 7.0
    assert bench_epoch_gpu.expected_seconds(took, "cpu") == 7.0  # none with the cpu sampler yet
    assert bench_epoch_gpu.expected_seconds([*took, ("cpu", 12.0)], "gpu") == 7.0
    assert bench_epoch_gpu.expected_seconds([*took, ("cpu", 12.0)], "cpu") == 12.0


def test_each_case_trains_with_its_placement_sampler_and_precision():
    args = bench_epoch_gpu.parse_args(["--features", "ssd,pinned,packed", "--cache-frac", "0.1", "--precision", "32"])
    cases = bench_epoch_gpu.plan(args)
    ssd, pinned, packed = [bench_epoch_gpu.train_options(c, 3, 1000, args.cache_frac) for c in cases[:3]]
    assert ssd["features"] == "ssd" and ssd["cache_rows"] == 100 and ssd["scratch_gb"] == 0  # random reads
    assert packed["features"] == "packed" and packed["cache_rows"] == 100 and "scratch_gb" not in packed
    assert pinned["features"] == "pinned" and "cache_rows" not in pinned and pinned["precision"] == "32"
    assert pinned["eval"] == "layerwise" and pinned["eval_every"] == 3 and pinned["device"] == "cuda"
    sampled = bench_epoch_gpu.train_options(bench_epoch_gpu.plan(args)[1], 3, 1000, args.cache_frac, "sampled")
    assert sampled["eval"] == "sampled" and sampled["eval_every"] == 3
    from gnnsys.training.options import MinibatchOptions

    for options in (ssd, packed):
        MinibatchOptions(**(options | {"device": "cpu", "sampler": "cpu"}))  # options train() accepts


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
    scales[3] = "0.0005,0.0004"  # several products scales: each prepared
    assert bench_epoch_gpu.main(["--graph", "products", *scales]) == 0
    out = capsys.readouterr().out
    assert out.count("preparing") == 1 and f"products: {tmp_path / 'products-0.0004'}" in out
    assert json.loads((tmp_path / "products-0.0004" / "meta.json").read_text())["num_nodes"] > 0


def epoch_report(graph, cases, path, facts=None):
    facts = facts or {"gpu": "NVIDIA H100", "torch": "2.11", "triton": "3.6", "cuda": "13.0"}
    cases = [c | {"precision": c["precision_asked"]} | facts for c in cases]
    return {"graphs": {graph: {"path": path, "cases": cases}}}


def figures_of(folder: Path) -> dict:
    """{(figure, graph): figure} of gpu_figures.py's headline_figures.json in `folder`, after running it;
    an SSD figure with the packed reader under (figure, graph, "packed")."""
    assert gpu_figures.main([str(folder)]) == 0
    figures = json.loads((folder / "headline_figures.json").read_text())["figures"]
    return {(f["figure"], f.get("graph"), *(["packed"] if f.get("features") == "packed" else [])): f for f in figures}


def test_the_headline_figures_against_their_targets(tmp_path, capsys):
    products = [case("gpu", "gpu", "32", 0.5), case("pinned", "gpu", "32", 0.55), case("cpu-gather", "gpu", "32", 1.0)]
    ssd = [case("pinned", "gpu", "32", 1.0), case("gpu", "gpu", "32", 0.9), case("packed", "gpu", "32", 1.2)]
    ssd.append(case("ssd", "gpu", "32", 1.6))
    for cases in (products, ssd):
        bench_epoch_gpu.add_ratios(cases)
    (tmp_path / "epoch_products.json").write_text(json.dumps(epoch_report("products", products, "/d/products-0.25")))
    (tmp_path / "epoch_ssd.json").write_text(json.dumps(epoch_report("products", ssd, "/d/products-0.1")))
    peer = {"config": {"dataset": "/d/./products-0.1/"}, "epochs": [{"time_s": 9.0}, {"time_s": 4.0}]}
    (tmp_path / "pyg_peer_products.json").write_text(json.dumps(peer))
    got = figures_of(tmp_path)
    pinned, ssd = got[("pinned_vs_gpu_resident", "products")], got[("ssd_vs_in_memory", "products")]
    assert (pinned["value"], pinned["met"], pinned["dataset"]) == (pytest.approx(1.1), True, "products-0.25")
    assert got[("pinned_vs_gpu_resident", "papers")]["value"] is None  # not measured
    assert (ssd["value"], ssd["met"], ssd["dataset"]) == (pytest.approx(1.6), False, "products-0.1")
    packed = got[("ssd_vs_in_memory", "products", "packed")]
    assert (packed["value"], packed["met"], packed["in_memory_features"]) == (pytest.approx(1.2), True, "pinned")
    versus = got[("gnnsys_vs_pyg", "products")]  # gnnsys on the peer's graph (0.9 s), not the faster x0.25 one
    assert (versus["value"], versus["met"], versus["dataset"]) == (pytest.approx(0.225), True, "products-0.1")
    assert versus["features"] == "gpu" and versus["pyg_epochs_timed"] == 1 and versus["pyg_complete"]
    assert all(f["gpu"] == "NVIDIA H100" for f in got.values() if f["value"] is not None)
    out = capsys.readouterr().out
    where = "graph products, dataset products-0.1, features ssd, sampler gpu, precision 32"
    assert f"ssd_vs_in_memory ({where}): 1.60 (target" in out
    assert "pinned_vs_gpu_resident (graph papers): not measured" in out


def test_figures_whose_results_are_absent_or_cut_short_are_not_measured(tmp_path, capsys):
    got = figures_of(tmp_path)  # nothing ran
    assert len(got) == 4 and all(f["value"] is None and f["met"] is None for f in got.values())
    assert capsys.readouterr().out.count(": not measured") == 4
    (tmp_path / "epoch_products.json").write_text('{"graphs": {"products": {"cases": [')  # killed mid-write
    (tmp_path / "epoch_papers.json").write_text("[]")
    late = case("pinned", "gpu", "32", None) | {"skipped": "not run: it would end past the 80 s time budget"}
    ssd = [case("ssd", "gpu", "32", 12.0), late]
    bench_epoch_gpu.add_ratios(ssd)
    (tmp_path / "epoch_ssd.json").write_text(json.dumps(epoch_report("products", ssd, "/d/products-0.1")))
    assert all(f["value"] is None for f in figures_of(tmp_path).values())  # no in-memory case to compare with
    peer = {"config": {"dataset": "/d/products-0.1"}, "epochs": [{"time_s": 3.0}], "partial": True}
    (tmp_path / "pyg_peer_products.json").write_text(json.dumps(peer))
    ssd[1] = case("pinned", "gpu", "32", 1.5)
    bench_epoch_gpu.add_ratios(ssd)
    (tmp_path / "epoch_ssd.json").write_text(json.dumps(epoch_report("products", ssd, "/d/products-0.1")))
    versus = figures_of(tmp_path)[("gnnsys_vs_pyg", "products")]  # the one epoch PyG finished
    assert versus["value"] == pytest.approx(0.5) and versus["pyg_epochs_timed"] == 1 and not versus["pyg_complete"]


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
    assert record["first_epoch_s"] > 0 and record["outside_epochs_s"] >= 0  # loading and evaluating, for sizing
    packed = case | {"features": "packed"}
    record = bench_epoch_gpu.bench_case(ds.path, packed, bench_epoch_gpu.train_options(packed, 2, 400, 0.1) | small)
    assert record["epoch_s"] > 0 and record["tiers_last"]["packed"]["batches"] > 0  # read from packed segments
    gpu_only = {"features": "pinned", "sampler": "cpu", "precision_asked": "32"}
    failed = bench_epoch_gpu.bench_case(ds.path, gpu_only, bench_epoch_gpu.train_options(gpu_only, 2, 400, 0.1) | small)
    assert failed["epoch_s"] is None and failed["error"].startswith("GPUUnavailableError: placement 'pinned'")
