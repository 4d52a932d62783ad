"""The "Serving replay" section's part for `attnbench replay-validate` documents: per variant
the steps measured, median and p90 absolute error, share of steps outside the calibration
range and whether it meets the target, and a figure of predicted vs measured per step
(`report.plots_serving.predicted_vs_measured`)."""

from __future__ import annotations

import math
from pathlib import Path

from attnbench.replay.validation_doc import (
    ValidationDocument,
    ValidationDocumentError,
    is_validation_document,
    parse_validation,
)
from attnbench.report.blocks import Block, Table, Text
from attnbench.results import is_document_path, read_json_shared


def load_validations(
    paths: list[Path],
) -> tuple[list[tuple[Path, ValidationDocument]], list[str]]:
    """The `replay-validate` documents among `paths`, and one line per one that does not read."""
    docs, problems = [], []
    for p in paths:
        if not is_document_path(p):
            continue
        try:
            data = read_json_shared(p)
        except (OSError, ValueError):
            continue
        if is_validation_document(data):
            try:
                docs.append((p, parse_validation(data, str(p))))
            except ValidationDocumentError as exc:
                problems.append(str(exc))
    return docs, problems


def _pct(v: float) -> str:
    return f"{100 * v:.0f}%" if math.isfinite(v) else "-"


def validation_blocks(path: Path, vdoc: ValidationDocument, label: str) -> list[Block]:
    """A validation document: the error per variant against the target, and the figure."""
    t = vdoc.target
    where = f" on {vdoc.gpu}" if vdoc.gpu else ""
    text = Text(
        f"Replay cost models against live GPU steps{where} (`{path.name}`): decode steps drawn "
        f"from replays of {', '.join(vdoc.traces) or 'the traces'}, each timed with every "
        f"variant.{_rescored(vdoc)} Target: median |error| <= {t.median_abs_err:.0%} and p90 <= "
        f"{t.p90_abs_err:.0%} over >= {t.steps} steps."
    )
    rows: list[list[object]] = [
        [
            name,
            f"{s.measured}/{s.steps}",
            _pct1(s.median_abs_err),
            _pct1(s.p90_abs_err),
            _pct1(s.max_abs_err),
            _pct1(s.mean_err),
            _pct(s.outside_share),
            "yes" if s.meets_target else "no",
        ]
        for name, s in sorted(vdoc.summary.items())
    ]
    table = Table(
        ["variant", "steps measured", "median |err|", "p90 |err|", "max |err|", "bias",
         "outside range", "meets target"],
        rows,
        "error = predicted / measured - 1 per call; outside range: steps beyond the "
        "calibration rows the model was fitted on",
    )  # fmt: skip
    blocks: list[Block] = [text, table]
    if vdoc.heldout:
        blocks = heldout_blocks(path, vdoc)
    points: dict[str, list[tuple[float, float]]] = {}
    for st in vdoc.steps:
        if math.isfinite(st.measured_us):
            points.setdefault(st.backend, []).append((st.measured_us, st.predicted_us))
    from attnbench.report.plots_serving import predicted_vs_measured

    drawing = predicted_vs_measured(points, t.p90_abs_err, label)
    if drawing is not None:
        blocks.append(
            drawing.figure("predicted vs measured per step, per variant", "replay-validation")
        )
    return blocks


def heldout_blocks(path: Path, vdoc: ValidationDocument) -> list[Block]:
    """A leave-one-trace-out document: the rule, then per variant and trace the error of the
    trace's steps against models fitted without it, and each variant's worst trace."""
    t = vdoc.target
    where = f" on {vdoc.gpu}" if vdoc.gpu else ""
    text = Text(
        f"Replay cost models on traffic they were not fitted to{where} (`{path.name}`, leave "
        f"one trace out): the steps of each of {', '.join(vdoc.traces)} judged by models fitted "
        "on the calibration rows and the other traces' steps. "
        f"Target per trace: median |error| <= {t.median_abs_err:.0%} and p90 <= "
        f"{t.p90_abs_err:.0%} over >= {t.steps} steps. Rule: {vdoc.rule}"
    )
    rows: list[list[object]] = []
    for name, s in sorted(vdoc.summary.items()):
        for trace, by in vdoc.per_trace.items():
            e = by.get(name)
            if e is not None:
                rows.append(
                    [name, trace, f"{e.measured}/{e.steps}", _pct1(e.median_abs_err),
                     _pct1(e.p90_abs_err), _pct1(e.mean_err), "yes" if e.meets_target else "no"]
                )  # fmt: skip
        rows.append(
            [name, "worst: " + (s.worst_trace or "-"), f"{s.measured}/{s.steps}",
             _pct1(s.median_abs_err), _pct1(s.p90_abs_err), _pct1(s.mean_err),
             f"{s.traces_meeting} of {s.traces} traces"]
        )  # fmt: skip
    table = Table(
        ["variant", "held-out trace", "steps measured", "median |err|", "p90 |err|", "bias",
         "meets target"],
        rows,
        "error = predicted / measured - 1 per call; the `worst` line pools the variant's "
        "held-out steps and names the trace with the largest p90, the error its rankings use",
    )  # fmt: skip
    blocks: list[Block] = [text, table]
    if vdoc.misses:
        blocks.append(
            Text("Where the target is missed:\n" + "\n".join(f"- {m}" for m in vdoc.misses))
        )
    return blocks


def _pct1(v: float) -> str:
    return f"{100 * v:.1f}%" if math.isfinite(v) else "-"


def _rescored(vdoc: ValidationDocument) -> str:
    """For a `--rescore` document: whose measurements it re-predicts, with which commit."""
    src = vdoc.rescored_from
    if not src:
        return ""
    prov = src.get("provenance") or {}
    measured = f" at {prov['git_sha']}" if isinstance(prov, dict) and prov.get("git_sha") else ""
    now = vdoc.provenance.get("git_sha")
    at = f" at {now}" if now else ""
    name = Path(str(src.get("path", "?"))).name
    return (
        f" Re-predicted{at} without a GPU: the steps measured in `{name}`{measured}, with the"
        " cost models refitted on the calibration rows."
    )
