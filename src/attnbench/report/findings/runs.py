"""Sections on the runs themselves, from the session logs (`logs/*.txt`) and the GPU test
reports (`h200-gpu-tests-*.txt`): wall times, first-use setup, test pass counts (every log and
report names its commit in a line of its own); and, last, every file read with its commits."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from attnbench.analysis.evidence import evidence_of_commits
from attnbench.report.findings.core import (
    UNKNOWN,
    Headline,
    Inputs,
    Section,
    Table,
    doc_commit,
    fnum,
    header_commit,
    joined,
    section,
    sources,
    stem,
)
from attnbench.report.findings.gate import file_evidence

COMMIT_LINE = re.compile(r"^(?:=== )?commit (\S+?);?(?:\s|$)", re.M)
ROWS_LINE = re.compile(r"^rows: (.+?) in (\d+) s -> (\S+)$", re.M)
PYTEST_SUMMARY = re.compile(
    r"^(\d+ (?:passed|failed|errors?|skipped|deselected).*) in ([\d.]+)s(?: \(.*\))?$", re.M
)
"""pytest's last line, a failing one too (`1 failed, 133 passed, ... in 144.13s (0:02:24)`)."""
OUTCOMES = ("failed", "error", "passed")
"""The outcomes a headline names (skips and deselections left to the table)."""
GROUP_LINE = re.compile(r"^=== group (\w+): (.+): exit (\d+) after (\d+) s$", re.M)
COMPILED = re.compile(r"^compiled (\d+) s ", re.M)
GPU_TESTS = re.compile(r"^(\w+)-gpu-tests-(\w+)\.txt$")
"""`h200-gpu-tests-a.txt`: the GPU tag (`scripts/h200/gpu_tag.sh`) and the group."""
DEFAULT_RUN = re.compile(r"^(h\d00)-default-(fresh|warm)(?:-(\d+))?$")
"""`h200-default-fresh`, `h100-default-warm-2`: the default suite on a fresh machine, or again
with every kernel compiled; a number for a later run of the same kind on another machine."""
GPU_NAMES = {"h200": "H200", "h100": "H100 80GB HBM3"}


def is_default_run(name: str) -> bool:
    return DEFAULT_RUN.match(stem(name)) is not None


def commit_before(text: str, pos: int) -> str:
    """The commit named by the last `commit X` line before `pos` in a log."""
    found = [m.group(1) for m in COMMIT_LINE.finditer(text, 0, pos)]
    return found[-1] if found else UNKNOWN


def run_walls(inputs: Inputs) -> list[dict[str, str]]:
    """Every `rows: ... in N s -> FILE` line of the session logs (what `attnbench run` prints
    last), with its log and commit; a log that names no commit before the line is left out."""
    out = []
    for name, text in inputs.texts.items():
        for m in ROWS_LINE.finditer(text):
            if commit_before(text, m.start()) == UNKNOWN:
                continue
            out.append(
                {
                    "log": name,
                    "file": m.group(3).rsplit("/", 1)[-1],
                    "rows": m.group(1),
                    "wall_s": m.group(2),
                    "commit": commit_before(text, m.start()),
                }
            )
    return out


def _first_plan(rows: pd.DataFrame) -> list[list[str]]:
    """Seconds of first plans (where libraries JIT-compile) per library of one run."""
    first = rows["details"].map(lambda d: d.get("first_plan_s") if d is not None else None)
    rows = rows.assign(first_plan_s=pd.to_numeric(first, errors="coerce"))
    out = []
    for lib, g in rows.groupby("library"):
        total = g["first_plan_s"].sum()
        if total > 0:
            out.append([str(lib), fnum(total), str(int(g["first_plan_s"].notna().sum()))])
    return out


def _run_row(inputs: Inputs, name: str, **times: str) -> dict[str, str]:
    """One default run's row: its file, rows by status, commit, and the given times."""
    counts: dict[str, int] = dict(inputs.written.get(name, {}))
    return {
        "log": name,
        "file": name,
        "rows": ", ".join(f"{k} {n}" for k, n in sorted(counts.items())),
        **times,
        "commit": joined(header_commit(h) for h in inputs.headers.get(name, [])),
    }


def footer_walls(inputs: Inputs) -> list[dict[str, str]]:
    """The default runs' own footers (wall, setup and prebuild seconds, the modules the jobs
    still compiled), last footer of each file, with its file's commit."""
    out = []
    for name, footers in inputs.footers.items():
        if not is_default_run(name) or not footers:
            continue
        f = footers[-1]
        pre = f.prebuild or {}
        first = pre.get("first_use") or []
        times = {
            "wall_s": f"{f.wall_s:.0f}" + (" (cut short)" if f.interrupted else ""),
            "setup_s": f"{f.setup_s:.0f}",
            "prebuild_s": f"{pre['seconds']:.0f}" if "seconds" in pre else "-",
            "first_use": f"{len(first)} ({sum(b['seconds'] for b in first):.0f} s)",
        }
        out.append(_run_row(inputs, name, **times))
    return out


def _seconds(wall: str) -> str:
    """`88` -> `88 s`, `88 (cut short)` -> `88 s (cut short)`; words stay as they are."""
    head, _, rest = wall.partition(" ")
    return f"{head} s {rest}".rstrip() if head.isdigit() else wall


def _unfooted(inputs: Inputs, known: set[str]) -> list[dict[str, str]]:
    """Default runs with rows but neither a footer nor a log line: cut short (before a cut
    run wrote its footer) with their rows kept; listed, so the cut run is not left out."""
    cut = {"wall_s": "cut short, no footer", "setup_s": "-", "prebuild_s": "-", "first_use": "-"}
    return [
        _run_row(inputs, name, **cut)
        for name in inputs.headers
        if is_default_run(name) and stem(name) not in known
    ]


def _footer_table(walls: list[dict[str, str]]) -> Table:
    cols = ["file", "rows by status", "wall s", "setup s", "prebuild s", "compiled by jobs"]
    keys = ["file", "rows", "wall_s", "setup_s", "prebuild_s", "first_use"]
    rows = [[*(w[k] for k in keys), w["commit"]] for w in walls]
    note = "From each file's footer (its last line): the run's own record of its time."
    return Table([*cols, "commit"], rows, note=note)


@section("default-run")
def default_run(inputs: Inputs) -> Section | None:
    """The README's first command on the H200: its wall time, run twice, and first plans;
    from the files' footers where they have them, else from the session logs."""
    footed = footer_walls(inputs)
    have = {stem(w["file"]) for w in footed}
    logged = [w for w in run_walls(inputs) if is_default_run(w["file"])]
    footed += _unfooted(inputs, have | {stem(w["file"]) for w in logged})
    walls = footed + [w for w in logged if stem(w["file"]) not in have]
    tables = [_footer_table(footed)] if footed else []
    logged = [w for w in logged if stem(w["file"]) not in have]
    if logged:
        rows = [[w["file"], w["rows"], w["wall_s"], f"`{w['log']}`", w["commit"]] for w in logged]
        tables.append(Table(["run", "rows by status", "wall s", "log", "commit"], rows))
    for name in sorted({stem(n) for n in inputs.headers if is_default_run(n)}):
        rows = inputs.of(name)
        if not rows.empty:
            plan = [[*r, *sources(rows)] for r in _first_plan(rows)]
            cols = ["library", "first plans, s", "rows", "file", "commit"]
            tables.append(Table(cols, plan, title=f"`{name}`: first plan per library"))
    if not tables:
        return None
    text = (
        "`attnbench run` (the default suite) on a fresh machine and again with every kernel "
        "compiled: the wall time, setup time and prebuild the file's footer records (older "
        "runs: the wall time their last line printed, from the session log), and per library "
        "the seconds its first plans took (`details.first_plan_s`: where FlashInfer JIT-compiles "
        "and FlexAttention's Inductor compiles)."
    )
    return Section("Default run: wall time and first use", text, tables, _wall_heads(walls))


def _wall_heads(walls: list[dict[str, str]]) -> list[Headline]:
    """One headline per GPU: every fresh and every warm run's wall time (runs that kept a
    row), in file order, so a slower machine's run stands beside a faster one's."""
    by_gpu: dict[str, list[dict[str, str]]] = {}
    for w in walls:
        m = DEFAULT_RUN.match(stem(w["file"]))
        if m and re.search(r"\bok\b", w["rows"]):
            by_gpu.setdefault(m.group(1), []).append(w)
    heads = []
    for tag, runs in by_gpu.items():
        runs = sorted(runs, key=lambda w: stem(w["file"]))
        parts = []
        for kind in ("fresh", "warm"):
            times = [_seconds(w["wall_s"]) for w in runs if f"-default-{kind}" in w["file"]]
            if times:
                parts.append(f"{kind} {', '.join(times)}")
        topic = f"default suite wall time, {GPU_NAMES.get(tag, tag)}"
        sources_ = [", ".join(w["log"] for w in runs), ", ".join(w["commit"] for w in runs)]
        heads.append(Headline.of(topic, "; ".join(parts), sources_, gated=False))
    return heads


def _gpu_group(name: str, text: str) -> list[str] | None:
    """A GPU test report's row: GPU, group, pytest's summary and seconds, the call, the
    modules it compiled, the file and its commit."""
    m = GPU_TESTS.match(name)
    summary = PYTEST_SUMMARY.search(text)
    if m is None or summary is None:
        return None
    group = GROUP_LINE.search(text)
    compiled = [int(s) for s in COMPILED.findall(text)]
    modules = f"{len(compiled)} ({min(compiled)}-{max(compiled)} s each)" if compiled else "0"
    return [
        GPU_NAMES.get(m.group(1), m.group(1)),
        m.group(2),
        summary.group(1),
        f"{float(summary.group(2)):.0f}",
        f"exit {group.group(3)} after {group.group(4)} s" if group else "-",
        modules,
        f"`{name}`",
        commit_before(text, len(text)),
    ]


def _outcomes(summary: str) -> str:
    """`1 failed, 133 passed, 3 skipped` -> `1 failed, 133 passed`."""
    return ", ".join(p for p in summary.split(", ") if p.split(" ")[-1].rstrip("s") in OUTCOMES)


@section("gpu-tests")
def gpu_tests(inputs: Inputs) -> Section | None:
    """`pytest -m gpu` in the groups of `scripts/h200/gpu_tests.sh`: each group's report, per
    GPU (the report's name), and per GPU a headline naming the commit the groups ran at."""
    rows = [r for name, text in inputs.texts.items() if (r := _gpu_group(name, text))]
    if not rows:
        return None
    text = (
        "Each group's pytest summary, the call's exit status and wall time, and the FlashInfer "
        "modules it JIT-compiled, from the report the group wrote, with the GPU and commit it "
        "ran on. `attnbench findings` (and `--check`) print how many commits ago each GPU's "
        "last full pass (groups a-d) ran, and warn when it is older than the last change to "
        "`backends/`, `measure/` or `run/`."
    )
    cols = ["GPU", "group", "pytest", "pytest s", "call", "modules compiled", "file", "commit"]
    heads = []
    for gpu in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == gpu]
        figure = "; ".join(f"{r[1]}: {_outcomes(r[2])}" for r in mine)
        at = joined(r[7] for r in mine)
        cells = [", ".join(r[6] for r in mine), ", ".join(r[7] for r in mine)]
        heads.append(
            Headline.of(f"GPU tests (`pytest -m gpu`), {gpu}", f"{figure}; at {at}", cells)
        )
    return Section("GPU tests", text, [Table(cols, rows)], heads)


@section("run-walls")
def run_wall_table(inputs: Inputs) -> Section | None:
    """Every run's wall time the session logs record."""
    walls = run_walls(inputs)
    if not walls:
        return None
    rows = [[w["file"], w["rows"], w["wall_s"], f"`{w['log']}`", w["commit"]] for w in walls]
    text = "Every `attnbench run`/`tune` line `rows: ... in N s` in the session logs."
    return Section(
        "Run wall times", text, [Table(["output", "rows", "wall s", "log", "commit"], rows)]
    )


LIBRARIES = {
    "flashinfer-python": "flashinfer",
    "tokenspeed-fa3": "fa3",
    "torch": "torch",
    "nvidia-cudnn-cu13": "cuDNN",
}
"""The libraries a row depends on most, by their short names."""


def _libraries(headers: list[Any]) -> str:
    libs = [h.provenance.get("libraries") or {} for h in headers]
    parts = [
        f"{short} {joined(lib[k] for lib in libs if k in lib)}"
        for k, short in LIBRARIES.items()
        if any(k in lib for lib in libs)
    ]
    driver = joined(h.provenance.get("driver") for h in headers if h.provenance.get("driver"))
    return ", ".join([*parts, f"driver {driver or '-'}"])


@section("files")
def files(inputs: Inputs) -> Section | None:
    """Every file read: its rows or records, GPU (`gpus.file_gpus`: a document's own, else
    its name's tag's, else `CPU` where it ran without CUDA), libraries and commits."""
    from attnbench.report.findings.gpus import file_gpus

    known = file_gpus(inputs)
    rows = []
    for name, headers in inputs.headers.items():
        n = int((inputs.rows["file"] == name).sum()) if not inputs.rows.empty else 0
        gpus = joined(h.gpu for h in headers)
        commits = joined(header_commit(h) for h in headers)
        ev = file_evidence(inputs, name)
        rows.append([f"`{name}`", str(n), gpus, _libraries(headers), ev.gate, ev.tree, commits])
    for name, doc in inputs.docs.items():
        gpu = known.get(name) or "-"
        tree = evidence_of_commits([doc_commit(doc)]).tree
        rows.append([f"`{name}`", "document", str(gpu), "-", "-", tree, doc_commit(doc)])
    for name, text in inputs.texts.items():
        commit = commit_before(text, len(text))
        kind = "GPU test report" if GPU_TESTS.match(name) else "log"
        shown = commit if commit != UNKNOWN else "no commit line (gives no figure)"
        tree = evidence_of_commits([commit]).tree if commit != UNKNOWN else "-"
        rows.append([f"`{name}`", kind, known.get(name) or "-", "-", "-", tree, shown])
    if not rows:
        return None
    text = (
        "Each results file with its rows (the latest per case and variant), the GPU and "
        "libraries its headers record, the gate its `ok` rows passed (`eager + timed output`: "
        "the accuracy gate before timing and the timed-output check after it, rows carrying "
        "`timed_rel_l2_err`; `eager only`: the gate before timing alone), the tree (clean, or "
        "`dirty`: a run's commit with uncommitted edits) and the commit of every run it holds; "
        "each JSON document with the tree and commit its provenance names; each report and log "
        "with the commit its own line names. A README headline drawn from rows not at today's "
        "gate (both checks, a clean tree) says so in its text."
    )
    table = Table(["file", "rows", "GPU", "libraries", "gate", "tree", "commit"], rows)
    return Section("Files and commits", text, [table])
