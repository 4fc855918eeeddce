"""Streaming layer-wise inference of a training checkpoint over every node of
a prepared dataset (`gnnsys.predict`, the function behind `gnnsys predict`),
under a host-memory budget, against the disk's sequential bandwidth.

Writes the predicted label of every node to `--predictions` (a .npy, as
`gnnsys predict --output labels` does) or, with `--output scores`, keeps the
logits in memory (small graphs only). Records per layer the passes, bytes
read and seconds (InferenceStats) next to the time a single sequential read
of that layer's input takes at fio's 1 MiB sequential bandwidth (measured in
the same run, on features.bin), the whole run's wall and CPU seconds, the
bytes read from devices (/proc/self/io), peak RSS (ru_maxrss: the
memory-mapped graph's pages count there too) and anonymous memory (RssAnon)
before inference and at its peak (sampled every 0.2 s), and the load
average, as JSON.

    python benchmarks/bench_inference.py DIR CKPT --host-mem-budget 4 --dtype bfloat16 \\
        --scratch-dir /work/bench/scratch --predictions /work/bench/scratch/labels.npy --json OUT.json
"""

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from helpers import fio, fio_machine  # noqa: E402
from peaks import Peaks  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset")
    p.add_argument("checkpoint")
    p.add_argument("--host-mem-budget", type=float, default=1.0, help="GB one layer may hold")
    p.add_argument("--dtype", default="float32", help="hidden layers' scratch dtype")
    p.add_argument("--scratch-dir")
    p.add_argument("--output", choices=["labels", "scores"], default="labels")
    p.add_argument("--predictions", help=".npy for the labels (default: kept in memory)")
    p.add_argument("--json", required=True, help="where the record goes")
    args = p.parse_args(argv)
    from gnnsys.datasets import load_dataset
    from gnnsys.inference.prediction import predict

    torch.set_num_threads(os.cpu_count())
    info = fio_machine()
    features = Path(args.dataset) / "features.bin"
    seq = fio(features, 1 << 20, 8, "io_uring", 3.0, rw="read")
    ds = load_dataset(args.dataset)

    def io():
        return int(dict(line.split(": ") for line in open("/proc/self/io").read().split("\n") if line)["read_bytes"])

    from gnnsys.host_memory import anonymous_bytes

    anon_start = anonymous_bytes()  # the interpreter, torch and the loaded dataset, before inference
    anon = Peaks({"rss_anon": anonymous_bytes})
    before, load, began, cpu = io(), os.getloadavg(), time.perf_counter(), _cpu_seconds()
    result, stats = predict(
        ds,
        args.checkpoint,
        args.predictions,
        output=args.output,
        host_mem_budget=args.host_mem_budget,
        inference_dtype=args.dtype,
        scratch_dir=args.scratch_dir,
        progress=True,
        return_stats=True,
    )
    wall, cpu = time.perf_counter() - began, _cpu_seconds() - cpu
    layers = stats.to_dict()["layers"]
    for layer in layers:
        layer["sequential_read_s"] = layer["input_bytes"] / (seq["mb_per_s"] * 1e6)
        layer["over_sequential_read"] = layer["seconds"] / layer["sequential_read_s"]
    rec = {
        "machine": info,
        "args": vars(args),
        "num_nodes": ds.num_nodes,
        "num_edges": ds.num_edges,
        "wall_s": wall,
        "cpu_s": cpu,
        "read_bytes": io() - before,
        "features_bytes": features.stat().st_size,
        "fio_sequential_mb_per_s": seq["mb_per_s"],
        "layers": layers,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_anon_start_bytes": anon_start,
        "rss_anon_peak_bytes": anon.stop()["rss_anon"],
        "load_start": load,
        "load_end": os.getloadavg(),
        "output": str(result) if args.predictions else list(result.shape),
    }
    Path(args.json).write_text(json.dumps(rec, indent=1))
    print(json.dumps({k: v for k, v in rec.items() if k != "machine"}, indent=1))


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process's threads so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
