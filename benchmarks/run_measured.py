"""Run a gnnsys CLI command in this process and print, as one JSON line on
stderr at the end, its wall time, peak RSS (getrusage), the bytes it read from
devices (/proc/self/io read_bytes, write_bytes) and the load average before and after.

    python benchmarks/run_measured.py train DIR --features ssd --host-mem-budget 0.3 ...
"""

import json
import os
import resource
import sys
import time

from gnnsys.cli import main

t = time.perf_counter()
load = os.getloadavg()
rc = main(sys.argv[1:])
io = dict(line.split(": ") for line in open("/proc/self/io").read().split("\n") if line)
print(
    json.dumps(
        {
            "rc": rc,
            "wall_s": time.perf_counter() - t,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "read_bytes": int(io["read_bytes"]),
            "write_bytes": int(io["write_bytes"]),
            "rchar": int(io["rchar"]),
            "load_start": load,
            "load_end": os.getloadavg(),
        }
    ),
    file=sys.stderr,
)
sys.exit(rc)
