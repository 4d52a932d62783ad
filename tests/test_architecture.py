"""The package's shape, checked from the source text alone (nothing here imports attnbench).

Every `import` in src/attnbench counts, at module level or inside a function (a lazy import is
still a dependency). From that graph: no module cycle and no package cycle, type-only imports
(under `if TYPE_CHECKING:`) included, since a cycle of types is still a cycle of the design; no
import outside `if TYPE_CHECKING:` from a lower layer into a higher one (`LAYERS`); and no
module over `MAX_LINES` lines unless `OVERSIZE` says why.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "attnbench"
MAX_LINES = 400

# Bottom to top: a package may import from its own layer's other packages only where no package
# cycle results, and from any lower layer, never from a higher one. "attnbench" is the root
# package (its __init__: the version). `config` (Settings) sits just under the CLI, so no
# library code can read the settings; the libraries get frozen values.
LAYERS: list[set[str]] = [
    {"attnbench", "attnbench.workload"},  # specs, models, lengths, inputs, quantisation
    {"attnbench.measure"},  # timers, engine, stats, hardware, metrics, accuracy
    {"attnbench.backends"},  # one module per kernel library, behind one protocol
    {"attnbench.results"},  # result rows and the JSONL store
    {"attnbench.run"},  # the sweep and where it runs (process, workers, Ray), tune, fidelity
    {"attnbench.analysis"},  # stored rows only: frame, compare, recommend, hybrid, engines
    {"attnbench.replay", "attnbench.fp8study"},  # studies built on measurements and analysis
    {"attnbench.report"},  # Markdown/HTML report, plots, terminal tables
    {"attnbench.config", "attnbench.config_load"},  # Settings and their loading: the CLI only
    {"attnbench.cli", "attnbench.__main__"},  # parsing and wiring
]

# Modules allowed over MAX_LINES, each with why. Only files being rewritten right now may be
# here (OVERSIZE_MAY_LIST), and an entry goes once its file is back under the limit.
OVERSIZE: dict[str, str] = {}
OVERSIZE_MAY_LIST: frozenset[str] = frozenset()


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / ROOT).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of every node under an `if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`) block."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = getattr(test, "id", None) or getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for stmt in node.body:
                    skip.update(id(n) for n in ast.walk(stmt))
    return skip


def _known(name: str) -> str | None:
    """The module `name` loads: itself, or the nearest enclosing package we have."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, *, typing_only: bool = False) -> Iterator[tuple[str, int]]:
    """(imported attnbench module, line) for each import in `module`; with `typing_only`, those
    under `if TYPE_CHECKING:` too."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip = set() if typing_only else _type_checking_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            # `from pkg import sub` loads the submodule `pkg.sub` when there is one
            targets = [
                f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source
                for a in node.names
            ]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            targets = [node.args[0].value]
        for target in targets:
            if target == ROOT or target.startswith(ROOT + "."):
                found = _known(target)
                if found and found != module:
                    yield found, node.lineno


def _graph(*, typing_only: bool = False) -> dict[str, dict[str, int]]:
    """module -> {imported module: first line importing it}."""
    graph: dict[str, dict[str, int]] = {}
    for module in MODULES:
        edges: dict[str, int] = {}
        for target, line in _imports(module, typing_only=typing_only):
            edges[target] = min(line, edges.get(target, line))
        graph[module] = edges
    return graph


GRAPH = _graph()
FULL_GRAPH = _graph(typing_only=True)
"""GRAPH with the type-only imports: what the cycle tests read."""


def package_of(module: str) -> str:
    """`attnbench.X` for anything in package or top-level module X; the root for itself."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path [a, b, ..., a], or None (iterative DFS, sorted for stable output)."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for start in sorted(graph):
        if state.get(start):
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(child) == 1:
                return [*path[path.index(child) :], child]
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph.get(child, ())))))
    return None


def _describe(cycle: list[str], where: dict[tuple[str, str], str]) -> str:
    steps = [f"  {a} -> {b}  ({where[a, b]})" for a, b in itertools.pairwise(cycle)]
    return "import cycle:\n" + "\n".join(steps)


def _line(module: str, target: str) -> str:
    path = MODULES[module].relative_to(SRC.parent)
    return f"{path}:{FULL_GRAPH[module][target]}"


def test_architecture_sees_the_package() -> None:
    assert {"attnbench.cli", "attnbench.run.sweep", "attnbench.results.loader"} <= set(MODULES)
    assert "attnbench.measure.engine" in GRAPH["attnbench.run.sweep"]  # module-level import
    assert "attnbench.run.sweep" in GRAPH["attnbench.run.session"]  # function-level import
    typed = "attnbench.fp8study.config"  # errors.py imports StudyConfig for its annotations only
    assert typed in FULL_GRAPH["attnbench.fp8study.errors"]
    assert typed not in GRAPH["attnbench.fp8study.errors"]


def test_architecture_no_module_cycle() -> None:
    graph = {m: set(edges) for m, edges in FULL_GRAPH.items()}
    where = {(m, t): _line(m, t) for m, edges in FULL_GRAPH.items() for t in edges}
    cycle = _find_cycle(graph)
    assert cycle is None, _describe(cycle, where)


def test_architecture_no_package_cycle() -> None:
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for module, edges in FULL_GRAPH.items():
        src = package_of(module)
        graph.setdefault(src, set())
        for target in edges:
            dst = package_of(target)
            if dst != src:
                graph[src].add(dst)
                where.setdefault((src, dst), f"{module} imports {target}, {_line(module, target)}")
    cycle = _find_cycle(graph)
    assert cycle is None, _describe(cycle, where)


def test_architecture_layers_point_down() -> None:
    rank = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
    unplaced = sorted({package_of(m) for m in MODULES} - set(rank))
    assert not unplaced, f"packages missing from LAYERS: {unplaced}"
    upward = [
        f"  {_line(m, t)}: {m} (layer {rank[package_of(m)]}) imports {t} "
        f"(layer {rank[package_of(t)]})"
        for m, edges in sorted(GRAPH.items())
        for t in sorted(edges)
        if rank[package_of(t)] > rank[package_of(m)]
    ]
    assert not upward, "imports from a lower layer into a higher one:\n" + "\n".join(upward)


def test_architecture_modules_stay_small() -> None:
    assert set(OVERSIZE) <= OVERSIZE_MAY_LIST, "OVERSIZE may only hold OVERSIZE_MAY_LIST"
    sizes = {
        str(p.relative_to(SRC.parent)): len(p.read_text(encoding="utf-8").splitlines())
        for p in MODULES.values()
    }
    big = sorted(
        f"  {p}: {n} lines" for p, n in sizes.items() if n > MAX_LINES and p not in OVERSIZE
    )
    assert not big, f"modules over {MAX_LINES} lines (split them):\n" + "\n".join(big)
    stale = sorted(p for p in OVERSIZE if sizes.get(p, 0) <= MAX_LINES)
    assert not stale, f"OVERSIZE lists files that are no longer over {MAX_LINES} lines: {stale}"
