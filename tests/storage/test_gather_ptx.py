"""What the GPU will execute, proven on the CPU: the PTX Triton compiles for sm_90.

tests/storage/ptx_probe.py compiles the gather and sampler kernels in a
separate process (this one runs Triton interpreted), specialised by Triton's
own launch binder from the launchers' arguments, and runs ptxas. Rows have
a 128-byte stride. Loads read whole 16-byte vectors of the padded row; a
store can be 16 bytes only where the output row is a multiple of 16 bytes:
fp32 x 602 (2408 B) and fp16 x 100 (200 B) rows start 8 bytes off a 16-byte
boundary every other row, so their stores are 64-bit. The Triton IR shows
the tile loop's structure: one atomic, after the loop; the next tile's ids
carried from one iteration to the next. With ids sorted on the device, rows
are stored through the permutation in the same vectors. Skipped when triton
or its CUDA backend's ptxas is absent.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gnnsys.storage.gather_plan import resident_programs

pytest.importorskip("triton")

PROBE = Path(__file__).with_name("ptx_probe.py")
ROW_SIZES = [f"fp32-{b}B" for b in (256, 512, 1024, 2048, 4096)]
DEFAULTS = [*ROW_SIZES, "fp32-100", "fp32-602", "fp16-100", "fp32-512B-offset", "fp32-512B-sorted"]


@pytest.fixture(scope="module")
def ptx() -> dict:
    """The probe's report (compiles 15 kernels: several seconds)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # Triton 3.9's default, said explicitly (silences its warning)
    r = subprocess.run([sys.executable, str(PROBE)], capture_output=True, text=True, timeout=300, env=env)
    if r.returncode == 3:
        pytest.skip(r.stderr.strip())
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


@pytest.mark.parametrize(
    "case,load_bits,store_bits",
    [
        *[(case, 128, 128) for case in ROW_SIZES],
        ("fp32-100", 128, 128),
        ("fp32-602", 128, 64),
        ("fp16-100", 128, 64),
        ("fp32-512B-offset", 128, 128),
        ("fp32-512B-sorted", 128, 128),
    ],
)
def test_gather_moves_rows_in_vectors(ptx, case, load_bits, store_bits):
    report = ptx["gather"][case]
    assert report["loads_bits"] == [load_bits] and report["stores_bits"] == [store_bits], report
    assert report["spill_bytes"] == 0, report


@pytest.mark.parametrize("case", DEFAULTS)
def test_default_tiles_keep_32_kib_in_flight_a_multiprocessor(ptx, case):
    """With the default config, the programs an H100 multiprocessor holds at
    once (by the compiled kernel's registers, as launch_args cuts the grid)
    have at least 32 KiB of loads in flight (the old kernel: 8 KiB)."""
    report = ptx["gather"][case]
    programs = resident_programs(report["registers"], report["warps"], 0)
    tile_bytes = report["block_r"] * report["block_w"] * report["elem_bits"] // 8
    assert programs * tile_bytes >= 32 << 10 and report["registers"] <= 255, report


@pytest.mark.parametrize("case", ["fp32-512B-widest-4w", "fp32-4096B-widest-8w"])
def test_the_widest_tiles_the_sweep_may_try_do_not_spill(ptx, case):
    report = ptx["gather"][case]
    assert report["loads_bits"] == [128] and report["spill_bytes"] == 0 and report["registers"] <= 255, report


def test_rotated_rows_take_one_step(ptx):
    report = ptx["gather"]["fp32-512B-offset"]
    assert report["rotate"] and report["block_w"] >= report["span"] > 512 // 4, report


@pytest.mark.parametrize("case", [*ROW_SIZES, "fp32-512B-offset", "fp32-512B-sorted"])
def test_one_atomic_after_the_loop_and_the_next_ids_carried(ptx, case):
    report = ptx["gather"][case]
    assert report["atomics"] == 1 and report["atomics_in_loops"] == 0, report
    rows = report["block_r"]
    assert f"tensor<{rows}xi64>" in report["carried"], report  # the next tile's ids (int64 ids)
    assert f"tensor<{rows}xi32>" in report["carried"], report  # each row slot's first bad position


def test_tiles_hold_many_rows(ptx):
    """A tile of rows of up to 1 KiB holds at least 16 of them (the old kernel: 8 of 512 B rows)."""
    rows = {case: ptx["gather"][case]["block_r"] for case in ROW_SIZES}
    assert rows["fp32-256B"] >= 32 and rows["fp32-512B"] >= 16 and rows["fp32-1024B"] >= 16, rows


def test_sampler_registers_and_spills(ptx):
    for fanout, report in ptx["sampler"].items():
        print(
            f"sampler kernel, fanout {fanout}: {report['registers']} registers, "
            f"{report['spill_bytes']} bytes spilled ({ptx['target']}, triton {ptx['triton']})"
        )
    assert sorted(ptx["sampler"], key=int) == ["5", "15", "32"]
    assert all(r["registers"] and r["spill_bytes"] == 0 for r in ptx["sampler"].values()), ptx["sampler"]
