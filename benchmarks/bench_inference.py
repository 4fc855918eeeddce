"""Streaming layer-wise inference of a training checkpoint over every node of a
prepared dataset under a host-memory budget: per-layer passes, bytes and
seconds (InferenceStats), the bytes read from devices (/proc/self/io), peak
RSS and the load average, as JSON.

    python benchmarks/bench_inference.py DIR CKPT BUDGET_GB OUT.json [SCRATCH_DIR]
"""
import json, os, resource, sys, time
import torch
from gnnsys.datasets import load_dataset
from gnnsys.prediction import load_model
from gnnsys.training.inference import layerwise_inference

path, ckpt, budget_gb, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
scratch = sys.argv[5] if len(sys.argv) > 5 else None
torch.set_num_threads(2)
ds = load_dataset(path)
model = load_model(ckpt, ds)
def io():
    return int(dict(l.split(": ") for l in open("/proc/self/io").read().split("\n") if l)["read_bytes"])
before, load, t = io(), os.getloadavg(), time.perf_counter()
logits, stats = layerwise_inference(model, ds, host_mem_budget=int(budget_gb * 1e9), return_stats=True,
                                    progress=True, scratch_dir=scratch)
rec = {"budget_gb": budget_gb, "wall_s": time.perf_counter() - t, "read_bytes": io() - before,
       "features_bytes": os.path.getsize(os.path.join(path, "features.bin")), "stats": stats.to_dict(),
       "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "load_start": load,
       "load_end": os.getloadavg(), "logits_shape": list(logits.shape)}
json.dump(rec, open(out, "w"), indent=1)
print(json.dumps(rec, indent=1))
