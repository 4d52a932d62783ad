"""Sections on the serving replay: the replay documents (per-token latency under a trace), the
live validations of its cost models, and the calibration rows they are fitted on. Documents
are read as the JSON `attnbench replay` and `replay-validate` write (their keys are the
schema), so nothing here runs the simulator."""

from __future__ import annotations

from collections import Counter
from typing import Any

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


@section("replay-validation")
def replay_validation(inputs: Inputs) -> Section | None:
    docs = _docs(inputs, VALIDATION_SCHEMA)
    if not docs:
        return None
    rows: list[list[str]] = []
    heads: list[list[str]] = []
    for name, doc in docs:
        for variant, s in (doc.get("summary") or {}).items():
            rows.append(
                [
                    str(variant),
                    f"{s.get('measured')} of {s.get('steps')}",
                    fpct(s.get("median_abs_err"), 1),
                    fpct(s.get("p90_abs_err"), 1),
                    fpct(s.get("max_abs_err"), 0),
                    "yes" if s.get("meets_target") else "no",
                    f"`{name}`",
                    doc_commit(doc),
                ]
            )
        meets = sum(bool(s.get("meets_target")) for s in (doc.get("summary") or {}).values())
        heads.append(
            [f"{stem(name)} {meets} of {len(doc.get('summary') or {})}", name, doc_commit(doc)]
        )
    target = docs[0][1].get("target") or {}
    text = (
        "Replayed serving steps timed live on the GPU with every variant, against the cost "
        "model's prediction: |error| per step, per variant. The target is "
        f"{fpct(target.get('median_abs_err'))} median and {fpct(target.get('p90_abs_err'))} p90 "
        "(a `--rescore` document re-predicts another document's measured steps without a GPU)."
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
        "variants within the target: " + ", ".join(h[0] for h in heads),
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
