"""benchmarks/bench_mag.py and the peers' heterogeneous reader: the peer reads
exactly the graph gnnsys trains on, the references come from the
generator's record, and both subcommands run end to end on a tiny
mag-shaped graph."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import gnnsys
from gnnsys.cli import main as gnnsys_main

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path[:0] = [str(BENCHMARKS), str(BENCHMARKS / "peers")]

import bench_mag  # noqa: E402
import common as peers  # noqa: E402

SCALE = 0.001  # 736 papers, 1,135 authors


def prepare(out: Path, *extra: str) -> Path:
    argv = ["prepare", "synthetic", "--like", "ogbn-mag", "--scale", str(SCALE), "--seed", "2", "--no-progress"]
    assert gnnsys_main([*argv, *extra, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    return prepare(tmp_path_factory.mktemp("bench") / "mag")


def test_peer_reads_the_graph_gnnsys_trains_on(mag):
    dataset, peer = gnnsys.load_dataset(mag), peers.PeerHeteroDataset(mag)
    assert peer.num_nodes == dataset.node_types and peer.target == "paper"
    assert len(peer.relations) == len(dataset.relations) == 7
    for (src, name, dst), (s, d) in peer.relations.items():
        relation = tuple(name.split("__"))
        assert (relation[0], relation[2]) == (src, dst)
        indptr, indices = dataset.relations[relation]
        assert torch.equal(s, torch.as_tensor(indices).long())
        assert torch.equal(torch.bincount(d, minlength=dataset.node_types[dst]), torch.as_tensor(indptr).diff())
    paper = dataset.features["paper"]
    assert set(peer.features) == {"paper"}
    assert torch.equal(peer.features["paper"], paper[torch.arange(paper.shape[0])].float())
    assert torch.equal(peer.labels, dataset.labels)
    assert all(torch.equal(peer.splits[s], dataset.split(s)) for s in ("train", "valid", "test"))


def test_peer_refuses_a_homogeneous_dataset(tmp_path):
    out = tmp_path / "cora-like"
    assert (
        gnnsys_main(
            ["prepare", "synthetic", "--like", "ogbn-arxiv", "--scale", "0.001", "--no-progress", "--out", str(out)]
        )
        == 0
    )
    with pytest.raises(SystemExit, match="not a heterogeneous dataset"):
        peers.PeerHeteroDataset(out)


def test_references_are_the_generators_record(mag):
    dataset = gnnsys.load_dataset(mag)
    refs = bench_mag.generator_references(dataset)
    synth = dataset.meta["source"]["synthetic"]
    assert refs["bayes_accuracy"]["features_and_all_neighbours"] == synth["attainable_accuracy_at_least"]
    accuracies = [refs["bayes_accuracy"][k] for k in bench_mag.BAYES]
    assert accuracies == sorted(accuracies) and accuracies[-1] < refs["label_ceiling"] < 1


def test_references_refuse_a_graph_without_reverse_relations(tmp_path):
    dataset = gnnsys.load_dataset(prepare(tmp_path / "directed", "--add-reverse-relations", "no"))
    with pytest.raises(SystemExit, match="without the reverse relations"):
        bench_mag.generator_references(dataset)


def test_timing_and_accuracy_write_their_results(mag, tmp_path):
    out = tmp_path / "results"
    sampling = ["--fanouts", "4,3", "--batch-size", "128", "--out", str(out)]
    configs = ["--configs", "gnnsys-fp32,gnnsys-sparse", "--reps", "1"]
    assert bench_mag.main(["timing", str(mag), *configs, *sampling]) == 0
    result = json.loads((out / "mag_timing_mag.json").read_text())
    summary = result["summary"]["gnnsys-fp32"]
    assert summary["runs_ok"] == 1 and summary["precision"] == ["32"]
    assert result["summary"]["gnnsys-sparse"]["runs_ok"] == 1
    runs = [*result["runs"]["gnnsys-fp32"], *result["runs"]["gnnsys-sparse"]]
    assert [run["options"]["sparse_embeddings"] for run in runs] == [False, True]
    assert len(summary["epoch_s_per_run"][0]) == 2 and 0.0 < summary["test"] < 1.0
    assert result["dataset"]["num_nodes"]["author"] == 1_135 and result["ratios_gnnsys_over_dgl"] == {}
    assert bench_mag.main(["accuracy", str(mag), "--runs", "2", "--epochs", "2", "--sparse-embeddings", *sampling]) == 0
    document = json.loads((out / "mag_accuracy_mag_sparse.json").read_text())
    assert document["options"]["sparse_embeddings"] is True
    assert [run["seed"] for run in document["runs"]] == [0, 1]
    assert [e["epoch"] for e in document["curves"][1]["epochs"]] == [0, 1]
    assert document["options"]["embedding_dim"] == 128 and document["precision"] == "32"
    finals = [run["final_test"] for run in document["runs"]]
    assert document["logger"]["final_test"]["mean"] == pytest.approx(sum(finals) / 2)


def test_timing_refuses_an_unknown_configuration(mag, capsys):
    with pytest.raises(SystemExit):
        bench_mag.parse_args(["timing", str(mag), "--configs", "gnnsys-fp32,pyg"])
    assert "--configs: unknown ['pyg']" in capsys.readouterr().err


def test_same_model_export_holds_every_weight_of_the_rgcn(mag, tmp_path):
    from gnnsys.datasets.hetero_dataset import relation_name
    from gnnsys.models.rgcn import HeteroRGCN
    from gnnsys.samplers.hetero import HeteroNeighborSampler

    dataset = gnnsys.load_dataset(mag)
    record = bench_mag.export_same_model(dataset, tmp_path / "rgcn.npz", seeds=40)
    exported = dict(np.load(tmp_path / "rgcn.npz"))
    assert record["seeds"] == 40 and exported["logits"].shape == (40, dataset.num_classes)
    torch.manual_seed(7)  # another initialisation, then every weight from the file
    model = HeteroRGCN(
        dataset.node_types, {"paper": 128}, dataset.edge_types, "paper", 64, dataset.num_classes, 2, embedding_dim=128
    ).eval()
    with torch.no_grad():
        for t, e in model.embeddings.items():
            e.weight.copy_(torch.from_numpy(exported.pop(f"embedding/{t}")))
        for i, layer in enumerate(model.layers):
            for relation, conv in layer.convs.convs.items():
                conv.lin_l.weight.copy_(torch.from_numpy(exported.pop(f"layer{i}/rel/{relation_name(relation)}")))
            for t, root in layer.roots.items():
                root.weight.copy_(torch.from_numpy(exported.pop(f"layer{i}/root/{t}/weight")))
                root.bias.copy_(torch.from_numpy(exported.pop(f"layer{i}/root/{t}/bias")))
        assert sorted(exported) == ["logits", "seeds"]  # nothing else in the file
        batch = HeteroNeighborSampler.from_dataset(dataset, [-1, -1]).sample(torch.from_numpy(exported["seeds"]))
        batch.x = {"paper": dataset.features["paper"][batch.input_nodes["paper"]].float()}
        logits = model(model.inputs(batch), batch.blocks)
    assert torch.allclose(logits, torch.from_numpy(exported["logits"]), atol=1e-6)
