"""A validation document restated from the rows it was measured from: each step's measured time
from its result row, its error from that time, and the statistics the document states (per
variant; held out, per trace too) recomputed with the functions that wrote them
(`validate.error_stats`, `loto.trace_stats`, `loto.variant_summary`). `attnbench findings
--check` fails on any figure that differs.

Which rows a document rests on: a held-out document names them (`live_rows`); a live one's rows
are the results file `replay-validate` wrote beside it (the same stem, `.jsonl`); a rescored one
re-predicts the measured steps of the document it names (`rescored_from`), so it rests on that
document's rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath

from attnbench.replay import loto
from attnbench.replay.validate import StepError, error_stats
from attnbench.replay.validation_doc import ValidatedStep, ValidationDocument, VariantError
from attnbench.results import ResultRow

REL_TOL = 1e-9
"""Stated and recomputed figures agree to this (JSON keeps floats exactly)."""
STATS = ("steps", "measured", "median_abs_err", "p90_abs_err", "max_abs_err", "mean_err")
HELDOUT_STATS = ("worst_trace", "worst_median_abs_err", "worst_p90_abs_err", "traces_meeting")
Figure = float | int | bool | str | None


def file_stem(name: str) -> str:
    """`results/replay/x.jsonl.gz` -> `x`."""
    base = PurePosixPath(name).name
    for suffix in (".jsonl.gz", ".jsonl", ".json.gz", ".json"):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


def rows_stem(name: str, doc: ValidationDocument) -> str:
    """The stem of the results file whose rows `doc` (file `name`) was measured from."""
    if doc.heldout and doc.live_rows:
        return file_stem(doc.live_rows[0])
    if doc.rescored_from and doc.rescored_from.get("path"):
        return file_stem(str(doc.rescored_from["path"]))
    return file_stem(name)


def step_rows(doc: ValidationDocument, rows: Sequence[ResultRow]) -> list[ResultRow | None]:
    """Per step of `doc`, in order, the row that timed it (None: no row left for it). Held
    out: the last row of the step's label and variant; live: the rows of the step's KV
    lengths and variant, taken in file order."""
    if doc.heldout:
        by_label: dict[tuple[str, int, str], ResultRow] = {}
        for r in rows:
            tag = loto.parse_label(r.spec.label) if r.spec.kind == "decode" else None
            if tag is not None:
                by_label[(tag[0], tag[1], r.backend)] = r
        return [by_label.get((s.trace, s.step, s.backend)) for s in doc.steps]
    queue: dict[tuple[str, tuple[int, ...]], list[ResultRow]] = {}
    for r in rows:
        queue.setdefault((r.backend, tuple(r.spec.kv_lens)), []).append(r)
    out: list[ResultRow | None] = []
    for s in doc.steps:
        left = queue.get((s.backend, tuple(s.kv_lens)), [])
        out.append(left.pop(0) if left else None)
    return out


def measured_us(row: ResultRow) -> float | None:
    """What a validation takes from a row: its latency where it was timed, else None."""
    return float(row.latency_us) if row.status == "ok" and row.latency_us else None


def _same(a: Figure, b: Figure) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0)
    return a == b


def _show(v: Figure) -> str:
    return f"{v:.10g}" if isinstance(v, float) else str(v)


def _line(where: str, field: str, stated: Figure, recomputed: Figure) -> str:
    return f"{where} {field}: stated {_show(stated)}, from the rows {_show(recomputed)}"


def _step_error(s: ValidatedStep, measured: float | None) -> StepError:
    return StepError(
        s.trace,
        s.step,
        s.backend,
        s.requests,
        s.kv_total,
        s.kv_max,
        s.predicted_us,
        measured,
        s.outside,
        tuple(s.kv_lens),
    )


def _stated(v: VariantError | None, field: str) -> Figure:
    return getattr(v, field) if v is not None else None


def _stats_lines(
    where: str, stated: Mapping[str, VariantError], recomputed: Mapping[str, Mapping[str, Figure]]
) -> list[str]:
    """One line per statistic of `stated` (per variant) that `recomputed` does not give."""
    fields = [*STATS, "meets_target"]
    out = []
    for name in sorted(set(stated) | set(recomputed)):
        have, want = stated.get(name), recomputed.get(name, {})
        extra = HELDOUT_STATS if "worst_trace" in want else ()
        for field in (*fields, *extra):
            if not _same(_stated(have, field), want.get(field)):
                out.append(_line(f"{where} {name}", field, _stated(have, field), want.get(field)))
    return out


def restate(
    doc: ValidationDocument, rows: Sequence[ResultRow], name: str, rows_name: str
) -> list[str]:
    """One line per figure of `doc` (file `name`) that its rows (file `rows_name`) do not give:
    a step without its row, a step's measured time or error, a statistic."""
    out: list[str] = []
    errors: list[StepError] = []
    for s, r in zip(doc.steps, step_rows(doc, rows), strict=True):
        where = f"{name}: step {s.trace}:{s.step} {s.backend}"
        stored = s.measured_us if math.isfinite(s.measured_us) else None
        if r is None:
            out.append(f"{where}: no row in {rows_name}")
            errors.append(_step_error(s, stored))
            continue
        e = _step_error(s, measured_us(r))
        errors.append(e)
        if not _same(stored, e.measured_us):
            out.append(_line(where, "measured_us", stored, e.measured_us))
        rel = s.rel_err if math.isfinite(s.rel_err) else None
        if not _same(rel, e.rel_err):
            out.append(_line(where, "rel_err", rel, e.rel_err))
    if not doc.heldout:
        return out + _stats_lines(f"{name}: summary", doc.summary, error_stats(errors))
    per_trace = loto.trace_stats(errors)
    out += _stats_lines(f"{name}: summary", doc.summary, loto.variant_summary(errors, per_trace))
    for trace in sorted(set(doc.per_trace) | set(per_trace)):
        out += _stats_lines(
            f"{name}: {trace}", doc.per_trace.get(trace, {}), per_trace.get(trace, {})
        )
    return out
