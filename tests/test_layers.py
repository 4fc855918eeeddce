"""The layering of the installed package, read from the source with `ast`.

Every import of a gnnsys module counts, inside functions too, relative ones
resolved against their package; a package's `__init__` is the package module.
Layers, bottom to top (LAYERS): a module may import its own layer or lower
ones, never a higher one (so the leaves import only leaves, and no lower layer
imports the top package `gnnsys`); samplers never import storage (a rank
below them, which never imports them either), and gnnsys.trainers.gnnpipe
never imports gnnsys.trainers.fullgraph. Every module must be in a layer.
Also: no import cycle, no source file over MAX_LINES, and `import
gnnsys.datasets` and the CLI's parser stay light.
"""

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = "gnnsys"  # the package itself: its __init__, the top rank (not its submodules)
LAYERS = [  # (rank, modules); each name covers the module and its submodules; the first match counts
    (
        0,
        (
            "gnnsys.errors",
            "gnnsys._capabilities",
            "gnnsys.ids",
            "gnnsys.atomic",
            "gnnsys.host_memory",
            "gnnsys.progress",
            "gnnsys.numbers",
            "gnnsys.identity",
            "gnnsys.environment",
            "gnnsys.json_fields",
            "gnnsys.scratch",
        ),
    ),
    (1, ("gnnsys.storage",)),
    (2, ("gnnsys.datasets",)),
    (3, ("gnnsys.samplers",)),
    (
        4,
        (
            "gnnsys.models",
            "gnnsys.runtime",
            "gnnsys.loading",
            "gnnsys.parallel.distributed",
            "gnnsys.parallel.ranks",
            "gnnsys.parallel.partition",
            "gnnsys.inference.streaming",
        ),
    ),
    (
        5,
        (
            "gnnsys.training",
            "gnnsys.parallel.data_parallel",
            "gnnsys.inference.layerwise",
            "gnnsys.inference.rows_io",
            "gnnsys.inference.rgcn_layerwise",
            "gnnsys.inference.prediction_io",
            "gnnsys.inference.plan",
            "gnnsys.inference.passes",
            "gnnsys.inference.tiles",
        ),
    ),
    (
        6,
        (
            "gnnsys.trainers",
            "gnnsys.inference.prediction",
            "gnnsys.inference.hetero_prediction",
            "gnnsys.inference.prediction_options",
        ),
    ),
    (7, ("gnnsys.cli", "gnnsys.__main__", "gnnsys.api")),
    (7, ("gnnsys.inference", "gnnsys.parallel")),  # their __init__ only (a docstring): their modules are placed above
]
FORBIDDEN = [  # (importer, imported) within one rank
    ("gnnsys.samplers", "gnnsys.storage"),
    ("gnnsys.storage", "gnnsys.samplers"),
    ("gnnsys.trainers.gnnpipe", "gnnsys.trainers.fullgraph"),
]
MAX_LINES = 400  # lines as ruff format writes them (one argument per line in long calls)


def _package_dirs() -> dict[str, Path]:
    """{package name: source folder}: gnnsys and the folders pyproject.toml maps into it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {name: ROOT / folder for name, folder in config.items()}


def _source_files() -> dict[str, Path]:
    """{module name: file} of every .py file under the four source folders."""
    files = {}
    for package, folder in _package_dirs().items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join((package, *parts))] = path
    return files


FILES = _source_files()


def _is_package(module: str) -> bool:
    return FILES[module].name == "__init__.py"


def _under(module: str, name: str) -> bool:
    return module == name or module.startswith(name + ".")


def _imports(module: str) -> list[tuple[str, str]]:
    """(imported gnnsys module, "file:line: statement") for every import in `module`'s file."""
    path = FILES[module]
    package = module if _is_package(module) else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    found = []
    for node in sorted(nodes, key=lambda n: n.lineno):
        where = f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}"
        if isinstance(node, ast.Import):
            found += [(alias.name, where) for alias in node.names]
            continue
        base = node.module or ""
        if node.level:  # relative: `from .x import y` in package P is P.x; each extra dot goes one package up
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
        for alias in node.names:  # `from P import x`: the submodule P.x if there is one, else P
            found.append((f"{base}.{alias.name}" if f"{base}.{alias.name}" in FILES else base, where))
    return [(target, where) for target, where in dict.fromkeys(found) if _under(target, TOP)]


GRAPH = {module: _imports(module) for module in sorted(FILES)}


def _rank(module: str) -> int | None:
    if module == TOP:
        return LAYERS[-1][0]
    return next((rank for rank, names in LAYERS for name in names if _under(module, name)), None)


def test_every_module_has_a_layer():
    lost = [f"{m} ({FILES[m].relative_to(ROOT)})" for m in sorted(FILES) if _rank(m) is None]
    assert not lost, "modules in no layer (add them to LAYERS):\n" + "\n".join(lost)


def test_imports_exist():
    missing = [f"{where} -> {target}" for m in sorted(FILES) for target, where in GRAPH[m] if target not in FILES]
    assert not missing, "imports of gnnsys modules that do not exist:\n" + "\n".join(missing)


def _layer_breaks(module: str) -> list[str]:
    rank = _rank(module)
    if rank is None:
        return []  # test_every_module_has_a_layer names it
    bad = []
    for target, where in GRAPH[module]:
        target_rank = _rank(target)
        if target_rank is None:
            bad.append(f"{where} -> {target} (in no layer)")
        elif target_rank > rank:
            bad.append(f"{where} -> {target} (layer {target_rank}, above {module}'s {rank})")
        elif any(_under(module, a) and _under(target, b) for a, b in FORBIDDEN):
            bad.append(f"{where} -> {target} (forbidden within layer {rank})")
    return bad


def test_imports_respect_layers():
    bad = [line for m in sorted(FILES) for line in _layer_breaks(m)]
    assert not bad, "imports that break the layering:\n" + "\n".join(bad)


def _find_cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """The cycles a depth-first search of `edges` ({module: modules it imports})
    closes, one per back edge, each as [m0, m1, ..., m0] (m0 imports m1, ...)."""
    cycles, done = [], set()
    for start in edges:
        if start in done:
            continue
        stack, on_path, path = [(start, iter(edges[start]))], {start}, [start]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_path.discard(path.pop())
                done.add(node)
            elif child in on_path:
                cycles.append(path[path.index(child) :] + [child])
            elif child not in done:
                stack.append((child, iter(edges[child])))
                on_path.add(child)
                path.append(child)
    return cycles


def test_no_import_cycle():
    cycles = _find_cycles({m: sorted({t for t, _ in GRAPH[m] if t in FILES}) for m in GRAPH})
    lines = []
    for cycle in cycles:
        lines.append(" -> ".join(cycle))
        for a, b in zip(cycle, cycle[1:]):
            lines += [f"    {where}" for target, where in GRAPH[a] if target == b]
    assert not cycles, "import cycles:\n" + "\n".join(lines)


def test_file_length():
    long = [
        f"{FILES[m].relative_to(ROOT)} ({m}): {n} lines"
        for m in sorted(FILES)
        if (n := len(FILES[m].read_text().splitlines())) > MAX_LINES
    ]
    assert not long, f"source files over {MAX_LINES} lines:\n" + "\n".join(long)


@pytest.mark.parametrize(
    "code",
    ["import gnnsys.datasets", "from gnnsys.cli import build_parser; build_parser()"],
    ids=["datasets", "cli-parser"],
)
def test_import_is_light(code, tmp_path):
    """The datasets package, and the CLI up to its parser (`gnnsys ... --help`,
    `info`, `prepare`), import neither PyG nor the trainers."""
    heavy = ("torch_geometric", "gnnsys.trainers.minibatch")
    check = f"{code}; import sys; print([m for m in {heavy!r} if m in sys.modules])"
    run = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"{code} failed:\n{run.stderr}"
    assert run.stdout.strip() == "[]", f"{code} also imported {run.stdout.strip()}"
