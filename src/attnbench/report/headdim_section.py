"""The head_dim section (issue 36): per head_dim and kernel, whether it was the fastest, how far
behind it was, or why it has no timing: refused (with the reason it gave before anything was
built), a wrong answer the gate caught or an error (each named with the library versions);
FlashInfer's known head_dim bugs with the rows that show them; and Gemma-2's soft-capped cases,
who ran them and who refused (`analysis.headdim_study`). Registered on import, like
`report.sections`.
"""

from __future__ import annotations

from attnbench.analysis.frame import fmt_us
from attnbench.analysis.headdim_study import (
    BugStatus,
    CappedCase,
    HeadDimZoo,
    ZooCell,
    headdim_zoos,
    known_bug_status,
    soft_capped_cases,
)
from attnbench.report.blocks import Block, ReportData, Section, Table, Text, register_section
from attnbench.report.gqa_section import MESSAGE_CHARS, STATUS_WORDS, header_versions
from attnbench.report.table import short_case


def cell_text(cell: ZooCell | None) -> str:
    if cell is None:
        return "-"
    if cell.status in ("fastest", "ok"):
        text = "**fastest**"
        if cell.status == "ok":
            text = f"{cell.ratio:.2f}x" if cell.ratio is not None else "ok"
            if cell.fastest_at:
                text += f" (fastest at {cell.fastest_at} of {cell.points})"
        if cell.worst_other:
            text += f"; {STATUS_WORDS.get(cell.worst_other, cell.worst_other)}"
            text += f" at {cell.other_points}"
        return text
    return STATUS_WORDS.get(cell.status, cell.status)


def _dims(dims: list[int]) -> str:
    return ", ".join(f"d{d}" for d in dims)


def zoo_table(zoo: HeadDimZoo) -> Table:
    rows = []
    for dim in zoo.head_dims:
        wins = zoo.fastest.get(dim, [])
        fastest = ", ".join(f"{b} ({n} of {len(zoo.points)})" for b, n in wins) or "-"
        rows.append(
            [f"d{dim}", fastest, *(cell_text(zoo.cells.get((dim, b))) for b in zoo.backends)]
        )
    return Table(
        ["head_dim", "fastest (points won)", *zoo.backends],
        rows,
        f"head_dim zoo, {zoo.kind} ({zoo.shape}) at {len(zoo.points)} points "
        f"({'; '.join(zoo.points)}): per head_dim the kernels fastest at some point, and per "
        "kernel **fastest** (at every point) or its latency / the fastest kernel's (geometric "
        "mean over its points), else why there is no timing (refused, WRONG answer, error)",
    )


def _problem_line(p: dict[str, object]) -> str:
    message = str(p["message"])
    if len(message) > MESSAGE_CHARS:
        message = message[:MESSAGE_CHARS].rsplit(" ", 1)[0] + " …"
    dims = p["head_dims"]
    assert isinstance(dims, list)
    built = f"; {p['versions']}" if p["versions"] else ""
    word = STATUS_WORDS.get(str(p["status"]), str(p["status"]))
    return f"- `{p['backend']}` {word} on {p['cases']} cases ({_dims(dims)}{built}): {message}"


def zoo_blocks(zoo: HeadDimZoo) -> list[Block]:
    blocks: list[Block] = [zoo_table(zoo)]
    refusals = [f"- `{b}` refuses {_dims(dims)}: {why}" for (b, why), dims in zoo.refusals.items()]
    if refusals:
        blocks.append(
            Text("**Refused** (in `check`, before anything was built):\n\n" + "\n".join(refusals))
        )
    wrong = [p for p in zoo.problems if p["status"] == "mismatch"]
    errors = [p for p in zoo.problems if p["status"] != "mismatch"]
    if wrong:
        lines = "\n".join(_problem_line(p) for p in wrong)
        blocks.append(Text("**Wrong answers found** (the accuracy gate failed them):\n\n" + lines))
    else:
        built = f" ({zoo.libraries})" if zoo.libraries else ""
        blocks.append(
            Text(
                f"**Wrong answers found**: none; all {zoo.timed} rows that ran passed the "
                f"accuracy gate{built}."
            )
        )
    if errors:
        lines = "\n".join(_problem_line(p) for p in errors)
        blocks.append(Text("**Errors and crashes** (with the build that raised them):\n\n" + lines))
    return blocks


def bug_line(s: BugStatus) -> str:
    """`- key (flashinfer-python 0.7.4): what. <refused citing / shown by / not measured>`."""
    bug = s.bug
    head = f"- `{bug.key}` ({bug.distribution} {bug.seen_on}): {bug.what}."
    if s.state == "refused" and bug.evidence is not None:
        return f"{head} Refused in `check` on {bug.seen_on}, citing {bug.evidence.cite()}."
    if s.shown_by:
        shown = "; ".join(e.cite() for e in s.shown_by)
        return (
            f"{head} Not refused yet: shown by {shown}; cite it as the bug's `evidence` "
            "(backends/flashinfer_bugs.py) to refuse every such case."
        )
    return f"{head} Not measured here yet: the witness case ({bug.witness_text}) runs."


def capped_table(cases: list[CappedCase]) -> Table:
    rows = []
    for c in cases:
        fastest = f"{c.timed[0][0]} {fmt_us(c.timed[0][1])}" if c.timed else "-"
        best = c.timed[0][1] if c.timed else None
        others = ", ".join(f"{b} {t / best:.2f}x" for b, t in c.timed[1:] if best) or "-"
        failed = ", ".join(f"{b} {STATUS_WORDS.get(s, s)}" for b, s in c.failed) or "-"
        rows.append([short_case(c.spec), fastest, others, ", ".join(c.refused) or "-", failed])
    return Table(
        ["case (soft-cap 50)", "fastest", "also passed", "refused", "wrong / error"],
        rows,
        "Gemma-2's soft-capped cases (cap * tanh(logits / cap)): the fastest kernel that passed "
        "the gate, the others' latency / the fastest's, the variants that refused (no soft-cap: "
        "their reasons are in the rows), and wrong answers or errors",
    )


@register_section("head_dim zoo", order=45)
def headdim_section(data: ReportData) -> Section | None:
    versions = header_versions(data)
    zoos = headdim_zoos(data.rows, versions)
    capped = soft_capped_cases(data.rows)
    if not zoos and not capped:
        return None
    blocks: list[Block] = [
        Text(
            "Decode and prefill at the head dims models ship (64: gpt-oss; 80: Phi-2; 96: "
            "Phi-3-mini; 128; 192: decompressed MLA; 256: Gemma-2-9b): which kernels take "
            "each, which refuse and why, which give wrong answers or crash, and which is "
            "fastest."
        )
    ]
    for zoo in zoos:
        blocks += zoo_blocks(zoo)
    bugs = known_bug_status(data.rows, versions)
    lines = "\n".join(bug_line(s) for s in bugs)
    blocks.append(Text("**Known library bugs** (refused in `check`):\n\n" + lines))
    if capped:
        blocks.append(capped_table(capped))
    return Section("head_dim zoo", blocks)
