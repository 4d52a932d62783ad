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


# One timing path: kernels are built, gated and timed only by `run/` (sessions, the sweep,
# its job kinds) on `measure/`'s timers; every study hands its cases to a `run.session`.
TIMING_HOMES = frozenset({"attnbench.measure", "attnbench.run"})
KERNEL_BUILDERS = frozenset({"attnbench.backends"})
"""Packages that may call a backend's `plan` besides the timing homes (engine variants wrap a
raw variant's plan)."""
TIMING_CALLS = frozenset({"Event", "CUDAGraph", "graph", "synchronize", "elapsed_time"})
"""`torch.cuda` names that only a timer uses (and `elapsed_time`, on any object)."""
CLOCKS = frozenset({"perf_counter", "perf_counter_ns"})
SWEEP_MODULES = frozenset(
    {
        "attnbench.run.sweep",
        "attnbench.run.tune",
        "attnbench.run.kernel_error",
        "attnbench.measure.engine",
        "attnbench.measure.timers",
    }
)
DRIVERS = frozenset(
    {
        "SweepContext",
        "run_sweep",
        "run_case",
        "run_backend",
        "runnable_on",
        "tune_case",
        "tune_variant",
        "make_trial",
        "error_case",
        "measure",
        "choose_timer",
    }
)
"""What runs the build/gate/time loop (in `SWEEP_MODULES`): only `run/` and `measure/` import
them (their exceptions and pure metrics may be imported anywhere)."""


def _drivers_imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each import of a `DRIVERS` name, or of a `SWEEP_MODULES` module whole."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in SWEEP_MODULES:
            found += [
                (node.lineno, f"{node.module}.{a.name}") for a in node.names if a.name in DRIVERS
            ]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name in SWEEP_MODULES]
    return found


def _dotted(node: ast.AST) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _timing_code(tree: ast.AST, may_plan: bool) -> list[tuple[int, str]]:
    """(line, what) for each piece of kernel-timing code in `tree`: a CUDA event, graph or
    device sync (`torch.cuda.X`, or imported from `torch.cuda`), `elapsed_time`, a clock read
    inside a loop (a timing loop), and (unless `may_plan`) a call of a backend's `plan`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = _dotted(node)
            if node.attr == "elapsed_time" or (
                node.attr in TIMING_CALLS and name.endswith(f"cuda.{node.attr}")
            ):
                found.append((node.lineno, name))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch.cuda"):
            found += [
                (node.lineno, f"torch.cuda.{a.name}") for a in node.names if a.name in TIMING_CALLS
            ]
        elif isinstance(node, ast.For | ast.While | ast.AsyncFor):
            found += [
                (n.lineno, f"{_dotted(n.func)}() in a loop")
                for n in ast.walk(node)
                if isinstance(n, ast.Call) and _dotted(n.func).split(".")[-1] in CLOCKS
            ]
        elif (
            not may_plan
            and isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "plan"
            and len(node.args) >= 2
        ):
            found.append((node.lineno, f"{_dotted(node.func)}(...): a backend's plan"))
    return sorted(set(found))


def test_architecture_timing_code_is_recognised() -> None:
    """The rule below can fail: each kind of timing code in a snippet is found."""
    snippet = ast.parse(
        "import time, torch\n"
        "from torch.cuda import Event\n"
        "g = torch.cuda.CUDAGraph()\n"
        "torch.cuda.synchronize()\n"
        "ms = start.elapsed_time(end)\n"
        "for _ in range(3):\n"
        "    t0 = time.perf_counter()\n"
        "planned = backend.plan(spec, inputs)\n"
        "doc_t0 = time.perf_counter()\n"
    )
    lines = [line for line, _ in _timing_code(snippet, may_plan=False)]
    assert lines == [2, 3, 4, 5, 7, 8]
    assert [line for line, _ in _timing_code(snippet, may_plan=True)] == [2, 3, 4, 5, 7]
    imports = ast.parse(
        "from attnbench.run.sweep import DeviceLost, run_case\n"
        "import attnbench.measure.engine\n"
        "from attnbench.run.kernel_error import error_metrics\n"
    )
    assert [what for _, what in _drivers_imported(imports)] == [
        "attnbench.run.sweep.run_case",
        "attnbench.measure.engine",
    ]


def test_architecture_one_timing_path() -> None:
    """No CUDA event, CUDA graph, device sync or timing loop outside `measure/` and `run/`;
    nothing outside them imports what runs the sweep, its job kinds or the measurement engine
    (`DRIVERS`); and only
    `backends/` besides them builds a kernel (a backend's `plan`). So the replay's live steps,
    `replay-validate` and the fp8 study time their kernels through a `run.session`."""
    bad: list[str] = []
    for module, path in MODULES.items():
        package = package_of(module)
        if package in TIMING_HOMES:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        where = path.relative_to(SRC.parent)
        bad += [
            f"  {where}:{line}: {what}"
            for line, what in _timing_code(tree, may_plan=package in KERNEL_BUILDERS)
        ]
        bad += [f"  {where}:{line}: imports {what}" for line, what in _drivers_imported(tree)]
    assert not bad, "kernel timing outside measure/ and run/:\n" + "\n".join(sorted(bad))
