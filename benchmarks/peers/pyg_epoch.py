"""PyG baseline: one sampling + feature-slicing epoch with NeighborLoader, then
GraphSAGE training epochs, on a gnnsys dataset directory. Prints one JSON line.

Runs in the PyG peer environment (benchmarks/setup_peers.sh: torch-sparse
built from source), never imports gnnsys. The loader is given the graph
without features and the rows of each batch's n_id are sliced here, exactly
what NeighborLoader's own filtering does, so sampling and slicing are timed
apart. The model is PyG's usual NeighborLoader GraphSAGE: every layer runs on
every sampled node and the first batch_size outputs are the seeds'. Accuracy
comes from PyG's usual exact layer-wise inference (NeighborLoader with
num_neighbors=[-1] over all nodes, one layer at a time).

--device cuda is PyG's standard GPU training: NeighborLoader samples and the
features are sliced on the CPU, each batch's features and edges are copied to
the GPU through pinned memory (timed as gathering, the copies awaited), and the
model, the loss and the optimizer run on the GPU. On the GPU machine the
sampling library comes from benchmarks/.gpu-wheels (benchmarks/make_gpu_wheels.sh).
--workers N samples in N NeighborLoader worker processes (default 0: in this one).
"""
from __future__ import annotations

import argparse
import importlib

import torch
import torch.nn.functional as F
import torch_geometric
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import SAGEConv

from common import (PeerDataset, machine, parse_args, seed_everything, task_loss, timed_epoch, train_and_report,
                    warm_up)

SAMPLING_LIBRARIES = ("torch_sparse", "pyg_lib")  # NeighborLoader samples with either


class SAGE(torch.nn.Module):
    """GraphSAGE (mean) over a sampled subgraph: len(dims) - 1 layers, ReLU
    and dropout after every hidden layer."""

    def __init__(self, dims: list[int], dropout: float):
        super().__init__()
        self.layers = torch.nn.ModuleList(SAGEConv(a, b, aggr="mean") for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def layer(self, i: int, h: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """Layer i over the subgraph's edges: one row per subgraph node."""
        h = self.layers[i](h, edge_index)
        if i < len(self.layers) - 1:
            h = F.dropout(F.relu(h), self.dropout, self.training)
        return h

    def forward(self, x, edge_index):
        for i in range(len(self.layers)):
            x = self.layer(i, x, edge_index)
        return x


def loader(graph, ids, fanouts, batch_size, shuffle, workers=0):
    """PyG's NeighborLoader over `ids` (`workers` worker processes)."""
    return NeighborLoader(graph, num_neighbors=fanouts, input_nodes=ids, batch_size=batch_size, shuffle=shuffle,
                          num_workers=workers, persistent_workers=workers > 0)


@torch.no_grad()
def layerwise_logits(model, graph, x, batch_size, device, workers=0):
    """Exact logits of every node, one layer at a time over all nodes (each
    layer's rows computed on `device`, kept on the CPU)."""
    model.eval()
    batches = loader(graph, None, [-1], batch_size, shuffle=False, workers=workers)
    for i, conv in enumerate(model.layers):
        out = torch.empty(graph.num_nodes, conv.out_channels)
        for b in batches:
            rows = model.layer(i, x[b.n_id].to(device), b.edge_index.to(device))[:b.batch_size]
            out[b.n_id[:b.batch_size]] = rows.cpu()
        x = out
    return x


def to_gpu(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`tensor` copied to `device` through pinned memory (asynchronously)."""
    return tensor.pin_memory().to(device, non_blocking=True)


def workers_count(text: str) -> int:
    """--workers: a whole number >= 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}")
    return int(text)


def add_arguments(p: argparse.ArgumentParser):
    """The options of this peer beyond the common ones."""
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the model trains (cuda: sampling and slicing stay on the CPU)")
    p.add_argument("--workers", type=workers_count, default=0, help="NeighborLoader worker processes")


def arguments() -> argparse.Namespace:
    """This run's arguments (sys.argv): the common ones and this peer's."""
    return parse_args(__doc__, extend=add_arguments)


def training_device(name: str) -> torch.device:
    """The device named by --device; SystemExit (one line) for cuda without a GPU."""
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"pyg_epoch: --device cuda: torch {torch.__version__} sees no CUDA GPU here")
    return torch.device(name)


def sampling_libraries() -> dict:
    """{module: version} of NeighborLoader's sampling libraries importable here;
    SystemExit (one line) when there is neither."""
    versions, errors = {}, []
    for name in SAMPLING_LIBRARIES:
        try:
            versions[name] = importlib.import_module(name).__version__
        except (ImportError, OSError) as e:  # OSError: built for another torch
            errors.append(f"{name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    if not versions:
        raise SystemExit(f"pyg_epoch: NeighborLoader needs torch-sparse or pyg-lib, and this Python has neither "
                         f"({'; '.join(errors)}): run benchmarks/setup_peers.sh pyg, or on a GPU machine install "
                         f"the wheels benchmarks/make_gpu_wheels.sh makes")
    return versions


def device_facts(device: torch.device) -> dict:
    """The GPU, its CUDA and the fp32 matmul precision, for a cuda run's record."""
    if device.type != "cuda":
        return {}
    return {"gpu": torch.cuda.get_device_name(device), "cuda": torch.version.cuda,
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


def main():
    args = arguments()
    device = training_device(args.device)
    libraries = sampling_libraries()
    seed_everything(args.seed)
    data = PeerDataset(args.dataset)
    src, dst = data.src_dst()
    graph = Data(edge_index=torch.stack([src, dst]), num_nodes=data.num_nodes)
    x_all, y_all = data.features, data.labels
    if device.type == "cuda":
        def gather(batch):
            x = to_gpu(x_all[batch.n_id], device)
            batch.edge_index = to_gpu(batch.edge_index, device)
            torch.cuda.current_stream(device).synchronize()
            return x
    else:
        gather = lambda batch: x_all[batch.n_id]  # noqa: E731
    train = loader(graph, data.splits["train"], args.fanouts, args.batch_size, shuffle=True, workers=args.workers)

    record = {"system": "pyg", "dataset": data.name, "device": args.device, "config": vars(args),
              "machine": machine(torch_geometric=torch_geometric.__version__, **libraries, **device_facts(device))}
    warm_up(train)
    record["sampling"] = timed_epoch(train, gather)

    model = SAGE([x_all.shape[1]] + [args.hidden] * (len(args.fanouts) - 1) + [data.num_classes], args.dropout)
    model = model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    def step(batch, x):
        opt.zero_grad()
        out = model(x, batch.edge_index)[:batch.batch_size]
        loss = task_loss(out, y_all[batch.n_id[:batch.batch_size]].to(device))
        loss.backward()
        opt.step()
        return loss.detach()

    train_and_report(record, args, model, train, gather, step,
                     lambda: layerwise_logits(model, graph, x_all, args.eval_batch_size, device, args.workers),
                     y_all, data.splits)


if __name__ == "__main__":
    main()
