"""What several benchmark scripts share, so that no script imports another:

- the systems compared (`PEERS`, where setup_peers.sh builds the peers'
  environments; `SYSTEMS`, each system's Python and epoch script;
  `epoch_flags`, the training options an epoch script takes);
- summaries of runs (`median_of`, `warm`);
- the device under the SSD benchmarks (`fio`, `fio_version`, `fio_machine`,
  `measure_device`, `read_size`, `read_bytes`);
- a minibatch sampler's input-node trace (`record_trace`);
- a measured child process (`run_child`: wall time, peak RSS and disk use);
- the roofline of a SAGE layer (`sage_layer_counts`: the FLOPs of its dense
  products and the bytes its aggregation moves on one block, `gemm_shape`,
  `add_counts`, `roofline_floor`) and the memory bandwidth (`copy_bandwidth`).

Plots are in plotting.py, peak sampling in peaks.py, the gnnsys-against-DGL
timings of bench_proteins.py and bench_mag.py in side_by_side.py. Imports only
the standard library at module level: scripts that also run in the peers'
environments (without gnnsys) import it.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from peaks import Peaks, disk_used

HERE = Path(__file__).resolve().parent
PEERS = Path(os.environ.get("GNNSYS_PEERS", "/work/.cache/gnnsys-peers"))
SYSTEMS = {  # {system: (its Python, its epoch script)}
    "gnnsys": (Path(sys.executable), HERE / "gnnsys_epoch.py"),
    "dgl": (PEERS / "dgl" / "bin" / "python", HERE / "peers" / "dgl_epoch.py"),
    "pyg": (PEERS / "pyg" / "bin" / "python", HERE / "peers" / "pyg_epoch.py"),
}


def epoch_flags(args) -> list[str]:
    """The training options of an epoch script (SYSTEMS) from a benchmark's
    `args`: --fanouts, --batch-size, --hidden, --lr and --epochs."""
    return [
        "--fanouts",
        args.fanouts,
        "--batch-size",
        str(args.batch_size),
        "--hidden",
        str(args.hidden),
        "--lr",
        str(args.lr),
        "--epochs",
        str(args.epochs),
    ]


def median_of(values):
    """The median of `values` that are not None; None when there are none."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def warm(epochs: list) -> list:
    """A run's epochs without its first when it has more (that one also pays for warming up)."""
    return epochs[1:] or epochs


def fio_version() -> str:
    """fio's version; SystemExit naming the setup script where fio is missing."""
    if not shutil.which("fio"):
        raise SystemExit("fio is not installed: run `bash benchmarks/setup_fio.sh`")
    return subprocess.run(["fio", "--version"], capture_output=True, text=True, check=True).stdout.strip()


def fio_machine() -> dict:
    """Platform, CPUs, load and versions (fio's included) of the machine running an SSD benchmark."""
    import numpy as np
    import torch

    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
        "loadavg_note": "Linux counts threads waiting in reads in the load average: the benchmark's own "
        "reads raise loadavg_end",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "fio": fio_version(),
    }


def huge_page_dir(nbytes: int, meminfo: str = "/proc/meminfo", mounts: str = "/proc/mounts") -> str | None:
    """A writable hugetlbfs mount with free huge pages for `nbytes` of buffers
    (and 4 MiB to spare), or None (`bash benchmarks/setup_fio.sh` reserves
    some and mounts one, as root)."""
    try:
        with open(meminfo) as f:
            info = {line.split(":")[0]: int(line.split()[1]) for line in f if line.startswith("Huge")}
        with open(mounts) as f:
            mounts = [line.split()[1] for line in f if line.split()[2] == "hugetlbfs"]
    except (OSError, ValueError, IndexError):
        return None
    free = info.get("HugePages_Free", 0) * info.get("Hugepagesize", 0) * 1024
    usable = [m for m in mounts if os.access(m, os.W_OK)]
    return usable[0] if usable and free >= nbytes + (4 << 20) else None


def fio(file, bs: int, depth: int, engine: str, seconds: float, rw: str = "randread") -> dict:
    """One time-based fio job over `file` with O_DIRECT: `depth` reads in flight
    (iodepth for io_uring/libaio, that many jobs of one read for psync);
    requests/s, MB/s and mean completion latency from its JSON output. Its
    buffers are huge pages where a hugetlbfs mount has room (`huge_page_dir`),
    as gnnsys's read buffers are: large direct reads into small pages ran at
    a third of the rate on the development VM (benchmarks/README.md);
    "buffers" says which."""
    jobs = depth if engine == "psync" else 1
    huge = huge_page_dir(bs * depth)
    cmd = [
        "fio",
        "--name=ref",
        f"--filename={file}",
        "--direct=1",
        f"--rw={rw}",
        f"--bs={bs}",
        f"--ioengine={engine}",
        f"--iodepth={1 if engine == 'psync' else depth}",
        f"--numjobs={jobs}",
        "--thread",
        "--group_reporting",
        "--time_based",
        f"--runtime={max(1, round(seconds * 1000))}ms",
        "--norandommap",
        "--randrepeat=0",
        "--output-format=json",
        "--readonly",
        *([f"--mem=mmaphuge:{huge}/gnnsys-fio-{os.getpid()}"] if huge else []),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    if done.returncode:
        raise SystemExit(f"fio failed ({' '.join(cmd)}): {done.stderr.strip()[-500:]}")
    read = json.loads(done.stdout[done.stdout.index("{") :])["jobs"][0]["read"]
    return {
        "engine": engine,
        "depth": depth,
        "bs": bs,
        "reads_per_s": read["iops"],
        "mb_per_s": read["bw_bytes"] / 1e6,
        "lat_mean_us": read["clat_ns"]["mean"] / 1e3,
        "buffers": "huge pages" if huge else "small pages",
    }


def measure_device(file: Path, read_size: int, depths: list, seconds: float) -> dict:
    """fio on `file` now: random reads of `read_size` with io_uring at each
    depth (the best is the floor's rate) and 1 MiB sequential reads."""
    random = [fio(file, read_size, d, "io_uring", seconds) for d in depths]
    best = max(random, key=lambda r: r["reads_per_s"])
    seq = fio(file, 1 << 20, 8, "io_uring", seconds, rw="read")
    print(
        f"fio: best {best['reads_per_s']:,.0f} random {read_size} B reads/s (depth {best['depth']}), sequential "
        f"{seq['mb_per_s']:,.0f} MB/s into {seq['buffers']}",
        flush=True,
    )
    return {
        "random": random,
        "best_reads_per_s": best["reads_per_s"],
        "best_depth": best["depth"],
        "seq_bytes_per_s": seq["mb_per_s"] * 1e6,
        "read_size": read_size,
        "load": os.getloadavg(),
    }


def read_size(path: Path) -> int:
    """The bytes of the blocks one row of the dataset at `path` spans (the SSD tier's smallest read)."""
    from gnnsys.datasets.features_file import DTYPES
    from gnnsys.datasets.meta import read_meta
    from gnnsys.storage.direct_io import open_rows_file, row_blocks

    f = read_meta(path)["features"]
    file = open_rows_file(path / f["file"], True)
    os.close(file.fd)
    return row_blocks(f["dim"] * DTYPES[f["dtype"]].itemsize, f["row_stride"], file.block) * file.block


def read_bytes(path: Path) -> int:
    """Bytes read so far from the block device holding `path` (its sectors
    read in /sys/dev/block: every reader of the device counts, page-cache
    misses of a memory map included; the machine must be otherwise idle)."""
    dev = os.stat(path).st_dev
    with open(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat") as f:
        return int(f.read().split()[2]) * 512


def record_trace(sampler, seeds, epochs) -> list:
    """The sorted distinct input nodes (int64 arrays) of every batch that
    `sampler` samples from `seeds` (a gnnsys.samplers.SeedBatches) in `epochs`, in order."""
    import numpy as np

    return [
        np.unique(sampler.sample(b, e, i).input_nodes.numpy()).astype(np.int64)
        for e in epochs
        for i, b in enumerate(seeds.epoch(e))
    ]


def run_child(argv: list[str], disk: Path, keep_output: bool = False) -> dict:
    """Run one child process; its wall time, peak RSS, peak added disk use
    (on the file system of `disk`) and exit status, and with `keep_output`
    what it printed ("output")."""
    from gnnsys.host_memory import anonymous_bytes

    start, used = time.perf_counter(), disk_used(disk)
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = Peaks({"disk": lambda: disk_used(disk) - used, "rss_anon": lambda: anonymous_bytes(child.pid)}, period=0.5)
    output = child.stdout.read()
    peaks = peak.stop()  # before wait4 reaps the child, while its /proc entry is there
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4; keep Popen consistent
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed with status {child.returncode}:\n{output}")
    return {
        "wall_s": round(wall, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "user_s": round(usage.ru_utime, 2),
        "sys_s": round(usage.ru_stime, 2),
        "peak_disk_bytes": peaks["disk"],
        "peak_rss_anon_mib": round(peaks["rss_anon"] / 2**20, 1),
        "loadavg_end": os.getloadavg(),
        **({"output": output} if keep_output else {}),
    }


# -- the roofline of a SAGE layer (bench_roofline.py, bench_precision.py) ----------------------
# The dense products of one GraphSAGE (mean) layer as gnnsys runs it on a block (gnnsys/models/gnn.py):
# lin_l on the num_dst aggregated rows, lin_r on the num_dst root rows, both in -> out. Backward: each
# weight's gradient (out x rows @ rows x in), and each input's gradient (rows x out @ out x in) unless
# the layer's input needs none (the first layer reads the features). {product: (direction, m, k, n)}.
SAGE_PRODUCTS = {
    "lin_l": ("forward", "rows", "in", "out"),
    "lin_r": ("forward", "rows", "in", "out"),
    "lin_l.weight_grad": ("backward", "out", "rows", "in"),
    "lin_r.weight_grad": ("backward", "out", "rows", "in"),
    "lin_l.input_grad": ("backward", "rows", "out", "in"),
    "lin_r.input_grad": ("backward", "rows", "out", "in"),
}
CSR_ENTRY_BYTES = 8 + 4  # an int64 column index and a float32 weight per edge
INDPTR_BYTES = 8


def gemm_shape(product: str, rows: int, d_in: int, d_out: int) -> tuple:
    """(m, k, n) of SAGE_PRODUCTS' `product` for a block of `rows` destination rows, d_in -> d_out."""
    sizes = {"rows": rows, "in": d_in, "out": d_out}
    return tuple(sizes[name] for name in SAGE_PRODUCTS[product][1:])


def sage_layer_counts(
    num_dst: int, num_src: int, edges: int, d_in: int, d_out: int, input_grad: bool, x_size: int, agg_size: int
) -> dict:
    """What one SAGE layer computes and moves on one block, forward and backward:
    {"forward"|"backward": {"gemm_flops": {product: FLOPs (2 m k n)}, "bytes_gathered",
    "bytes_compulsory"}}. input_grad: the layer's input takes a gradient (not the
    first layer); x_size, agg_size: bytes per element of the rows it reads and of
    the aggregated rows (and their gradients).

    The aggregation's bytes: forward it reads, per edge, the source row and the
    CSR entry, the row pointers, and writes num_dst rows; backward (input_grad
    only) the same over the transpose: a row of the output's gradient per edge,
    and num_src rows of the input's gradient written. "gathered" counts a row
    read per edge (what the kernel asks of memory); "compulsory" each distinct
    row once (num_src forward, num_dst backward), the lower bound a perfect
    cache allows (the floor's figure)."""
    out = {}
    for direction in ("forward", "backward"):
        flops = {}
        for product, (d, *_) in SAGE_PRODUCTS.items():
            if d == direction and (input_grad or not product.endswith("input_grad")):
                m, k, n = gemm_shape(product, num_dst, d_in, d_out)
                flops[product] = 2 * m * k * n
        out[direction] = {"gemm_flops": flops, "bytes_gathered": 0, "bytes_compulsory": 0}
    csr = edges * CSR_ENTRY_BYTES
    fwd = out["forward"]
    written = num_dst * d_in * agg_size
    fwd["bytes_gathered"] = edges * d_in * x_size + csr + (num_dst + 1) * INDPTR_BYTES + written
    fwd["bytes_compulsory"] = num_src * d_in * x_size + csr + (num_dst + 1) * INDPTR_BYTES + written
    if input_grad:
        bwd = out["backward"]
        written = num_src * d_in * x_size
        bwd["bytes_gathered"] = edges * d_in * agg_size + csr + (num_src + 1) * INDPTR_BYTES + written
        bwd["bytes_compulsory"] = num_dst * d_in * agg_size + csr + (num_src + 1) * INDPTR_BYTES + written
    return out


def add_counts(total: dict, counts: dict) -> dict:
    """`total` (nested dicts of numbers, as sage_layer_counts returns) with `counts` added in place."""
    for key, value in counts.items():
        if isinstance(value, dict):
            add_counts(total.setdefault(key, {}), value)
        else:
            total[key] = total.get(key, 0) + value
    return total


def roofline_floor(gemm_flops: dict, gflops: dict, nbytes: float, bandwidth: float) -> dict:
    """The floor of one piece of work: its products at their GEMM rates
    (gemm_flops {product: FLOPs}, gflops {product: GFLOP/s}) against its bytes at
    `bandwidth` (bytes/s); {"gemm_s", "memory_s", "floor_s" (the larger), "bound"}."""
    gemm_s = sum(flops / (gflops[product] * 1e9) for product, flops in gemm_flops.items())
    memory_s = nbytes / bandwidth
    return {
        "gemm_s": gemm_s,
        "memory_s": memory_s,
        "floor_s": max(gemm_s, memory_s),
        "bound": "gemm" if gemm_s >= memory_s else "memory",
    }


def copy_bandwidth(mib: int = 256, repeats: int = 5) -> dict:
    """Memory bandwidth by a torch copy of `mib` MiB into another buffer at torch's
    threads: bytes read plus written per second, median (and best) of `repeats` after a warm-up."""
    import torch

    n = mib * 2**20 // 4
    src, dst = torch.ones(n), torch.empty(n)
    dst.copy_(src)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    moved = 2 * n * 4
    return {"bytes_per_s": moved / statistics.median(times), "best_bytes_per_s": moved / min(times), "mib": mib}
