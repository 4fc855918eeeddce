"""benchmarks/bench_roofline.py and its counts in benchmarks/helpers.py: the FLOPs
of a SAGE layer against torch's own FLOP counter and a hand count, the
aggregation's bytes by hand, the floor's arithmetic, a whole run on a tiny
graph (its counts against the real loader's blocks, recounted), and its
refusals of bad arguments."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from gnnsys.cli import main as gnnsys_main
from gnnsys.models.gnn import GNNLayer
from gnnsys.samplers.block import Block

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_roofline  # noqa: E402
from helpers import roofline_floor, sage_layer_counts  # noqa: E402

# A block by hand: 3 destination rows (the first 3 of 5 sources), 6 edges.
INDPTR, INDICES = [0, 2, 3, 6], [1, 3, 0, 2, 3, 4]
D_IN, D_OUT = 4, 6


def total_flops(counts: dict) -> int:
    return sum(sum(d["gemm_flops"].values()) for d in counts.values())


def in_place_addmm_flops(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """torch's counter has no formula for the in-place addmm_ a SAGE layer accumulates its neighbour product with."""
    return 2 * a_shape[0] * a_shape[1] * b_shape[1]


def onednn_linear_flops(x_shape, weight_shape, *args, out_shape=None, **kwargs) -> int:
    """oneDNN's fp32 product (`gnnsys.models.linear`): x [m, k] times weight [n, k] transposed."""
    return 2 * x_shape[0] * x_shape[1] * weight_shape[0]


def onednn_weight_grad_flops(grad_shape, x_shape, *args, out_shape=None, **kwargs) -> int:
    """oneDNN's weight gradient: grad [m, n] transposed times x [m, k]."""
    return 2 * grad_shape[0] * grad_shape[1] * x_shape[1]


FORMULAS = {
    torch.ops.aten.addmm_: in_place_addmm_flops,
    torch.ops.mkldnn._linear_pointwise: onednn_linear_flops,
    torch.ops.aten.mkldnn_linear_backward_weights: onednn_weight_grad_flops,
}


@pytest.mark.parametrize("input_grad", [False, True])
def test_flops_match_torch_flop_counter_and_a_hand_count(input_grad):
    torch.manual_seed(0)
    block = Block(torch.tensor(INDPTR), torch.tensor(INDICES), 5, 3)
    layer = GNNLayer("sage", D_IN, D_OUT)
    x = torch.randn(5, D_IN, requires_grad=input_grad)
    with FlopCounterMode(display=False, custom_mapping=FORMULAS) as counter:
        layer(x, block).sum().backward()
    counts = sage_layer_counts(3, 5, 6, D_IN, D_OUT, input_grad, 4, 4)
    assert total_flops(counts) == counter.get_total_flops()
    # each product is 2 x 3 rows x 4 x 6 = 144: lin_l and lin_r forward, their weight
    # gradients, and (not in a first layer) their input gradients
    assert counts["forward"]["gemm_flops"] == {"lin_l": 144, "lin_r": 144}
    assert sum(counts["backward"]["gemm_flops"].values()) == (4 if input_grad else 2) * 144


def test_aggregation_bytes_by_hand():
    counts = sage_layer_counts(3, 5, 6, D_IN, D_OUT, True, 4, 2)
    csr = 6 * 12  # int64 index and float32 weight per edge
    # forward: 6 source rows of 4 x 4 B read per edge (5 distinct), 4 row pointers, 3 rows of 4 x 2 B written
    assert counts["forward"]["bytes_gathered"] == 6 * 16 + csr + 4 * 8 + 3 * 8
    assert counts["forward"]["bytes_compulsory"] == 5 * 16 + csr + 4 * 8 + 3 * 8
    # backward: 6 gradient rows of 4 x 2 B per edge (3 distinct), 6 row pointers, 5 rows of 4 x 4 B written
    assert counts["backward"]["bytes_gathered"] == 6 * 8 + csr + 6 * 8 + 5 * 16
    assert counts["backward"]["bytes_compulsory"] == 3 * 8 + csr + 6 * 8 + 5 * 16
    first = sage_layer_counts(3, 5, 6, D_IN, D_OUT, False, 4, 2)
    assert first["backward"]["bytes_gathered"] == first["backward"]["bytes_compulsory"] == 0


def test_floor_is_the_larger_of_gemm_and_memory_time():
    gemm = roofline_floor({"a": 2e9, "b": 1e9}, {"a": 100.0, "b": 50.0}, 1e8, 1e10)
    assert gemm["gemm_s"] == pytest.approx(0.04) and gemm["memory_s"] == pytest.approx(0.01)
    assert gemm["floor_s"] == pytest.approx(0.04) and gemm["bound"] == "gemm"
    memory = roofline_floor({"a": 1e9}, {"a": 100.0}, 5e8, 1e10)
    assert memory["floor_s"] == pytest.approx(0.05) and memory["bound"] == "memory"
    assert roofline_floor({}, {}, 0, 1e10)["floor_s"] == 0


@pytest.fixture(scope="module")
def arxiv(tmp_path_factory):
    out = tmp_path_factory.mktemp("roofline") / "arxiv"
    argv = ["prepare", "synthetic", "--like", "ogbn-arxiv", "--scale", "0.002", "--seed", "1", "--no-progress"]
    assert gnnsys_main([*argv, "--out", str(out)]) == 0
    return out


def recount(path, fanouts, batch_size, seed, epoch) -> list:
    """Per layer: blocks, destination rows, source rows and edges of a training epoch, from a loader of our own."""
    import gnnsys
    from gnnsys.loading.loader import MinibatchLoader
    from gnnsys.loading.options import BatchOptions, SamplingOptions

    loader = MinibatchLoader(
        gnnsys.load_dataset(path),
        "train",
        SamplingOptions(fanouts=fanouts),
        BatchOptions(batch_size=batch_size, shuffle=True, seed=seed),
    )
    loader.set_epoch(epoch)
    rows = [[0, 0, 0, 0] for _ in fanouts]
    for mb in loader:
        for i, block in enumerate(mb.blocks):
            for k, v in enumerate((1, block.num_dst, block.num_src, block.num_edges)):
                rows[i][k] += v
    return rows


def test_a_tiny_run_counts_the_loaders_blocks_and_adds_up(arxiv, tmp_path):
    argv = [str(arxiv), "--precisions", "32", "--threads", "1", "--prefetch", "4,0", "--nice", "0,19", "--warmup", "1"]
    argv += ["--batch-size", "16", "--hidden", "8", "--fanouts", "4,3", "--gemm-repeats", "1", "--bandwidth-mib", "1"]
    assert bench_roofline.main([*argv, "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "roofline_arxiv.json").read_text())
    settings = [(r["prefetch"], r["loader_nice"], r["torch_threads"]) for r in result["runs"]]
    assert settings == [(4, 0, 1), (4, 19, 1), (0, 0, 1), (0, 19, 1)]
    expected = recount(arxiv, [4, 3], 16, 0, epoch=1)  # the epoch after the warm-up
    classes = result["runs"][0]["layers"][-1]["out"]
    for run in result["runs"]:
        assert run["steps"] == expected[0][0] and run["steps_untimed"] == 0
        dims = [(layer["in"], layer["out"]) for layer in run["layers"]]
        assert dims == [(128, 8), (8, classes)]
        for i, layer in enumerate(run["layers"]):
            rows = layer["rows"]
            assert [rows[k] for k in ("blocks", "dst", "src", "edges")] == expected[i]
            d_in, d_out = dims[i]
            gemm = layer["counts"]["forward"]["gemm_flops"]
            assert gemm == {"lin_l": 2 * rows["dst"] * d_in * d_out, "lin_r": 2 * rows["dst"] * d_in * d_out}
            backward = sum(layer["counts"]["backward"]["gemm_flops"].values())
            assert backward == (2 if i == 0 else 4) * 2 * rows["dst"] * d_in * d_out
        roofline = run["roofline"]
        pieces = roofline["pieces"]
        assert roofline["floor_s"] == pytest.approx(sum(p.get("floor_s", 0) for p in pieces.values()))
        assert all(p["floor_s"] > 0 for name, p in pieces.items() if name.startswith("layer"))
        assert all(p["gemm_new_shape_s"] > 0 for name, p in pieces.items() if name.startswith("layer"))
        assert sum(p["measured_s"] for p in pieces.values()) == pytest.approx(roofline["compute_s"])
        assert roofline["compute_s"] == run["breakdown"]["compute_s"]
        assert pieces["other"]["measured_s"] >= 0
    assert result["runs"][0]["threads_alive"] != result["runs"][2]["threads_alive"]  # prefetch 0: no loader threads
    if importlib.util.find_spec("matplotlib") is not None:  # the plot is drawn where matplotlib is installed
        assert (tmp_path / "roofline_arxiv.png").stat().st_size > 0
    for rates in result["rates"]["1"]["gemm"].values():
        assert set(rates) == {"fp32", "bf16", "fp32_new_shape", "bf16_new_shape"}


def test_alternated_threads_split_one_epochs_steps_and_a_profiled_epoch_follows(arxiv, tmp_path, capsys):
    argv = [str(arxiv), "--precisions", "32", "--threads", "2,1", "--alternate", "--warmup", "0", "--batch-size", "16"]
    argv += ["--hidden", "8", "--fanouts", "4,3", "--gemm-repeats", "1", "--gemm-seconds", "0", "--bandwidth-mib", "1"]
    assert bench_roofline.main([*argv, "--profile", "--out", str(tmp_path)]) == 0
    runs = json.loads((tmp_path / "roofline_arxiv.json").read_text())["runs"]
    assert [(r["torch_threads"], r["alternated"], r["epoch"]) for r in runs] == [(2, True, 0), (1, True, 0)]
    profile = runs[0]["profile"]
    assert profile["epoch"] == 1 and "profile" not in runs[1]
    assert sum(profile["groups"].values()) == pytest.approx(sum(op["self_s"] for op in profile["ops"]))
    products = "products (oneDNN)" if torch.backends.mkldnn.is_available() else "products (torch)"
    assert profile["groups"][products] > 0 and profile["groups"]["aggregation"] > 0
    assert [op["self_s"] for op in profile["ops"]] == sorted((op["self_s"] for op in profile["ops"]), reverse=True)
    assert "profiled epoch" in capsys.readouterr().out
    expected = recount(arxiv, [4, 3], 16, 0, epoch=0)
    batches = expected[0][0]
    assert [r["steps"] for r in runs] == [(batches + 1) // 2, batches // 2]  # steps 0, 2, ... at 2 threads
    for i in range(2):  # the two counts' blocks are the epoch's
        assert [sum(r["layers"][i]["rows"][k] for r in runs) for k in ("blocks", "dst", "src", "edges")] == expected[i]
    for run in runs:
        assert run["compute_s"] == pytest.approx(sum(p["measured_s"] for p in run["roofline"]["pieces"].values()))
        assert run["compute_s"] < run["breakdown"]["compute_s"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--precisions", "16-mixed"], "--precisions: unknown ['16-mixed']"),
        (["--threads", "0"], "--threads: every value must be >= 1"),
        (["--threads", "two"], "--threads: not a comma-separated list of integers"),
        (["--prefetch", "-1"], "--prefetch: every value must be >= 0"),
        (["--nice", "20"], "--nice: niceness runs from 0 to 19, got [20]"),
        (["--nice", "-1"], "--nice: every value must be >= 0"),
        (["--fanouts", "5,0"], "--fanouts: 0 is not a fanout"),
        (["--warmup", "-1"], "--warmup: must be >= 0"),
        (["--alternate", "--threads", "2"], "--alternate: needs at least two --threads counts"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(arxiv, capsys, extra, message):
    with pytest.raises(SystemExit) as exit_:
        bench_roofline.parse_args([str(arxiv), *extra])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_a_directory_without_a_dataset_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench_roofline.parse_args([str(tmp_path)])
    assert "not a prepared gnnsys dataset (no meta.json)" in capsys.readouterr().err
