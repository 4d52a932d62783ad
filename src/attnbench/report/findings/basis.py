"""What the published figures rest on, checked by `attnbench findings --check` beside the text:

- every measured row the findings read carries the bandwidth and FLOP/s fractions its latency,
  bytes and FLOPs give against the ceilings its header states (`results.fractions`);
- every replay-validation document states what the rows it was measured from give
  (`replay.validation_rows`): each step's measured time and error, and every statistic.

Each disagreement is one line naming the file, the case, the field, the stored value and the
recomputed one. Only the committed rows are read (no cost model is fitted), so it stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnbench.analysis.frame import resolve_paths
from attnbench.replay.validation_doc import is_validation_document, parse_validation
from attnbench.replay.validation_rows import restate, rows_stem
from attnbench.report.findings.core import DEFAULT_FOLDER
from attnbench.results import (
    is_document_path,
    is_results_path,
    read_for_analysis,
    read_json,
)
from attnbench.results.fractions import fraction_mismatches

ROWS_FOLDERS = ("", "replay")
"""Where a validation document's rows are looked for, below each results folder."""

KNOWN_UNSTATED: dict[str, tuple[str, dict[str, Any]]] = {
    "h100-headdim-fi.jsonl.gz": (
        "its first run's worker lost its CUDA context to flashinfer:tc's illegal memory access "
        "at head_dim 80 and was replaced; the replacement measured its own ceilings, which the "
        "pool did not write to the file (its rows 72-111 carry fractions of them, implied here "
        "from those rows)",
        {
            "copy_bandwidth_gbps": 3005.59219141965,
            "read_bandwidth_gbps": 3169.3993659198554,
            "matmul_tflops": {"bfloat16": 798.7107560821865},
        },
    ),
}
"""Files with rows timed against ceilings their header does not state: why, and those ceilings
(a fraction is accepted when either the header's or these give it)."""


@dataclass
class Basis:
    """What the check read and the lines it failed on."""

    rows: int = 0
    """Measured rows whose fractions were re-derived."""
    documents: int = 0
    """Validation documents restated from their rows."""
    steps: int = 0
    lines: list[str] = field(default_factory=list)


def _show(v: float | None) -> str:
    return "None" if v is None else f"{v:.10g}"


def check_fractions(path: Path, into: Basis) -> None:
    """Every measured row of `path` against its header's ceilings (`results.fractions`)."""
    rf = read_for_analysis(path)
    extra = KNOWN_UNSTATED.get(path.name, ("", None))[1]
    for i, row in enumerate(rf.rows):
        if row.status != "ok" or not row.latency_us:
            continue
        into.rows += 1
        for name, stored, want in fraction_mismatches(row, rf.header_at(i), extra):
            into.lines.append(
                f"{path.name}: {row.case_id} {row.backend}: {name} stored {_show(stored)}, "
                f"recomputed {_show(want)} (latency_us, bytes, flops, the header's ceilings)"
            )


def _rows_file(stem: str, folders: Sequence[Path]) -> Path | None:
    for folder in folders:
        for sub in ROWS_FOLDERS:
            for suffix in (".jsonl.gz", ".jsonl"):
                p = (folder / sub if sub else folder) / f"{stem}{suffix}"
                if p.is_file():
                    return p
    return None


def check_validation(path: Path, data: Any, folders: Sequence[Path], into: Basis) -> None:
    """A validation document against the rows it was measured from (`validation_rows`)."""
    doc = parse_validation(data, str(path))
    stem = rows_stem(path.name, doc)
    rows = _rows_file(stem, [path.parent, *folders])
    into.documents += 1
    into.steps += len(doc.steps)
    if rows is None:
        where = ", ".join(f"{f}/{s}" if s else str(f) for f in folders for s in ROWS_FOLDERS)
        into.lines.append(f"{path.name}: its rows ({stem}.jsonl[.gz]) are not in {where}")
        return
    into.lines += restate(doc, read_for_analysis(rows).rows, path.name, rows.name)


def check_basis(results: Sequence[Path] | None = None) -> Basis:
    """The fractions of every results file and the figures of every validation document among
    RESULTS (default: the committed `results/`); ValueError / OSError as the loader raises."""
    files = resolve_paths(list(results) if results else [DEFAULT_FOLDER])
    folders = list(dict.fromkeys(p.parent for p in files))
    out = Basis()
    for p in files:
        if is_results_path(p):
            check_fractions(p, out)
        elif is_document_path(p):
            data = read_json(p)
            if is_validation_document(data):
                check_validation(p, data, folders, out)
    return out
