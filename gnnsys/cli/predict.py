"""`gnnsys predict DIR --checkpoint CKPT --out FILE.npy`: a trained model's
class scores (logits), predicted labels or a layer's embeddings for every
node or the ids in --nodes, by streaming layer-wise inference (gnnsys.inference.prediction)."""

from __future__ import annotations

import argparse

import numpy as np

from gnnsys.cli.schema_flags import add_schema_arguments, build_options, given_options
from gnnsys.datasets.input_paths import input_path
from gnnsys.datasets.node_ids import read_node_ids
from gnnsys.inference.prediction_options import HeteroPredictOptions, PredictOptions

LABELS = {"homogeneous": PredictOptions, "heterogeneous dataset": HeteroPredictOptions}
TITLES = {"prediction": "prediction", "evaluation": "streaming inference (homogeneous datasets)"}
NOT_OPTIONS = ("path", "checkpoint", "out", "nodes", "run", "interrupted", "command")


def add_parser(sub):
    p = sub.add_parser(
        "predict",
        help="class scores, labels or embeddings of a trained model (from a checkpoint)",
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument("path", type=input_path, help="prepared dataset directory")
    p.add_argument(
        "--checkpoint",
        required=True,
        type=input_path,
        metavar="CKPT",
        help="checkpoint directory of gnnsys train --checkpoint-dir (or its checkpoint.pt)",
    )
    p.add_argument("--out", required=True, metavar="FILE.npy", help="output .npy file (written atomically)")
    p.add_argument(
        "--nodes",
        type=input_path,
        metavar="IDS",
        help="node ids: a 1-D .npy array of integers, or text with one id a line (default: every node)",
    )
    add_schema_arguments(p, LABELS, TITLES)
    return p


def run(args) -> int:
    from gnnsys.datasets import HeteroDataset, as_dataset
    from gnnsys.inference.prediction import predict  # imports PyG: not needed to build the parser

    dataset = as_dataset(args.path)
    cls = HeteroPredictOptions if isinstance(dataset, HeteroDataset) else PredictOptions
    options = build_options(cls, given_options(args, NOT_OPTIONS), "a heterogeneous dataset")
    nodes = None if getattr(args, "nodes", None) is None else read_node_ids(args.nodes)
    out = predict(dataset, args.checkpoint, args.out, nodes=nodes, options=options)
    if not out.is_file():  # streamed to a pipe or a FIFO: its reader has the array
        print(f"wrote {options.output} to {out}")
        return 0
    shape = np.load(out, mmap_mode="r").shape
    print(f"wrote {options.output} {'x'.join(map(str, shape))} to {out}")
    return 0
