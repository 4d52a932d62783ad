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
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from attnbench.workload.quant import SCHEMES, Scheme

SCHEMA_VERSION = 1
DOCUMENT_TYPE = "fp8-study"
DEPTHS_11 = tuple(i / 10 for i in range(11))


@dataclass(frozen=True)
class StudyConfig:
    """Sizes and axes of one study run. `small()` runs in seconds on a CPU; `full()` is the
    H200 study (contexts up to 64k)."""

    device: str = "cpu"
    seed: int = 0
    formats: tuple[str, ...] = ("e4m3", "e5m2")
    schemes: tuple[Scheme, ...] = SCHEMES
    # error study
    data_kinds: tuple[str, ...] = ("random", "outlier_channels", "fa3_outliers", "small")
    num_tokens: int = 512
    num_queries: int = 8
    num_qo_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128
    calibration_tokens: int | None = None
    """Tokens of the held-out calibration sample of static schemes; None: num_tokens."""
    # needle study
    needle_data: tuple[str, ...] = ("random", "outlier_channels")
    needle_lengths: tuple[int, ...] = (256, 1024)
    needle_depths: tuple[float, ...] = DEPTHS_11
    needle_targets: tuple[str, ...] = ("max+0.1", "max+1", "lse+0")
    needle_heads: int = 4
    needle_trials: int = 2
    # kernel study (CUDA + FlashInfer and/or FA3)
    kernel: bool = True
    kernel_shapes: tuple[tuple[str, int, str], ...] = (
        ("ctx1024", 8, "1024"),
        ("mixed", 8, "mixed:256-16384"),
    )
    """(label, batch_size, lengths) of the decode batches the kernel runs."""
    kernel_page_size: int = 16
    # summary bounds
    recall_bound: float = 0.99
    rel_l2_bound: float = 0.05

    @classmethod
    def small(cls, device: str = "cpu", seed: int = 0) -> StudyConfig:
        return cls(device=device, seed=seed)

    @classmethod
    def full(cls, device: str = "cuda", seed: int = 0) -> StudyConfig:
        return cls(
            device=device,
            seed=seed,
            num_tokens=16384,
            num_queries=32,
            needle_lengths=(1024, 4096, 16384, 65536),
            needle_targets=("max+0.1", "max+0.3", "max+1", "lse+0"),
            needle_heads=8,
            needle_trials=8,
            kernel_shapes=(
                ("ctx1024", 32, "1024"),
                ("ctx16384", 8, "16384"),
                ("mixed", 16, "mixed"),
            ),
        )

    def with_overrides(self, **changes: Any) -> StudyConfig:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


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
