"""The benchmarks' layout, read with `ast`: no script imports another (what
several share lives in benchmarks/helpers.py and the other helper modules),
and helpers.py imports without gnnsys, torch or numpy (scripts that also run
in the peers' environments import it)."""

import ast
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
HELPER_MODULES = {
    "helpers": "what several scripts share",
    "plotting": "figures",
    "peaks": "peak sampling",
    "side_by_side": "gnnsys against DGL for bench_proteins.py and bench_mag.py",
    "plot_minibatch": "bench_minibatch.py's figure, also redrawn standalone from a result",
    "gather_common": "what bench_gather_gpu.py and sweep_gather_gpu.py share",
    "gpu_facts": "the GPU, CUDA, torch and Triton every GPU result records",
}


def local_imports(path: Path, modules: set[str]) -> list[tuple[int, str]]:
    """(line, module) of every import in `path` (inside functions too) of one of `modules`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.split(".")[0] in modules]
    return found


def test_no_benchmark_script_imports_another():
    modules = {path.stem for path in BENCHMARKS.glob("*.py")}
    assert set(HELPER_MODULES) <= modules
    scripts = modules - set(HELPER_MODULES)
    bad = [
        f"benchmarks/{path.name}:{line}: imports {name}"
        for path in sorted(BENCHMARKS.glob("*.py"))
        for line, name in local_imports(path, scripts)
    ]
    assert not bad, "benchmark scripts importing other scripts (move what they share to helpers.py):\n" + "\n".join(bad)


def test_local_imports_are_found(tmp_path):
    """The check above sees imports inside functions and `import x` as well as `from x import y`."""
    path = tmp_path / "probe.py"
    path.write_text("import bench_a\n\ndef f():\n    from bench_b.sub import g\n    import os\n")
    assert local_imports(path, {"bench_a", "bench_b"}) == [(1, "bench_a"), (4, "bench_b.sub")]


def test_helpers_import_without_gnnsys_torch_or_numpy():
    blocked = "import sys; sys.modules.update(gnnsys=None, torch=None, numpy=None)"  # importing them raises
    check = "assert helpers.median_of([3, None, 1, 2]) == 2 and helpers.warm([1, 2, 3]) == [2, 3]"
    code = f"{blocked}; sys.path.insert(0, {str(BENCHMARKS)!r}); import helpers; {check}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
