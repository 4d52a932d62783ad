"""`sdpa:mla`: torch `scaled_dot_product_attention` on MLA's absorbed form, on CPU and GPU.

MLA (spec.mla) as plain attention with one KV head: q = [q_nope W_UK; q_pe] (576 values per
head), k = the latent [ckv; kpe] (576), v = ckv (its first kv_lora_rank = 512 values), the one
latent broadcast to every query head, scale spec.sm_scale. Plan gathers each request's latent
from its pages into a zero-padded `[B, 1, Lmax, 576]` copy (not timed) and, for a ragged or
causal batch, the boolean mask of `masks.padded_mask` (bottom-right causal, padding hidden);
uniform decode needs none and uniform prefill uses `is_causal`. v is a view of that copy.

The kernel is chosen in plan, by trial, from the knob `kernel` (`auto`: on a GPU the
memory-efficient kernel, then cuDNN, then math; on the CPU flash, then math); the broadcast of
the KV head is torch's `enable_gqa`, else an expanded view (knob `gqa`). The row records both.
fp8 latents are refused: SDPA has no fp8 path.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnbench.backends import kvgather
from attnbench.backends.base import PlannedRun, Unsupported, UnsupportedCase
from attnbench.backends.features import mla_only
from attnbench.backends.masks import is_square_causal, needs_mask, padded_mask
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.spec import ITEMSIZE, WorkloadSpec

KERNELS: dict[str, SDPBackend] = {
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "math": SDPBackend.MATH,
}
AUTO_ORDER: dict[str, tuple[str, ...]] = {
    "cuda": ("efficient", "cudnn", "math"),
    "cpu": ("flash", "math"),
}
MATH_SCORES_BUDGET_BYTES = 16 << 30
"""Largest fp32 score matrix `[B, Hq, Lq, Lk]` the math kernel may materialise."""


def padded_latent(inputs: AttentionInputs) -> torch.Tensor:
    """Every request's latent, one row each, zero-padded: `[B, Lmax, latent_dim]` (cache
    dtype), gathered from the pages with one indexing op."""
    spec = inputs.spec
    page, offset = kvgather.token_slots(inputs, [0] * spec.batch_size, list(spec.kv_lens))
    packed = inputs.kv_cache[page, offset]  # [total_kv, 576]
    out = torch.zeros(
        spec.batch_size, max(spec.kv_lens), spec.head_dim, dtype=packed.dtype, device=packed.device
    )
    rows, cols = kvgather.padded_index(list(spec.kv_lens), inputs.device)
    out[rows, cols] = packed
    return out


def math_scores_bytes(spec: WorkloadSpec) -> int:
    return spec.batch_size * spec.num_qo_heads * max(spec.qo_lens) * max(spec.kv_lens) * 4


class SdpaMlaBackend:
    """torch SDPA on the absorbed MLA form (see the module docstring)."""

    name = "sdpa:mla"
    devices: tuple[str, ...] = ("cpu", "cuda")
    knobs: Mapping[str, tuple[object, ...]] = {
        "kernel": ("auto", "efficient", "cudnn", "flash", "math"),
        "gqa": ("auto", "native", "expand"),
    }

    def available(self) -> str | None:
        return None  # part of torch

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        if why := mla_only(self.name, spec, "plain attention runs on sdpa:<kernel>"):
            return why
        if spec.is_fp8:
            return Unsupported("sdpa:mla has no fp8 latent path (SDPA has no fp8 KV kernels)")
        if spec.kv_dtype != spec.dtype:
            return Unsupported(f"q dtype {spec.dtype} and latent dtype {spec.kv_dtype} differ")
        return None

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        assert spec.mla is not None
        chosen = {k: v[0] for k, v in self.knobs.items()} | dict(knobs or {})
        dev = inputs.device
        kernels = AUTO_ORDER[dev.type] if chosen["kernel"] == "auto" else (str(chosen["kernel"]),)
        forms = ("native", "expand") if chosen["gqa"] == "auto" else (str(chosen["gqa"]),)
        max_kv = max(spec.kv_lens)
        rows, cols = kvgather.padded_index(list(spec.qo_lens), dev)
        q, latent, mask, is_causal = _padded_operands(spec, inputs, rows, cols)
        rank = spec.mla.kv_lora_rank
        failures: list[str] = []
        for kernel in kernels:
            if kernel == "math" and math_scores_bytes(spec) > MATH_SCORES_BUDGET_BYTES:
                failures.append(f"math: would materialise {math_scores_bytes(spec) >> 30} GiB")
                continue
            for form in forms:
                k = latent if form == "native" else latent.expand(-1, spec.num_qo_heads, -1, -1)
                kw: dict[str, Any] = {
                    "attn_mask": mask,
                    "is_causal": is_causal,
                    "scale": spec.sm_scale,
                    "enable_gqa": form == "native",
                }
                run = _runner(KERNELS[kernel], q, k, k[..., :rank], kw)
                why = _trial(run)
                if why is not None:
                    failures.append(f"{kernel}/gqa={form}: {why}")
                    continue

                def unpack(out: torch.Tensor) -> torch.Tensor:
                    return out.transpose(1, 2)[rows, cols]

                pad = spec.batch_size * max_kv - spec.total_kv
                details: dict[str, str | int | float | bool] = {
                    "kernel": kernel,
                    "gqa": form,
                    "mask": mask is not None,
                    "kv_cache": "padded-latent",
                    "padded_fraction": round(pad / (spec.batch_size * max_kv), 4),
                }
                extra = pad * spec.head_dim * ITEMSIZE[spec.kv_dtype]
                extra += mask.numel() if mask is not None else 0
                return PlannedRun(
                    run=run,
                    resolved=kernel,
                    details=details,
                    unpack=unpack,
                    extra_bytes=extra,
                )
        raise UnsupportedCase("sdpa:mla found no SDPA kernel for this case: " + "; ".join(failures))


def _padded_operands(
    spec: WorkloadSpec, inputs: AttentionInputs, rows: torch.Tensor, cols: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, bool]:
    """q padded to [B, H, Lq, D], the latent to [B, 1, Lk, D], and the mask SDPA needs: none
    (causal or not) for a uniform batch whose mask is square-causal or absent, else explicit."""
    dev = inputs.device
    max_q, max_kv = max(spec.qo_lens), max(spec.kv_lens)
    q = torch.zeros(
        spec.batch_size,
        max_q,
        spec.num_qo_heads,
        spec.head_dim,
        dtype=inputs.q.dtype,
        device=dev,
    )
    q[rows, cols] = inputs.q
    q = q.transpose(1, 2)  # [B, H, Lq, 576]
    latent = padded_latent(inputs).unsqueeze(1)  # [B, 1, Lk, 576]
    uniform = len(set(spec.qo_lens)) == 1 and len(set(spec.kv_lens)) == 1
    mask = None
    is_causal = False
    if not uniform or (needs_mask(spec) and not is_square_causal(spec)):
        mask = padded_mask(spec, max_q, max_kv, dev)
    elif needs_mask(spec):
        is_causal = True
    return q, latent, mask, is_causal


def _runner(
    backend: SDPBackend, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kw: dict[str, Any]
) -> Callable[[], torch.Tensor]:
    def run() -> torch.Tensor:
        with sdpa_kernel([backend]):
            out: torch.Tensor = F.scaled_dot_product_attention(q, k, v, **kw)
        return out

    return run


def _trial(run: Callable[[], torch.Tensor]) -> str | None:
    """Run once (kernel selection happens here, not in a timed call); why it failed, or None."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            run()
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as exc:
            notes = " | ".join(str(w.message) for w in caught)[:300]
            return f"{type(exc).__name__}: {exc}"[:300] + (f" [{notes}]" if notes else "")
    return None


def backends() -> list[SdpaMlaBackend]:
    return [SdpaMlaBackend()]
