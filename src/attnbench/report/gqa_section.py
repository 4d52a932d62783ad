"""The GQA-ratio sweep section: per group size (query heads per KV head: 1..16, MQA, a model's
own ratio) and decode kernel, whether it was the fastest, how far behind it was, or why it has
no timing: refused (with the reason it gave before anything was built), a wrong answer the
accuracy gate caught (with the library versions), or an error (named, with the versions of the
build that raised it). Registered on import, like `report.sections`.
"""

from __future__ import annotations

from collections.abc import Mapping

from attnbench.analysis.frame import fmt_us
from attnbench.analysis.model_studies import GqaCell, GqaSweep, gqa_sweeps, refusal_reason
from attnbench.report.blocks import Block, ReportData, Section, Table, Text, register_section

MESSAGE_CHARS = 220
STATUS_WORDS = {
    "unsupported": "refused",
    "mismatch": "WRONG",
    "error": "error",
    "oom": "out of memory",
    "timeout": "timeout",
}


def cell_text(cell: GqaCell | None) -> str:
    if cell is None:
        return "-"
    if cell.status == "fastest":
        return f"**fastest** {fmt_us(cell.latency_us)}"
    if cell.status == "ok":
        text = f"{cell.ratio:.2f}x" if cell.ratio is not None else "ok"
        if cell.fastest_at:
            text += f" (fastest at {cell.fastest_at} of {cell.lengths})"
        return text
    return STATUS_WORDS.get(cell.status, cell.status)


def fastest_text(sweep: GqaSweep, key: tuple[int, int, str]) -> str:
    """`ctx4096: sdpa:cudnn 99.4 µs; mixed(..): flashinfer:tc 160.2 µs`."""
    runs = sweep.fastest.get(key, [])
    return "; ".join(f"{length}: {backend} {fmt_us(us)}" for length, backend, us in runs) or "-"


def _groups_text(groups: list[int], every: list[int]) -> str:
    if groups == every:
        return "every group size"
    return "group " + ", ".join(map(str, groups))


def sweep_blocks(sweep: GqaSweep) -> list[Block]:
    every = sorted({hq // hkv for hq, hkv, _ in sweep.groups})
    table = Table(
        ["group (heads)", "fastest per length", *sweep.backends],
        [
            [
                GqaSweep.group_label(k),
                fastest_text(sweep, k),
                *(cell_text(sweep.cells.get((k, b))) for b in sweep.backends),
            ]
            for k in sweep.groups
        ],
        f"GQA sweep, decode {sweep.shape}, lengths {', '.join(sweep.lengths)}: per group size, "
        "the fastest kernel at each length, and per kernel **fastest** (at every length; its "
        "median latency) or its latency / the fastest kernel's (geometric mean over the "
        "lengths), else why there is no timing (refused, WRONG answer, error)",
    )
    blocks: list[Block] = [table]
    refusals: dict[tuple[str, str], list[int]] = {}
    for (key, backend), cell in sweep.cells.items():
        if cell.status == "unsupported":
            why = refusal_reason(backend, cell.reason)
            refusals.setdefault((backend, why), []).append(key[0] // key[1])
    lines = [
        f"- `{b}` refuses {_groups_text(sorted(set(g)), every)}: {why}"
        for (b, why), g in sorted(refusals.items())
    ]
    lines += [f"- `{b}` refuses every case here: {why}" for b, why in sorted(sweep.never.items())]
    if lines:
        blocks.append(
            Text("**Refused** (in `check`, before anything was built):\n\n" + "\n".join(lines))
        )
    wrong = [p for p in sweep.problems if p["status"] == "mismatch"]
    errors = [p for p in sweep.problems if p["status"] != "mismatch"]
    if wrong:
        blocks.append(
            Text(
                "**Wrong answers found** (the accuracy gate failed them):\n\n"
                + _problem_lines(wrong, every)
            )
        )
    else:
        built = f" ({sweep.libraries})" if sweep.libraries else ""
        blocks.append(
            Text(
                f"**Wrong answers found**: none; all {sweep.timed} rows that ran passed the "
                f"accuracy gate{built}."
            )
        )
    if errors:
        blocks.append(
            Text(
                "**Errors** (as measured with the build named; a later attnbench may refuse such "
                "cases up front, but these rows are what that build did):\n\n"
                + _problem_lines(errors, every)
            )
        )
    return blocks


def _problem_lines(problems: list[dict[str, object]], every: list[int]) -> str:
    out = []
    for p in problems:
        groups = p["groups"]
        assert isinstance(groups, list)
        message = str(p["message"])
        if len(message) > MESSAGE_CHARS:
            message = message[:MESSAGE_CHARS].rsplit(" ", 1)[0] + " …"
        built = f"; {p['versions']}" if p["versions"] else ""
        out.append(
            f"- `{p['backend']}` {STATUS_WORDS.get(str(p['status']), p['status'])} on "
            f"{p['cases']} cases ({_groups_text(groups, every)}{built}): {message}"
        )
    return "\n".join(out)


def header_versions(data: ReportData) -> Mapping[str, Mapping[str, str]]:
    """Per results file, the library versions its headers name (for wrong answers, errors)."""
    out: dict[str, dict[str, str]] = {}
    for path, header in data.loaded.headers:
        libs = (header.provenance or {}).get("libraries") or {}
        out.setdefault(path.name, {}).update({str(k): str(v) for k, v in dict(libs).items()})
    return out


@register_section("GQA-ratio sweep", order=44)
def gqa_section(data: ReportData) -> Section | None:
    sweeps = gqa_sweeps(data.rows, header_versions(data))
    if not sweeps:
        return None
    blocks: list[Block] = [
        Text(
            "Decode at one shape while the number of query heads per KV head (the GQA group) "
            "changes: which kernels take every group size, which refuse some and why, which "
            "give wrong answers, which error, and which is fastest."
        )
    ]
    for sweep in sweeps:
        blocks += sweep_blocks(sweep)
    return Section("GQA-ratio sweep", blocks)
