"""Terminal tables of result rows (rich)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from attnbench.report.units import fmt_bandwidth, fmt_compute
from attnbench.results import ResultRow
from attnbench.workload.spec import WorkloadSpec

DEFAULT_PAGE_SIZE = WorkloadSpec.model_fields["page_size"].default
DEFAULT_KV_LAYOUT = WorkloadSpec.model_fields["kv_layout"].default

STATUS_STYLE = {
    "ok": "green",
    "unsupported": "dim",
    "mismatch": "bold red",
    "error": "red",
    "oom": "magenta",
    "timeout": "magenta",
    "invalid": "bold red",
}


INVALID = "invalid"
"""How a view shows an `ok` row whose latency is no measurement (the file keeps `ok`)."""


def valid_latency(value: float | None) -> bool:
    """A latency that is a measurement: a positive finite number of microseconds."""
    return value is not None and math.isfinite(value) and value > 0


def invalid(row: ResultRow) -> bool:
    """An `ok` row whose latency is missing, NaN, infinite, zero or negative: invalid data."""
    return row.status == "ok" and not valid_latency(row.latency_us)


def invalid_reason(row: ResultRow) -> str:
    return (
        f"an ok row whose latency_us={row.latency_us} is not a positive finite number: "
        "invalid data, not a measurement"
    )


def fmt(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def cut_text(text: str, limit: int) -> str:
    """`text` with its whitespace collapsed, cut at the last space before `limit` characters
    and ended with ` …` when longer (a word is never cut in the middle)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    head = flat[: limit - 2]
    space = head.rfind(" ")
    return (head[:space] if space > 0 else head) + " …"


DTYPE_SHORT = {"float16": "fp16", "bfloat16": "bf16", "fp8_e4m3": "e4m3", "fp8_e5m2": "e5m2"}


def short_case(spec: WorkloadSpec) -> str:
    """`decode mixed(256..65536) bs32 bf16/e4m3`: what differs between cases of one suite."""
    lens = spec.lengths or f"ctx{max(spec.kv_lens)}"
    parts = [spec.kind, lens, f"bs{spec.batch_size}"]
    if spec.model:
        parts.insert(1, spec.model + (f"/tp{spec.tp}" if spec.tp > 1 else ""))
    if spec.kind == "append":
        parts.append(f"q{max(spec.qo_lens)}")
    if spec.tree is not None:
        parts.append(spec.tree.name)
    if spec.shared_prefix_len:
        parts.append(f"prefix{spec.shared_prefix_len}")
    if spec.layer_type:  # a model's sliding or full layers (gpt-oss, Gemma-3)
        parts.append(spec.layer_type.removesuffix("_attention"))
    if spec.window_left >= 0:
        parts.append(f"win{spec.window_left}")
    if spec.sinks:
        parts.append("sinks")
    kv = DTYPE_SHORT.get(spec.kv_dtype, spec.kv_dtype)
    parts.append(f"{DTYPE_SHORT.get(spec.dtype, spec.dtype)}/{kv}")
    if spec.page_size != DEFAULT_PAGE_SIZE:
        parts.append(f"p{spec.page_size}")
    if spec.kv_layout != DEFAULT_KV_LAYOUT:
        parts.append(spec.kv_layout)
    if spec.label:
        parts.append(spec.label)
    return " ".join(parts)


def results_table(rows: Iterable[ResultRow], title: str = "") -> Table:
    """Case, variant, status, median latency, bandwidth and compute (units scaled to the value:
    GB/s or MB/s, TFLOP/s or GFLOP/s) with their fractions of the measured ceilings, and the
    accuracy gate's error."""
    table = Table(title=title, show_lines=False, header_style="bold")
    table.add_column("case", overflow="fold")
    table.add_column("backend", overflow="fold")
    table.add_column("ran", overflow="fold", style="dim")
    table.add_column("status")
    table.add_column("latency µs", justify="right")
    table.add_column("±CI", justify="right", style="dim")
    table.add_column("bandwidth", justify="right")
    table.add_column("%copy", justify="right")
    table.add_column("compute", justify="right")
    table.add_column("%mm", justify="right")
    table.add_column("rel err", justify="right", style="dim")
    for r in rows:
        style = STATUS_STYLE.get(r.status, "")
        rel_ci = r.latency.rel_ci if r.latency else None
        err = r.accuracy.rel_l2_err if r.accuracy else None
        status = f"[{style}]{r.status}[/]" if style else r.status
        if r.status != "ok" and r.reason:
            status += f" [dim]{escape(r.reason[:70])}[/]"
        table.add_row(
            escape(short_case(r.spec)),
            escape(r.backend),
            escape(r.resolved),
            status,
            fmt(r.latency_us, ".1f"),
            pct(rel_ci) if rel_ci is not None else "-",
            fmt_bandwidth(r.bandwidth_gbps),
            pct(r.bandwidth_frac_measured),
            fmt_compute(r.tflops),
            pct(r.tflops_frac_measured),
            fmt(err, ".1e"),
        )
    return table


def fit_columns(table: Table, width: int, console: Console, keys: int = 1) -> list[Table]:
    """`table` as one or more tables no wider than `width`, for a narrow terminal: each holds
    the first `keys` columns (what names a row) and, in their order, the other columns that
    fit beside them at their natural width (each column goes to the first part it fits in); a
    column that fits only by wrapping gets a part of its own. Only the first part has the
    title. One table when it fits as it is."""
    natural = console.options.update(width=10_000)

    def fits(columns: list[int]) -> bool:
        part = _part(table, columns, title=False)
        return Measurement.get(console, natural, part).maximum <= width

    if fits(list(range(len(table.columns)))):
        return [table]
    key_cols = list(range(min(keys, len(table.columns))))
    parts: list[list[int]] = []
    for i in range(len(key_cols), len(table.columns)):
        home = next((p for p in parts if fits(sorted([*p, i]))), None)
        if home is None:
            parts.append([*key_cols, i])
        else:
            home.append(i)
            home.sort()
    return [_part(table, cols, title=n == 0) for n, cols in enumerate(parts or [key_cols])]


def _part(table: Table, columns: list[int], title: bool) -> Table:
    """A table of some of `table`'s columns, with its look and rows (and title)."""
    part = Table(
        title=table.title if title else None,
        box=table.box,
        show_header=table.show_header,
        show_edge=table.show_edge,
        show_lines=table.show_lines,
        pad_edge=table.pad_edge,
        header_style=table.header_style,
        title_style=table.title_style,
        expand=False,
    )
    part.padding = table.padding
    cells = []
    for i in columns:
        col = table.columns[i]
        part.add_column(
            col.header,
            justify=col.justify,
            style=col.style,
            header_style=col.header_style,
            no_wrap=col.no_wrap,
            overflow=col.overflow,
            min_width=col.min_width,
            max_width=col.max_width,
        )
        cells.append(list(col.cells))
    for row in zip(*cells, strict=True):
        part.add_row(*row)
    return part


def wrap_words(text: str, width: int) -> str:
    """`text` on lines of at most `width` characters, broken only between words (a longer
    word keeps a line of its own, whole), so a table cell's natural width is at most
    max(`width`, its longest word) and no word or number is split."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "\n".join(lines)
