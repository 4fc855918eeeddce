"""The layering of the installed package, read from the source with `ast`.

Every import of a gnnsys module counts, inside functions too, relative ones
resolved against their package; a package's `__init__` is the package module.
Layers, bottom to top (LAYERS): a module may import its own layer or lower
ones, never a higher one (so the leaves import only leaves, and no lower layer
imports the top package `gnnsys`); samplers and storage never import each
other, and gnnsys.gnnpipe never imports gnnsys.fullgraph. Every module must be
in a layer. Also: no import cycle, no source file over MAX_LINES, and
`import gnnsys.datasets` and the CLI's parser stay light.
"""

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = "gnnsys"  # the package itself: its __init__, rank 6 (not its submodules)
LAYERS = [  # (rank, modules); each name covers the module and its submodules
    (0, ("gnnsys.errors", "gnnsys.environment", "gnnsys._capabilities", "gnnsys.ids", "gnnsys.feature_source")),
    (1, ("gnnsys.datasets",)),
    (2, ("gnnsys.samplers", "gnnsys.storage")),
    (
        3,
        (
            "gnnsys.allocator",
            "gnnsys.dropout",
            "gnnsys.models",
            "gnnsys.model_names",
            "gnnsys.units",
            "gnnsys.partition",
            "gnnsys.distributed",
            "gnnsys.ranks",
            "gnnsys.loader",
            "gnnsys.loader_options",
            "gnnsys.feature_stack",
            "gnnsys.bf16",
            "gnnsys.aggregation",
            "gnnsys.precision",
            "gnnsys.cpu_features",
            "gnnsys.streaming",
            "gnnsys.hetero_models",
            "gnnsys.hetero_loader",
            "gnnsys.hetero_features",
        ),
    ),
    (4, ("gnnsys.training",)),
    (
        5,
        (
            "gnnsys.minibatch",
            "gnnsys.fullgraph",
            "gnnsys.gnnpipe",
            "gnnsys.prediction",
            "gnnsys.hetero_minibatch",
            "gnnsys.hetero_prediction",
        ),
    ),
    (6, ("gnnsys.cli", "gnnsys.__main__", "gnnsys.api")),
]
FORBIDDEN = [  # (importer, imported) within one rank
    ("gnnsys.samplers", "gnnsys.storage"),
    ("gnnsys.storage", "gnnsys.samplers"),
    ("gnnsys.gnnpipe", "gnnsys.fullgraph"),
]
MAX_LINES = 500  # lines as ruff format writes them (one argument per line in long calls)


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


@pytest.mark.parametrize("module", sorted(FILES))
def test_module_has_a_layer(module):
    assert _rank(module) is not None, f"{module} ({FILES[module].relative_to(ROOT)}) is in no layer: add it to LAYERS"


@pytest.mark.parametrize("module", sorted(FILES))
def test_imports_exist(module):
    missing = [f"{where} -> {target}" for target, where in GRAPH[module] if target not in FILES]
    assert not missing, f"{module} imports gnnsys modules that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize("module", sorted(FILES))
def test_imports_respect_layers(module):
    rank = _rank(module)
    if rank is None:
        pytest.skip(f"{module} is in no layer (test_module_has_a_layer)")
    bad = []
    for target, where in GRAPH[module]:
        target_rank = _rank(target)
        if target_rank is None:
            bad.append(f"{where} -> {target} (in no layer)")
        elif target_rank > rank:
            bad.append(f"{where} -> {target} (layer {target_rank}, above {module}'s {rank})")
        elif any(_under(module, a) and _under(target, b) for a, b in FORBIDDEN):
            bad.append(f"{where} -> {target} (forbidden within layer {rank})")
    assert not bad, f"{module} breaks the layering:\n" + "\n".join(bad)


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


@pytest.mark.parametrize("module", sorted(FILES))
def test_file_length(module):
    lines = len(FILES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{FILES[module].relative_to(ROOT)} ({module}) has {lines} lines, over {MAX_LINES}"


@pytest.mark.parametrize(
    "code",
    ["import gnnsys.datasets", "from gnnsys.cli import build_parser; build_parser()"],
    ids=["datasets", "cli-parser"],
)
def test_import_is_light(code, tmp_path):
    """The datasets package, and the CLI up to its parser (`gnnsys ... --help`,
    `info`, `prepare`), import neither PyG nor the trainers."""
    heavy = ("torch_geometric", "gnnsys.minibatch")
    check = f"{code}; import sys; print([m for m in {heavy!r} if m in sys.modules])"
    run = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"{code} failed:\n{run.stderr}"
    assert run.stdout.strip() == "[]", f"{code} also imported {run.stdout.strip()}"
