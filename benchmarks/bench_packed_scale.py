"""Packed training epochs on a graph larger than memory, as a user runs them.

One child runs `gnnsys train DATASET --features ssd` (which packs where it
pays; the run's first line says which reader it chose and why) for one epoch
more than `--epochs`, with evaluation only after that last one, and is
stopped (SIGTERM) once `--epochs` epochs have printed their rows: an
evaluation of every node of a graph this size is not what is measured here.
Measured from outside while it runs: each epoch's time as the trainer
prints it, the time from the start to the end of epoch `--epochs` (loading,
the first window's packing and every epoch), peak RssAnon and peak added
disk use (the packed scratch) sampled every 0.5 s, and the bytes the child
read and wrote (/proc/PID/io) up to then. fio measures the device's
sequential reads of features.bin in the same run (8 MiB, depth 1, as the
tier reads a packed file); the device floor of the epochs is their bytes
read and written at that rate (reads and writes share the device).

    python benchmarks/bench_packed_scale.py /work/bench-data/papers-1.0 --epochs 3 --host-mem-budget 4 \\
        --cache-gb 1.42 --name packed_papers-1.0
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from helpers import fio, fio_machine  # noqa: E402
from peaks import Peaks, disk_used  # noqa: E402

EPOCH_ROW = re.compile(r"^\s*(\d+)\*?\s+\S+\s+.*\s(\d+\.\d+)\s*$")  # "epoch loss train valid test time_s"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", help="prepared dataset with block-aligned feature rows")
    p.add_argument("--epochs", type=int, default=3, help="epochs measured (the child is stopped after them)")
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--cache-gb", type=float, required=True)
    p.add_argument("--host-mem-budget", type=float, required=True)
    p.add_argument("--scratch-dir", help="where packs go (default: the system's temporary directory)")
    p.add_argument("--fio-seconds", type=float, default=3.0)
    p.add_argument("--name", default="packed_scale")
    p.add_argument("--out", default=str(HERE / "results"))
    return p.parse_args(argv)


def train_argv(args) -> list[str]:
    """The `gnnsys train` command of the child: one epoch more than measured, evaluated only after it."""
    epochs = args.epochs + 1
    argv = [sys.executable, "-m", "gnnsys", "train", args.dataset, "--no-progress", "--features", "ssd"]
    argv += ["--fanouts", args.fanouts, "--batch-size", str(args.batch_size), "--hidden", str(args.hidden)]
    argv += ["--epochs", str(epochs), "--eval-every", str(epochs), "--eval", "sampled"]
    argv += ["--cache-gb", str(args.cache_gb), "--host-mem-budget", str(args.host_mem_budget)]
    return argv + (["--scratch-dir", args.scratch_dir] if args.scratch_dir else [])


def epoch_row(line: str) -> tuple[int, float] | None:
    """(epoch, seconds) of a row of the trainer's epoch table, else None."""
    found = EPOCH_ROW.match(line)
    return None if found is None else (int(found[1]), float(found[2]))


def measure(argv: list[str], epochs: int, disk: Path) -> dict:
    """Run `argv` until it prints `epochs` epoch rows, then stop it; what was measured."""
    from gnnsys.host_memory import anonymous_bytes

    start, used = time.perf_counter(), disk_used(disk)
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    peaks = Peaks({"disk": lambda: disk_used(disk) - used, "rss_anon": lambda: anonymous_bytes(child.pid)}, 0.5)
    lines, times, io = [], [], {}
    try:
        for line in child.stdout:
            lines.append(line.rstrip("\n"))
            print(line, end="", flush=True)
            row = epoch_row(line)
            if row is not None:
                times.append(row[1])
                if len(times) == epochs:
                    io = dict(x.split(": ") for x in Path(f"/proc/{child.pid}/io").read_text().split("\n") if x)
                    break
        wall = time.perf_counter() - start
        measured = peaks.stop()
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait()
    if len(times) < epochs:
        raise SystemExit(f"{' '.join(argv)} ended after {len(times)} epochs:\n" + "\n".join(lines[-20:]))
    return {
        "epoch_s": times,
        "wall_to_last_epoch_s": round(wall, 2),
        "read_bytes": int(io["read_bytes"]),
        "write_bytes": int(io["write_bytes"]),
        "peak_rss_anon_gb": measured["rss_anon"] / 1e9,
        "peak_disk_bytes": measured["disk"],
        "note": next((x for x in lines if x.startswith("features ssd:")), None),
        "loadavg_end": os.getloadavg(),
    }


def main(argv=None) -> None:
    from gnnsys.atomic import atomic_write_bytes
    from gnnsys.storage.packing import READ_BYTES

    args = parse_args(argv)
    if args.epochs < 1:
        raise SystemExit(f"--epochs: at least 1, got {args.epochs}")
    seq = fio(Path(args.dataset) / "features.bin", READ_BYTES, 1, "psync", args.fio_seconds, rw="read")
    print(f"fio: {seq['mb_per_s']:,.0f} MB/s sequential into {seq['buffers']}", flush=True)
    machine = fio_machine()
    run = measure(train_argv(args), args.epochs, Path(args.scratch_dir or tempfile.gettempdir()))
    moved = run["read_bytes"] + run["write_bytes"]
    summary = {
        "epochs": args.epochs,
        "first_s": run["epoch_s"][0],
        "steady_s": statistics.median(run["epoch_s"][1:]) if args.epochs > 1 else None,
        "epochs_s": sum(run["epoch_s"]),
        "device_floor_s": moved / (seq["mb_per_s"] * 1e6),
        "peak_rss_anon_gb": run["peak_rss_anon_gb"],
        "peak_scratch_gb": run["peak_disk_bytes"] / 1e9,
    }
    result = {"machine": machine, "args": vars(args), "fio_seq": seq, "run": run, "summary": summary}
    target = Path(args.out) / f"{args.name}.json"
    atomic_write_bytes(target, json.dumps(result, indent=1).encode())
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
