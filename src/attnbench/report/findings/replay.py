"""Sections on the serving replay: the replay documents (per-token latency under a trace), the
live validations of its cost models, and the calibration rows they are fitted on. Documents
are read as the JSON `attnbench replay` and `replay-validate` write (their keys are the
schema), so nothing here runs the simulator."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from attnbench.replay.loto import METHOD as HELDOUT_METHOD
from attnbench.replay.loto import count_rule
from attnbench.replay.validate import MIN_STEPS, TARGET_MEDIAN, TARGET_P90, target_text
from attnbench.report.findings.core import (
    Headline,
    Inputs,
    Section,
    Table,
    doc_commit,
    fnum,
    fpct,
    fx,
    section,
    sources,
    stem,
)

REPLAY_SCHEMA = "attnbench.replay/1"
VALIDATION_SCHEMA = "attnbench.replay-validation/1"
CALIBRATION = ("h200-replay-calibration", "h200-replay-calibration-fp8")


def _docs(inputs: Inputs, schema: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (n, d) for n, d in inputs.docs.items() if isinstance(d, dict) and d.get("schema") == schema
    ]


def _crossing(doc: dict[str, Any], candidate: str) -> str:
    c = (doc.get("crossing") or {}).get(candidate)
    if not c:
        return "-"
    if c.get("status") == "crossed":
        return f"{fx(c.get('scale'))} ({fnum(c.get('rate_req_s'), 2)} req/s)"
    if c.get("status") == "above":
        return f"not at any rate tried (from {fx(c.get('min_scale'))})"
    return str(c.get("status"))


def _trusted(doc: dict[str, Any], candidate: str) -> str:
    for t in (doc.get("trust") or {}).get("candidates", []):
        if t.get("candidate") == candidate:
            return f"{fpct(t.get('decode_err'), 1)} ({t.get('decode_err_from', '-')})"
    return "-"


def _run_rows(name: str, doc: dict[str, Any]) -> list[list[str]]:
    scale = doc.get("main_scale", 1.0)
    trace = (doc.get("trace") or {}).get("name", "?")
    out = []
    for r in doc.get("runs", []):
        if r.get("rate_scale") != scale:
            continue
        itl, ttft = r.get("itl_ms") or {}, r.get("ttft_ms") or {}
        out.append(
            [
                str(trace),
                str(r["candidate"]),
                fnum(itl.get("p50")),
                fnum(itl.get("p99")),
                fnum(ttft.get("p50"), 0),
                fnum(r.get("throughput_tok_s"), 0),
                _crossing(doc, str(r["candidate"])),
                _trusted(doc, str(r["candidate"])),
                f"`{name}`",
                doc_commit(doc),
            ]
        )
    return out


def _padded_rows(name: str, doc: dict[str, Any]) -> list[list[str]]:
    trace = (doc.get("trace") or {}).get("name", "?")
    return [
        [
            str(trace),
            str(p["backend"]),
            fnum(p.get("ragged_itl_ms_p50")),
            fnum(p.get("padded_itl_ms_p50")),
            fx(p.get("ratio_itl_ms_p50"), 1),
            f"`{name}`",
            doc_commit(doc),
        ]
        for p in doc.get("padded_vs_ragged") or []
    ]


@section("replay")
def replay(inputs: Inputs) -> Section | None:
    docs = _docs(inputs, REPLAY_SCHEMA)
    if not docs:
        return None
    runs = [r for n, d in docs for r in _run_rows(n, d)]
    padded = [r for n, d in docs for r in _padded_rows(n, d)]
    text = (
        "Each replay document: per candidate at the document's main rate, ITL and TTFT "
        "percentiles and output throughput; the largest rate multiple of the trace whose p99 "
        "ITL meets the document's target; and the attention-cost error the document trusts for "
        "the candidate (its validated p90, else the held-out error). Then, where costed, padded "
        "against ragged decode."
    )
    cols = [
        "trace",
        "candidate",
        "ITL p50 ms",
        "ITL p99 ms",
        "TTFT p50 ms",
        "tok/s",
        "sustains (x trace rate)",
        "trusted error",
        "file",
        "commit",
    ]
    tables = [Table(cols, runs)]
    if padded:
        tables.append(
            Table(
                [
                    "trace",
                    "variant",
                    "ragged ITL p50 ms",
                    "padded ITL p50 ms",
                    "padded / ragged",
                    "file",
                    "commit",
                ],
                padded,
            )
        )
    return Section("Serving replay", text, tables)


def _target(doc: dict[str, Any]) -> tuple[float, float, int]:
    """The target a document was judged by (its `target`, else the code's)."""
    t = doc.get("target") or {}
    return (
        float(t.get("median_abs_err", TARGET_MEDIAN)),
        float(t.get("p90_abs_err", TARGET_P90)),
        int(t.get("steps", MIN_STEPS)),
    )


def _pooled_meets(s: dict[str, Any], target: tuple[float, float, int]) -> bool:
    """A variant's pooled steps meet the target (a held-out count asks every trace instead)."""
    median, p90, steps = target
    return (
        int(s.get("measured") or 0) >= steps
        and float(s.get("median_abs_err", math.nan)) <= median
        and float(s.get("p90_abs_err", math.nan)) <= p90
    )


def _meets_cell(doc: dict[str, Any], s: dict[str, Any]) -> str:
    verdict = "yes" if s.get("meets_target") else "no"
    if doc.get("method") != HELDOUT_METHOD:
        return verdict
    return f"{verdict} ({s.get('traces_meeting', 0)} of {s.get('traces', 0)} traces)"


def _validation_rows(name: str, doc: dict[str, Any]) -> list[list[str]]:
    return [
        [
            str(variant),
            f"{s.get('measured')} of {s.get('steps')}",
            fpct(s.get("median_abs_err"), 1),
            fpct(s.get("p90_abs_err"), 1),
            fpct(s.get("max_abs_err"), 0),
            _meets_cell(doc, s),
            f"`{name}`",
            doc_commit(doc),
        ]
        for variant, s in (doc.get("summary") or {}).items()
    ]


def _count(name: str, doc: dict[str, Any]) -> str:
    """`stem a of b`, and for a held-out document the rule that count follows and the pooled
    count beside it."""
    summary = doc.get("summary") or {}
    meets = sum(bool(s.get("meets_target")) for s in summary.values())
    head = f"{stem(name)} {meets} of {len(summary)}"
    if doc.get("method") != HELDOUT_METHOD:
        return head
    pooled = sum(_pooled_meets(s, _target(doc)) for s in summary.values())
    return f"{head} ({count_rule()}; pooled, {pooled} of {len(summary)})"


@section("replay-validation")
def replay_validation(inputs: Inputs) -> Section | None:
    docs = _docs(inputs, VALIDATION_SCHEMA)
    if not docs:
        return None
    rows = [r for name, doc in docs for r in _validation_rows(name, doc)]
    heads = [[_count(name, doc), name, doc_commit(doc)] for name, doc in docs]
    target = _target(docs[0][1])
    text = (
        "Replayed serving steps timed live on the GPU with every variant, against the cost "
        f"model's prediction: |error| per step, per variant. The target: {target_text(*target)}. "
        "A leave-one-trace-out document judges each trace's steps by models fitted without it, "
        f"and there {count_rule()}; its row shows the pooled figures and how many "
        "traces meet the target "
        "(a `--rescore` document re-predicts another document's measured steps without a GPU). "
        "`attnbench findings --check` recomputes every figure here from the rows the document "
        "was measured from."
    )
    cols = [
        "variant",
        "steps measured",
        "median |err|",
        "p90 |err|",
        "worst",
        "meets target",
        "file",
        "commit",
    ]
    head = Headline.of(
        "replay cost model vs live steps",
        f"variants within the target ({target_text(*target)}): " + ", ".join(h[0] for h in heads),
        [", ".join(h[1] for h in heads), ", ".join(h[2] for h in heads)],
    )
    return Section("Replay validation", text, [Table(cols, rows)], [head])


@section("replay-calibration")
def replay_calibration(inputs: Inputs) -> Section | None:
    """The calibration files' cases and rows by status, error rows counted."""
    rows = []
    for name in CALIBRATION:
        every = inputs.of(name)
        if every.empty:
            continue
        file = every["file"].iloc[0]
        written = inputs.written.get(file, Counter())
        status = Counter(every["status"])
        per_variant = every[every["status"] == "ok"].groupby("backend")["case_id"].nunique()
        rows.append(
            [
                str(every["case_id"].nunique()),
                str(every["backend"].nunique()),
                ", ".join(f"{n} {s}" for s, n in sorted(status.items())),
                ", ".join(f"{n} {s}" for s, n in sorted(written.items())),
                ", ".join(f"{b} {n}" for b, n in per_variant.items()),
                *sources(every),
            ]
        )
    if not rows:
        return None
    text = (
        "The rows the replay's cost models are fitted on: cases and variants, the latest row "
        "per (case, variant) by status, every row as written (a resumed run's retried rows "
        "included), and the ok cases per variant."
    )
    cols = [
        "cases",
        "variants",
        "latest rows",
        "rows as written",
        "ok cases per variant",
        "file",
        "commit",
    ]
    return Section("Replay calibration", text, [Table(cols, rows)])
