"""Report section for `attnbench fp8` study documents: which format and scaling scheme keeps
error and needle recall within bounds, beside the fp8 kernel speed measured by the sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnbench.report.blocks import ReportData, Section, Table, Text, register_section
from attnbench.results import FP8_STUDY_TYPE, is_document_path, read_json_shared


def study_docs(paths: list[Path]) -> list[dict[str, Any]]:
    docs = []
    for p in paths:
        if not is_document_path(p):
            continue
        try:
            doc = read_json_shared(p)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("type") == FP8_STUDY_TYPE:
            docs.append({**doc, "_path": p.name})  # the shared document is left as read
    return docs


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"


def _worst(r: dict[str, Any]) -> str:
    err = r.get("rel_l2_err_max")
    return "-" if err is None else f"{_pct(err)} ({r.get('rel_l2_err_max_data') or '-'})"


def _recall(needle: dict[str, Any]) -> str:
    return ", ".join(f"{t} {100 * n['recall']:.1f}%" for t, n in needle.items()) or "-"


def _summary_row(r: dict[str, Any]) -> list[str]:
    """One format/scheme row: worst error, K/V lost to underflow and saturation, recall."""
    return [
        r["format"],
        r["scheme"],
        _worst(r),
        _pct(max(r.get("k_underflow_fraction_max") or 0, r.get("v_underflow_fraction_max") or 0)),
        _pct(max(r.get("k_saturated_fraction_max") or 0, r.get("v_saturated_fraction_max") or 0)),
        _recall(r.get("needle") or {}),
        "yes" if r.get("within_bounds") else "no",
    ]


_HEADERS = [
    "format",
    "scheme",
    "worst rel L2 (data)",
    "K underflow",
    "V saturated",
    "needle recall",
    "within bounds",
]


def _study_table(doc: dict[str, Any]) -> Table:
    """One study document's table, its caption naming the run and whether it finished."""
    s = doc.get("settings", {})
    caption = (
        f"{doc['_path']}: device {s.get('device')}, {s.get('num_tokens')} tokens, "
        f"needle contexts {s.get('needle_lengths', '-')}"
    )
    if doc.get("complete") is False:  # absent in documents written before the key
        done = ", ".join(k.removesuffix("_s") for k in doc.get("timings", {})) or "no part"
        caption += f"; the run stopped early: only {done} finished"
    return Table(_HEADERS, [_summary_row(r) for r in doc.get("summary", [])], caption)


@register_section("FP8 numerics", order=62, per_gpu=False)
def fp8_numerics(data: ReportData) -> Section | None:
    docs = study_docs(list(data.extras))
    if not docs:
        return None
    blocks: list[Any] = [
        Text(
            "Quantisation error of the attention output against an fp64 reference on the "
            "unquantised K/V (worst data kind), K/V values lost to underflow or saturation, and "
            "needle-in-a-haystack recall (the needle's logit a set margin above the strongest "
            "distractor, `max+m`, or at the distractors' log-sum-exp, `lse+0`). `within bounds` "
            "= worst relative L2 error <= 5% and recall >= 99% for every target. The kernel "
            "error of each fp8 kernel on the GPU is in the Accuracy section (the gate compares "
            "each kernel with fp64 attention on the very fp8 values it read)."
        )
    ]
    blocks += [_study_table(doc) for doc in docs]
    return Section("FP8 numerics", blocks)
