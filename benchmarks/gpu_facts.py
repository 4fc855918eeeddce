"""What a GPU figure ran with, recorded beside every GPU result: the GPU, its
memory and compute capability, CUDA, torch, Triton and Python (`gpu_facts`).

    python benchmarks/gpu_facts.py OUT.json

writes them (with the host's CPU count and the source's commit, where git
knows it) for benchmarks/gpu_steps.sh's machine facts. Imports torch only
inside the functions; never gnnsys (it runs before gnnsys is installed).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def gpu_facts() -> dict:
    """{"gpu", "gpu_memory_gib", "capability", "cuda", "torch", "triton", "python"}:
    gpu, its memory and capability None without CUDA, triton None without Triton."""
    import torch

    facts = {"gpu": None, "gpu_memory_gib": None, "capability": None, "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        facts.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1))
        facts["capability"] = f"{props.major}.{props.minor}"
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return facts | {"torch": torch.__version__, "triton": triton_version, "python": platform.python_version()}


def source_commit() -> dict:
    """{"commit", "dirty"} of the checkout this file is in (None for both without git)."""

    def git(*args):
        run = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return run.stdout.strip() if run.returncode == 0 else None

    try:
        commit = git("rev-parse", "HEAD")
        status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    except OSError:
        commit = status = None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def machine_facts() -> dict:
    """gpu_facts() with the interpreter, CUDA's availability, GPU count, CPU count and source commit."""
    import torch

    facts = gpu_facts() | {"executable": sys.executable, "cuda_available": torch.cuda.is_available()}
    facts["gpu_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
    return facts | {"cpu_count": os.cpu_count(), "platform": platform.platform(), **source_commit()}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python benchmarks/gpu_facts.py OUT.json")
    Path(sys.argv[1]).write_text(json.dumps(machine_facts()))
