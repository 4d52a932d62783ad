"""Kernel error of FlashInfer's and FA3's fp8 paged decode, kept apart from quantisation error.

For each shape and fp8 format, the case's bf16 paged KV cache (the *source*) is quantised to fp8
with per-tensor scales (real = stored * k_scale, what `run(k_scale=, v_scale=)` takes), or with
per-(token, head) scales, FlashInfer 0.7.4's `use_token_head_sf` layout (`plan(
use_token_head_sf=True)`, `run(kv_cache_sf=(k_sf, v_sf))`, float32 `[num_pages, page_size,
num_kv_heads]` for NHD; real = stored * sf), the brief's "per-token dynamic scaling".

    quantisation error = fp64 reference on the dequantised fp8 cache vs on the bf16 source
    kernel error       = the fp8 decode vs fp64 reference on the dequantised fp8 cache
    total error        = the fp8 decode vs fp64 reference on the bf16 source
    bf16 kernel error  = the variant on the bf16 source vs its fp64 reference (16-bit baseline)

FlashAttention-3's fp8 decode (`flash-attn:fa3`, per-tensor scales, e4m3 only; it quantises
the query too, measured apart) runs beside them on each shape: `kernel_fa3`.

The kernels run where every kernel attnbench times runs: one `run.session.RunSession` (worker
processes under the watchdog on a GPU), each (scheme, format, shape) one job of kind
`KernelErrorJob` (`run.kernel_error`), each variant through the sweep's plan, accuracy gate and
measurement. This module says what to run and turns the rows into the study's records. Without
CUDA, FlashInfer or FA3 the study records why it skipped (`kernel_study`'s reason) and runs
whichever of the two it can.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch

from attnbench.measure.config import MeasureConfig

if TYPE_CHECKING:
    from attnbench.fp8study.config import StudyConfig
    from attnbench.results import ResultRow
    from attnbench.run.jobs import KernelErrorJob
    from attnbench.workload.spec import WorkloadSpec

KERNEL_VARIANTS = ("flashinfer:fa2", "flashinfer:tc")
"""FlashInfer's decode variants, as the sweep names them: BatchDecodeWithPagedKVCacheWrapper
(backend="fa2") on the CUDA-core decode kernel, or on the tensor-core (fa2 prefill template)
one. Both dequantise fp8 K/V to the query dtype and keep q unquantised (FA3's fp8 path quantises
q too: `kernel_fa3` measures that error apart)."""
TOKEN_VARIANTS = ("flashinfer:tc",)
"""The per-(token, head) scale layout runs on the tensor-core path only (FlashInfer forces it)."""
KNOBS: tuple[tuple[str, object], ...] = (("use_cuda_graph", False),)
"""FlashInfer's decode wrapper as a plain (not CUDA-graph mode) wrapper, as the study has always
built it; a variant without the knob ignores it."""
KERNEL_MEASURE = MeasureConfig(cold_l2=False, warmup_ms=1.0, min_runs=3, max_time_ms=5.0)
"""The study records errors, not speed: its kernels get a short measurement."""


def cuda_unavailable(device: str | torch.device) -> str | None:
    """None when `device` is a usable CUDA device, else why not (one wording for FlashInfer and
    FA3, so a run without CUDA records the reason once)."""
    if torch.device(device).type != "cuda":
        return f"device {device} is not CUDA (the fp8 decode kernels run on NVIDIA GPUs)"
    if not torch.cuda.is_available():
        return "CUDA is not available"
    return None


def kernel_unavailable(device: str | torch.device) -> str | None:
    """None when FlashInfer's fp8 decode can run on `device`, else why not."""
    reason = cuda_unavailable(device)
    if reason is not None:
        return reason
    try:
        import flashinfer  # noqa: F401
    except Exception as exc:  # ImportError, or a broken CUDA/JIT install
        return f"flashinfer is not importable: {type(exc).__name__}: {exc}".splitlines()[0]
    return None


def kernel_study(
    cfg: StudyConfig, on_record: Callable[[dict[str, Any]], None] | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """(records, None), or (records, why a library was skipped), or ([], why) when no kernel
    can run here. `on_record` gets each record as it is measured, so a run cut short keeps
    what it finished. Order: the per-tensor scheme in each format, then the per-(token, head)
    one, each over every shape (per shape: FlashInfer's variants, then FA3): e4m3's per-tensor
    kernels (the ones a serving deployment uses, and those a warm FlashInfer cache holds) come
    first, the modules that must still be JIT-compiled (e5m2, token-head scales) later."""
    from attnbench.fp8study import kernel_fa3

    cuda = cuda_unavailable(cfg.device)
    skipped = {
        "flashinfer": kernel_unavailable(cfg.device),
        kernel_fa3.FA3_VARIANT: cuda or kernel_fa3.fa3_unavailable(cfg.device),
    }
    reasons = {lib: why for lib, why in skipped.items() if why is not None}
    reason = "; ".join(f"{lib}: {why}" for lib, why in reasons.items()) or None
    if len(reasons) == len(skipped):  # nothing runs here; no CUDA is one cause, said once
        causes = set(reasons.values())
        return [], causes.pop() if len(causes) == 1 else reason
    jobs = list(_jobs(cfg, set(skipped) - set(reasons)))
    return _run(cfg, jobs, on_record), reason


Work = tuple["WorkloadSpec", tuple[str, ...], "KernelErrorJob", dict[str, Any]]
"""One job of the study: its case, variants and kind, and the shape fields of its records."""


def _jobs(cfg: StudyConfig, libraries: set[str]) -> Iterator[Work]:
    """The study's jobs in order (see `kernel_study`); `libraries`: those that run here."""
    from attnbench.fp8study.kernel_fa3 import FA3_VARIANT
    from attnbench.run.jobs import KernelErrorJob
    from attnbench.workload.lengths import parse_lengths
    from attnbench.workload.quant import fp8_format

    flashinfer = "flashinfer" in libraries
    for scheme in ("tensor", "token"):
        if scheme == "token" and not flashinfer:
            continue  # only FlashInfer takes per-(token, head) scales
        names: tuple[str, ...] = KERNEL_VARIANTS if flashinfer else ()
        if scheme == "token":
            names = TOKEN_VARIANTS
        elif FA3_VARIANT in libraries:
            names = (*names, FA3_VARIANT)
        kind = KernelErrorJob(scheme=scheme, knobs=KNOBS)
        for fmt_name in cfg.formats:
            fmt = fp8_format(fmt_name).name
            for label, batch_size, lengths in cfg.kernel_shapes:
                kv_lens = parse_lengths(lengths, batch_size, cfg.seed)[0].kv_lens
                shape = {
                    "shape": label,
                    "batch_size": len(kv_lens),
                    "lengths": lengths,
                    "max_kv_len": max(kv_lens),
                    "format": fmt,
                }
                yield _spec(cfg, kv_lens, f"fp8_{fmt}", scheme), names, kind, shape


def _spec(cfg: StudyConfig, kv_lens: tuple[int, ...], kv_dtype: str, scheme: str) -> WorkloadSpec:
    from attnbench.workload.spec import WorkloadSpec

    return WorkloadSpec.model_validate(
        {
            "kind": "decode",
            "num_qo_heads": cfg.num_qo_heads,
            "num_kv_heads": cfg.num_kv_heads,
            "head_dim": cfg.head_dim,
            "kv_lens": kv_lens,
            "qo_lens": (1,) * len(kv_lens),
            "page_size": cfg.kernel_page_size,
            "kv_layout": "NHD",
            "dtype": "bfloat16",
            "kv_dtype": kv_dtype,
            "seed": cfg.seed,
            "label": f"fp8-study {scheme} scales",  # one case id per scheme
        }
    )


def _run(
    cfg: StudyConfig, jobs: list[Work], on_record: Callable[[dict[str, Any]], None] | None
) -> list[dict[str, Any]]:
    """Every job in one session on `cfg.device`; a record per row, as each comes."""
    from attnbench.measure.hardware import detect
    from attnbench.run.plan import RunPlan, RunSink, placement
    from attnbench.run.session import RunSession

    shapes = {spec.case_id: shape for spec, _, _, shape in jobs}
    records: list[dict[str, Any]] = []

    def keep(row: ResultRow) -> None:
        records.append(kernel_record(shapes[row.case_id], row))
        if on_record is not None:
            on_record(records[-1])

    info = detect(cfg.device)
    settings = {"fp8_study": asdict(cfg)}
    plan = RunPlan(
        run_id="fp8-study-kernel",
        device=info,
        where=placement(info),
        measure_cfg=KERNEL_MEASURE,
        settings=settings,
    )
    with RunSession(plan, RunSink(on_row=keep)) as session:
        batch = [session.job(spec, names, kind) for spec, names, kind, _ in jobs]
        session.run_jobs([j for j in batch if j is not None])
    return records


def kernel_record(shape: dict[str, Any], row: ResultRow) -> dict[str, Any]:
    """The study's record of one row of a `KernelErrorJob`: the shape, the scheme's scales and
    quantisation error, the variant's status, and its error split (`run.kernel_error`)."""
    from attnbench.fp8study.kernel_fa3 import FA3_VARIANT, fa3_fields

    errors = dict(row.details.get("kernel_error") or {})
    plan_details = errors.pop("plan_details", None)
    rec: dict[str, Any] = {**shape}
    rec.update({k: errors.pop(k) for k in ("scheme", "k_scale", "v_scale", "quant") if k in errors})
    rec.update(variant=row.backend, status=row.status, reason=row.reason)
    if row.status == "ok":
        rec["reason"] = ""  # an ok row's reason holds measurement notes, not the study's
    if row.resolved:
        rec["resolved"] = row.resolved
    if row.backend == FA3_VARIANT and plan_details is not None:
        rec.update(fa3_fields(plan_details))
    rec.update(errors)
    return rec
