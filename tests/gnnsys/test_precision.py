"""Mixed precision: gnnsys.runtime.precision (and its choice per machine), models and
dropout in bf16, the full-graph reference and GNNPipe under bf16-mixed, and
precision in checkpoints. Every test runs on an injected CPU (`cpu`), by
default one with native bf16 GEMMs, so that none depends on this machine's."""

import logging
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from gnnsys.datasets import Dataset, DatasetError
from gnnsys.errors import ConfigError
from gnnsys.models.dropout import hash_dropout, relu_dropout
from gnnsys.models.gnn import GNN, GNNLayer
from gnnsys.runtime import cpu_features
from gnnsys.runtime.precision import Precision, make_precision, resolve_precision
from gnnsys.samplers import Block
from gnnsys.trainers.fullgraph import train_fullgraph
from gnnsys.training.checkpoints import restore_training_state, training_state
from gnnsys.training.fullgraph_options import FullGraphOptions
from gnnsys.training.options import MinibatchOptions

sys.path.insert(0, str(Path(__file__).parent))
from test_fullgraph import FAST, tiny_dataset  # noqa: E402
from test_models import random_csc  # noqa: E402

BF16_CPU = cpu_features.probe("model name: AMD EPYC 9B14\nflags: avx2 avx512f avx512_bf16\n", "AVX512", {}, True)
AVX2_CPU = cpu_features.probe("model name: AMD EPYC 7B12\nflags: avx2 f16c\n", "AVX2", {}, True)
EMULATED_CPU = cpu_features.probe(
    "model name: AMD EPYC 9B14\nflags: avx2 avx512f avx512_bf16\n",
    "AVX2",
    {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    True,
    benchmark=lambda: {"fp32": 37.0, "bf16": 1.1},
)


@pytest.fixture(autouse=True)
def cpu(monkeypatch):
    """cpu(features): the CPU gnnsys.runtime.precision sees (BF16_CPU until a test sets
    another); worker processes see its verdict through GNNSYS_CPU_BF16."""

    def inject(features):
        monkeypatch.setattr(cpu_features, "detect", lambda: features)
        monkeypatch.setenv("GNNSYS_CPU_BF16", "1" if features.bf16_gemm else "0")

    inject(BF16_CPU)
    return inject


# -- the choice per machine ----------------------------------------------------------------
@pytest.mark.parametrize(
    "features, auto, bf16", [(BF16_CPU, "bf16-mixed", "bf16-mixed"), (AVX2_CPU, "32", "32"), (EMULATED_CPU, "32", "32")]
)
def test_auto_and_bf16_mixed_resolve_by_the_cpus_bf16_gemms(cpu, features, auto, bf16):
    cpu(features)
    assert [resolve_precision(n, "cpu") for n in ("auto", "bf16-mixed", "32")] == [auto, bf16, "32"]
    assert make_precision("auto", "cpu").name == auto
    assert FullGraphOptions(**FAST).precision == auto  # the default, kept resolved


def test_bf16_mixed_without_native_bf16_warns_in_one_line_naming_the_capability(cpu, caplog):
    cpu(AVX2_CPU)
    with caplog.at_level(logging.WARNING, logger="gnnsys.runtime.precision"):
        assert resolve_precision("bf16-mixed", "cpu") == "32"
        assert resolve_precision("auto", "cpu") == "32"
    [record] = caplog.records
    assert record.getMessage() == (
        "precision: bf16-mixed runs its matmuls in fp32 on this CPU, whose bf16 matmuls "
        "are not native (AMD EPYC 7B12: torch AVX2, no avx512_bf16 or amx_bf16); "
        "bf16-stored features stay bf16"
    )


@pytest.mark.parametrize("native, auto", [(True, "bf16-mixed"), (False, "32")])
def test_auto_on_cuda_takes_bf16_where_the_gpu_has_it(monkeypatch, native, auto):
    seen = []
    monkeypatch.setattr(
        torch.cuda, "is_bf16_supported", lambda including_emulation=True: seen.append(including_emulation) or native
    )
    assert resolve_precision("auto", "cuda") == auto
    assert seen == [False]  # torch's emulated bf16 is not native
    assert resolve_precision("32", "cuda:1") == "32"


@pytest.mark.parametrize("features", [BF16_CPU, AVX2_CPU])
def test_every_choice_trains_as_fp32_within_precision(cpu, features):
    """auto and bf16-mixed agree with fp32 within bf16's precision on both kinds
    of CPU; where bf16 is not native they are fp32, bit for bit."""
    cpu(features)
    options = dict(FAST, epochs=10, model="sage")
    ref = train_fullgraph(tiny_dataset(), precision="32", **options)
    for name in ("auto", "bf16-mixed"):
        for ds in (tiny_dataset(), bf16_dataset()):
            run = train_fullgraph(ds, precision=name, **options)
            assert run.config["precision"] == resolve_precision(name, "cpu")
            losses, ref_losses = [e["loss"] for e in run.epochs], [e["loss"] for e in ref.epochs]
            assert max(abs(a - b) for a, b in zip(losses, ref_losses)) < 0.05
            if features is AVX2_CPU and ds.features.dtype == torch.float32:
                assert losses == ref_losses


def test_the_cli_takes_auto_as_the_default():
    from gnnsys.cli import build_parser

    assert build_parser().parse_args(["train", ".", "--precision", "auto"]).precision == "auto"
    assert MinibatchOptions.model_fields["precision"].default == "auto"
    assert FullGraphOptions().precision == resolve_precision("auto", "cpu")


# -- gnnsys.runtime.precision ------------------------------------------------------------------
@pytest.mark.parametrize("name, dtype", [("32", None), ("bf16-mixed", torch.bfloat16)])
def test_autocast_and_compute_dtype(name, dtype):
    p = make_precision(name, "cpu")
    assert p.compute_dtype == dtype
    with p.autocast():
        assert torch.is_autocast_enabled("cpu") == (dtype is not None)
        out = torch.nn.Linear(4, 2)(torch.randn(3, 4))
    assert out.dtype == (dtype or torch.float32)


@pytest.mark.parametrize(
    "name, stored, fed",
    [
        ("32", torch.float32, torch.float32),
        ("32", torch.bfloat16, torch.float32),
        ("bf16-mixed", torch.bfloat16, torch.bfloat16),
        ("bf16-mixed", torch.float32, torch.float32),
        ("bf16-mixed", torch.float16, torch.float32),
        ("16-mixed", torch.float16, torch.float16),
        ("16-mixed", torch.bfloat16, torch.float32),
    ],
)
def test_features_are_fed_as_stored_only_in_the_compute_dtype(name, stored, fed):
    assert Precision(name, torch.device("cpu")).input_dtype(stored) == fed


@pytest.mark.parametrize(
    "name, device, match",
    [
        ("64", "cpu", "must be one of auto, 32, bf16-mixed, 16-mixed, got '64'"),
        ("16-mixed", "cpu", "16-mixed needs a CUDA device"),
    ],
)
def test_bad_precisions_are_config_errors(name, device, match):
    with pytest.raises(ConfigError, match=f"^precision: {match}"):
        make_precision(name, device)


def test_backward_step_without_a_scaler_is_backward_then_step():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)
    b.load_state_dict(a.state_dict())
    x = torch.randn(5, 3)
    opt_a, opt_b = torch.optim.Adam(a.parameters()), torch.optim.Adam(b.parameters())
    a(x).sum().backward()
    opt_a.step()
    make_precision("bf16-mixed", "cpu").backward_step(b(x).sum(), opt_b)
    assert torch.equal(a.weight, b.weight)


# -- bf16 in the model and dropout -------------------------------------------------------
@pytest.mark.parametrize("fn", [hash_dropout, relu_dropout])
def test_dropout_in_bf16_keeps_the_fp32_mask(fn):
    """Same key, same mask in bf16 as in fp32; values rounded once; backward too."""
    x = torch.randn(50, 40)
    xb = x.bfloat16().requires_grad_()
    out32, out16 = fn(x.bfloat16().float(), 0.3, True, key=7), fn(xb, 0.3, True, key=7)
    assert out16.dtype == torch.bfloat16
    assert torch.equal(out16, out32.bfloat16())
    grad = torch.randn(50, 40).bfloat16()
    out16.backward(grad)
    xf = x.bfloat16().float().requires_grad_()
    fn(xf, 0.3, True, key=7).backward(grad.float())
    assert torch.equal(xb.grad, xf.grad.bfloat16())


def whole_graph(n=40):
    indptr, indices, _ = random_csc(n=n, e=200, seed=1)
    return Block.full_graph(indptr, indices)


@pytest.mark.parametrize("conv", ["sage", "gcn", "gat"])
@pytest.mark.parametrize("stored", [torch.float32, torch.bfloat16])
def test_layers_under_bf16_autocast_stay_close_to_fp32(conv, stored):
    block = whole_graph()
    torch.manual_seed(0)
    layer = GNNLayer(conv, 16, 32, heads=2 if conv == "gat" else 1, norm="layer", residual=True)
    x = torch.randn(block.num_src, 16).to(stored)
    ref = layer(x.float(), block)
    with torch.autocast("cpu", torch.bfloat16):
        out = layer(x, block)
    torch.testing.assert_close(out.float(), ref, rtol=0.05, atol=0.05)
    out.float().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in layer.parameters())


@pytest.mark.parametrize("conv", ["sage", "gcn"])
def test_sage_and_gcn_aggregate_in_bf16_under_autocast(conv):
    """Linear maps and aggregation in bf16: the layer's output is bf16 and
    torch.sparse.mm (which refuses fp32 values with bf16 rows) is not used."""
    block = whole_graph()
    layer = GNNLayer(conv, 8, 8, activation=False)
    with torch.autocast("cpu", torch.bfloat16):
        out = layer(torch.randn(block.num_src, 8), block)
    assert out.dtype == torch.bfloat16
    assert {"mean_adjacency", "gcn_adjacency"} & set(block.cache)


def test_gnn_trains_in_bf16_mixed_with_fp32_loss():
    block = whole_graph()
    torch.manual_seed(0)
    model = GNN("sage", 8, 16, 3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    precision = make_precision("bf16-mixed", "cpu")
    x, y = torch.randn(block.num_src, 8).bfloat16(), torch.randint(0, 3, (block.num_dst,))
    losses = []
    for _ in range(30):
        opt.zero_grad()
        with precision.autocast():
            logits = model(x, [block, block])
        loss = F.cross_entropy(logits.float(), y)
        precision.backward_step(loss, opt)
        losses.append(loss.item())
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert losses[-1] < 0.5 * losses[0]


# -- trainers ------------------------------------------------------------------------------
def bf16_dataset():
    ds = tiny_dataset()
    return Dataset(
        name="tiny-bf16",
        indptr=ds.indptr,
        indices=ds.indices,
        features=ds.features[torch.arange(ds.num_nodes)].bfloat16(),
        labels=ds.labels,
        splits=ds.splits,
        num_classes=ds.num_classes,
    )


@pytest.mark.parametrize(
    "model, pipeline", [("sage", {}), ("gcn", {}), ("sage", {"chunks": 3}), ("gcn", {"chunks": 2})]
)
def test_fullgraph_trains_in_bf16_mixed_close_to_fp32(model, pipeline):
    options = dict(FAST, epochs=20, model=model, **pipeline)
    ref = [e["loss"] for e in train_fullgraph(tiny_dataset(), **options).epochs]
    for ds in (tiny_dataset(), bf16_dataset()):
        mixed = train_fullgraph(ds, precision="bf16-mixed", **options)
        assert mixed.config["precision"] == "bf16-mixed"
        losses = [e["loss"] for e in mixed.epochs]
        assert losses[-1] < 0.9 * losses[0]
        assert max(abs(a - b) for a, b in zip(losses, ref)) < 0.05


def test_gnnpipe_workers_pass_bf16_activations():
    """Two stages exchanging bf16 activations and gradients train as one process does."""
    options = dict(FAST, epochs=10, model="gcn", chunks=2, precision="bf16-mixed")
    one = [e["loss"] for e in train_fullgraph(bf16_dataset(), **options).epochs]
    two = [e["loss"] for e in train_fullgraph(bf16_dataset(), workers=2, **options).epochs]
    assert max(abs(a - b) for a, b in zip(one, two)) < 0.02


def test_the_reference_feeds_bf16_features_without_an_upcast():
    from gnnsys.trainers.fullgraph import ReferenceTrainer

    ds = bf16_dataset()
    assert (
        ReferenceTrainer(ds, FullGraphOptions(precision="bf16-mixed", **FAST).for_dataset(ds)).x.dtype == torch.bfloat16
    )
    assert ReferenceTrainer(ds, FullGraphOptions(precision="32", **FAST).for_dataset(ds)).x.dtype == torch.float32


def test_gnnpipe_refuses_16_mixed_with_several_workers():
    from gnnsys.trainers.gnnpipe import train_pipeline

    options = FullGraphOptions(**dict(FAST, chunks=2, workers=2))
    with pytest.raises(ConfigError, match="^precision: 16-mixed runs GNNPipe with workers=1 only"):
        train_pipeline(tiny_dataset(), _with_precision(options, "16-mixed"))


def _with_precision(options, name):
    """options with another precision, bypassing the CUDA check (a CPU stand-in for a GPU run)."""
    object.__setattr__(options, "precision", name)
    return options


# -- checkpoints ------------------------------------------------------------------------------
@pytest.mark.parametrize("pipeline", [{}, {"chunks": 2}])
def test_resume_refuses_another_precision_naming_both(tmp_path, pipeline):
    ds = tiny_dataset()
    train_fullgraph(ds, checkpoint_dir=tmp_path, precision="bf16-mixed", **dict(FAST, epochs=1, **pipeline))
    with pytest.raises(
        DatasetError,
        match="was written with precision bf16-mixed, this run asks for 32; resume with --precision bf16-mixed$",
    ):
        train_fullgraph(ds, checkpoint_dir=tmp_path, resume=True, precision="32", **dict(FAST, **pipeline))
    resumed = train_fullgraph(
        ds, checkpoint_dir=tmp_path, resume=True, precision="bf16-mixed", **dict(FAST, **pipeline)
    )
    assert [e["epoch"] for e in resumed.epochs] == [0, 1, 2]


def test_a_checkpoint_without_precision_resumes_as_fp32():
    options = FullGraphOptions(precision="32", **FAST)
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(model.parameters())
    state = training_state(options, 1, [], model, opt)
    del state["options"]["precision"]
    assert restore_training_state(state, "ckpt", options, model, opt) == (1, [])


def test_the_gradient_scaler_state_is_saved_and_restored():
    options = FullGraphOptions(**FAST)
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(model.parameters())
    saved = Precision("16-mixed", torch.device("cpu"))
    saved.load_state_dict(
        {"scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 10, "_growth_tracker": 3}
    )
    state = training_state(options, 2, [], model, opt, saved)
    restored = Precision("16-mixed", torch.device("cpu"))
    restore_training_state(state, "ckpt", options, model, opt, restored)
    assert restored.state_dict() == saved.state_dict() and restored.state_dict()["scale"] == 1024.0


def test_resume_compares_resolved_precisions(cpu, tmp_path):
    """A checkpoint records the precision its run resolved to: `auto` resumes it
    where it resolves the same, and is refused naming both where it does not."""
    ds = tiny_dataset()
    train_fullgraph(ds, checkpoint_dir=tmp_path, **dict(FAST, epochs=1))  # auto: bf16-mixed on BF16_CPU
    resumed = train_fullgraph(ds, checkpoint_dir=tmp_path, resume=True, precision="bf16-mixed", **FAST)
    assert [e["epoch"] for e in resumed.epochs] == [0, 1, 2] and resumed.config["precision"] == "bf16-mixed"
    cpu(AVX2_CPU)
    with pytest.raises(DatasetError, match="was written with precision bf16-mixed, this run asks for 32;"):
        train_fullgraph(ds, checkpoint_dir=tmp_path, resume=True, **dict(FAST, epochs=4))
