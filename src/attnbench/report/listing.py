"""Every row of a results file as a terminal listing that fits the terminal (`attnbench show`,
`run --verbose`): one heading line per case, one line per variant under it. Columns are added
in order of importance while they fit, so 80 columns show the variant, status, median,
bandwidth and compute, and a wider terminal adds the rest; numbers are never cut or wrapped (a
column is left out instead), and a failed row's reason wraps under its own line. Where the
variants of a case were planned in different modes (FlashInfer's CUDA-graph plan beside eager
ones), each variant says which (`graph plan`, `eager plan`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rich.text import Text

from attnbench.report.table import (
    INVALID,
    STATUS_STYLE,
    cut_text,
    invalid,
    invalid_reason,
    pct,
    short_case,
)
from attnbench.report.units import fmt_bandwidth, fmt_compute
from attnbench.results import ResultRow, mixed_plan_modes, plan_mode_label

INDENT = "  "
MIN_WIDTH = 40
REASON_CHARS = 400
"""A reason is cut after this many characters (the file keeps all of it)."""


@dataclass(frozen=True)
class Column:
    header: str
    cell: Callable[[ResultRow], str]
    right: bool = True
    style: str = ""


def _latency(r: ResultRow) -> str:
    return "-" if r.latency_us is None else f"{r.latency_us:.1f}"


def _ci(r: ResultRow) -> str:
    rel = r.latency.rel_ci if r.latency else None
    return "-" if rel is None else f"±{pct(rel)}"


def _err(r: ResultRow) -> str:
    err = r.accuracy.rel_l2_err if r.accuracy else None
    return "-" if err is None else f"{err:.1e}"


def _plan(r: ResultRow) -> str:
    return "-" if r.plan_us is None else f"{r.plan_us:.1f}"


FIXED = (
    Column("variant", lambda r: r.backend, right=False),
    Column("status", lambda r: INVALID if invalid(r) else r.status, right=False),
    Column("median µs", _latency),
)
"""Always shown."""
OPTIONAL = (
    Column("bandwidth", lambda r: fmt_bandwidth(r.bandwidth_gbps)),
    Column("%copy", lambda r: pct(r.bandwidth_frac_measured)),
    Column("compute", lambda r: fmt_compute(r.tflops)),
    Column("%mm", lambda r: pct(r.tflops_frac_measured)),
    Column("±CI", _ci, style="dim"),
    Column("ran", lambda r: r.resolved or "-", right=False, style="dim"),
    Column("rel err", _err, style="dim"),
    Column("plan µs", _plan, style="dim"),
)
"""Added in this order while the line still fits."""


def listing_lines(
    rows: Iterable[ResultRow], width: int = 80, include_unsupported: bool = False
) -> list[Text]:
    """The listing as lines of at most `width` (at least MIN_WIDTH) cells. Rows `unsupported`
    (a variant that does not apply to the case) are left out unless `include_unsupported`."""
    width = max(width, MIN_WIDTH)
    shown = [r for r in rows if include_unsupported or r.status != "unsupported"]
    mixed = mixed_plan_modes(shown)  # a case whose variants were planned in different modes
    shown = [_plan_mode_named(r) if r.case_id in mixed else r for r in shown]
    if not shown:
        return []
    columns, widths = _fit(shown, width)
    lines = [_header(columns, widths)]
    by_case: dict[str, list[ResultRow]] = {}
    for r in shown:
        by_case.setdefault(r.case_id, []).append(r)
    for case_rows in by_case.values():
        head = short_case(case_rows[0].spec)
        for part in textwrap.wrap(head, width, subsequent_indent="  ", break_on_hyphens=False):
            lines.append(Text(part, style="bold"))
        for r in case_rows:
            lines += _row_lines(r, columns, widths, width)
    return lines


def _plan_mode_named(r: ResultRow) -> ResultRow:
    label = plan_mode_label(r)
    return r.model_copy(update={"backend": f"{r.backend} ({label})"}) if label else r


def _fit(rows: list[ResultRow], width: int) -> tuple[list[Column], list[int]]:
    """The columns that fit in `width` and each one's width (its widest cell or header)."""

    def size(col: Column) -> int:
        return max(len(col.header), *(len(col.cell(r)) for r in rows))

    columns = list(FIXED)
    widths = [size(c) for c in columns]
    variant_room = width - len(INDENT) - sum(widths[1:]) - (len(widths) - 1)
    widths[0] = max(len(FIXED[0].header), min(widths[0], variant_room))
    for col in OPTIONAL:
        w = size(col)
        if len(INDENT) + sum(widths) + len(widths) + w <= width:
            columns.append(col)
            widths.append(w)
    return columns, widths


def _header(columns: list[Column], widths: list[int]) -> Text:
    cells = [
        c.header.rjust(w) if c.right else c.header.ljust(w)
        for c, w in zip(columns, widths, strict=True)
    ]
    return Text(INDENT + " ".join(cells).rstrip(), style="bold dim")


def _row_lines(r: ResultRow, columns: list[Column], widths: list[int], width: int) -> list[Text]:
    """A row that passed: one line of cells (a variant name wider than its column continues
    on the next line). Any other row: its variant, status and reason, wrapped."""
    name_w = widths[0]
    status = INVALID if invalid(r) else r.status
    style = STATUS_STYLE.get(status, "")
    if status != "ok":
        why = invalid_reason(r) if status == INVALID else r.reason
        reason = cut_text(why, REASON_CHARS) or "-"
        head = f"{r.backend.ljust(name_w)} {status.ljust(widths[1])} "
        parts = textwrap.wrap(
            head + reason,
            width,
            initial_indent=INDENT,
            subsequent_indent=INDENT * 2,
            break_on_hyphens=False,
        )
        out = [Text(parts[0][: len(INDENT) + len(head)])]
        out[0].stylize(style, len(INDENT) + name_w + 1, len(INDENT) + len(head))
        out[0].append(parts[0][len(INDENT) + len(head) :], style="dim")
        out += [Text(p, style="dim") for p in parts[1:]]
        return out
    first, rest = r.backend[:name_w], r.backend[name_w:]
    line = Text(INDENT)
    line.append(first.ljust(name_w))
    for col, w in zip(columns[1:], widths[1:], strict=True):
        line.append(" ")
        cell = col.cell(r)
        text = cell.rjust(w) if col.right else cell.ljust(w)
        line.append(text, style=style if col.header == "status" else col.style)
    line.rstrip()
    out = [line]
    while rest:
        out.append(Text(INDENT + rest[:name_w]))
        rest = rest[name_w:]
    return out
