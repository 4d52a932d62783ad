"""The package's shape, checked from the source text alone (nothing here imports attnbench).

Every `import` in src/attnbench counts, at module level or inside a function (a lazy import is
still a dependency). From that graph: no module cycle and no package cycle, type-only imports
(under `if TYPE_CHECKING:`) included, since a cycle of types is still a cycle of the design; no
import outside `if TYPE_CHECKING:` from a lower layer into a higher one (`LAYERS`). From the
syntax trees: no function too long, too wide or too deeply nested (`FUNCTION_ALLOWLIST` names
the exceptions), and one timing path.
"""

from __future__ import annotations

import ast
import functools
import itertools
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "attnbench"

# Bottom to top: a package may import from its own layer's other packages only where no package
# cycle results, and from any lower layer, never from a higher one. "attnbench" is the root
# package (its __init__: the version). `config` (Settings) sits just under the CLI, so no
# library code can read the settings; the libraries get frozen values.
LAYERS: list[set[str]] = [
    {"attnbench", "attnbench.workload"},  # specs, models, lengths, inputs, quantisation
    {"attnbench.engines"},  # what vLLM/SGLang run: each setting's kernel path, as data
    {"attnbench.measure"},  # timers, engine, stats, hardware, metrics, accuracy
    {"attnbench.backends"},  # one module per kernel library, behind one protocol
    {"attnbench.results"},  # result rows and the JSONL store
    {"attnbench.run"},  # the sweep and where it runs (process, workers, Ray), tune, fidelity
    {"attnbench.analysis"},  # stored rows only: frame, compare, recommend, hybrid, engines
    {"attnbench.replay", "attnbench.fp8study"},  # studies built on measurements and analysis
    {"attnbench.deploy"},  # the deployment answer: one GPU's rows, traffic, options, decider
    {"attnbench.report"},  # Markdown/HTML report, plots, terminal tables
    {"attnbench.config", "attnbench.config_load"},  # Settings and their loading: the CLI only
    {"attnbench.cli", "attnbench.__main__"},  # parsing and wiring
]


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


@functools.cache
def graph() -> dict[str, dict[str, int]]:
    """Module -> imported modules (and the line): built when a test first asks, not at
    collection (every pytest worker collects this file)."""
    return _graph()


@functools.cache
def full_graph() -> dict[str, dict[str, int]]:
    """`graph` with the type-only imports: what the cycle tests read."""
    return _graph(typing_only=True)


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
    return f"{path}:{full_graph()[module][target]}"


def test_architecture_sees_the_package() -> None:
    assert {"attnbench.cli", "attnbench.run.sweep", "attnbench.results.loader"} <= set(MODULES)
    assert "attnbench.measure.engine" in graph()["attnbench.run.sweep"]  # module-level import
    assert "attnbench.run.sweep" in graph()["attnbench.run.session"]  # function-level import
    typed = "attnbench.fp8study.config"  # errors.py imports StudyConfig for its annotations only
    assert typed in full_graph()["attnbench.fp8study.errors"]
    assert typed not in graph()["attnbench.fp8study.errors"]


def test_architecture_no_module_cycle() -> None:
    edges_of = {m: set(edges) for m, edges in full_graph().items()}
    where = {(m, t): _line(m, t) for m, edges in full_graph().items() for t in edges}
    cycle = _find_cycle(edges_of)
    assert cycle is None, _describe(cycle, where)


def test_architecture_no_package_cycle() -> None:
    packages: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for module, edges in full_graph().items():
        src = package_of(module)
        packages.setdefault(src, set())
        for target in edges:
            dst = package_of(target)
            if dst != src:
                packages[src].add(dst)
                where.setdefault((src, dst), f"{module} imports {target}, {_line(module, target)}")
    cycle = _find_cycle(packages)
    assert cycle is None, _describe(cycle, where)


def test_architecture_layers_point_down() -> None:
    rank = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
    unplaced = sorted({package_of(m) for m in MODULES} - set(rank))
    assert not unplaced, f"packages missing from LAYERS: {unplaced}"
    upward = [
        f"  {_line(m, t)}: {m} (layer {rank[package_of(m)]}) imports {t} "
        f"(layer {rank[package_of(t)]})"
        for m, edges in sorted(graph().items())
        for t in sorted(edges)
        if rank[package_of(t)] > rank[package_of(m)]
    ]
    assert not upward, "imports from a lower layer into a higher one:\n" + "\n".join(upward)


# What makes a function hard to read: its length in code lines (the body, less its docstring,
# blank lines and comments), its parameters (less self/cls; *args and **kwargs count one each)
# and its nesting (if/for/while/with/try/match; an `elif` stays at its `if`'s level).
MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 8
MAX_NESTING = 4
NESTING = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match)
if hasattr(ast, "TryStar"):
    NESTING = (*NESTING, ast.TryStar)

# "path:function" (a method: "path:Class.function") -> why it may exceed the limits. An entry
# goes once its function is back within them (test_architecture_function_allowlist_is_live).
# A typer command (decorated with `app.command`) is allowed by rule, not listed: it takes one
# parameter per CLI flag and hands them to a value object at once, so its width is the CLI's.
FUNCTION_ALLOWLIST: dict[str, str] = {}


def _nesting(node: ast.AST, depth: int = 0) -> int:
    """The deepest nesting of compound statements in `node`'s body (nested defs not counted)."""
    deepest = depth
    elif_branch = (
        node.orelse[0]
        if isinstance(node, ast.If) and len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)
        else None
    )
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if child is elif_branch:
            deepest = max(deepest, _nesting(child, depth))
        elif isinstance(child, NESTING):
            deepest = max(deepest, _nesting(child, depth + 1))
        else:
            deepest = max(deepest, _nesting(child, depth))
    return deepest


def _code_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
    """Lines of `fn`'s body that hold code: not its docstring, not blank, not a comment."""
    body = fn.body
    first = body[0]
    docstring = (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )
    skip = set(range(first.lineno, (first.end_lineno or first.lineno) + 1)) if docstring else set()
    begin = min(getattr(n, "lineno", fn.lineno) for n in body)
    return sum(
        1
        for i in range(begin, (fn.end_lineno or fn.lineno) + 1)
        if i not in skip and lines[i - 1].strip() and not lines[i - 1].strip().startswith("#")
    )


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = fn.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (args.vararg is not None) + (args.kwarg is not None)


def _is_command(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated with `<something>.command(...)`: a typer CLI command."""
    return any(
        isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "command"
        for d in fn.decorator_list
    )


def _functions(tree: ast.AST) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, def) for every function and method, nested ones included."""
    stack: list[tuple[str, ast.AST]] = [("", tree)]
    while stack:
        prefix, node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield prefix + child.name, child
                stack.append((f"{prefix}{child.name}.", child))
            elif isinstance(child, ast.ClassDef):
                stack.append((f"{prefix}{child.name}.", child))
            else:
                stack.append((prefix, child))


@functools.cache
def function_sizes() -> dict[str, tuple[int, int, int, bool]]:
    """ "path:function" -> (code lines, parameters, nesting, is a typer command), for src/."""
    out: dict[str, tuple[int, int, int, bool]] = {}
    for path in MODULES.values():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        where = path.relative_to(SRC / ROOT).as_posix()
        for name, fn in _functions(ast.parse(text, str(path))):
            size = (_code_lines(fn, lines), _parameters(fn), _nesting(fn), _is_command(fn))
            out[f"{where}:{name}"] = size
    return out


def _over(size: tuple[int, int, int, bool]) -> list[str]:
    code, params, nesting, _ = size
    return [
        what
        for what, bad in (
            (f"{code} code lines > {MAX_FUNCTION_LINES}", code > MAX_FUNCTION_LINES),
            (f"{params} parameters > {MAX_PARAMETERS}", params > MAX_PARAMETERS),
            (f"nesting {nesting} > {MAX_NESTING}", nesting > MAX_NESTING),
        )
        if bad
    ]


def test_architecture_function_size_is_measured() -> None:
    """The measures can fail: a snippet's lines, parameters and nesting are counted right."""
    snippet = (
        "def f(self, a, b, *args, c, **kw):\n"
        '    """Doc\n    string."""\n'
        "    # a comment\n"
        "\n"
        "    for x in a:\n"
        "        if x:\n"
        "            pass\n"
        "        elif b:\n"
        "            with c:\n"
        "                try:\n"
        "                    pass\n"
        "                except ValueError:\n"
        "                    pass\n"
    )
    fn = ast.parse(snippet).body[0]
    assert isinstance(fn, ast.FunctionDef)
    assert (_code_lines(fn, snippet.splitlines()), _parameters(fn), _nesting(fn)) == (9, 5, 4)
    assert _over((61, 9, 5, False)) == [
        "61 code lines > 60",
        "9 parameters > 8",
        "nesting 5 > 4",
    ]
    assert function_sizes()["cli/show.py:show"][3], "a typer command is recognised"


def test_architecture_functions_stay_readable() -> None:
    """No function in src/ over MAX_FUNCTION_LINES code lines, MAX_PARAMETERS parameters or
    MAX_NESTING levels, unless it is a typer command or FUNCTION_ALLOWLIST says why."""
    bad = sorted(
        f"  {name}: {', '.join(_over(size))}"
        for name, size in function_sizes().items()
        if _over(size) and not size[3] and name not in FUNCTION_ALLOWLIST
    )
    assert not bad, "functions past the limits (split them):\n" + "\n".join(bad)


def test_architecture_function_allowlist_is_live() -> None:
    """Every allowlisted function exists, still exceeds a limit, and says why."""
    stale = sorted(
        name
        for name in FUNCTION_ALLOWLIST
        if name not in function_sizes() or not _over(function_sizes()[name])
    )
    assert not stale, f"FUNCTION_ALLOWLIST names functions within the limits (drop them): {stale}"
    assert all(reason.strip() for reason in FUNCTION_ALLOWLIST.values())


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


def test_architecture_design_names_every_package() -> None:
    """DESIGN.md's package table has a row for every package in LAYERS (its one job)."""
    design = (SRC.parent / "DESIGN.md").read_text(encoding="utf-8")
    rows = [line.split("|")[1] for line in design.splitlines() if line.startswith("| `")]
    named = {name.strip("`/ ") for row in rows for name in row.replace(",", " ").split()}
    packages = {pkg.removeprefix(ROOT + ".") for layer in LAYERS for pkg in layer}
    missing = sorted(packages - named - {"__main__"})
    assert not missing, f"DESIGN.md's package table has no row for: {missing}"
