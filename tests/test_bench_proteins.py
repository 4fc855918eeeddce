"""benchmarks/bench_proteins.py and the multi-label parts of the peers'
common.py: the peers score and train exactly as gnnsys does, the generator's
references are recomputed from meta.json, and the benchmark runs end to end
on a tiny proteins-shaped graph."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import gnnsys
from gnnsys.cli import main as gnnsys_main
from gnnsys.training.tasks import rocauc, task_loss

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path[:0] = [str(BENCHMARKS), str(BENCHMARKS / "peers")]

import bench_proteins  # noqa: E402
import common as peers  # noqa: E402

SCALE = 0.001  # 133 nodes, about 600 neighbours each, as at full scale


@pytest.fixture(scope="module")
def proteins(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "proteins"
    argv = ["prepare", "synthetic", "--like", "ogbn-proteins", "--scale", str(SCALE), "--seed", "3"]
    assert gnnsys_main([*argv, "--node-features-from-edges", "mean", "--no-progress", "--out", str(out)]) == 0
    return out


def test_peer_rocauc_and_loss_are_gnnsys_s():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(-1, 2, (300, 6), generator=g)
    y[:, 5] = torch.where(y[:, 5] == 0, -1, y[:, 5])  # a task without negatives: left out by both
    scores = torch.randn(300, 6, generator=g).round(decimals=1)  # many ties
    assert peers.mean_rocauc(scores, y) == pytest.approx(rocauc(scores, y), abs=1e-12)
    assert float(peers.task_loss(scores, y)) == pytest.approx(float(task_loss(scores, y)), rel=1e-6)
    assert peers.roc_auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == 0.75
    assert peers.roc_auc(np.array([0.5, 0.5, 0.5]), np.array([0, 1, 1])) == 0.5


def test_peer_split_scores_are_rocauc_for_multilabel_and_accuracy_otherwise():
    logits = torch.tensor([[2.0, -1.0], [-1.0, 2.0], [0.5, 0.0], [0.0, 0.5]])
    splits = {"train": torch.tensor([0]), "valid": torch.tensor([0, 1]), "test": torch.tensor([0, 1, 2, 3])}
    multilabel = torch.tensor([[1, 0], [0, 1], [0, 1], [1, 0]])
    assert peers.split_scores(logits, multilabel, splits) == {"valid": 1.0, "test": 0.75}
    classes = torch.tensor([0, 1, 1, 1])
    assert peers.split_scores(logits, classes, splits) == {"valid": 1.0, "test": 0.75}


def test_latent_from_edge_mean_inverts_the_expected_edge_feature():
    rng = np.random.default_rng(0)
    h = np.array([-2.5, -1.0, 0.0, 0.3, 1.7])
    u, e = rng.standard_normal((2, 400_000, 1))
    x = (1 / (1 + np.exp(-(1.5 * (h + u) / 2 + 0.5 * e)))).mean(axis=0)  # the generator's edges, averaged
    assert bench_proteins.latent_from_edge_mean(x, 1.5, 0.5) == pytest.approx(h, abs=0.02)
    assert np.abs(bench_proteins.latent_from_edge_mean(x, 3.0, 0.5) - h).max() > 0.5  # another signal: far off


def test_references_come_from_the_generator(proteins):
    dataset = gnnsys.load_dataset(proteins)
    references = bench_proteins.generator_references(dataset)
    for split in ("valid", "test"):
        oracle, plug_in = references[split]["oracle"], references[split]["features_plug_in"]
        assert 0.75 < oracle < 0.95
        assert oracle - 0.03 < plug_in < oracle + 0.03


def test_references_refuse_labels_the_generator_did_not_draw(proteins):
    dataset = gnnsys.load_dataset(proteins)
    dataset.meta["source"]["synthetic"]["seed"] = 4
    with pytest.raises(SystemExit, match="labels.npy differs from the generator's"):
        bench_proteins.generator_references(dataset)


def test_fullgraph_accuracy_refuses_sampling_options(proteins, capsys):
    with pytest.raises(SystemExit):
        bench_proteins.parse_args(["accuracy", str(proteins), "--batch-size", "64"])
    assert "--batch-size: samples minibatches; the fullgraph trainer" in capsys.readouterr().err


def test_timing_and_accuracy_write_their_results(proteins, tmp_path):
    out = tmp_path / "results"
    args = ["--fanouts", "3,2", "--batch-size", "32", "--out", str(out)]
    assert bench_proteins.main(["timing", str(proteins), "--configs", "gnnsys-fp32", "--reps", "1", *args]) == 0
    result = json.loads((out / "proteins_timing_proteins.json").read_text())
    summary = result["summary"]["gnnsys-fp32"]
    assert summary["runs_ok"] == 1 and summary["precision"] == ["32"]
    assert summary["peak_rss_mib"] > summary["peak_rss_anon_mib"] > 0
    assert 0.0 < summary["test"] < 1.0 and result["ratios_gnnsys_over_dgl"] == {}
    timing = ["timing", str(proteins), "--configs", "gnnsys-fp32", "--resume", *args]
    assert bench_proteins.main([*timing, "--reps", "1"]) == 0  # nothing left to run: the same record
    resumed = json.loads((out / "proteins_timing_proteins.json").read_text())
    assert resumed["runs"] == result["runs"] and len(resumed["machine"]["resumed"]) == 1
    with pytest.raises(SystemExit, match="--resume: .* was run with"):
        bench_proteins.main([*timing, "--reps", "2"])
    assert bench_proteins.main(["accuracy", str(proteins), "--trainer", "minibatch", "--epochs", "5", *args]) == 0
    document = json.loads((out / "proteins_accuracy_proteins_minibatch.json").read_text())
    assert [e["epoch"] for e in document["curves"][0]["epochs"]] == [4]
    assert document["options"]["layers"] == 2 and document["runs"][0]["final_test"] > 0.5
