"""The measured cost of reads on the device holding a dataset's features.bin,
and the `IOModel` the SSD tier plans its reads with.

`probe` reads the file itself with O_DIRECT: random block-aligned reads of the
dataset's read size (the blocks one row spans) at a few queue depths through
each engine (the thread pool, io_uring where it works), random reads of
LARGE_READ bytes (what merged reads cost per byte: on the disk this was
written on they ran at less than half the sequential bandwidth) and 1 MiB
sequential reads over a span of the file. `io_model` returns the model of a file's device
from a JSON cache (one file per device and read size under
$GNNSYS_CACHE_DIR, else ~/.cache/gnnsys), probing when there is none, it is
older than MAX_AGE_S or `refresh` is asked; it gives None where no probe is
possible (the file system ignores O_DIRECT, e.g. tmpfs) or meaningful (a file
under MIN_PROBE_BYTES: random reads over a few MB measure the device's cache,
not its media).
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from gnnsys.errors import ConfigError
from gnnsys.json_fields import check_fields

from .direct_io import ReadPool, aligned, open_rows_file
from .machine_cache import cache_dir, read_cache, write_cache
from .uring_io import UringReader, uring_available

PROBE_DEPTHS = (1, 8, 32, 128)
PROBE_SECONDS = 3.0  # the whole probe: random reads at every depth and engine, then sequential reads
SEQ_READ = 1 << 20
SEQ_DEPTH = 8
LARGE_READ = 128 << 10  # the SSD tier's default max_read
LARGE_DEPTH = 32
MIN_PROBE_BYTES = 64 << 20
MAX_AGE_S = 7 * 86400
ENGINES = ("threads", "uring")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IOModel:
    """Measured reads of one device: `rates[engine][depth]` random reads/s of
    `read_size` bytes with `depth` in flight, the bandwidth of random
    LARGE_READ reads `random_bytes_per_s` (the cost of a byte in a merged
    read) and sequential bandwidth `seq_bytes_per_s` (a whole-file read);
    `measured` says where and when (the probe's record)."""

    read_size: int
    rates: dict
    random_bytes_per_s: float
    seq_bytes_per_s: float
    measured: dict

    def reads_per_s(self, engine: str, depth) -> np.ndarray | float:
        """Random reads/s of `engine` with `depth` in flight (scalar or array),
        interpolated linearly between the measured depths, flat beyond them."""
        measured = self.rates[engine]
        depths = sorted(measured)
        return np.interp(depth, depths, [measured[d] for d in depths])

    def request_s(self, engine: str, depth) -> np.ndarray | float:
        """Seconds one request adds at `depth` in flight beyond its bytes: the
        time per read at that depth less the read's bytes at random_bytes_per_s."""
        return np.maximum(1.0 / self.reads_per_s(engine, depth) - self.read_size / self.random_bytes_per_s, 0.0)

    def cost(self, engine: str, depth: int, requests, nbytes) -> np.ndarray:
        """Modelled seconds to read `nbytes` bytes in `requests` requests with
        up to `depth` in flight (a batch of fewer requests runs at that lower depth)."""
        requests = np.asarray(requests, dtype=np.float64)
        inflight = np.clip(requests, 1, depth)
        return requests * self.request_s(engine, inflight) + np.asarray(nbytes, np.float64) / self.random_bytes_per_s

    def faster_engine(self, threads: int, depth: int) -> str | None:
        """ "uring" or "threads", whichever reads faster with the tier's
        `depth` (ring) or `threads` (pool) in flight; None unless both were measured."""
        if not all(e in self.rates for e in ENGINES):
            return None
        return "uring" if self.reads_per_s("uring", depth) > self.reads_per_s("threads", threads) else "threads"

    def to_json(self) -> dict:
        """The model as JSON (depth keys as strings)."""
        d = asdict(self)
        d["rates"] = {e: {str(k): v for k, v in r.items()} for e, r in self.rates.items()}
        return d

    @classmethod
    def from_json(cls, d: dict) -> IOModel:
        """The model to_json wrote."""
        rates = {e: {int(k): float(v) for k, v in r.items()} for e, r in d["rates"].items()}
        return cls(
            int(d["read_size"]), rates, float(d["random_bytes_per_s"]), float(d["seq_bytes_per_s"]), d["measured"]
        )


def _timed_reads(reader, offsets_of, depth: int, size: int, seconds: float) -> tuple[float, int]:
    """(seconds, reads) of rounds of `reader.run` over offsets_of(n) (n reads of
    `size` bytes, `depth` staging slots) until `seconds` have passed, after one
    uncounted round."""
    n = max(8 * depth, 64)
    staging = aligned(depth * size)
    dest = (np.arange(n, dtype=np.int64) % depth) * size
    length = np.full(n, size, np.int64)
    view = memoryview(staging)
    reader.run(view, offsets_of(n), length, length, dest)
    took, done = 0.0, 0
    while took < seconds:
        offsets = offsets_of(n)
        began = time.perf_counter()
        reader.run(view, offsets, length, length, dest)
        took += time.perf_counter() - began
        done += n
    return took, done


def _rate(path, engine: str, depth: int, offsets_of, size: int, seconds: float) -> float:
    """Reads/s of `size` bytes at offsets_of(n) through `engine` with `depth`
    in flight over `path` opened with O_DIRECT, for about `seconds`."""
    file = open_rows_file(path, True)
    reader = UringReader(path, file, depth) if engine == "uring" else ReadPool(path, file, depth)
    try:
        took, done = _timed_reads(reader, offsets_of, depth, size, seconds)
    finally:
        reader.close()
    return done / took


def probe(path, read_size: int, *, depths=PROBE_DEPTHS, seconds: float = PROBE_SECONDS) -> IOModel:
    """Measure random reads of `read_size` bytes (a multiple of the file's
    O_DIRECT block) at every depth of `depths` per available engine, random
    LARGE_READ reads and 1 MiB sequential reads (both on the thread pool), on
    `path` with O_DIRECT, in about `seconds` in all; ConfigError where the
    file system does not honour O_DIRECT."""
    file = open_rows_file(path, True)
    size, block = file.size, file.block
    os.close(file.fd)
    if read_size % block or not 0 < read_size <= size:
        raise ConfigError(
            "read_size", f"{read_size} bytes is not a multiple of the {block} B block within {path} ({size} bytes)"
        )
    engines = [e for e in ENGINES if e == "threads" or uring_available()[0]]
    each = seconds / (len(engines) * len(depths) + 2)
    rng = np.random.default_rng()

    def random(nbytes):
        """offsets_of for random block-aligned reads of `nbytes` within the file."""
        return lambda n: rng.integers(0, (size - nbytes) // block + 1, n) * block

    began, load = time.time(), list(os.getloadavg())
    rates = {e: {int(d): _rate(path, e, d, random(read_size), read_size, each) for d in depths} for e in engines}
    large = min(LARGE_READ, size - size % block)
    random_bandwidth = _rate(path, "threads", LARGE_DEPTH, random(large), large, each) * large
    seq_size = min(SEQ_READ, size - size % block)
    chunks = size // seq_size
    position = [int(rng.integers(0, chunks))]

    def sequential(n):
        """offsets_of for consecutive reads of seq_size, from where the last call ended (wrapping)."""
        first = position[0]
        position[0] = (first + n) % chunks
        return ((first + np.arange(n)) % chunks) * seq_size

    seq_bandwidth = _rate(path, "threads", SEQ_DEPTH, sequential, seq_size, each) * seq_size
    st = os.stat(path)
    measured = {
        "file": str(Path(path).resolve()),
        "device": f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}",
        "block": block,
        "large_read": large,
        "large_depth": LARGE_DEPTH,
        "seq_read": seq_size,
        "seq_depth": SEQ_DEPTH,
        "at": began,
        "seconds": round(time.time() - began, 2),
        "loadavg": load,
    }
    return IOModel(read_size, rates, random_bandwidth, seq_bandwidth, measured)


def cache_path(path, read_size: int) -> Path:
    """The cache file of the device holding `path`, for reads of `read_size` bytes."""
    dev = os.stat(path).st_dev
    return cache_dir() / f"io-probe-{os.major(dev)}-{os.minor(dev)}-{read_size}.json"


def cached_model(path, read_size: int, max_age: float = MAX_AGE_S) -> IOModel | None:
    """The cached model of `path`'s device and read size, None if there is none
    younger than `max_age` seconds (an invalid one is absent, with a warning)."""
    value = read_cache(cache_path(path, read_size), check_cache)
    if value is None:
        return None
    model = IOModel.from_json(value)
    if "uring" not in model.rates and uring_available()[0]:
        return None  # probed where io_uring did not work: stale here, where the tier may read with it
    return model if time.time() - model.measured["at"] <= max_age else None


def io_model(path, read_size: int, *, refresh: bool = False, max_age: float = MAX_AGE_S) -> IOModel | None:
    """The model of `path`'s device for reads of `read_size` bytes: cached, or
    probed now and cached (`refresh`: always probed; a cache that cannot be
    written leaves it uncached, with a warning); None where a probe is not
    possible (no O_DIRECT) or `path` is smaller than MIN_PROBE_BYTES."""
    if os.stat(path).st_size < MIN_PROBE_BYTES:
        return None
    model = None if refresh else cached_model(path, read_size, max_age)
    if model is None:
        try:
            model = probe(path, read_size)
        except ConfigError as e:
            if e.option != "direct":
                raise
            return None
        cached = cache_path(path, read_size)
        if write_cache(cached, model.to_json()):
            log.info(
                "probed the reads of device %s in %.1f s (cached in %s)",
                model.measured["device"],
                model.measured["seconds"],
                cached,
            )
    return model


def _number(v) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def _positive(v) -> bool:
    return _number(v) and v > 0


def _size(v) -> bool:
    return type(v) is int and v > 0


def _rates(v) -> bool:
    """{engine: {depth as a decimal string: reads/s > 0}}, the thread pool's among them, none empty."""
    return (
        isinstance(v, dict)
        and "threads" in v
        and all(
            e in ENGINES
            and isinstance(r, dict)
            and r
            and all(isinstance(d, str) and d.isdigit() and int(d) > 0 and _positive(x) for d, x in r.items())
            for e, r in v.items()
        )
    )


CACHE_SCHEMA = (
    ("read_size", "a positive integer", _size),
    ("rates", "reads/s per engine (threads among them) and depth", _rates),
    ("random_bytes_per_s", "a positive number", _positive),
    ("seq_bytes_per_s", "a positive number", _positive),
)
MEASURED_SCHEMA = (
    ("file", "a string", lambda v: isinstance(v, str)),
    ("device", "a string", lambda v: isinstance(v, str)),
    *((key, "a positive integer", _size) for key in ("block", "large_read", "large_depth", "seq_read", "seq_depth")),
    ("at", "a time in seconds", _number),
    ("seconds", "a number of seconds", lambda v: _number(v) and v >= 0),
    ("loadavg", "3 load averages", lambda v: isinstance(v, list) and len(v) == 3 and all(map(_number, v))),
)


def check_cache(value, path) -> None:
    """DatasetError naming the first field of an I/O probe's cached JSON that
    is missing or not what IOModel.to_json writes."""
    check_fields(value, CACHE_SCHEMA, "", path)
    check_fields(value["measured"] if "measured" in value else None, MEASURED_SCHEMA, "measured", path)


def format_model(model: IOModel) -> list[str]:
    """Lines of a table of `model`: reads/s and MB/s per engine and depth, and sequential bandwidth."""
    m = model.measured
    lines = [
        f"I/O probe of device {m['device']} ({m['file']}, O_DIRECT, {m['block']} B blocks, "
        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(m['at']))}, load {m['loadavg'][0]:.2f}):",
        f"  {'engine':<8} {'depth':>5} {'reads/s':>10} {'MB/s':>8}  ({model.read_size} B random reads)",
    ]
    for engine, rates in model.rates.items():
        for depth, rate in sorted(rates.items()):
            lines.append(f"  {engine:<8} {depth:>5} {rate:>10,.0f} {rate * model.read_size / 1e6:>8.1f}")
    lines.append(
        f"  random {m['large_read'] >> 10} KiB reads, {m['large_depth']} in flight: "
        f"{model.random_bytes_per_s / 1e6:,.0f} MB/s"
    )
    lines.append(
        f"  sequential {m['seq_read'] >> 10} KiB reads, {m['seq_depth']} in flight: "
        f"{model.seq_bytes_per_s / 1e6:,.0f} MB/s"
    )
    return lines
