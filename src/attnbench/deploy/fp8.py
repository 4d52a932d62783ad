"""The cost side of fp8 KV in `recommend --model`: memory and the error the fp8 study measured.

Memory: KV bytes per value, fp8 / the 16-bit model dtype (scales are per tensor: negligible).
Error: from the fp8 study document (`attnbench fp8-study`, committed as
results/h200-fp8-study.json.gz), for the kernel the option runs (an engine setting's fp8
decode kernel: FA3 for vLLM FLASH_ATTN and SGLang fa3, FlashInfer's tensor-core decode for
both engines' flashinfer backends) and the format, with per-tensor scales (what both engines
use): the largest relative L2 error of kernel plus quantisation against fp64 over the study's
shapes (`kernel[].total`), and the needle recall at the study's tightest margin (its first
needle target, `max+0.1`: the needle's logit 0.1 above the largest other) - the lowest recall
over lengths and depths, from the study's summary. Pure apart from reading that one file.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attnbench.deploy.options import Option

STUDY_FILE = "h200-fp8-study.json.gz"
SCHEME = "tensor"
ENGINE_KERNEL = {
    "vllm:flash-attn": "flash-attn:fa3",
    "sglang:fa3": "flash-attn:fa3",
    "vllm:flashinfer": "flashinfer:tc",
    "sglang:flashinfer": "flashinfer:tc",
}
BYTES = {"float16": 2, "bfloat16": 2, "auto": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}


def kv_bytes_ratio(kv_dtype: str, model_dtype: str = "bfloat16") -> float:
    return BYTES.get(kv_dtype, 2) / BYTES.get(model_dtype, 2)


def study_path() -> Path:
    root = os.environ.get("ATTNBENCH_RESULTS")
    base = Path(root) if root and Path(root).is_dir() else Path("results")
    return base / STUDY_FILE


@functools.lru_cache(maxsize=4)
def _study(path: str) -> dict[str, Any] | None:
    from attnbench.results import FP8_STUDY_TYPE, read_json

    try:
        doc = read_json(Path(path))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("type") == FP8_STUDY_TYPE else None


def study_error(
    option: Option, engine: str, doc: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What the fp8 study measured for `option`'s kernel and format ({} without a study)."""
    doc = doc if doc is not None else _study(str(study_path()))
    if not doc or not option.key.kv.startswith("fp8"):
        return {}
    kernel = ENGINE_KERNEL.get(option.key.variant, option.key.variant)
    fmt = option.key.kv.removeprefix("fp8_")
    return study_figures(doc, kernel, fmt)


def study_figures(doc: Mapping[str, Any], kernel: str, fmt: str) -> dict[str, Any]:
    rows = [
        r
        for r in doc.get("kernel") or []
        if r.get("variant") == kernel
        and r.get("format") == fmt
        and r.get("scheme") == SCHEME
        and r.get("status") == "ok"
    ]
    totals = [float(r["total"]["rel_l2_err"]) for r in rows if r.get("total")]
    targets = (doc.get("settings") or {}).get("needle_targets") or ["max+0.1"]
    tight = str(targets[0])
    summary: Mapping[str, Any] = next(
        (
            s
            for s in doc.get("summary") or []
            if s.get("format") == fmt and s.get("scheme") == SCHEME
        ),
        {},
    )
    needle = (summary.get("needle") or {}).get(tight) or {}
    return {
        "kernel": kernel,
        "format": fmt,
        "scheme": SCHEME,
        "shapes": len(totals),
        "total_rel_l2_max": max(totals) if totals else None,
        "needle_target": tight,
        "needle_recall_min": needle.get("recall_min"),
        "needle_recall": needle.get("recall"),
        "source": STUDY_FILE,
    }
