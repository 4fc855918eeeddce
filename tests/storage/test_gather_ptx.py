"""What the GPU will execute, proven on the CPU: the PTX Triton compiles for sm_90.

tests/storage/ptx_probe.py compiles the gather and sampler kernels in a
separate process (this one runs Triton interpreted), specialised by Triton's
own launch binder from the launchers' arguments, and runs ptxas. Rows are
128-byte aligned (the features.bin layout). Loads read whole 16-byte vectors
of the padded row; a store can be 16 bytes only where the output row is a
multiple of 16 bytes: fp32 x 602 (2408 B) and fp16 x 100 (200 B) rows start
8 bytes off a 16-byte boundary every other row, so their stores are 64-bit.
Skipped when triton or its CUDA backend's ptxas is absent.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

PROBE = Path(__file__).with_name("ptx_probe.py")


@pytest.fixture(scope="module")
def ptx() -> dict:
    """The probe's report (compiles 7 kernels: a few seconds)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # Triton 3.9's default, said explicitly (silences its warning)
    r = subprocess.run([sys.executable, str(PROBE)], capture_output=True, text=True, timeout=300, env=env)
    if r.returncode == 3:
        pytest.skip(r.stderr.strip())
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


@pytest.mark.parametrize(
    "case,load_bits,store_bits",
    [("fp32-100", 128, 128), ("fp32-128", 128, 128), ("fp32-602", 128, 64), ("fp16-100", 128, 64)],
)
def test_gather_moves_rows_in_vectors(ptx, case, load_bits, store_bits):
    report = ptx["gather"][case]
    assert report["loads_bits"] == [load_bits] and report["stores_bits"] == [store_bits], report
    assert report["registers"] <= 64 and report["spill_bytes"] == 0, report


def test_sampler_registers_and_spills(ptx):
    for fanout, report in ptx["sampler"].items():
        print(
            f"sampler kernel, fanout {fanout}: {report['registers']} registers, "
            f"{report['spill_bytes']} bytes spilled ({ptx['target']}, triton {ptx['triton']})"
        )
    assert sorted(ptx["sampler"], key=int) == ["5", "15", "32"]
    assert all(r["registers"] and r["spill_bytes"] == 0 for r in ptx["sampler"].values()), ptx["sampler"]
