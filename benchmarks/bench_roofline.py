"""Roofline of a minibatch training epoch: per SAGE layer, what the machine allows against what it takes.

Trains GraphSAGE (bench_minibatch.py's model: mean aggregation, --hidden
wide, one layer per fanout, dropout 0.5) with gnnsys's own minibatch trainer
(`gnnsys.trainers.minibatch.MinibatchTrainer`, driven epoch by epoch through
`train_epoch`, as `gnnsys.train` runs it) and, for every batch of a timed
epoch:

- counts, from the blocks the real loader sampled (rows, source rows and edges
  of each layer, read by a forward pre-hook on each layer), the FLOPs of the
  layer's dense products and the bytes its aggregation moves, forward and
  backward (benchmarks/helpers.py, `sage_layer_counts`: lin_l on the
  aggregated rows and lin_r on the root rows; their weight gradients; their
  input gradients except in the first layer, whose input is the features);
- times each layer's forward and backward, the loss and the optimizer step
  with hooks (`LayerClock`): a forward pre-hook and hook on each layer, a
  gradient hook on each layer's output (it fires when that output's gradient
  is complete, i.e. when the layer's backward starts; the next layer down
  starts when the one above has produced its input's gradient), and the
  optimizer's step pre- and post-hooks. A hook reads perf_counter and stores
  it, a few microseconds a step; the CPU runs every op synchronously, so the
  marks are the ops' times. The rest of the trainer's compute time
  (zero_grad, reading the loss) is "other".

Then, with the loader stopped, the machine's rates at each torch thread count
used: the GEMM rate at every product's shape at the epoch's mean rows, fp32
and bf16 (`gnnsys.runtime.cpu_features.gemm_gflops`: torch's matmul or the models'
`linear`, whichever is faster; the best of at least
--gemm-repeats products and --gemm-seconds of them), and the memory bandwidth
(a torch copy of --bandwidth-mib MiB, read + write bytes, median of 5). A
piece's floor is max(its FLOPs at its GEMM rates, its compulsory aggregation
bytes / bandwidth) (`roofline_floor`; the bytes with a row read per edge are
reported too); the optimizer's is Adam's 7 fp32 reads and writes per
parameter at the bandwidth; the epoch's is the sum of the pieces' floors.
Each piece's distance to its floor is measured / floor.

Threads: --threads runs one timed epoch at each torch intra-op thread count
while the loader's threads (sampling and gather, --prefetch batches ahead)
run; --alternate runs one timed epoch instead whose steps take the counts in
turn (step i at the i-th modulo), so load from other jobs on a shared machine
falls on every count alike, and sums each count's steps apart (its compute is
then the steps' time from the first forward to the optimizer step's end).
--prefetch 0 takes the loader's background threads away (sampling and
gathering run between steps in the training thread), so comparing the
compute times says whether those threads take the GEMMs' cores. Every
(precision, prefetch) builds a fresh trainer, runs --warmup untimed epochs,
then the timed ones. gnnsys's defaults are not changed.

--profile: after the timed epochs, each configuration trains one more epoch
(at the first --threads count) under torch's profiler, and its first run
records every op's self CPU time (the time in the op itself) summed over the
epoch, and those sums by kind (OP_GROUPS: the products, the weight
gradients, the copies oneDNN needs, the aggregation, ReLU + dropout, the
rest), which says where the time above the floor goes.

Writes roofline_<dataset>.json (the machine, its load average, every thread
count, every run with its counts, times and floors) and a .png of measured
against floor per layer, atomically. Only the homogeneous SAGE model.

    python benchmarks/bench_roofline.py /work/bench-data/arxiv-1.0 --precisions 32,bf16-mixed \\
        --threads 2,1 --alternate --prefetch 4,0
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import threading
import time
from pathlib import Path

from helpers import add_counts, copy_bandwidth, gemm_shape, roofline_floor, sage_layer_counts
from plotting import can_plot, save_figure

from gnnsys.numbers import number

HERE = Path(__file__).resolve().parent
PRECISIONS = ("32", "bf16-mixed")
MAX_GEMM_REPEATS = 10_000
ADAM_BYTES_PER_PARAM = 7 * 4  # reads param, grad, exp_avg, exp_avg_sq; writes param, exp_avg, exp_avg_sq (fp32)
# what --profile sums an op's self time under (any other op: "other")
OP_GROUPS = {
    "mkldnn::_linear_pointwise": "products (oneDNN)",
    "aten::mkldnn_linear_backward_weights": "weight gradients (oneDNN)",
    "aten::mm": "products (torch)",
    "aten::addmm": "products (torch)",
    "aten::to_mkldnn": "copies for oneDNN",
    "_Aggregate": "aggregation",
    "_AggregateBackward": "aggregation",
    "_ReluDropout": "ReLU + dropout",
    "_ReluDropoutBackward": "ReLU + dropout",
}


class LayerClock:
    """Per-step times of each layer's forward and backward, the loss and the
    optimizer step of `model` (a gnnsys GNN of SAGE layers) trained by
    `optimizer`, and the counts (sage_layer_counts) of every block a layer ran
    on in training, summed per torch thread count (`groups`: {threads: sums});
    see the module docstring. `reset(rotate)`: new sums, and with several
    thread counts in `rotate`, step i runs at rotate[i % len(rotate)]."""

    def __init__(self, model, optimizer):
        self.layers = list(model.layers)
        for layer in self.layers:
            if layer.kind != "sage":
                raise ValueError(f"the roofline counts SAGE layers, got {layer.kind}")
        self.handles = []
        for i, layer in enumerate(self.layers):
            self.handles.append(layer.register_forward_pre_hook(functools.partial(self._forward_start, i)))
            self.handles.append(layer.register_forward_hook(functools.partial(self._forward_end, i)))
        self.handles.append(optimizer.register_step_pre_hook(self._step_start))
        self.handles.append(optimizer.register_step_post_hook(self._step_end))
        self.reset()

    def segments(self) -> list:
        """The timed pieces of a step, in the order they run."""
        n = len(self.layers)
        return (
            [f"layer{i}.forward" for i in range(n)]
            + ["loss"]
            + [f"layer{i}.backward" for i in reversed(range(n))]
            + ["optimizer"]
        )

    def reset(self, rotate: list | None = None):
        """Start new sums; with several thread counts in `rotate`, each step sets its own."""
        self.rotate = rotate if rotate and len(rotate) > 1 else None
        self.marks: dict = {}
        self.groups: dict = {}
        self.started = self.incomplete = 0
        self.thread_names: list = []

    def _group(self) -> dict:
        import torch

        threads = torch.get_num_threads()
        if threads not in self.groups:
            self.groups[threads] = {
                "seconds": dict.fromkeys(self.segments(), 0.0),
                "counts": [{} for _ in self.layers],
                "rows": [
                    dict.fromkeys(("blocks", "dst", "src", "edges", "x_size", "agg_size"), 0) for _ in self.layers
                ],
                "steps": 0,
                "step_s": 0.0,
            }
        return self.groups[threads]

    def close(self):
        for handle in self.handles:
            handle.remove()

    def _forward_start(self, i, module, args):
        import torch

        from gnnsys.models.gnn import low_precision

        if not (module.training and torch.is_grad_enabled()):
            return
        x, block = args[0], args[1]
        if i == 0:
            self.marks = {}
            if self.rotate:
                torch.set_num_threads(self.rotate[self.started % len(self.rotate)])
            self.started += 1
            self.group = self._group()
            if not self.thread_names:
                self.thread_names = sorted(t.name for t in threading.enumerate())
        x_size = x.element_size()
        agg_size = (low_precision(x) or x.dtype).itemsize
        rows = self.group["rows"][i]
        rows.update(x_size=x_size, agg_size=agg_size)
        for key, value in (("blocks", 1), ("dst", block.num_dst), ("src", block.num_src), ("edges", block.num_edges)):
            rows[key] += value
        counts = sage_layer_counts(
            block.num_dst,
            block.num_src,
            block.num_edges,
            module.in_dim,
            module.out_dim,
            x.requires_grad,
            x_size,
            agg_size,
        )
        add_counts(self.group["counts"][i], counts)
        self.marks[("forward", i)] = time.perf_counter()

    def _forward_end(self, i, module, args, out):
        now = time.perf_counter()
        if ("forward", i) not in self.marks:
            return
        self.marks[("forward_end", i)] = now
        if out.requires_grad:
            out.register_hook(functools.partial(self._backward_start, i))

    def _backward_start(self, i, grad):
        self.marks[("backward", i)] = time.perf_counter()

    def _step_start(self, optimizer, args, kwargs):
        self.marks["step"] = time.perf_counter()

    def _step_end(self, optimizer, args, kwargs):
        self.marks["step_end"] = time.perf_counter()
        self._fold()

    def _fold(self):
        m, n = self.marks, len(self.layers)
        needed = [("forward", i) for i in range(n)] + [("forward_end", i) for i in range(n)]
        needed += [("backward", i) for i in range(n)] + ["step", "step_end"]
        if any(k not in m for k in needed):
            self.incomplete += 1
            return
        seconds = self.group["seconds"]
        for i in range(n):
            seconds[f"layer{i}.forward"] += m[("forward_end", i)] - m[("forward", i)]
            end = m[("backward", i - 1)] if i else m["step"]
            seconds[f"layer{i}.backward"] += end - m[("backward", i)]
        seconds["loss"] += m[("backward", n - 1)] - m[("forward_end", n - 1)]
        seconds["optimizer"] += m["step_end"] - m["step"]
        self.group["steps"] += 1
        self.group["step_s"] += m["step_end"] - m[("forward", 0)]
        self.marks = {}


# -- one configuration: a trainer, its warm-up and timed epochs ---------------------------------
def run_configuration(dataset, args, precision: str, prefetch: int, nice: int | None = None) -> list:
    """The timed epochs of a fresh trainer at `precision` and `prefetch`, its loader's threads
    at niceness `nice` (None: the trainer's own): one per --threads, or with --alternate one
    whose steps take the thread counts in turn; a run record per thread count."""
    import numba
    import torch

    from gnnsys.runtime.allocator import retain_memory
    from gnnsys.trainers.minibatch import MinibatchTrainer
    from gnnsys.training.options import MinibatchOptions

    schedules = [args.threads] if args.alternate else [[t] for t in args.threads]
    options = MinibatchOptions.build(
        None,
        dict(
            model="sage",
            fanouts=tuple(args.fanouts),
            batch_size=args.batch_size,
            hidden=args.hidden,
            epochs=args.warmup + len(schedules) + args.profile,
            lr=args.lr,
            dropout=0.5,
            seed=args.seed,
            precision=precision,
            prefetch=prefetch,
            progress=False,
        ),
    ).for_dataset(dataset)
    retain_memory(options)
    trainer = MinibatchTrainer(dataset, options)
    if nice is not None:
        trainer.loader_nice = nice
    clock = LayerClock(trainer.model, trainer.optimizer)
    params = sum(p.numel() for p in trainer.model.parameters())
    default_threads = torch.get_num_threads()
    runs = []
    try:
        loader = trainer.train_loader()
        for epoch in range(args.warmup):
            trainer.train_epoch(loader, epoch)
        for k, schedule in enumerate(schedules):
            torch.set_num_threads(schedule[0])
            clock.reset(schedule)
            before = os.getloadavg()
            record = trainer.train_epoch(loader, args.warmup + k)
            after = os.getloadavg()
            for threads, group in sorted(clock.groups.items(), reverse=True):
                alternated = len(schedule) > 1
                runs.append(
                    {
                        "precision_requested": precision,
                        "precision": options.precision,
                        "prefetch": prefetch,
                        "loader_nice": trainer.loader_nice,
                        "torch_threads": threads,
                        "alternated": alternated,
                        "numba_threads": numba.get_num_threads(),
                        "threads_alive": clock.thread_names,
                        "epoch": record["epoch"],
                        "time_s": record["time_s"],
                        "loss": record["loss"],
                        "breakdown": record["breakdown"],
                        # the trainer's compute time; alternated, this count's steps from forward to step end
                        "compute_s": group["step_s"] if alternated else record["breakdown"]["compute_s"],
                        "steps": group["steps"],
                        "steps_untimed": clock.incomplete,
                        "seconds": group["seconds"],
                        "layers": [
                            {"in": layer.in_dim, "out": layer.out_dim, "rows": rows, "counts": counts}
                            for layer, rows, counts in zip(clock.layers, group["rows"], group["counts"])
                        ],
                        "parameters": params,
                        "loadavg_before": before,
                        "loadavg_after": after,
                    }
                )
                print(
                    f"{options.precision} prefetch {prefetch} nice {trainer.loader_nice} threads {threads}"
                    f"{' (alternated)' if alternated else ''}: epoch {record['time_s']:.2f} s, "
                    f"compute {runs[-1]['compute_s']:.2f} s over {group['steps']} steps (load {before[0]:.2f})",
                    flush=True,
                )
        if args.profile:
            clock.close()  # the timed runs' sums stay as they are
            torch.set_num_threads(args.threads[0])
            runs[0]["profile"] = profile_epoch(trainer, loader, args.warmup + len(schedules))
    finally:
        torch.set_num_threads(default_threads)
        clock.close()
        trainer.store.close()
    return runs


def profile_epoch(trainer, loader, epoch: int) -> dict:
    """One more epoch of `trainer` under torch's profiler: its time, and every op's self CPU
    seconds (the time in the op itself, not in the ops it calls) summed over the epoch, by op and
    by OP_GROUPS; the training thread's ops only (the loader's threads are not profiled)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        record = trainer.train_epoch(loader, epoch)
    ops = sorted(
        ({"op": e.key, "self_s": e.self_cpu_time_total / 1e6, "calls": e.count} for e in prof.key_averages()),
        key=lambda op: -op["self_s"],
    )
    groups: dict = {}
    for op in ops:
        group = OP_GROUPS.get(op["op"], "other")
        groups[group] = groups.get(group, 0.0) + op["self_s"]
    return {"epoch": record["epoch"], "time_s": record["time_s"], "groups": groups, "ops": ops}


def profile_table(profile: dict) -> str:
    """A profiled epoch's self CPU seconds by group, as text lines."""
    total = sum(profile["groups"].values())
    lines = [f"profiled epoch {profile['time_s']:.2f} s (under the profiler), ops' self time {total:.2f} s:"]
    for group, seconds in sorted(profile["groups"].items(), key=lambda g: -g[1]):
        lines.append(f"  {group:<28}{seconds:>8.3f} s {seconds / total:>6.1%}")
    return "\n".join(lines)


# -- the machine's rates and the floors ---------------------------------------------------------
def mean_rows(runs: list) -> list:
    """Each layer's destination rows per block, the mean over every block of `runs` (the GEMM shapes' rows)."""
    return [
        round(
            sum(r["layers"][i]["rows"]["dst"] for r in runs)
            / max(sum(r["layers"][i]["rows"]["blocks"] for r in runs), 1)
        )
        for i in range(len(runs[0]["layers"]))
    ]


def shape_key(product: str, rows: int, layer: dict) -> str:
    """The GEMM shape of `product` in `layer` (a run's layer record) at `rows` rows, as "m,k,n"."""
    return ",".join(map(str, gemm_shape(product, rows, layer["in"], layer["out"])))


def gemm_rates(shape: tuple, args) -> dict:
    """{"fp32", "bf16"}: the best GFLOP/s of a `shape` matmul (gemm_gflops) over at least
    --gemm-repeats repeats and --gemm-seconds of each dtype's repeats (on a shared
    machine the best of many short products finds the moments when every thread ran)."""
    from gnnsys.runtime.cpu_features import gemm_gflops

    first = gemm_gflops(shape, 1)
    m, k, n = shape
    slowest = 2 * m * k * n / (min(first.values()) * 1e9)
    repeats = min(max(args.gemm_repeats, math.ceil(args.gemm_seconds / slowest)), MAX_GEMM_REPEATS)
    more = gemm_gflops(shape, repeats)
    return {dtype: max(first[dtype], more[dtype]) for dtype in first}


def new_shape_rates(product: str, rows: int, layer: dict, repeats: int) -> dict:
    """{"fp32_new_shape", "bf16_new_shape"}: GFLOP/s of `product` at `rows` rows when every
    product has a row count not multiplied before (rows + 1, rows + 2, ...), as sampled
    blocks have: the median over `repeats` such products, by the faster of
    `cpu_features.products` (as `gemm_gflops`). A product then pays for oneDNN's
    primitive of the new shape (gnnsys bounds their caches, and sampled row counts
    seldom repeat), except an fp32 one by matmul, which does not go through oneDNN."""
    import statistics

    import torch

    from gnnsys.runtime.cpu_features import products

    gen = torch.Generator().manual_seed(0)
    out = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        medians = []
        for engine in range(2):  # the two of `products`
            times = []
            for i in range(1, repeats + 1):
                m, k, n = gemm_shape(product, rows + i, layer["in"], layer["out"])
                a, b = torch.randn(m, k, generator=gen).to(dtype), torch.randn(k, n, generator=gen).to(dtype)
                multiply = products(a, b)[engine]
                start = time.perf_counter()
                multiply()
                times.append(time.perf_counter() - start)
            medians.append(statistics.median(times) / (2 * m * k * n))
        out[f"{name}_new_shape"] = 1 / min(medians) / 1e9
    return out


def measure_rates(runs: list, args) -> dict:
    """At each thread count of `runs`: {threads: {"bandwidth": copy_bandwidth,
    "gemm": {"m,k,n": {"fp32", "bf16"} GFLOP/s, and new_shape_rates}}}, with the loader stopped."""
    import torch

    default_threads = torch.get_num_threads()
    rates = {}
    try:
        for threads in sorted({r["torch_threads"] for r in runs}):
            torch.set_num_threads(threads)
            gemm = {}
            for i, rows in enumerate(mean_rows(runs)):
                layer = runs[0]["layers"][i]
                for product in sorted(
                    {p for r in runs for d in r["layers"][i]["counts"].values() for p in d["gemm_flops"]}
                ):
                    key = shape_key(product, rows, layer)
                    if key not in gemm:
                        gemm[key] = gemm_rates(tuple(int(v) for v in key.split(",")), args)
                        gemm[key].update(new_shape_rates(product, rows, layer, args.gemm_repeats))
            bandwidth = copy_bandwidth(args.bandwidth_mib)
            rates[str(threads)] = {"bandwidth": bandwidth, "gemm": gemm, "loadavg": os.getloadavg()}
    finally:
        torch.set_num_threads(default_threads)
    return rates


def roofline(run: dict, rates: dict, rows: list) -> dict:
    """Each piece of `run` (layer i forward/backward, loss, optimizer, other) with
    its measured seconds and, where it has one, its floor (its GEMMs at the rates
    of `rows` rows per layer, mean_rows); and the epoch's totals."""
    mine = rates[str(run["torch_threads"])]
    dtype = "bf16" if run["precision"] == "bf16-mixed" else "fp32"
    bandwidth = mine["bandwidth"]["bytes_per_s"]
    pieces = {}
    for i, layer in enumerate(run["layers"]):
        for direction in ("forward", "backward"):
            c = layer["counts"].get(direction, {"gemm_flops": {}, "bytes_compulsory": 0, "bytes_gathered": 0})
            gflops = {p: mine["gemm"][shape_key(p, rows[i], layer)][dtype] for p in c["gemm_flops"]}
            floor = roofline_floor(c["gemm_flops"], gflops, c["bytes_compulsory"], bandwidth)
            fresh = {p: mine["gemm"][shape_key(p, rows[i], layer)][f"{dtype}_new_shape"] for p in c["gemm_flops"]}
            pieces[f"layer{i}.{direction}"] = {
                "gflop": sum(c["gemm_flops"].values()) / 1e9,
                "gemm_new_shape_s": roofline_floor(c["gemm_flops"], fresh, 0, bandwidth)["gemm_s"],
                "gb_compulsory": c["bytes_compulsory"] / 1e9,
                "gb_gathered": c["bytes_gathered"] / 1e9,
                "gathered_memory_s": c["bytes_gathered"] / bandwidth,
                **floor,
            }
    optimizer_bytes = run["steps"] * run["parameters"] * ADAM_BYTES_PER_PARAM
    pieces["optimizer"] = {
        "gflop": 0.0,
        "gb_compulsory": optimizer_bytes / 1e9,
        **roofline_floor({}, {}, optimizer_bytes, bandwidth),
    }
    for name, piece in pieces.items():
        piece["measured_s"] = run["seconds"][name]
        piece["measured_over_floor"] = piece["measured_s"] / piece["floor_s"] if piece["floor_s"] else None
    pieces["loss"] = {"measured_s": run["seconds"]["loss"]}
    compute = run["compute_s"]
    pieces["other"] = {"measured_s": compute - sum(run["seconds"].values())}
    floor = sum(p.get("floor_s", 0.0) for p in pieces.values())
    return {
        "pieces": pieces,
        "gflop": sum(p.get("gflop", 0.0) for p in pieces.values()),
        "floor_s": floor,
        "gemm_s": sum(p.get("gemm_s", 0.0) for p in pieces.values()),
        "memory_s": sum(p.get("memory_s", 0.0) for p in pieces.values()),
        "compute_s": compute,
        "compute_over_floor": compute / floor if floor else None,
        "gemm_dtype": dtype,
    }


def table(run: dict) -> str:
    """The run's roofline as text lines."""
    r = run["roofline"]
    head = (
        f"{run['precision']}, prefetch {run['prefetch']}, nice {run['loader_nice']}, "
        f"{run['torch_threads']} torch threads"
        f"{' (alternated)' if run['alternated'] else ''}: {run['steps']} steps, epoch "
        f"{run['time_s']:.2f} s, compute {r['compute_s']:.2f} s, floor {r['floor_s']:.2f} s "
        f"({r['compute_over_floor']:.2f}x)"
    )
    widths = {"GFLOP": 8, "GB": 8, "gemm s": 9, "mem s": 8, "floor s": 9, "meas s": 9, "x": 7, "new-shape gemm s": 18}
    lines = [head, f"  {'piece':<16}" + "".join(f"{c:>{w}}" for c, w in widths.items())]
    for name, p in r["pieces"].items():
        if "floor_s" not in p:
            lines.append(f"  {name:<16}{'':>{sum(list(widths.values())[:5])}}{p['measured_s']:>9.3f}")
            continue
        ratio = f"{p['measured_over_floor']:.2f}" if p["measured_over_floor"] is not None else "-"
        fresh = f"{p['gemm_new_shape_s']:.3f}" if "gemm_new_shape_s" in p else "-"
        lines.append(
            f"  {name:<16}{p['gflop']:>8.1f}{p['gb_compulsory']:>8.2f}{p['gemm_s']:>9.3f}{p['memory_s']:>8.3f}"
            f"{p['floor_s']:>9.3f}{p['measured_s']:>9.3f}{ratio:>7}{fresh:>18}"
        )
    return "\n".join(lines)


def plot(result: dict, path: Path):
    """Measured against floor per piece, one panel per precision (first prefetch, niceness and
    thread count), and the epoch's compute and wall time of every run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result["runs"]
    setting = lambda r: (r["prefetch"], r.get("loader_nice"), r["torch_threads"])  # noqa: E731
    first = [r for r in runs if setting(r) == setting(runs[0])]
    fig, axes = plt.subplots(1, len(first) + 1, figsize=(5.5 * (len(first) + 1), 4.2), squeeze=False)
    for ax, run in zip(axes[0], first):
        pieces = run["roofline"]["pieces"]
        names = list(pieces)
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], [pieces[n]["measured_s"] for n in names], 0.4, label="measured")
        ax.bar([x + 0.2 for x in xs], [pieces[n].get("floor_s", 0) for n in names], 0.4, label="floor")
        ax.set_xticks(list(xs), names, rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("seconds over the run's steps")
        ax.set_title(f"{run['precision']}: compute {run['roofline']['compute_over_floor']:.2f}x floor", fontsize=10)
        ax.legend(fontsize=8)
    ax = axes[0][-1]
    labels = [
        f"{r['precision']}\npf{r['prefetch']} n{r.get('loader_nice')} t{r['torch_threads']}"
        f"{'a' if r['alternated'] else ''}"
        for r in runs
    ]
    ax.bar(labels, [r["compute_s"] for r in runs], color="tab:blue", label="compute")
    ax.scatter(labels, [r["time_s"] for r in runs], color="tab:red", marker="o", label="epoch")
    ax.scatter(labels, [r["roofline"]["floor_s"] for r in runs], color="black", marker="_", s=400, label="floor")
    ax.set_ylabel("seconds over the run's steps")
    ax.set_title("precision, prefetch (pf), loader niceness (n), torch threads (t; a: alternated)", fontsize=9)
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=8)
    fig.suptitle(f"{result['dataset']}: SAGE {result['config']['hidden']} x {len(result['config']['fanouts'])}")
    save_figure(fig, path)


# -- the driver ---------------------------------------------------------------------------------
def int_list(flag: str, text: str, minimum: int) -> list:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{flag}: not a comma-separated list of integers: {text!r}") from None
    if not values or min(values) < minimum:
        raise argparse.ArgumentTypeError(f"{flag}: every value must be >= {minimum}, got {text!r}")
    return values


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", help="prepared homogeneous gnnsys dataset")
    p.add_argument("--precisions", default="32,bf16-mixed", help=f"comma-separated, of {', '.join(PRECISIONS)}")
    p.add_argument(
        "--threads", default=None, help="torch intra-op thread counts, one timed epoch each (default: torch's)"
    )
    p.add_argument(
        "--alternate",
        action="store_true",
        help="one timed epoch whose steps take the --threads counts in turn (load falls on each alike)",
    )
    p.add_argument("--prefetch", default="4", help="loader prefetch settings; 0 runs no background loader threads")
    p.add_argument(
        "--nice", default=None, help="niceness settings (0-19) of the loader's threads (default: the trainer's own)"
    )
    p.add_argument("--warmup", type=int, default=1, help="untimed epochs before the timed ones")
    p.add_argument(
        "--profile",
        action="store_true",
        help="then one more epoch per configuration under torch's profiler: each op's self CPU time",
    )
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=number, default=0.003)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gemm-repeats", type=int, default=5, help="timed repeats of each GEMM shape (the best counts)")
    p.add_argument("--gemm-seconds", type=number, default=1.0, help="and repeats for at least this long per shape")
    p.add_argument("--bandwidth-mib", type=int, default=256, help="MiB the bandwidth copy moves each way")
    p.add_argument("--out", default=str(HERE / "results"), help="results directory")
    args = p.parse_args(argv)
    try:
        args.fanouts = int_list("--fanouts", args.fanouts, -1)
        if 0 in args.fanouts:
            raise argparse.ArgumentTypeError(f"--fanouts: 0 is not a fanout (-1 takes every neighbour): {args.fanouts}")
        args.prefetch = int_list("--prefetch", args.prefetch, 0)
        args.nice = int_list("--nice", args.nice, 0) if args.nice is not None else [None]
        if max(n or 0 for n in args.nice) > 19:
            raise argparse.ArgumentTypeError(f"--nice: niceness runs from 0 to 19, got {args.nice}")
        args.threads = int_list("--threads", args.threads, 1) if args.threads is not None else None
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if args.alternate and (args.threads is None or len(args.threads) < 2):
        p.error("--alternate: needs at least two --threads counts to alternate")
    args.precisions = args.precisions.split(",")
    unknown = [x for x in args.precisions if x not in PRECISIONS]
    if unknown:
        p.error(f"--precisions: unknown {unknown} (choose from {', '.join(PRECISIONS)})")
    for flag, value, minimum in (
        ("--warmup", args.warmup, 0),
        ("--batch-size", args.batch_size, 1),
        ("--hidden", args.hidden, 1),
        ("--gemm-repeats", args.gemm_repeats, 1),
        ("--gemm-seconds", args.gemm_seconds, 0),
        ("--bandwidth-mib", args.bandwidth_mib, 1),
    ):
        if value < minimum:
            p.error(f"{flag}: must be >= {minimum}, got {value}")
    meta = Path(args.dataset) / "meta.json"
    if not meta.is_file():
        p.error(f"{args.dataset}: not a prepared gnnsys dataset (no meta.json)")
    try:
        kind = json.loads(meta.read_text()).get("kind")
    except (OSError, ValueError, AttributeError) as e:
        p.error(f"{meta}: unreadable ({e})")
    if kind == "hetero":
        p.error(f"{args.dataset}: heterogeneous; the roofline counts the homogeneous SAGE model")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    import numba
    import torch

    import gnnsys
    from gnnsys.atomic import atomic_write_bytes
    from gnnsys.training.result import machine_info

    if args.threads is None:
        args.threads = [torch.get_num_threads()]
    dataset = gnnsys.load_dataset(args.dataset)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"roofline_{Path(args.dataset).resolve().name}"
    json_path, png_path = out / f"{name}.json", out / f"{name}.png"
    result = {
        "benchmark": "roofline",
        "dataset": dataset.name,
        "config": vars(args),
        "machine": {**machine_info("cpu"), "loadavg_start": os.getloadavg()},
        "threads": {
            "torch_default": torch.get_num_threads(),
            "torch_interop": torch.get_num_interop_threads(),
            "numba": numba.get_num_threads(),
            "loader": "each run's threads_alive: gnnsys-sample-N and gnnsys-gather, none with prefetch 0",
        },
        "runs": [],
    }

    def save():
        atomic_write_bytes(json_path, json.dumps(result, indent=1).encode())

    for precision in args.precisions:
        for prefetch in args.prefetch:
            for nice in args.nice:
                result["runs"] += run_configuration(dataset, args, precision, prefetch, nice)
                save()
    result["rates"] = measure_rates(result["runs"], args)
    try:
        result["threads"]["numba_layer"] = numba.threading_layer()
    except ValueError:  # no parallel numba kernel ran
        result["threads"]["numba_layer"] = None
    result["gemm_rows"] = mean_rows(result["runs"])
    for run in result["runs"]:
        run["roofline"] = roofline(run, result["rates"], result["gemm_rows"])
        print(table(run), flush=True)
        if "profile" in run:
            print(profile_table(run["profile"]), flush=True)
    result["machine"]["loadavg_end"] = os.getloadavg()
    save()
    if can_plot(png_path):
        plot(result, png_path)
    print(f"wrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
