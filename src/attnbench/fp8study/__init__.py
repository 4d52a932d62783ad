"""The FP8 KV-cache numerics study behind `attnbench fp8`.

Three parts, each kept apart so an error is attributed to its cause:

- `errors`: quantisation error. fp64 attention on dequantised K/V vs on the original K/V, per
  (data kind, format, scheme), with underflow/saturation/subnormal counts.
- `needle`: retrieval. A needle key/value planted at many depths and context lengths; does the
  attention's top-1 still land on it, and how close is the output to its value?
- `kernel`: kernel error (CUDA with FlashInfer and/or FA3). FlashInfer's fp8 paged decode vs
  the fp64 reference on the same dequantised cache (per-tensor and per-(token, head) scales),
  and FA3's (per-tensor, e4m3) vs the fp64 reference on its dequantised fp8 query and cache, the
  query's own quantisation error recorded apart (`kernel_fa3`).

`run_study` returns one JSON-ready document (settings, provenance, every record and a summary).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from attnbench.fp8study.config import StudyConfig
from attnbench.results.textfile import FP8_STUDY_TYPE

SCHEMA_VERSION = 1
DOCUMENT_TYPE = FP8_STUDY_TYPE


def run_study(
    cfg: StudyConfig, checkpoint: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Run every part of the study; the JSON-ready document `write_study` saves. `checkpoint`
    gets the document after each part (`complete` false until the last), so a run cut short
    keeps the parts it finished."""
    from attnbench.fp8study.errors import error_study
    from attnbench.fp8study.kernel import kernel_study
    from attnbench.fp8study.needle import needle_study

    doc = _document(cfg)
    t0 = time.perf_counter()
    doc["errors"] = error_study(cfg)
    _part_done(doc, cfg, "errors_s", t0, checkpoint)
    t0 = time.perf_counter()
    doc["needle"] = needle_study(cfg)
    _part_done(doc, cfg, "needle_s", t0, checkpoint)
    t0 = time.perf_counter()
    doc["kernel_skipped"] = "disabled (--no-kernel)"
    if cfg.kernel:
        doc["kernel_skipped"] = "partial: the run stopped during the kernel part"

        def kept(rec: dict[str, Any]) -> None:  # each record on disk as soon as it is measured
            doc["kernel"].append(rec)
            _part_done(doc, cfg, "kernel_s", t0, checkpoint)

        _, doc["kernel_skipped"] = kernel_study(cfg, kept)
    doc["complete"] = True
    _part_done(doc, cfg, "kernel_s", t0, None)
    return doc


def _document(cfg: StudyConfig) -> dict[str, Any]:
    from attnbench.fp8study.data import DATA_KINDS
    from attnbench.results import provenance

    return {
        "type": DOCUMENT_TYPE,
        "schema_version": SCHEMA_VERSION,
        "settings": asdict(cfg),
        "provenance": provenance(),
        "data_kinds": {k: DATA_KINDS[k] for k in cfg.data_kinds},
        "complete": False,
        "timings": {},
        "errors": [],
        "needle": [],
        "kernel": [],
        "kernel_skipped": "not reached: the run stopped before the kernel part",
        "summary": [],
    }


def _part_done(
    doc: dict[str, Any],
    cfg: StudyConfig,
    timing: str,
    t0: float,
    checkpoint: Callable[[dict[str, Any]], None] | None,
) -> None:
    from attnbench.fp8study.summary import summarize

    doc["timings"][timing] = time.perf_counter() - t0
    doc["summary"] = summarize(
        doc["errors"],
        doc["needle"],
        doc["kernel"],
        recall_bound=cfg.recall_bound,
        rel_l2_bound=cfg.rel_l2_bound,
    )
    if checkpoint is not None:
        checkpoint(doc)


def write_study(doc: dict[str, Any], path: Path) -> Path:
    """Write the document as one compact JSON file (strict: NaN becomes null)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    from attnbench.results import dumps

    text = dumps(doc, separators=(",", ":"))
    path.write_text(text + "\n", encoding="utf-8")
    return path


def load_study(path: Path) -> dict[str, Any]:
    """Read a study document back; raises ValueError when it is not one."""
    from attnbench.results import read_json

    doc = read_json(path)
    if not isinstance(doc, dict) or doc.get("type") != DOCUMENT_TYPE:
        raise ValueError(f"{path}: not an attnbench fp8 study (type != {DOCUMENT_TYPE!r})")
    return doc


__all__ = ["StudyConfig", "load_study", "run_study", "write_study"]
