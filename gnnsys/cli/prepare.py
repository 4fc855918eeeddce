"""`gnnsys prepare KIND ... OUT`: one subcommand per input kind.

Each reader module in gnnsys.datasets registers its own arguments with
`add_arguments(parser)` and turns them into a GraphSource with
`source_from_args(args)`; the options shared by all kinds live here.
"""

from __future__ import annotations

import importlib
import sys

from gnnsys.datasets.features_file import DTYPES
from gnnsys.numbers import gigabytes

READERS = {
    "ogb": ("gnnsys.datasets.ogb", "an OGB node-property raw directory (CSV or npz layout)"),
    "planetoid": (
        "gnnsys.datasets.planetoid",
        "Planetoid ind.<name>.* files (Cora, CiteSeer, PubMed); "
        "the files' duplicate edges and self-loops are removed, as in PyG's Planetoid (--raw-edges keeps them)",
    ),
    "npz": (
        "gnnsys.datasets.npz",
        "an npz in the heterophilous-benchmark layout or the gnn-benchmark CSR "
        "layout (PyG's Amazon, Coauthor, CitationFull)",
    ),
    "arrays": ("gnnsys.datasets.arrays", "your own edges, features, labels and split"),
    "synthetic": ("gnnsys.datasets.synthetic", "a synthetic graph shaped like an OGB graph"),
}


def add_common(p):
    """The options every input kind shares."""
    p.add_argument("--to-undirected", action="store_true", help="add the reverse of every edge")
    p.add_argument(
        "--self-loops",
        choices=["keep", "drop"],
        default="keep",
        help="keep: the edges from a node to itself as the input kind reads them (prepare planetoid's reader "
        "removes the files' self-loops unless --raw-edges); drop: remove every one (default: %(default)s)",
    )
    p.add_argument("--dedup", action="store_true", help="remove repeated edges")
    p.add_argument(
        "--reorder",
        choices=["none", "degree"],
        default="none",
        help="relabel nodes by in-degree, hottest first (keeps order.npy) (default: %(default)s)",
    )
    p.add_argument(
        "--align", type=int, default=128, help="feature row alignment in bytes, 512 for SSD (default: %(default)s)"
    )
    p.add_argument(
        "--dtype", choices=list(DTYPES), default="float32", help="stored feature type (default: %(default)s)"
    )
    p.add_argument("--nan-to-zero", action="store_true", help="replace NaN/inf features with 0 instead of failing")
    p.add_argument(
        "--normalize-features",
        choices=["none", "row"],
        default="none",
        help="row: divide each feature row by its sum, rows summing to 0 left as they are "
        "(PyG's NormalizeFeatures, the GCN paper's preprocessing) (default: %(default)s)",
    )
    p.add_argument(
        "--remap-labels",
        action="store_true",
        help="number the distinct labels 0..C-1 in sorted order (meta.json keeps the original of each)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the gnnsys dataset (or empty directory) at --out; anything else is refused",
    )
    p.add_argument(
        "--mem-limit",
        type=gigabytes,
        default=None,
        metavar="GB",
        help="anonymous memory the process may use (default: half of the available memory, at most 8 GB); "
        "edges are spilled to bucket files beside the output when the graph does not fit",
    )
    p.add_argument(
        "--node-features-from-edges",
        choices=["none", "mean", "sum"],
        default="none",
        help="for an input with edge features and no node features (ogbn-proteins): each node's features are "
        "the mean or sum of its in-edges' features, zeros without in-edges (default: %(default)s)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def add_parser(sub):
    p = sub.add_parser("prepare", help="convert raw data into the gnnsys dataset format")
    kinds = p.add_subparsers(dest="kind", required=True)
    for kind, (module, help_text) in READERS.items():
        k = kinds.add_parser(kind, help=help_text, description=help_text[0].upper() + help_text[1:] + ".")
        importlib.import_module(module).add_arguments(k)
        add_common(k)
        k.add_argument("--out", "-o", required=True, help="output dataset directory")
    return p


def options_from_args(args):
    """PrepareOptions from parsed common options."""
    from gnnsys.datasets.writer import PrepareOptions

    return PrepareOptions(
        to_undirected=args.to_undirected,
        self_loops=args.self_loops,
        dedup=args.dedup,
        reorder=args.reorder,
        align=args.align,
        dtype=args.dtype,
        overwrite=args.overwrite,
        nan_to_zero=args.nan_to_zero,
        normalize_features=args.normalize_features,
        remap_labels=args.remap_labels,
        mem_limit=args.mem_limit,
        node_features_from_edges=args.node_features_from_edges,
        progress=not args.no_progress,
    )


def run(args) -> int:
    from gnnsys.datasets.inspect import format_summary, summarize
    from gnnsys.datasets.writer import check_output, write_dataset

    options = options_from_args(args)
    options.check()
    check_output(args.out, options.overwrite)  # before reading a large input
    source = importlib.import_module(READERS[args.kind][0]).source_from_args(args)
    for note in source.notes:
        print(f"gnnsys prepare: note: {note}", file=sys.stderr)
    out = write_dataset(source, args.out, options)
    print(format_summary(summarize(out)))
    print(f"written to {out}")
    return 0
