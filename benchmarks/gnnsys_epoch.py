"""gnnsys side of benchmarks/bench_minibatch.py: one sampling + feature-gather
epoch with `gnnsys.loading.loader.MinibatchLoader`, then `gnnsys.train` GraphSAGE
epochs, on a prepared dataset. Prints one JSON line in the peers' format
(benchmarks/peers/common.py), with the same arguments as the peer scripts.

The loader prefetches in threads, so the stage times it reports (summed over
batches) can add up to more than the epoch's wall time; time_s is wall time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

from common import emit, machine, parse_args, seed_everything, warm_up  # noqa: E402


def sampling_epoch(dataset, args) -> dict:
    """Wall time and summed stage times of one pass of the loader over the train split."""
    from gnnsys.loading.loader import MinibatchLoader
    from gnnsys.loading.options import BatchOptions, SamplingOptions

    loader = MinibatchLoader(
        dataset,
        "train",
        SamplingOptions(fanouts=args.fanouts),
        BatchOptions(batch_size=args.batch_size, shuffle=True, seed=args.seed),
    )
    warm_up(loader)
    stages = {"sample_s": 0.0, "gather_s": 0.0, "compute_s": 0.0}
    batches = 0
    start = time.perf_counter()
    for mb in loader:
        for key in ("sample_s", "gather_s"):
            stages[key] += mb.timings.get(key, 0.0)
        batches += 1
    return {"time_s": time.perf_counter() - start, "batches": batches, "breakdown": stages}


def main():
    import numba

    import gnnsys
    from gnnsys import train

    args = parse_args(__doc__)
    seed_everything(args.seed)
    dataset = gnnsys.load_dataset(args.dataset)
    record = {
        "system": "gnnsys",
        "dataset": dataset.name,
        "config": vars(args),
        "machine": machine(gnnsys=getattr(gnnsys, "__version__", "dev"), numba=numba.__version__),
    }
    record["sampling"] = sampling_epoch(dataset, args)
    if args.epochs:
        result = train(
            dataset,
            model="sage",
            fanouts=args.fanouts,
            batch_size=args.batch_size,
            hidden=args.hidden,
            epochs=args.epochs,
            lr=args.lr,
            dropout=args.dropout,
            seed=args.seed,
            eval_every=args.epochs,
            eval_batch_size=args.eval_batch_size,
            progress=False,
        ).to_dict()
        record["epochs"] = [
            {"epoch": e["epoch"], "time_s": e["time_s"], "loss": e["loss"], "breakdown": e["breakdown"]}
            for e in result["epochs"]
        ]
        if args.eval:
            last = result["epochs"][-1]
            record.update(valid=last["valid"], test=last["test"])
    emit(record)


if __name__ == "__main__":
    main()
