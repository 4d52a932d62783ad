"""The MLA section: DeepSeek-V3-shaped MLA (absorbed: 128 query heads on one 512 + 64 latent)
per case, each kernel's latency and its fractions of both ceilings measured in the same run,
which fraction binds, and a figure of the matmul fraction against context with an MLA roofline
(`analysis.model_studies.mla_cases`). Registered on import, like `report.sections`.
"""

from __future__ import annotations

from attnbench.analysis.frame import fmt_us, records
from attnbench.analysis.model_studies import MlaCase, MlaCell, is_mla, mla_backends, mla_cases
from attnbench.report import plots_studies
from attnbench.report.blocks import (
    Block,
    ReportData,
    Section,
    Table,
    Text,
    register_section,
)
from attnbench.report.table import short_case


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def cell_text(cell: MlaCell | None, fastest: bool, why: str = "") -> str:
    """`**499.2 µs** · 59% bw · 75% mm`; `-` (or the status) when the kernel has no timed row."""
    if cell is None:
        return why.split(":")[0] if why else "-"
    lat = fmt_us(cell.latency_us)
    lat = f"**{lat}**" if fastest else lat
    return f"{lat} · {_pct(cell.bandwidth_frac)} bw · {_pct(cell.matmul_frac)} mm"


def mla_table(cases: list[MlaCase]) -> Table:
    backends = mla_backends(cases)
    rows = []
    for c in cases:
        best = c.fastest
        cells = [
            cell_text(c.cell(b), best is not None and best.backend == b, c.not_ok.get(b, ""))
            for b in backends
        ]
        binds = "-"
        if best is not None and best.bound:
            frac = best.matmul_frac if best.bound == "compute" else best.bandwidth_frac
            binds = f"{'matmul' if best.bound == 'compute' else 'bandwidth'} ({_pct(frac)})"
        rows.append([c.label, *cells, binds])
    return Table(
        ["case", *backends, "binds (fastest)"],
        rows,
        "MLA per case: median latency (bold: fastest) · % of the copy bandwidth (bw) and of the "
        "matmul TFLOP/s (mm) measured in the same run; the larger fraction binds",
    )


def summary(cases: list[MlaCase]) -> str:
    """Who is fastest where, which ceiling binds MLA decode, and the best fraction reached."""
    total = len(cases)
    wins: dict[str, int] = {}
    for c in cases:
        if (f := c.fastest) is not None:
            wins[f.backend] = wins.get(f.backend, 0) + 1
    lines = [
        "Fastest kernel per MLA case: "
        + ", ".join(
            f"`{b}` in {n} of {total}" for b, n in sorted(wins.items(), key=lambda x: -x[1])
        )
        + "."
    ]
    dec = [c for c in cases if c.kind == "decode" and c.fastest is not None]
    compute = [c for c in dec if c.fastest is not None and c.fastest.bound == "compute"]
    if dec:
        lines.append(
            f"In {len(compute)} of {len(dec)} decode cases the fastest kernel's TFLOP/s fraction "
            "exceeds its bandwidth fraction: the case sits right of the roofline's ridge (every "
            "query head reads the one shared latent, so FLOPs per byte grow with the head count), "
            "and the **matmul ceiling** is the one MLA decode is judged against, not bandwidth."
        )
    top = max(cases, key=_matmul_frac, default=None)
    if top is not None and (f := top.fastest) is not None and f.matmul_frac is not None:
        tf = f" ({f.tflops:.0f} TFLOP/s)" if f.tflops else ""
        lines.append(
            f"Closest to the matmul ceiling: `{f.backend}` at {top.label}, "
            f"{fmt_us(f.latency_us)}, {_pct(f.matmul_frac)} of it{tf}, while reading at "
            f"{_pct(f.bandwidth_frac)} of the copy bandwidth."
        )
    return " ".join(lines)


def _matmul_frac(case: MlaCase) -> float:
    best = case.fastest
    return best.matmul_frac if best is not None and best.matmul_frac is not None else -1.0


def _missing(data: ReportData, cases: list[MlaCase]) -> list[str]:
    """Variants that never produced a timed MLA row, with their reason (one line each)."""
    rows = data.rows[is_mla(data.rows)] if not data.rows.empty else data.rows
    if rows.empty:
        return []
    timed = set(mla_backends(cases))
    out = []
    for backend, g in rows.groupby("backend"):
        if backend in timed or not str(backend).endswith("mla"):
            continue
        first = g.iloc[0]
        out.append(f"- `{backend}`: {first['status']} ({len(g)} cases): {first['reason']}")
    timed_cases = set(data.ok[is_mla(data.ok)]["case_id"]) if not data.ok.empty else set()
    untimed = rows[~rows["case_id"].isin(timed_cases) & rows["backend"].isin(timed)]
    for _, g in untimed.groupby("case_id"):
        found = {str(r["backend"]): r for r in records(g)}
        why = [
            f"`{b}` {found[b]['status']}: {found[b]['reason']}" if b in found else f"`{b}` no row"
            for b in sorted(timed)
        ]
        out.append(f"- case {short_case(g.iloc[0]['spec'])}: " + "; ".join(why))
    return out


@register_section("MLA (DeepSeek-V3 shape)", order=42)
def mla_section(data: ReportData) -> Section | None:
    cases = mla_cases(data.rows, data.ok)
    if not cases:
        return None
    blocks: list[Block] = [Text(summary(cases)), mla_table(cases)]
    drawing = plots_studies.mla_ceilings(data.ok[is_mla(data.ok)], data.ceilings, data.label)
    if drawing:
        blocks.append(
            drawing.figure(
                "MLA decode's fraction of the measured matmul ceiling against context, per kernel "
                "and batch size; and every MLA row on a roofline with the measured copy-bandwidth "
                "and matmul ceilings and their ridge",
                "mla-ceilings",
            )
        )
    missing = _missing(data, cases)
    if missing:
        blocks.append(Text("Without a timed MLA row:\n\n" + "\n".join(missing)))
    return Section("MLA (DeepSeek-V3 shape)", blocks)
