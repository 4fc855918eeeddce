"""Out-of-core training epochs with packed batches, side by side with the
same run in memory and through the random-read SSD tier, against fio.

Each run is a fresh child process (`run_measured.py train DIR ...`, the
command a user types, with `--json`), measured from outside (helpers.run_child:
wall time, peak RssAnon sampled every 0.5 s, peak added disk use, which is the
packed scratch) and from inside (/proc/self/io bytes read and written). Modes:

- memory: `--features auto` (the table in memory);
- ssd: `--features ssd --scratch-gb 0 --cache-policy hybrid --lookahead 4`
  (rows read at random through the SSD tier at its best settings, its cache
  `--cache-gb` under `--host-mem-budget`);
- packed: `--features ssd`, which packs batches here (the run's first line
  says so, and the benchmark checks it), with the same budget and cache, or
  with `--packed-cache budget` no cache size (the packed tier's default: what
  the budget leaves).

Each run evaluates once, after its last epoch, sampled in every mode; the
epoch times leave it out, the bytes read and written are the whole run's.
fio measures the device in the same run: sequential reads of the packed
files' read size (storage.packing.READ_BYTES, one in flight, as the tier reads
a file) and random reads of a row's blocks (the SSD tier's smallest read).
Epoch 1 packs its window before it trains and the next one beside it; the
last epoch packs nothing beside it; the epochs between are the steady ones
(so runs need at least 3 epochs, and 4 give two steady ones). Time to 3
epochs is the first three epochs' sum. The packed read floor is max(bytes a
steady packed epoch reads / fio's sequential rate, the in-memory epoch):
reading the packs and computing overlap. Its device floor adds what a steady
epoch writes and scans to pack the next window (all its bytes at fio's
sequential read rate: reads and writes share the device's bandwidth). Repeats
alternate the modes; medians are reported with the load average. Writes JSON
(and a PNG where matplotlib is installed) under benchmarks/results/ (--name).

    bash benchmarks/setup_fio.sh
    python benchmarks/bench_packed.py /work/bench/papers-0.02 --epochs 4 --repeats 3 --name packed_papers
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from helpers import fio, fio_machine, read_size, run_child  # noqa: E402
from plotting import can_plot, save_figure  # noqa: E402

MODES = ("memory", "ssd", "packed")
TARGET_STEADY, TARGET_THREE = 1.2, 1.5  # packed over in memory: a steady epoch, and 3 epochs with packing


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", help="prepared dataset with block-aligned feature rows")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--epochs", type=int, default=4, help="at least 3: the first and the last are not steady")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--cache-gb", type=float, default=0.1, help="the cache of the ssd and packed modes")
    p.add_argument(
        "--packed-cache",
        choices=("given", "budget"),
        default="given",
        help="the packed mode's cache: --cache-gb, or no size given (what the budget leaves)",
    )
    p.add_argument("--host-mem-budget", type=float, default=1.0, help="GB, for the ssd and packed modes")
    p.add_argument("--scratch-dir", help="where packs go (default: the system's temporary directory)")
    p.add_argument("--fio-seconds", type=float, default=3.0)
    p.add_argument("--name", default="packed")
    p.add_argument("--out", default=str(HERE / "results"))
    return p.parse_args(argv)


def mode_flags(mode: str, args) -> list[str]:
    """The `gnnsys train` flags of one mode."""
    if mode == "memory":
        return []
    flags = ["--features", "ssd", "--host-mem-budget", str(args.host_mem_budget)]
    cache = ["--cache-gb", str(args.cache_gb)]
    if mode == "ssd":
        return [*flags, *cache, "--scratch-gb", "0", "--cache-policy", "hybrid", "--lookahead", "4"]
    cache = cache if args.packed_cache == "given" else []
    return [*flags, *cache, *(["--scratch-dir", args.scratch_dir] if args.scratch_dir else [])]


def run_mode(mode: str, args, work: Path) -> dict:
    """One child run of `mode`: its epochs' records and what was measured around it."""
    out = work / f"{mode}.json"
    argv = [sys.executable, str(HERE / "run_measured.py"), "train", args.dataset, "--no-progress", "--json", str(out)]
    argv += ["--fanouts", args.fanouts, "--batch-size", str(args.batch_size), "--hidden", str(args.hidden)]
    argv += ["--epochs", str(args.epochs), "--eval-every", str(args.epochs), "--eval", "sampled"]
    argv += mode_flags(mode, args)
    scratch = Path(args.scratch_dir or tempfile.gettempdir())
    measured = run_child(argv, scratch, keep_output=True)
    said = measured.pop("output")
    inside = json.loads([line for line in said.splitlines() if line.startswith('{"rc"')][-1])
    if mode == "packed" and "features ssd: packed batches" not in said:
        raise SystemExit(f"--features ssd did not pack here:\n{said}")
    epochs = json.loads(out.read_text())["epochs"]
    return {
        "mode": mode,
        "epoch_s": [e["time_s"] for e in epochs],
        "tiers": [e.get("tiers", {}) for e in epochs],
        "read_bytes": inside["read_bytes"],
        "write_bytes": inside["write_bytes"],
        **measured,
    }


def summarize(runs: list, device: dict) -> dict:
    """Per mode: medians of the first and steady epochs and of the epochs'
    sum, bytes read and written, peaks; for packed its floor and the targets."""
    med = statistics.median
    out = {}
    steady = slice(1, -1)  # the first epoch packs its own window, the last packs none beside it
    for mode in dict.fromkeys(r["mode"] for r in runs):
        mine = [r for r in runs if r["mode"] == mode]
        s = {
            "runs": len(mine),
            "first_s": med(r["epoch_s"][0] for r in mine),
            "steady_s": med(med(r["epoch_s"][steady]) for r in mine),
            "epochs_s": med(sum(r["epoch_s"][:3]) for r in mine),
            "wall_s": med(r["wall_s"] for r in mine),
            "read_bytes": med(r["read_bytes"] for r in mine),
            "write_bytes": med(r["write_bytes"] for r in mine),
            "peak_rss_anon_mib": max(r["peak_rss_anon_mib"] for r in mine),
            "peak_disk_bytes": max(r["peak_disk_bytes"] for r in mine),
        }
        # A window's packing counts in the epoch it ends in, which may be the one after the epoch it
        # ran beside; one window packs beside each steady epoch, so a steady epoch packs a run's mean window.
        tiers = [[t["packed"] for t in r["tiers"] if "packed" in t] for r in mine]
        if any(tiers):

            def per_window(key: str) -> float:
                return med(sum(t[key] for t in p) / max(1, sum(t["windows_packed"] for t in p)) for p in tiers)

            steady_read = med(med(t["bytes_read"] for t in p[steady]) for p in tiers)
            s["packed_read_bytes_steady"] = steady_read
            s["pack_s_steady"] = per_window("pack_s")
            s["unplanned"] = max(t["unplanned"] for p in tiers for t in p)
            s["read_floor_s"] = steady_read / device["seq_bytes_per_s"]
            s["moved_bytes_steady"] = steady_read + per_window("packed_bytes") + device["file_bytes"]
            s["device_floor_s"] = s["moved_bytes_steady"] / device["seq_bytes_per_s"]
        out[mode] = s
    memory, packed = out.get("memory"), out.get("packed")
    if memory and packed:
        packed["floor_s"] = max(packed["read_floor_s"], memory["steady_s"])
        packed["device_floor_with_packing_s"] = max(packed["device_floor_s"], memory["steady_s"])
        packed["steady_over_memory"] = packed["steady_s"] / memory["steady_s"]
        packed["epochs_over_memory"] = packed["epochs_s"] / memory["epochs_s"]
        packed["steady_over_floor"] = packed["steady_s"] / packed["floor_s"]
        packed["steady_target_met"] = packed["steady_over_memory"] <= TARGET_STEADY
        packed["epochs_target_met"] = packed["epochs_over_memory"] <= TARGET_THREE
    if "ssd" in out and packed:
        packed["ssd_over_packed_steady"] = out["ssd"]["steady_s"] / packed["steady_s"]
    return out


def plot(summary: dict, path: Path) -> None:
    """Bars of the first and steady epochs per mode, with the packed floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(summary)
    fig, ax = plt.subplots(figsize=(1.8 * len(modes) + 2, 4))
    x = range(len(modes))
    ax.bar([i - 0.2 for i in x], [summary[m]["first_s"] for m in modes], 0.4, label="first epoch (packs its window)")
    ax.bar([i + 0.2 for i in x], [summary[m]["steady_s"] for m in modes], 0.4, label="steady epoch (median)")
    if "floor_s" in summary.get("packed", {}):
        ax.axhline(summary["packed"]["floor_s"], color="k", linestyle=":", label="packed floor")
    ax.set_xticks(list(x), modes)
    ax.set_ylabel("seconds per epoch")
    ax.set_title("SAGE epochs: in memory, random SSD reads, packed batches")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv=None) -> None:
    from gnnsys.atomic import atomic_write_bytes
    from gnnsys.storage.packing import READ_BYTES

    args = parse_args(argv)
    if args.epochs < 3:
        raise SystemExit(f"--epochs: at least 3 (the first and the last epoch are not steady), got {args.epochs}")
    modes = args.modes.split(",")
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"--modes: unknown mode {m!r} (of {', '.join(MODES)})")
    data = Path(args.dataset)
    file = data / "features.bin"
    seq = fio(file, READ_BYTES, 1, "psync", args.fio_seconds, rw="read")
    rand = fio(file, read_size(data), 32, "io_uring", args.fio_seconds)
    device = {"seq": seq, "random": rand, "seq_bytes_per_s": seq["mb_per_s"] * 1e6, "file_bytes": file.stat().st_size}
    print(
        f"fio: {seq['mb_per_s']:,.0f} MB/s sequential into {seq['buffers']}, {rand['reads_per_s']:,.0f} random reads/s",
        flush=True,
    )
    runs = []
    with tempfile.TemporaryDirectory() as work:
        for repeat in range(args.repeats):
            for mode in modes:
                run = run_mode(mode, args, Path(work))
                runs.append(run)
                print(f"repeat {repeat + 1} {mode}: epochs {run['epoch_s']} s, load {run['loadavg_end']}", flush=True)
    summary = summarize(runs, device)
    result = {"machine": fio_machine(), "args": vars(args), "device": device, "runs": runs, "summary": summary}
    target = Path(args.out) / f"{args.name}.json"
    atomic_write_bytes(target, json.dumps(result, indent=1).encode())
    if can_plot(target.with_suffix(".png")):
        plot(summary, target.with_suffix(".png"))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
