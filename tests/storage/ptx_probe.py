"""Compile the gather and sampler kernels for sm_90 without a GPU and report their PTX.

Run as a script by tests/storage/test_gather_ptx.py, in a process where Triton
compiles rather than interprets (TRITON_INTERPRET unset). Each kernel is
specialised by Triton's own launch binder from the arguments the launcher
would pass (storage.triton_gather.launch_args; the sampler's launch), so the
PTX is what a launch on an H100 would compile; `ptxas -v` (run by Triton,
its log captured; an empty Triton cache makes sure it runs) gives registers
and spills. Prints one JSON object:
{"gather": {case: report}, "sampler": {fanout: report}} where a report holds
the bit widths of the global loads and stores of the kernel's element type,
registers and spill bytes. Exits 3 when the CUDA backend's compiler (ptxas)
is not available.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import sys
import tempfile

import torch

if os.environ.get("TRITON_INTERPRET", "0") == "1":
    sys.exit("ptx_probe: TRITON_INTERPRET=1 is set; the kernels must be compiled")
_CACHE = tempfile.TemporaryDirectory(prefix="ptx_probe-")  # a cached kernel would skip ptxas and its log
os.environ["TRITON_CACHE_DIR"] = _CACHE.name

import triton  # noqa: E402
from triton import knobs  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler.compiler import ASTSource, make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
# name: (dtype, dim, the table's base past a 128-byte line, the launch config: None (the default),
# ("widest", warps): the widest tile the sweep may try, ("sorted",): the default with ids sorted)
GATHER_CASES = {
    **{f"fp32-{b}B": (torch.float32, b // 4, 0, None) for b in (256, 512, 1024, 2048, 4096)},
    "fp32-100": (torch.float32, 100, 0, None),
    "fp32-602": (torch.float32, 602, 0, None),
    "fp16-100": (torch.float16, 100, 0, None),
    "fp32-512B-offset": (torch.float32, 128, 64, None),  # rows rotated back to their line
    "fp32-512B-widest-4w": (torch.float32, 128, 0, ("widest", 4)),
    "fp32-4096B-widest-8w": (torch.float32, 1024, 0, ("widest", 8)),
    "fp32-512B-sorted": (torch.float32, 128, 0, ("sorted",)),
}
SAMPLER_FANOUTS = (5, 15, 32)
_MEMORY_OP = re.compile(r"\b(ld|st)\.global((?:\.[a-z0-9]+)*?)(?:\.v(\d))?\.([bsuf])(\d+)\b")


def aligned(nbytes: int, align: int = 128) -> torch.Tensor:
    """A uint8 host tensor of `nbytes` starting on an `align`-byte boundary (as cudaMalloc's)."""
    buf = torch.empty(nbytes + align, dtype=torch.uint8)
    skip = (-buf.data_ptr()) % align
    return buf[skip : skip + nbytes]


def compile_launch(kernel, args: tuple, meta: dict):
    """Compile `kernel` as a launch with `args` and `meta` would, for TARGET;
    returns (compiled kernel, ptxas log)."""
    backend = make_backend(TARGET)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*args, **meta)
    options, signature, constexprs, attrs = kernel._pack_args(backend, meta, bound, specialization, options)
    log = io.StringIO()
    knobs.nvidia.dump_ptxas_log = True
    with contextlib.redirect_stdout(log):
        compiled = triton.compile(
            ASTSource(kernel, signature, constexprs, attrs), target=TARGET, options=options.__dict__
        )
    return compiled, log.getvalue()


def report(compiled, ptxas_log: str, elem_bits: int) -> dict:
    """Widths (bits) of the global loads/stores of `elem_bits`-bit elements, registers, spills."""
    widths = {"ld": set(), "st": set()}
    for op, _, vec, _, bits in _MEMORY_OP.findall(compiled.asm["ptx"]):
        if int(bits) == elem_bits:
            widths[op].add(int(bits) * int(vec or 1))
    regs = re.search(r"Used (\d+) registers", ptxas_log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", ptxas_log)
    return {
        "loads_bits": sorted(widths["ld"]),
        "stores_bits": sorted(widths["st"]),
        "registers": int(regs.group(1)) if regs else None,
        "spill_bytes": int(spills.group(1)) + int(spills.group(2)) if spills else None,
    }


def gather_case(dtype: torch.dtype, dim: int, offset: int, how: tuple | None, rows: int = 1000, n: int = 4096) -> dict:
    """The gather of `n` ids from a table of 128-byte-stride rows of `dim` x `dtype` starting `offset`
    bytes past a line, with the launch config `how` names (see GATHER_CASES)."""
    from gnnsys.storage.gather_plan import LaunchConfig, max_tile_rows, plan_gather
    from gnnsys.storage.triton_gather import _gather_rows_kernel, launch_args, launch_config

    row_bytes = dim * dtype.itemsize
    stride = -(-row_bytes // 128) * 128
    table = aligned(rows * stride + offset)[offset:].view(rows, stride)
    out = aligned(n * row_bytes).view(dtype).view(n, dim)
    ids = torch.zeros(n, dtype=torch.int64)
    err = torch.zeros(1, dtype=torch.int64)
    plan = plan_gather(table.data_ptr(), stride, out.data_ptr(), row_bytes)
    config = launch_config(plan.load_bytes, out.device)
    if how and how[0] == "widest":
        config = LaunchConfig(max_tile_rows(plan, how[1]), how[1])
    elif how:
        config = dataclasses.replace(config, sort=True)
    grid, args, meta = launch_args(table, ids, out, err, config=config)
    compiled, log = compile_launch(_gather_rows_kernel, args, meta)
    facts = {"rotate": meta["ROTATE"], "block_r": meta["BLOCK_R"], "block_w": meta["BLOCK_W"], "warps": config.warps}
    facts |= {"threads_per_sm": config.threads_per_sm, "elem_bits": 8 * plan.elem, "span": plan.span}
    return report(compiled, log, 8 * plan.elem) | loop_structure(compiled.asm["ttir"]) | facts


def loop_structure(ttir: str) -> dict:
    """Where the gather's atomics are and what its tile loop carries, from the Triton IR:
    `atomics` (tt.atomic_rmw ops), `atomics_in_loops` (of them, inside an scf.for), and
    `carried` (the result types of the outermost scf.for: the values one tile hands the next)."""
    depth, loops, atomics, in_loops, carried = 0, [], 0, 0, None
    for line in ttir.splitlines():
        code = line.strip()
        if "scf.for" in code:
            if carried is None:
                types = code.split("->", 1)[1] if "->" in code else ""
                carried = re.findall(r"tensor<[^>]*>|\bi\d+\b", types.split("{", 1)[0])
            loops.append(depth)
        if "tt.atomic_rmw" in code:
            atomics += 1
            in_loops += bool(loops)
        depth += code.count("{") - code.count("}")
        while loops and depth <= loops[-1]:
            loops.pop()
    return {"atomics": atomics, "atomics_in_loops": in_loops, "carried": carried or []}


def sampler_case(fanout: int, n: int = 1024, num_nodes: int = 10_000) -> dict:
    """The sampling kernel for one layer of `fanout` over an int64 CSC."""
    from gnnsys.samplers.gpu_sampler import _sample_kernel, sample_launch_args

    indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
    indices = torch.zeros(num_nodes * 8, dtype=torch.int64)
    nodes = torch.zeros(n, dtype=torch.int64)
    out = torch.empty((n, fanout), dtype=torch.int64)
    counts = torch.empty(n, dtype=torch.int64)
    grid, args, meta = sample_launch_args(
        indptr, indices, nodes, 0x1234_5678_9ABC_DEF0, out, counts, fanout, replace=False, max_programs=528
    )
    compiled, log = compile_launch(_sample_kernel, args, meta)
    return report(compiled, log, 64)


def main() -> int:
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        get_ptxas(TARGET.arch)
    except Exception as e:  # noqa: BLE001 -- any failure to import or locate ptxas means "no compiler"
        print(f"ptx_probe: the CUDA backend's ptxas is not available ({type(e).__name__}: {e})", file=sys.stderr)
        return 3
    result = {
        "triton": triton.__version__,
        "target": f"sm_{TARGET.arch}",
        "gather": {name: gather_case(*case) for name, case in GATHER_CASES.items()},
        "sampler": {str(f): sampler_case(f) for f in SAMPLER_FANOUTS},
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
