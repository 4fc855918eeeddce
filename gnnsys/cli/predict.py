"""`gnnsys predict DIR --checkpoint CKPT --out FILE.npy`: a trained model's
class scores (logits), predicted labels or a layer's embeddings for every
node or the ids in --nodes, by streaming layer-wise inference (gnnsys.inference.prediction)."""

from __future__ import annotations

import numpy as np

from gnnsys.cli import gigabytes
from gnnsys.datasets.input_paths import input_path
from gnnsys.datasets.node_ids import read_node_ids
from gnnsys.inference.layerwise import DEFAULT_BUDGET
from gnnsys.inference.prediction_io import OUTPUTS
from gnnsys.inference.rows_io import OUTPUT_DTYPES
from gnnsys.storage.memory_plan import GB


def add_parser(sub):
    p = sub.add_parser("predict", help="class scores, labels or embeddings of a trained model (from a checkpoint)")
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
    p.add_argument(
        "--output",
        choices=list(OUTPUTS),
        default="scores",
        help="scores: the last layer's logits (float32, before softmax); labels: their argmax (int64; "
        "multi-label datasets: each task's 0/1, int8); "
        "embeddings: the output of --layer (float32) (default: %(default)s)",
    )
    p.add_argument(
        "--layer", type=int, help="1-based layer whose output --output embeddings writes (default: the last)"
    )
    p.add_argument("--scratch-dir", help="where hidden layers' outputs are kept (default: a temporary directory)")
    p.add_argument(
        "--host-mem-budget",
        type=gigabytes,
        metavar="GB",
        help=f"GB (10^9 bytes) of host memory one layer may hold (default: {DEFAULT_BUDGET / GB:g}; a "
        "heterogeneous graph's layers are held in memory)",
    )
    p.add_argument(
        "--dtype",
        choices=list(OUTPUT_DTYPES),
        default="float32",
        help="dtype of hidden layers' scratch files (default: %(default)s)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=4096,
        help="destinations whose dense maps run at a time (default: %(default)s)",
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N, for the dense maps (default: %(default)s)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")
    return p


def run(args) -> int:
    from gnnsys.inference.prediction import predict  # imports PyG: not needed to build the parser

    nodes = None if args.nodes is None else read_node_ids(args.nodes)
    budget = None if args.host_mem_budget is None else int(args.host_mem_budget * GB)
    out = predict(
        args.path,
        args.checkpoint,
        args.out,
        nodes=nodes,
        output=args.output,
        layer=args.layer,
        scratch_dir=args.scratch_dir,
        host_mem_budget=budget,
        dtype=args.dtype,
        batch_size=args.batch_size,
        device=args.device,
        progress=args.progress,
    )
    if not out.is_file():  # streamed to a pipe or a FIFO: its reader has the array
        print(f"wrote {args.output} to {out}")
        return 0
    shape = np.load(out, mmap_mode="r").shape
    print(f"wrote {args.output} {'x'.join(map(str, shape))} to {out}")
    return 0
