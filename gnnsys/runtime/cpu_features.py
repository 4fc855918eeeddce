"""What this CPU executes natively, in one place: the ISA flags that matter for
training (bf16 dot products by AVX512-BF16 or AMX, fp16, AVX-512, AVX2), the
capability torch dispatches its own kernels for, and whether a bf16 matrix
multiply runs faster here than an fp32 one (`gnnsys.runtime.precision` chooses by it;
every result's machine record names it).

Where the flags tell, they decide: torch computes bf16 GEMMs with oneDNN's
AVX512-BF16 or AMX kernels, several times the fp32 rate; without those
instructions it falls back to a scalar loop, some 30x slower than fp32. Where
they cannot tell (no /proc/cpuinfo, torch without oneDNN, or the ISA narrowed
by ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA or DNNL_MAX_CPU_ISA, as an emulated
older CPU does), a short micro-benchmark of a training GEMM shape decides, and
its outcome is cached per machine: JSON under $GNNSYS_CACHE_DIR (default
~/.cache/gnnsys), keyed by CPU model, flags, torch version and those variables.
GNNSYS_CPU_BF16=1 or 0 in the environment overrides the verdict (for a CPU
whose flags mislead, or a test suite that must run the same precision on
every machine, its subprocesses included).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from pathlib import Path

import torch

from gnnsys import environment
from gnnsys.json_fields import check_fields
from gnnsys.models.linear import linear
from gnnsys.storage.machine_cache import cache_dir, read_cache, write_cache

FLAGS = ("avx2", "f16c", "avx512f", "avx512bw", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # bf16 dot products in hardware
FP16_FLAGS = ("avx512_fp16", "amx_fp16")
ISA_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")  # what narrows the ISA torch uses
GEMM_SHAPE = (2048, 256, 256)  # rows x in -> out: a hidden SAGE layer's GEMM at a sampled batch's size
FAST = 1.2  # bf16 GEMMs count as fast when they beat fp32 by this factor
CACHE_FILE = "cpu_features.json"
FORCE_ENV = "GNNSYS_CPU_BF16"


@dataclasses.dataclass(frozen=True)
class CPUFeatures:
    """What one CPU (as this process may use it) executes natively.

    model: the CPU's name; flags: those of FLAGS it reports (None: unknown);
    capability: torch.backends.cpu.get_cpu_capability(); isa_env: the ISA_ENV
    variables set; bf16_gemm: a bf16 matmul runs faster than an fp32 one;
    decided_by: "flags", "benchmark" or FORCE_ENV; gemm_gflops: {"fp32", "bf16"} GFLOP/s
    of GEMM_SHAPE when the benchmark decided.
    """

    model: str
    flags: tuple | None
    capability: str
    isa_env: dict
    bf16_gemm: bool
    decided_by: str
    gemm_gflops: dict | None = None

    @property
    def native_bf16(self) -> bool:
        """The CPU has bf16 dot-product instructions (AVX512-BF16 or AMX-BF16)."""
        return bool(self.flags) and any(f in self.flags for f in BF16_FLAGS)

    @property
    def native_fp16(self) -> bool:
        """The CPU has fp16 arithmetic instructions (AVX512-FP16 or AMX-FP16)."""
        return bool(self.flags) and any(f in self.flags for f in FP16_FLAGS)

    def describe(self) -> str:
        """One line: model, torch's capability, the bf16 instructions found, narrowing variables, GEMM rates."""
        if self.flags is None:
            bf16 = "flags unknown"
        else:
            bf16 = "+".join(f for f in BF16_FLAGS if f in self.flags) or "no avx512_bf16 or amx_bf16"
        parts = [f"torch {self.capability}", bf16, *(f"{k}={v}" for k, v in self.isa_env.items())]
        if self.gemm_gflops:
            parts.append(f"bf16 GEMM {self.gemm_gflops['bf16']:.1f} vs fp32 {self.gemm_gflops['fp32']:.1f} GFLOP/s")
        return f"{self.model}: {', '.join(parts)}"

    def to_dict(self) -> dict:
        """The JSON-serialisable record, with native_bf16 and native_fp16."""
        return {
            **dataclasses.asdict(self),
            "flags": None if self.flags is None else list(self.flags),
            "native_bf16": self.native_bf16,
            "native_fp16": self.native_fp16,
        }


def read_cpuinfo(text: str | None) -> tuple[str, tuple | None]:
    """(model name, the FLAGS present) from /proc/cpuinfo's text; flags None without an x86 flags line."""
    model, flags = "unknown CPU", None
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model == "unknown CPU":
            model = value.strip()
        elif key == "flags" and flags is None:  # x86's; other CPUs' are left to the benchmark
            present = set(value.split())
            flags = tuple(f for f in FLAGS if f in present)
    return model, flags


def products(a: torch.Tensor, b: torch.Tensor) -> tuple:
    """The ways torch can compute a @ b ([m, k] by [k, n]), as callables: its matmul and the
    models' `linear` (which puts fp32 products on oneDNN, `gnnsys.models.linear`). A GEMM rate
    is the faster one's."""
    b_t = b.t().contiguous()
    return (lambda: a @ b, lambda: linear(a, b_t))


def gemm_gflops(shape: tuple = GEMM_SHAPE, repeats: int = 3) -> dict:
    """{"fp32", "bf16"}: GFLOP/s of an [m, k] x [k, n] product in each dtype, the best of
    `repeats` after a warm-up of each of `products`."""
    m, k, n = shape
    gen = torch.Generator().manual_seed(0)
    rates = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(m, k, generator=gen).to(dtype), torch.randn(k, n, generator=gen).to(dtype)
        best = math.inf
        for product in products(a, b):
            product()
            for _ in range(repeats):
                start = time.perf_counter()
                product()
                best = min(best, time.perf_counter() - start)
        rates[name] = 2 * m * k * n / best / 1e9
    return rates


def probe(
    cpuinfo: str | None, capability: str, env: dict, onednn: bool, benchmark=gemm_gflops, cache: Path | None = None
) -> CPUFeatures:
    """The CPUFeatures of a CPU whose /proc/cpuinfo reads `cpuinfo` (None: none),
    with torch `capability`, environment `env` and oneDNN available or not:
    decided by the flags when they tell, else by `benchmark()` (GEMM rates as
    `gemm_gflops` returns), whose outcome is kept in the JSON file `cache`."""
    model, flags = read_cpuinfo(cpuinfo)
    isa_env = {k: env[k] for k in ISA_ENV if env.get(k)}
    if flags is not None and onednn and not isa_env:
        return CPUFeatures(model, flags, capability, isa_env, any(f in flags for f in BF16_FLAGS), "flags")
    key = hashlib.sha256(json.dumps([model, flags, capability, isa_env, onednn, torch.__version__]).encode())
    key = key.hexdigest()[:16]
    known = (read_cache(cache, check_cache) if cache is not None else None) or {}
    rates = known.get(key)
    if rates is None:
        rates = benchmark()
        if cache is not None:
            write_cache(cache, {**known, key: rates})
    return CPUFeatures(model, flags, capability, isa_env, rates["bf16"] >= FAST * rates["fp32"], "benchmark", rates)


def _rate(v) -> bool:
    return type(v) in (int, float) and math.isfinite(v) and v > 0


RATES_SCHEMA = tuple((name, "GFLOP/s, a positive number", _rate) for name in ("fp32", "bf16"))


def check_cache(value, path) -> None:
    """DatasetError naming the first entry of the benchmark cache (JSON {key:
    {"fp32": GFLOP/s, "bf16": GFLOP/s}}) that is not what `probe` writes."""
    check_fields(value, (), "", path)
    for key, rates in value.items():
        check_fields(rates, RATES_SCHEMA, key, path)


_detected: dict = {}


def _cpuinfo() -> str | None:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return None


def detect() -> CPUFeatures:
    """This machine's CPUFeatures as this process sees it (once per process and
    set of ISA variables; a benchmark's outcome is also cached on disk)."""
    env = {k: environment.value(k) or "" for k in ISA_ENV}
    forced = environment.value(FORCE_ENV) or ""
    key = (*env.values(), forced)
    if key not in _detected and forced:
        model, flags = read_cpuinfo(_cpuinfo())
        _detected[key] = CPUFeatures(
            model,
            flags,
            torch.backends.cpu.get_cpu_capability(),
            {k: v for k, v in env.items() if v},
            forced == "1",
            FORCE_ENV,
        )
    if key not in _detected:
        _detected[key] = probe(
            _cpuinfo(),
            torch.backends.cpu.get_cpu_capability(),
            env,
            torch.backends.mkldnn.is_available(),
            cache=cache_dir() / CACHE_FILE,
        )
    return _detected[key]
