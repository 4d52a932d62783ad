"""The answer at the end of a run (after hyperfine's "Summary"): per case the fastest variant
that passed the accuracy gate, its latency and fraction of the measured ceiling, and how much
faster it is than the runner-up and than FlashInfer's default path, called faster only when
`analysis.compare.estimate_ratio` finds the difference significant and beyond the noise.
Failures that matter are always listed; variants that did not apply are only counted.

`summarize_rows` is pure (rows in, a `RunSummary` out); `render_summary` lays it out as plain
text lines no wider than a given width (80 by default).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from attnbench.analysis.compare import FAILED, Timing, estimate_ratio
from attnbench.backends.variant import Variant
from attnbench.report.table import (
    INVALID,
    cut_text,
    invalid,
    invalid_reason,
    short_case,
    valid_latency,
)
from attnbench.results import ResultRow, mixed_plan_modes, plan_mode_label

FLASHINFER_DEFAULT = "flashinfer:auto"
"""FlashInfer's default path: the wrappers with the library's own `backend="auto"` choice."""
DEFAULT_FALLBACKS = {"decode": ("flashinfer:fa2",)}
"""Without a `flashinfer:auto` row, the variant `auto` picks on SM90 (`backends/flashinfer_rules`):
the CUDA-core decode kernel for single-token decode, the fa3 paged prefill kernel otherwise
(fa2 where fa3 did not run)."""
OTHER_FALLBACKS = ("flashinfer:fa3", "flashinfer:fa2")
ORACLE = "reference"
"""The fp32/fp64 oracle every kernel is checked against: timed on the CPU as a baseline, but
not a serving kernel, so never "the fastest variant"."""
REASON_CHARS = 240
"""A failure's reason is cut after this many characters (the full text is in the file)."""


@dataclass(frozen=True)
class Versus:
    """The winner against one other variant of the same case."""

    variant: str
    role: str
    """`runner-up` or `FlashInfer's default`."""
    ratio: float
    """median(other) / median(winner): above 1, the winner is faster."""
    significant: bool
    """Significant and beyond the noise of both rows (`estimate_ratio(...).verdict`)."""

    def describe(self) -> str:
        if self.significant:
            return f"{self.ratio:.2f}x faster than {self.role} {self.variant}"
        return f"tie with {self.role} {self.variant} ({self.ratio:.2f}x)"


@dataclass(frozen=True)
class CaseSummary:
    case_id: str
    label: str
    winner: str
    """The fastest variant that passed the gate (`backend`, with what ran when it differs)."""
    latency_us: float
    ceiling_frac: float | None
    """The larger of the bandwidth and matmul fractions of the ceilings measured in the run."""
    ceiling: str
    """Which ceiling: `copy` (bandwidth) or `matmul` (FLOP/s)."""
    passed: int
    versus: tuple[Versus, ...] = ()
    default_note: str = ""
    """What to say about FlashInfer's default path when there is no ratio to give."""


@dataclass(frozen=True)
class Failure:
    label: str
    backend: str
    status: str
    reason: str


@dataclass(frozen=True)
class NoWinner:
    """A case without a serving kernel that passed: what happened to each variant."""

    label: str
    oracle_us: float | None
    """The reference's median when the oracle alone was measured, else None."""
    failed: dict[str, int]
    """Status -> variants that ran and failed (mismatch, error, oom, timeout, invalid)."""
    refused: tuple[tuple[str, tuple[str, ...]], ...]
    """(reason, variants) of the variants that did not apply, each reason once (the memory
    guard's figures, a dtype, MLA on a GQA kernel...)."""


@dataclass
class RunSummary:
    cases: list[CaseSummary] = field(default_factory=list)
    no_winner: list[NoWinner] = field(default_factory=list)
    """Cases where no serving kernel passed the gate, each with why."""
    failures: list[Failure] = field(default_factory=list)
    not_applicable: int = 0
    """(case, variant) pairs that did not apply (status `unsupported`)."""


def summarize_rows(rows: Iterable[ResultRow]) -> RunSummary:
    """The summary of a run's rows. A later row for the same (case, variant) replaces an
    earlier one (`--resume`); cases keep the order they first appear in."""
    latest: dict[tuple[str, str], ResultRow] = {}
    for r in rows:
        latest.pop(r.key, None)
        latest[r.key] = r
    mixed = mixed_plan_modes(latest.values())
    latest = {k: _plan_mode_named(r) if r.case_id in mixed else r for k, r in latest.items()}
    by_case: dict[str, list[ResultRow]] = {}
    for r in latest.values():
        by_case.setdefault(r.case_id, []).append(r)
    out = RunSummary()
    for case_id, case_rows in by_case.items():
        label = short_case(case_rows[0].spec)
        out.not_applicable += sum(r.status == "unsupported" for r in case_rows)
        out.failures += [
            Failure(label, r.backend, r.status, r.reason) for r in case_rows if r.status in FAILED
        ]
        out.failures += [
            Failure(label, r.backend, INVALID, invalid_reason(r)) for r in case_rows if invalid(r)
        ]
        ok = sorted(
            (r for r in case_rows if r.status == "ok" and valid_latency(r.latency_us)),
            key=lambda r: float(r.latency_us or 0.0),
        )
        kernels = [r for r in ok if r.backend != ORACLE and not _baseline(r.backend)]
        baselines = [r for r in ok if _baseline(r.backend)]
        by_backend = {r.backend: r for r in case_rows}
        if kernels:
            case = _case(case_id, label, kernels, by_backend)
            out.cases.append(_with_baseline(case, kernels[0], baselines))
        elif baselines:  # a run of baselines only: the fastest of them (its name says -contiguous)
            out.cases.append(_case(case_id, label, baselines, by_backend))
        else:
            out.no_winner.append(_no_winner(label, case_rows, ok))
    return out


def _baseline(name: str) -> bool:
    """A `-contiguous` baseline: it prices paging, but no serving engine runs it, so it is
    never "the fastest variant" while a variant on the paged cache passed."""
    variant = Variant.maybe(name)
    return variant is not None and variant.baseline


def _with_baseline(case: CaseSummary, best: ResultRow, baselines: list[ResultRow]) -> CaseSummary:
    """The case with a note when a baseline ran faster than the winner (on a paged winner,
    what paging costs)."""
    if not baselines or float(baselines[0].latency_us or 0.0) >= case.latency_us:
        return case
    base = baselines[0]
    est = estimate_ratio(timing(base), timing(best))  # winner / baseline
    took = f"{est.ratio:.2f}x its time" if est.verdict == "slower" else "a tie"
    note = (
        f"baseline {base.backend} (a contiguous KV copy no engine runs) "
        f"{fmt_latency(float(base.latency_us or 0.0))}: the winner took {took}"
    )
    notes = f"{case.default_note}; {note}" if case.default_note else note
    return replace(case, default_note=notes)


def _no_winner(label: str, rows: list[ResultRow], ok: list[ResultRow]) -> NoWinner:
    failed: dict[str, int] = {}
    for r in rows:
        status = INVALID if invalid(r) else r.status
        if status in FAILED or status == INVALID:
            failed[status] = failed.get(status, 0) + 1
    refused: dict[str, list[str]] = {}
    for r in rows:
        if r.status == "unsupported":
            refused.setdefault(cut_text(r.reason, REASON_CHARS) or "no reason given", []).append(
                r.backend
            )
    return NoWinner(
        label=label,
        oracle_us=float(ok[0].latency_us or 0.0) if ok else None,
        failed=failed,
        refused=tuple((why, tuple(names)) for why, names in refused.items()),
    )


def _case(
    case_id: str, label: str, ok: list[ResultRow], by_backend: Mapping[str, ResultRow]
) -> CaseSummary:
    best = ok[0]
    frac, ceiling = ceiling_fraction(best)
    versus: list[Versus] = []
    if len(ok) > 1:
        versus.append(_versus(best, ok[1], "runner-up"))
    default, note = default_path(by_backend, best.spec.kind)
    if default is not None and default.backend == best.backend:
        note = "it is FlashInfer's default path"
    elif default is not None and (len(ok) < 2 or default.backend != ok[1].backend):
        versus.append(_versus(best, default, "FlashInfer's default"))
    return CaseSummary(
        case_id=case_id,
        label=label,
        winner=variant_label(best),
        latency_us=float(best.latency_us or 0.0),
        ceiling_frac=frac,
        ceiling=ceiling,
        passed=len(ok),
        versus=tuple(versus),
        default_note=note,
    )


def default_path(by_backend: Mapping[str, ResultRow], kind: str) -> tuple[ResultRow | None, str]:
    """FlashInfer's default path for a case: the `flashinfer:auto` row when it passed, else
    the variant `auto` picks (see DEFAULT_FALLBACKS). Returns (row or None, a note when the
    default path did not give a usable row)."""
    auto = by_backend.get(FLASHINFER_DEFAULT)
    if auto is not None and auto.status == "ok" and valid_latency(auto.latency_us):
        return auto, ""
    for name in DEFAULT_FALLBACKS.get(kind, OTHER_FALLBACKS):
        row = by_backend.get(name)
        if row is not None and row.status == "ok" and valid_latency(row.latency_us):
            return row, ""
    if auto is not None and auto.status in FAILED:
        return None, f"FlashInfer's default path failed ({auto.status})"
    return None, ""


def _versus(best: ResultRow, other: ResultRow, role: str) -> Versus:
    est = estimate_ratio(timing(best), timing(other))
    return Versus(variant_label(other), role, est.ratio, est.verdict == "slower")


def timing(row: ResultRow) -> Timing:
    """A row's median, CI of the median and samples, as `analysis.compare` reads them."""
    lat = row.latency
    record: dict[str, Any] = {
        "latency_us": row.latency_us,
        "ci_low_us": lat.ci_low_us if lat else None,
        "ci_high_us": lat.ci_high_us if lat else None,
        "samples_us": row.samples_us,
    }
    return Timing.of(record)


def ceiling_fraction(row: ResultRow) -> tuple[float | None, str]:
    """The fraction of the measured ceiling the row reached: bandwidth over the streaming-read
    ceiling (attention reads far more than it writes; the copy ceiling where a run has no read
    figure) or FLOP/s over the matmul ceiling, whichever is larger (the one that bounds it)."""
    bw, bw_name = row.bandwidth_frac_read, "read"
    if not _finite(bw):
        bw, bw_name = row.bandwidth_frac_measured, "copy"
    mm, mm_name = row.tflops_frac_measured, "matmul"
    if row.tflops_ceiling == "fp8_e4m3":  # the kernel multiplies in fp8: the fp8 GEMM's ceiling
        mm_name = "fp8 matmul"
    candidates = [(v, name) for v, name in ((bw, bw_name), (mm, mm_name)) if _finite(v)]
    if not candidates:
        return None, ""
    value, name = max(candidates, key=lambda c: float(c[0] or 0.0))
    return float(value or 0.0), name


def _plan_mode_named(r: ResultRow) -> ResultRow:
    """The row with its plan mode after what ran (`flashinfer:fa2 (fa2, graph plan)`): for
    cases whose variants were planned in different modes."""
    label = plan_mode_label(r)
    ran = r.resolved or _kernel(r.backend) or r.backend
    return r.model_copy(update={"resolved": f"{ran}, {label}"}) if label else r


def _kernel(name: str) -> str:
    """The kernel path `name` names (`fa2` of `flashinfer:fa2`); empty where it names none."""
    variant = Variant.maybe(name)
    return variant.kernel if variant is not None else ""


def variant_label(row: ResultRow) -> str:
    """`flashinfer:auto (fa2)`: the variant, and what ran when the name does not say it."""
    short = _kernel(row.backend)
    if row.resolved and row.resolved not in (short, row.backend):
        return f"{row.backend} ({row.resolved})"
    return row.backend


def fmt_latency(us: float) -> str:
    """123.4 µs, 6.28 ms, 1.25 s: never cut, three or four significant figures."""
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e4:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


def render_summary(
    summary: RunSummary,
    width: int = 80,
    listing_hint: str = "`attnbench show FILE --all` lists them with the reasons",
) -> list[str]:
    """Plain-text lines, none wider than `width` (at least 40). `listing_hint` ends the line
    that counts the variants that did not apply (where to see them)."""
    width = max(width, 40)
    lines: list[str] = []
    n_cases = len(summary.cases) + len(summary.no_winner)
    lines += _wrap(
        f"Summary of {n_cases} cases: the fastest variant that passed the accuracy gate, its "
        "median and % of the ceiling measured in this run (streaming-read bandwidth, or copy in "
        "runs without one, or matmul: whichever bounds the case), and how much faster it is "
        "than the runner-up and FlashInfer's default path (tie: not significant, or within "
        "the noise)",
        width,
    )
    for c in summary.cases:
        lines += _wrap(c.label, width)
        parts = [c.winner, fmt_latency(c.latency_us)]
        if c.ceiling_frac is not None:
            parts.append(f"{100 * c.ceiling_frac:.0f}% of {c.ceiling} ceiling")
        if c.passed == 1:
            parts.append("(the only variant that passed)")
        lines += _join(parts, width, "  ", "  ")
        notes = [v.describe() for v in c.versus] + ([c.default_note] if c.default_note else [])
        if notes:
            lines += _join(notes, width, "    ", "; ")
    for case in summary.no_winner:
        lines += _no_winner_lines(case, width)
    if summary.not_applicable:
        lines += _wrap(
            f"{summary.not_applicable} (case, variant) pairs did not apply here (unsupported)"
            + (f": {listing_hint}" if listing_hint else ""),
            width,
        )
    if summary.failures:
        lines += _wrap(f"Failed ({len(summary.failures)}):", width)
        for f in summary.failures:
            reason = cut_text(f.reason, REASON_CHARS)
            text = f"{f.status} {f.backend} on {f.label}" + (f": {reason}" if reason else "")
            lines += _wrap(text, width, "  ", "    ")
    return lines


def _no_winner_lines(case: NoWinner, width: int) -> list[str]:
    """`LABEL: nothing ran: every variant was refused`, or what ran and failed, then each
    refusal's reason once with the variants it applies to."""
    if case.oracle_us is not None:
        parts = [f"no serving kernel ran here (only the reference, {fmt_latency(case.oracle_us)})"]
    elif case.failed:
        parts = ["no variant passed"]
    else:
        parts = ["nothing ran: every variant was refused"]
    if case.failed:
        counts = ", ".join(f"{status} {n}" for status, n in case.failed.items())
        parts.append(f"failed: {counts} (listed under Failed)")
    if (case.refused and len(parts) > 1) or (case.refused and case.oracle_us is not None):
        parts.append("refused")
    head = "; ".join(parts)
    lines = _wrap(f"{case.label}: {head}" + (":" if case.refused else ""), width)
    for why, names in case.refused:
        lines += _wrap(f"{', '.join(names)}: {why}", width, "  ", "    ")
    return lines


def _wrap(text: str, width: int, first: str = "", rest: str = "  ") -> list[str]:
    return textwrap.wrap(
        text,
        width,
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=False,
    ) or [first.rstrip()]


def _join(parts: Sequence[str], width: int, indent: str, sep: str) -> list[str]:
    """Parts joined by `sep`, a new line (same indent) where the next part would not fit; a
    part longer than a line wraps at spaces."""
    lines: list[str] = []
    line = ""
    for i, part in enumerate(parts):
        candidate = f"{line}{sep}{part}" if line else part
        tail = len(sep.rstrip()) if i < len(parts) - 1 else 0  # a line ends with the separator
        if len(indent) + len(candidate) + tail <= width:
            line = candidate
            continue
        if line:
            lines.append(indent + line + sep.rstrip())
        wrapped = _wrap(part, width - tail, indent, indent + "  ")
        lines += wrapped[:-1]
        line = wrapped[-1][len(indent) :]
    if line:
        lines.append(indent + line)
    return lines


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
