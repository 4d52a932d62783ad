"""Rows written by older attnbench versions, brought to today's meaning in one place.

- FlashAttention-3 on a paged cache. Before FA3 ran on the paged KV cache, `flash-attn:fa3`
  ran on a contiguous (or packed) copy made in plan; that variant is now
  `flash-attn:fa3-contiguous`, and `flash-attn:fa3` reads the pages. An `flash-attn:fa3` row
  (or its `+tuned` form) whose `details.kv_cache` is not `paged` is such an old row and is read
  under the new name. A row with neither `kv_cache` nor the older `contiguous` key (a failure
  row) is renamed too, unless its run already knows the two variants apart (it has a paged
  `flash-attn:fa3` row or a `flash-attn:fa3-contiguous` row) or it was written after FA3 went
  paged (`PAGED_FA3_SINCE`): a run of refusals only, such as FA3 refusing Gemma-2's soft-cap,
  stays `flash-attn:fa3`.
- FLOP/s fractions. Rows without `tflops_ceiling` took their fractions against the bf16 matmul
  ceiling even where the kernel multiplies in fp8 (a prefill at "107%" of bf16 was 58% of the
  fp8 GEMM in the same run). A row whose accuracy gate ran at an fp8 `precision` (exactly the
  kernels that multiply P in fp8) takes them again against the fp8 ceiling its run's header
  stored; every such row names the ceiling it is now a fraction of.
- Plan mode (`plan_mode`, read without changing the row). Rows without `details.plan_mode`
  were planned as the code then did it: FlashInfer's
  decode wrapper (`BatchDecodeWithPagedKVCacheWrapper`) in CUDA-graph mode unless the row's
  `use_cuda_graph` knob says false (the default has been `use_cuda_graph=True` since the
  backend's first version), every other path eagerly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from attnbench.backends.variant import TUNED_SUFFIX, Variant
from attnbench.measure import metrics
from attnbench.results.rows import Header, ResultRow

FA3 = "flash-attn:fa3"
FA3_CONTIGUOUS = "flash-attn:fa3-contiguous"
PAGED_FA3_SINCE = "2026-12-02T22:39:28+00:00"
"""When `flash-attn:fa3` started reading the paged cache (commit e7dbadc): a row written later
means the paged variant, whatever its details hold."""


def _base(backend: str) -> tuple[str, str]:
    """(`flash-attn:fa3`, `+tuned`) of `flash-attn:fa3+tuned`."""
    variant = Variant.maybe(backend)
    if variant is None:
        return backend, ""
    return variant.base, TUNED_SUFFIX if variant.tuned else ""


def _paged(row: ResultRow) -> bool:
    return row.details.kv_cache == "paged"


def migrate_rows(rows: Iterable[ResultRow]) -> int:
    """Rename old contiguous-cache FA3 rows in place (see the module docstring); returns how
    many were renamed."""
    rows = list(rows)
    knows_paged = {
        r.run_id
        for r in rows
        if _base(r.backend)[0] == FA3_CONTIGUOUS or (_base(r.backend)[0] == FA3 and _paged(r))
    }
    renamed = 0
    for r in rows:
        name, suffix = _base(r.backend)
        if name != FA3 or _paged(r):
            continue
        d = r.details
        described = d.kv_cache is not None or d.contiguous is not None
        if not described and (r.run_id in knows_paged or r.timestamp > PAGED_FA3_SINCE):
            continue
        r.backend = FA3_CONTIGUOUS + suffix
        renamed += 1
    return renamed


def _ceiling_key(row: ResultRow) -> str:
    precision = row.accuracy.precision if row.accuracy else ""
    return metrics.matmul_ceiling_key(metrics.mma_dtype(row.spec.dtype, precision))


def _rate(table: Mapping[str, Any] | None, key: str) -> float | None:
    value = (table or {}).get(key)
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _fp8_ceiling(row: ResultRow, headers: Iterable[Header]) -> float | None:
    """The fp8 matmul ceiling of the run that wrote `row`: of the header (a resumed run has
    several, possibly under one run_id) whose bf16 ceiling the stored fraction was taken of."""
    frac, tflops = row.tflops_frac_measured, row.tflops
    if not frac or not tflops:
        return None
    used = tflops / frac
    for h in headers:
        bf16 = _rate((h.ceilings or {}).get("matmul_tflops"), metrics.MATMUL_16BIT)
        if h.run_id == row.run_id and bf16 and abs(bf16 - used) <= 1e-9 * used:
            return _rate((h.ceilings or {}).get("matmul_tflops"), metrics.MATMUL_FP8)
    return None


def matmul_fractions(rows: Iterable[ResultRow], headers: Sequence[Header]) -> int:
    """Name the ceiling of each measured row written without `tflops_ceiling`, and give a row
    that multiplied in fp8 its FLOP/s fractions against the fp8 ceiling its run measured (see
    the module docstring; None where the run measured none); 16-bit rows keep theirs. Returns
    how many rows changed their fractions."""
    changed = 0
    for r in rows:
        if r.status != "ok" or r.tflops is None or r.tflops_ceiling is not None:
            continue
        r.tflops_ceiling = _ceiling_key(r)
        if r.tflops_ceiling != metrics.MATMUL_FP8:
            continue
        fp8 = _fp8_ceiling(r, headers)
        sheet = next((h.spec_sheet for h in headers if h.run_id == r.run_id and h.spec_sheet), None)
        r.tflops_frac_measured = r.tflops / fp8 if fp8 else None
        if sheet is not None:
            peak = _rate(sheet.get("tflops"), metrics.MATMUL_FP8)
            r.tflops_frac_spec = r.tflops / peak if peak else None
        changed += 1
    return changed


DECODE_WRAPPER = "BatchDecodeWithPagedKVCacheWrapper"
PLANNED = frozenset({"ok", "mismatch"})
"""Statuses of rows whose variant was planned (and so had a plan mode)."""


def plan_mode(row: ResultRow) -> str:
    """`cuda-graph` or `eager`: the row's `details.plan_mode`, or for a row written before it
    was recorded the mode its plan was built in (see the module docstring); "" for a row
    that was never planned. The row itself is left as it was read."""
    d = row.details
    if d.plan_mode is not None or row.status not in PLANNED:
        return d.plan_mode or ""
    graph = d.api == DECODE_WRAPPER and d.get("use_cuda_graph", True) not in (False, "false")
    return "cuda-graph" if graph else "eager"


PLAN_MODE_LABELS = {"cuda-graph": "graph plan", "eager": "eager plan"}


def plan_mode_label(row: ResultRow) -> str:
    """`graph plan` or `eager plan` (empty for a row that was never planned)."""
    mode = plan_mode(row)
    return PLAN_MODE_LABELS.get(mode, mode)


def mixed_plan_modes(rows: Iterable[ResultRow]) -> set[str]:
    """Case ids whose planned rows were planned in more than one mode: there the plan mode is
    part of what a row's time means (FlashInfer's CUDA-graph plan splits differently)."""
    modes: dict[str, set[str]] = {}
    for r in rows:
        if mode := plan_mode(r):
            modes.setdefault(r.case_id, set()).add(mode)
    return {case for case, seen in modes.items() if len(seen) > 1}
