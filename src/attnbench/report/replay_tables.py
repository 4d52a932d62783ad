"""`attnbench replay`'s terminal tables, rendered from the typed replay document
(`replay.document.ReplayDocument`): runs, crossings, padded vs ragged, cost models, live check,
the rankings (ties where the difference is inside the error), and the notes about steps beyond
the fitted range and how far each candidate is validated."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table

    from attnbench.replay.document import ReplayDocument
    from attnbench.replay.records import LiveValidation

RUN_COLUMNS = (
    "candidate", "rate×", "req/s", "ITL p50", "ITL p90", "ITL p99", "TTFT p50", "TTFT p99",
    "decode step", "tok/s", "attn %", "beyond fit",
)  # fmt: skip
MODEL_COLUMNS = (
    "variant", "decode rows", "GB/s", "rel RMSE", "max", "prefill rows", "TFLOP/s", "rel RMSE",
    "notes",
)  # fmt: skip
FAR_NOTE_FRAC = 0.01
"""A run with more than this share of steps far beyond the fitted rows gets a note."""


def escape(text: str) -> str:
    """Names like `x [padded]` are not rich markup."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def _f(v: float, digits: int = 1) -> str:
    return f"{v:.{digits}f}" if math.isfinite(v) else "-"


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%" if math.isfinite(v) else "-"


NAME_WIDTH = 26
"""The candidate or variant column wraps at spaces past this width (a hybrid's name is 50
characters), so the other columns fit beside it at 80 columns (`cli.common.print_fitted`)."""
NAME_COLUMNS = ("candidate", "variant", "backend", "variant / part", "option")


def _table(title: str, columns: tuple[str, ...], left: tuple[str, ...] = ()) -> Table:
    from rich.table import Table

    t = Table(title=title)
    for col in columns:
        t.add_column(
            col,
            justify="left" if col in left else "right",
            max_width=NAME_WIDTH if col in NAME_COLUMNS else None,
        )
    return t


def runs_table(doc: ReplayDocument) -> Table:
    t = _table(
        escape(f"replay {doc.trace.name} on {doc.gpu} (ms)"),
        RUN_COLUMNS,
        left=("candidate",),
    )
    for r in doc.runs:
        t.add_row(
            escape(r.candidate),
            f"{r.rate_scale:g}",
            _f(r.rate_req_s, 2),
            _f(r.itl_ms.p50, 2),
            _f(r.itl_ms.p90, 2),
            _f(r.itl_ms.p99, 2),
            _f(r.ttft_ms.p50),
            _f(r.ttft_ms.p99),
            _f(r.decode_step_ms.p50, 2),
            _f(r.throughput_tok_s, 0),
            f"{100 * r.time_frac.attention:.0f}",
            f"{100 * r.extrapolated.far_steps_frac:.0f}%",
        )
    return t


def crossing_table(doc: ReplayDocument) -> Table | None:
    if doc.itl_target_ms is None or not doc.crossing:
        return None
    t = _table(
        f"rate where p99 ITL crosses {doc.itl_target_ms:g} ms",
        ("candidate", "crossing", "req/s"),
        left=("candidate", "crossing"),
    )
    for name, c in doc.crossing.items():
        if c.status == "crossed":
            t.add_row(escape(name), f"{c.scale:.2f}x", _f(c.rate_req_s, 2))
        elif c.status == "below":
            t.add_row(escape(name), f"not crossed up to {c.max_scale:g}x", "-")
        else:
            t.add_row(escape(name), f"above already at {c.min_scale:g}x", "-")
    return t


def padded_table(doc: ReplayDocument) -> Table | None:
    if not doc.padded_vs_ragged:
        return None
    claim = doc.brief_claim
    t = _table(
        f"padded vs ragged decode (brief: {claim.itl_before_ms} -> {claim.itl_after_ms} ms, "
        f"{claim.factor:.1f}x)",
        ("backend", "ITL p50", "padded", "×", "ITL p99", "padded", "×", "step p50", "padded"),
    )
    for r in doc.padded_vs_ragged:
        t.add_row(
            escape(r.backend),
            _f(r.ragged_itl_ms_p50, 2),
            _f(r.padded_itl_ms_p50, 2),
            _f(r.ratio_itl_ms_p50, 2),
            _f(r.ragged_itl_ms_p99, 2),
            _f(r.padded_itl_ms_p99, 2),
            _f(r.ratio_itl_ms_p99, 2),
            _f(r.ragged_decode_step_ms_p50, 2),
            _f(r.padded_decode_step_ms_p50, 2),
        )
    return t


def models_table(doc: ReplayDocument) -> Table:
    t = _table(
        "attention cost models (held-out error)",
        MODEL_COLUMNS,
        left=("variant", "notes"),
    )
    nan = math.nan
    for m in doc.models:
        dec, pre = m.decode, m.prefill
        t.add_row(
            escape(m.backend),
            str(dec.n_rows if dec else 0),
            _f(m.decode_bandwidth_gbps, 0),
            _pct(dec.cv_rel_rmse if dec else nan),
            _pct(dec.cv_max_rel_err if dec else nan),
            str(pre.n_rows if pre else 0),
            _f(m.prefill_tflops, 0),
            _pct(pre.cv_rel_rmse if pre else nan),
            escape("; ".join(m.notes)),
        )
    return t


def live_table(live: LiveValidation) -> Table:
    t = _table(
        escape(f"cost model vs live GPU steps ({live.device})"),
        ("variant / part", "measured", "rel RMSE", "median |err|", "max |err|", "bias"),
    )
    for key, v in live.summary.items():
        t.add_row(
            escape(key),
            f"{v.measured}/{v.samples}",
            _pct(v.rel_rmse),
            _pct(v.median_abs_err),
            _pct(v.max_abs_err),
            _pct(v.mean_err),
        )
    return t


METRIC_NAMES = {"itl_ms.p50": "ITL p50", "itl_ms.p99": "ITL p99", "ttft_ms.p50": "TTFT p50"}


def metric_name(metric: str) -> str:
    return METRIC_NAMES.get(metric, metric)


def ranking_table(doc: ReplayDocument) -> Table | None:
    """Candidates by each ranked metric; those whose ranges overlap share a rank."""
    from attnbench.replay.trust import ties

    if doc.trust is None or not doc.trust.rankings:
        return None
    scale = doc.trust.rankings[0].rate_scale
    t = _table(
        f"ranking at rate {scale:g}x (ms; range: attention cost off by its error)",
        ("metric", "rank", "candidate", "ms", "range", "not distinguishable from"),
        left=("metric", "candidate", "not distinguishable from"),
    )
    for r in doc.trust.rankings:
        tied = ties(r)
        for e in r.entries:
            span = (
                f"{_f(e.low_ms, 2)}-{_f(e.high_ms, 2)}"
                if math.isfinite(e.low_ms)
                else "error unknown"
            )
            t.add_row(
                metric_name(r.metric),
                str(e.group),
                escape(e.candidate),
                _f(e.value_ms, 2),
                span,
                escape(", ".join(tied[e.candidate])),
            )
    return t


def trust_lines(doc: ReplayDocument) -> list[str]:
    """One line per candidate: its validated error (or that it is not validated on live
    steps) and its share of replayed steps beyond the calibration range."""
    from attnbench.replay.trust import trust_line

    return [trust_line(t) for t in doc.trust.candidates] if doc.trust else []


def tables(doc: ReplayDocument) -> list[Table]:
    """Every table of the document, in the order the command prints them."""
    return [t for t, _ in printed_tables(doc)]


def _ratio(v: float, lo: float, hi: float) -> str:
    return f"{v:.2f}x [{lo:.2f}-{hi:.2f}]" if math.isfinite(v) else "-"


def _replayed(doc: ReplayDocument, variant: str) -> tuple[float, float]:
    """ITL p50 and TTFT p50 (ms) of the single candidate that replays `variant` at the main
    scale (NaN: not replayed)."""
    for r in doc.runs_at():
        if r.candidate == variant or r.candidate.startswith(variant + " ("):
            return r.itl_ms.p50, r.ttft_ms.p50
    return math.nan, math.nan


def paired_table(doc: ReplayDocument) -> Table | None:
    """`recommend --engine none`'s options ranked by the paired statistics of the rows
    (`doc.answer`), beside what the replay measured for each."""
    a = doc.answer
    if a is None or not a.ranks:
        return None
    t = _table(
        escape(f"rank by the rows, paired against the default {a.default} (95% CI)"),
        ("rank", "option", "decode", "prefill", "ITL p50", "TTFT p50"),
        left=("option",),
    )
    for r in a.ranks:
        itl, ttft = _replayed(doc, r.variant)
        t.add_row(
            str(r.rank) if r.rank is not None else "-",
            escape(r.option),
            _ratio(r.decode_ratio, r.decode_ci_low, r.decode_ci_high),
            _ratio(r.prefill_ratio, r.prefill_ci_low, r.prefill_ci_high),
            _f(itl, 2),
            _f(ttft),
        )
    return t


def answer_lines(doc: ReplayDocument) -> list[str]:
    """The decision, as `recommend --engine none` states it on the same rows and traffic: the
    choice, the options tied with it (once), the hybrid, what is never chosen."""
    a = doc.answer
    if a is None:
        return []
    if a.choice is None:
        return [f"no answer from the rows (`{a.command}` says why)"]
    head = (
        f"keep the default, {a.choice}"
        if a.choice == a.default
        else f"{a.choice} instead of the default {a.default}"
    )
    out = [f"decision (as `{a.command}`): {head}", f"traffic: {a.weighting}"]
    if a.tied:
        out.append(f"tied with it (95% CIs overlap): {', '.join(a.tied)}")
    if a.hybrid is not None:
        out.append(f"hybrid: prefill {a.hybrid[0]}, decode {a.hybrid[1]} (a call of its own each)")
    elif a.prefill is None:
        out.append("hybrid: none (no option has prefill cases to choose a prefill call by)")
    else:
        out.append(f"hybrid: none ({a.prefill} is also the fastest prefill call)")
    out += [f"never chosen: {line}" for line in a.not_deployable]
    return out


RANKING_KEYS = 3
"""A ranking split to fit the terminal repeats its metric, rank and candidate in each part."""


def printed_tables(doc: ReplayDocument) -> list[tuple[Table, int]]:
    """Every table of the document with the number of its leading columns that name a row
    (repeated in each part where `cli.common.print_fitted` splits it to fit the terminal)."""
    out = [(runs_table(doc), 1)]
    paired = paired_table(doc)
    if paired is not None:
        out.append((paired, 2))
    ranking = ranking_table(doc)
    if ranking is not None:
        out.append((ranking, RANKING_KEYS))
    out += [(t, 1) for t in (crossing_table(doc), padded_table(doc)) if t is not None]
    out.append((models_table(doc), 1))
    if doc.live is not None:
        out.append((live_table(doc.live), 1))
    return out


def extrapolation_notes(doc: ReplayDocument) -> list[str]:
    """One note per run with many steps far beyond the measured rows."""
    notes = []
    for r in doc.runs:
        far = r.extrapolated.far_steps_frac
        if far > FAR_NOTE_FRAC:
            notes.append(
                f"{r.candidate} at {r.rate_scale:g}x: {100 * far:.0f}% of steps lie beyond "
                f"1.5x the measured rows (up to {r.extrapolated.max_factor:.1f}x): their "
                "attention cost is extrapolated (measure rows that cover them: "
                "`attnbench run --suite replay`, larger batches or longer contexts)"
            )
    return notes
