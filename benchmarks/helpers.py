"""What several benchmark scripts share, so that no script imports another:

- the systems compared (`PEERS`, where setup_peers.sh builds the peers'
  environments; `SYSTEMS`, each system's Python and epoch script);
- summaries of runs (`median_of`, `warm`);
- the device under the SSD benchmarks (`fio`, `fio_version`, `fio_machine`,
  `measure_device`, `read_size`, `read_bytes`);
- a minibatch sampler's input-node trace (`record_trace`);
- a measured child process (`run_child`: wall time, peak RSS and disk use).

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


def fio(file, bs: int, depth: int, engine: str, seconds: float, rw: str = "randread") -> dict:
    """One time-based fio job over `file` with O_DIRECT: `depth` reads in flight
    (iodepth for io_uring/libaio, that many jobs of one read for psync);
    requests/s, MB/s and mean completion latency from its JSON output."""
    jobs = depth if engine == "psync" else 1
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
    }


def measure_device(file: Path, read_size: int, depths: list, seconds: float) -> dict:
    """fio on `file` now: random reads of `read_size` with io_uring at each
    depth (the best is the floor's rate) and 1 MiB sequential reads."""
    random = [fio(file, read_size, d, "io_uring", seconds) for d in depths]
    best = max(random, key=lambda r: r["reads_per_s"])
    seq = fio(file, 1 << 20, 8, "io_uring", seconds, rw="read")
    print(
        f"fio: best {best['reads_per_s']:,.0f} random {read_size} B reads/s (depth {best['depth']}), sequential "
        f"{seq['mb_per_s']:,.0f} MB/s",
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


def run_child(argv: list[str], disk: Path) -> dict:
    """Run one child process; its wall time, peak RSS, peak added disk use and exit status."""
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
    }
