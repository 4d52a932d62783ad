"""The cost side of fp8 KV in `recommend --model`: memory and the error the fp8 study measured.

Memory: KV bytes per value, fp8 / the 16-bit model dtype (scales are per tensor: negligible).
Error: from an fp8 study document (`attnbench fp8`, committed under results/ with `fp8` in its
name), for the kernel the option runs (an engine setting's fp8 decode kernel: FA3 for vLLM
FLASH_ATTN and SGLang fa3, FlashInfer's tensor-core decode for both engines' flashinfer
backends) and the format, with per-tensor scales (what both engines use): the largest relative
L2 error of kernel plus quantisation against fp64 over the study's shapes (`kernel[].total`;
FA3 quantises the query too, and its records hold that error with the query quantised, and the
query's share apart, `q_quant`), the needle recall at the study's tightest margin (its first
needle target, `max+0.1`: the needle's logit 0.1 above the largest other; the lowest recall over
lengths and depths, from the study's summary; the needle test quantises K and V only), and
whether the study judges the scheme within its bounds (`within_bounds`).

The study is the answer's own where one exists: the same head shape (`settings`' heads) and
GPU (`provenance.gpu`; a CPU study is "CPU"); else the nearest (kernel figures first, then the
head shape, then the GPU), and `scope` says which GPU and head shape the figures come from.
Pure apart from reading those files.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench.deploy.options import Option

STUDY_FILE = "h200-fp8-study.json.gz"
"""The study a caller without a GPU and head shape gets first (name order breaks ties)."""
STUDY_GLOB = "*fp8*.json*"
SCHEME = "tensor"
ENGINE_KERNEL = {
    "vllm:flash-attn": "flash-attn:fa3",
    "sglang:fa3": "flash-attn:fa3",
    "vllm:flashinfer": "flashinfer:tc",
    "sglang:flashinfer": "flashinfer:tc",
}
BYTES = {"float16": 2, "bfloat16": 2, "auto": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}
Heads = tuple[int, int, int]
"""(num_qo_heads, num_kv_heads, head_dim)."""


def kv_bytes_ratio(kv_dtype: str, model_dtype: str = "bfloat16") -> float:
    return BYTES.get(kv_dtype, 2) / BYTES.get(model_dtype, 2)


@dataclass(frozen=True)
class Study:
    """One fp8 study document and the file it came from."""

    name: str
    doc: Mapping[str, Any]

    @property
    def gpu(self) -> str:
        """The GPU that ran it (`provenance.gpu`), "CPU" for a CPU study."""
        device = str((self.doc.get("settings") or {}).get("device") or "")
        gpu = (self.doc.get("provenance") or {}).get("gpu")
        if device.startswith("cpu") or (not gpu and not device.startswith("cuda")):
            return "CPU"
        return str(gpu or device)

    @property
    def heads(self) -> Heads | None:
        s = self.doc.get("settings") or {}
        try:
            return (int(s["num_qo_heads"]), int(s["num_kv_heads"]), int(s["head_dim"]))
        except (KeyError, TypeError, ValueError):
            return None


def results_dir() -> Path:
    """Where the fp8 studies are: the first folder `$ATTNBENCH_RESULTS` names (it may name
    files, folders or globs, several joined by the path separator), else `results/`."""
    for entry in os.environ.get("ATTNBENCH_RESULTS", "").split(os.pathsep):
        if entry and Path(entry).is_dir():
            return Path(entry)
    return Path("results")


def study_path() -> Path:
    return results_dir() / STUDY_FILE


def studies(folder: Path | None = None) -> tuple[Study, ...]:
    """Every fp8 study document in `folder` (default: the results folder), by name."""
    from attnbench.results import is_document_path

    folder = folder if folder is not None else results_dir()
    files = sorted(p for p in folder.glob(STUDY_GLOB) if is_document_path(p) and p.is_file())
    stamp = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files)
    return _read_studies(stamp)


@functools.lru_cache(maxsize=4)
def _read_studies(stamp: tuple[tuple[str, int, int], ...]) -> tuple[Study, ...]:
    from attnbench.results import FP8_STUDY_TYPE, read_json

    out = []
    for path, _, _ in stamp:
        try:
            doc = read_json(Path(path))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("type") == FP8_STUDY_TYPE:
            out.append(Study(Path(path).name, doc))
    return tuple(out)


def pick_study(
    pool: Sequence[Study], kernel: str, fmt: str, gpu: str | None, heads: Heads | None
) -> Study | None:
    """The study to quote for `kernel` at `fmt` on the answer's `gpu` and `heads`: one with
    kernel figures for them first, then the same head shape, then the same GPU, then a GPU
    study before a CPU one, then `STUDY_FILE`, then by name."""

    def rank(s: Study) -> tuple[bool, bool, bool, bool, bool, str]:
        return (
            not _kernel_rows(s.doc, kernel, fmt),
            heads is not None and s.heads != heads,
            gpu is not None and s.gpu != gpu,
            s.gpu == "CPU",
            s.name != STUDY_FILE,
            s.name,
        )

    return min(pool, key=rank, default=None)


def study_error(
    option: Option,
    engine: str,
    doc: Mapping[str, Any] | None = None,
    *,
    gpu: str | None = None,
    heads: Heads | None = None,
) -> dict[str, Any]:
    """What the fp8 study measured for `option`'s kernel and format ({} without a study),
    from the study nearest the answer's `gpu` and `heads` (`pick_study`; `doc`: that study
    only), with `scope` naming the GPU and head shape it comes from."""
    if not option.key.kv.startswith("fp8"):
        return {}
    pool = (Study(STUDY_FILE, doc),) if doc is not None else studies()
    kernel = ENGINE_KERNEL.get(option.key.variant, option.key.variant)
    fmt = option.key.kv.removeprefix("fp8_")
    study = pick_study(pool, kernel, fmt, gpu, heads)
    if study is None:
        return {}
    out = study_figures(study.doc, kernel, fmt)
    out["source"] = study.name
    out.update(study_scope(study, gpu, heads))
    return out


def study_scope(study: Study, gpu: str | None, heads: Heads | None) -> dict[str, Any]:
    """Where the figures come from: the study's GPU and heads, whether they are the answer's
    (None: the answer's was not given), and `scope`, that in words ("fp8 study on NVIDIA
    H200, heads 32/8 d128 (not this answer's 8/1 d128)")."""
    same_gpu = None if gpu is None else study.gpu == gpu
    same_heads = None if heads is None or study.heads is None else study.heads == heads
    text = f"fp8 study on {study.gpu}"
    if study.heads is not None:
        text += f", heads {heads_text(study.heads)}"
    notes = [str(gpu)] if same_gpu is False else []
    notes += [heads_text(heads)] if heads is not None and same_heads is False else []
    if notes:
        text += f" (not this answer's {', '.join(notes)})"
    elif same_gpu and same_heads:
        text += " (this answer's GPU and heads)"
    return {
        "study_gpu": study.gpu,
        "study_heads": list(study.heads) if study.heads else None,
        "same_gpu": same_gpu,
        "same_heads": same_heads,
        "scope": text,
    }


def heads_text(heads: Heads) -> str:
    return f"{heads[0]}/{heads[1]} d{heads[2]}"


def _kernel_rows(doc: Mapping[str, Any], kernel: str, fmt: str) -> list[Mapping[str, Any]]:
    return [
        r
        for r in doc.get("kernel") or []
        if r.get("variant") == kernel
        and r.get("format") == fmt
        and r.get("scheme") == SCHEME
        and r.get("status") == "ok"
    ]


def _max_rel(rows: Sequence[Mapping[str, Any]], part: str) -> float | None:
    errs = [float(r[part]["rel_l2_err"]) for r in rows if r.get(part)]
    return max(errs) if errs else None


def study_figures(doc: Mapping[str, Any], kernel: str, fmt: str) -> dict[str, Any]:
    """The figures of one study for `kernel` at `fmt`, per-tensor scales: the worst total
    error over its shapes (FA3's with the query quantised, `query_quantised`, and the query's
    own share `q_rel_l2_max`), the needle recall at the tightest target (K/V quantisation
    only), and the study's verdict on the scheme (`within_bounds`, its bounds, the worst
    quantisation error over data kinds and the kind)."""
    rows = _kernel_rows(doc, kernel, fmt)
    settings = doc.get("settings") or {}
    targets = settings.get("needle_targets") or ["max+0.1"]
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
        "shapes": sum(1 for r in rows if r.get("total")),
        "total_rel_l2_max": _max_rel(rows, "total"),
        "query_quantised": any(r.get("q_quant") for r in rows),
        "q_rel_l2_max": _max_rel(rows, "q_quant"),
        "needle_target": tight,
        "needle_recall_min": needle.get("recall_min"),
        "needle_recall": needle.get("recall"),
        "needle_kv_only": True,
        "within_bounds": summary.get("within_bounds"),
        "rel_l2_bound": settings.get("rel_l2_bound"),
        "recall_bound": settings.get("recall_bound"),
        "quant_rel_l2_max": summary.get("rel_l2_err_max"),
        "quant_rel_l2_max_data": summary.get("rel_l2_err_max_data") or None,
        "pooled_recall_min": summary.get("needle_recall_min"),
        "source": STUDY_FILE,
    }


def fp8_evidence(e: Mapping[str, Any]) -> str:
    """The fp8 line's study part from `study_error`'s figures: the error (with the query's
    quantisation where the kernel does it), the needle recall (K/V quantisation only), the
    study's verdict where it is outside its bounds, and which GPU and heads it comes from."""
    if not e:
        return "; no fp8 study figures for this kernel and format"
    out = ""
    if e.get("total_rel_l2_max") is not None:
        what = (
            f"{e['kernel']} with q and KV in {e['format']}"
            if e.get("query_quantised")
            else f"{e['kernel']} + {e['format']} KV quantisation"
        )
        out += (
            f"; error ({what}, per-tensor scales): rel. L2 <= "
            f"{_pct(e['total_rel_l2_max'])} over {e['shapes']} shapes"
        )
        if e.get("q_rel_l2_max") is not None:
            out += f" (q's quantisation alone <= {_pct(e['q_rel_l2_max'])})"
    else:
        out += f"; no {e.get('kernel')} error figures in the study"
    if e.get("needle_recall_min") is not None:
        out += (
            f"; needle recall >= {_pct(e['needle_recall_min'])} (mean "
            f"{_pct(e['needle_recall'])}) at the tightest margin {e['needle_target']}"
        )
        if e.get("query_quantised"):
            out += ", KV quantisation only (the needle test keeps q 16-bit)"
    out += _bounds_text(e)
    return out + (f"; {e['scope']}" if e.get("scope") else "")


def _bounds_text(e: Mapping[str, Any]) -> str:
    """`; outside the study's bounds (...)` where the study judges the scheme so, else ""."""
    if e.get("within_bounds") is not False:
        return ""
    scheme = f"{e['format']} per-{e.get('scheme', SCHEME)}"
    why = []
    worst, bound = e.get("quant_rel_l2_max"), e.get("rel_l2_bound")
    if worst is not None and (bound is None or worst > bound):
        on = f" on {e['quant_rel_l2_max_data']} data" if e.get("quant_rel_l2_max_data") else ""
        limit = f" > {_pct(bound)}" if bound is not None else ""
        why.append(f"rel. L2 {_pct(worst)}{on}{limit}")
    recall, floor = e.get("pooled_recall_min"), e.get("recall_bound")
    if recall is not None and floor is not None and recall < floor:
        why.append(f"needle recall {_pct(recall)} < {_pct(floor)}")
    return f"; the study judges {scheme} outside its bounds" + (
        f" ({'; '.join(why)})" if why else ""
    )


def _pct(v: float) -> str:
    return f"{100 * float(v):.1f}%"
