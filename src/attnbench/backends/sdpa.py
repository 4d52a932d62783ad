"""torch `scaled_dot_product_attention` with one kernel pinned per variant.

Variants `sdpa:cudnn`, `sdpa:flash`, `sdpa:efficient`, `sdpa:math` (math also on CPU), each run
under `torch.nn.attention.sdpa_kernel([SDPBackend.X])` so torch cannot silently pick another.

SDPA has no page table and no ragged batch, so plan builds one of (knob `ragged`):

- `uniform`: every request has the same qo_len and kv_len, so `[B, H, L, D]` holds no padding;
  no mask unless the case needs one (square causal uses `is_causal`).
- `padded`: gather to `[B, H, Lmax, D]` with a boolean mask `[B, 1, Lq, Lk]` that hides
  padding keys and applies the bottom-right causal / tree rule. SDPA's own `is_causal` is
  top-left aligned, wrong whenever q is shorter than k, so it is never used for that. Kernels
  without masks (flash) cannot run ragged cases this way.
- `nested`: jagged nested tensors (`torch.nested.nested_tensor_from_jagged`), no padding; torch
  supports no mask there and only top-left `is_causal`, so it serves decode, non-causal and
  square-causal (prefill) cases.

`auto` (default) takes uniform, else padded when the kernel takes masks, else nested.
GQA: `enable_gqa=True` when the kernel accepts it, else K/V heads repeated in plan (knob `gqa`).
Padding, repeated heads and the mask are reported as `extra_bytes`; nothing is dequantised:
fp8 KV caches are unsupported (SDPA has no fp8 KV path). A sliding window is part of the mask
(`masks.request_mask`), so windowed cases take the padded path. Attention sinks (spec.sinks) are
one more key per request: K and V get a zero row after the padded keys and the mask becomes an
additive float mask `[B, Hq, Lq, Lk + 1]` (0 where a key is allowed, -inf where not) whose last
column is the head's sink logit, so that key's logit is q . 0 + sink = sink and its value adds
nothing: exactly the reference's `cat([QK, S])` softmax. Kernels without masks (flash) refuse
sinks. MLA runs on `sdpa:mla` (`sdpa_mla`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnbench.backends import kvgather
from attnbench.backends.base import PlannedRun, Unsupported, UnsupportedCase
from attnbench.backends.features import missing_feature
from attnbench.backends.masks import is_square_causal, needs_mask, padded_mask
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.spec import ITEMSIZE, WorkloadSpec

KERNELS: dict[str, SDPBackend] = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}
MASK_BUDGET_BYTES = 4 << 30
"""Largest padded boolean mask plan will build."""
MATH_SCORES_BUDGET_BYTES = 16 << 30
"""Largest fp32 score matrix the math kernel may materialise."""


def uniform(spec: WorkloadSpec) -> bool:
    return len(set(spec.qo_lens)) == 1 and len(set(spec.kv_lens)) == 1


def nested_ok(spec: WorkloadSpec) -> bool:
    """Jagged SDPA computes the case right: no mask needed, or square causal (top-left)."""
    return spec.kind != "tree" and (not needs_mask(spec) or is_square_causal(spec))


def choose_ragged(kernel: str, spec: WorkloadSpec, requested: str = "auto") -> str:
    """The ragged-batch strategy for `kernel`: uniform | padded | nested. Raises ValueError
    with the reason when the requested one cannot compute the case correctly."""
    if spec.sinks:  # the sink is a mask column: only the padded path carries it
        if kernel == "flash":
            raise ValueError(
                "sdpa:flash takes no attn_mask: attention sinks need an additive mask with a "
                "sink column (sdpa:efficient, sdpa:cudnn and sdpa:math take one)"
            )
        if requested not in ("auto", "padded"):
            raise ValueError(
                f"ragged={requested}: attention sinks need the padded path (an additive mask "
                "with a sink column)"
            )
        return "padded"
    square_or_free = not needs_mask(spec) or is_square_causal(spec)
    if requested in ("auto", "uniform") and uniform(spec) and square_or_free:
        return "uniform"
    if requested == "uniform":
        raise ValueError("ragged=uniform needs equal lengths and no mask beyond is_causal")
    if requested in ("auto", "padded") and kernel != "flash":
        return "padded"
    if requested == "padded":
        raise ValueError(
            "sdpa:flash takes no attn_mask: a padded ragged batch would attend to padding "
            "(needs uniform lengths, or nested tensors)"
        )
    if nested_ok(spec) and not (kernel == "math" and needs_mask(spec)):
        return "nested"
    if requested == "nested":
        raise ValueError(
            "nested tensors take no mask and only top-left is_causal: they serve decode, "
            "non-causal and q_len == kv_len cases" + (" (math: no is_causal)" * (kernel == "math"))
        )
    raise ValueError(
        f"sdpa:{kernel} takes no mask: ragged {spec.kind} needs uniform lengths, or nested "
        "tensors, which serve decode and q_len == kv_len only"
    )


@dataclass
class _Tensors:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor | None
    is_causal: bool
    unpack: Callable[[torch.Tensor], torch.Tensor]
    extra_bytes: int
    details: dict[str, str | int | float | bool]


class SdpaBackend:
    """torch SDPA with one kernel pinned (see the module docstring)."""

    knobs: Mapping[str, tuple[object, ...]] = {
        "ragged": ("auto", "uniform", "padded", "nested"),
        "gqa": ("auto", "native", "repeat"),
    }

    def __init__(self, kernel: str) -> None:
        self.kernel = kernel
        self.name = f"sdpa:{kernel}"
        self.devices: tuple[str, ...] = ("cpu", "cuda") if kernel == "math" else ("cuda",)

    def available(self) -> str | None:
        return None  # part of torch

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        if device.kind not in self.devices:
            return Unsupported(f"{self.name} needs a CUDA GPU")
        reasons = {
            "mla": f"{self.name} runs grouped-query attention; MLA cases run on sdpa:mla",
            "softcap": f"{self.name}: scaled_dot_product_attention takes a scale and an additive "
            "mask, no logit soft-cap (tanh of the logits); soft-capped cases run on flex (a "
            "score_mod) and flashinfer:fa2/tc",
        }
        if why := missing_feature(self.name, spec, ("window", "sinks"), reasons):
            return why
        if spec.is_fp8:
            return Unsupported("sdpa has no fp8 KV path (dequantising in plan is no fp8 kernel)")
        if spec.kv_dtype != spec.dtype:
            return Unsupported(f"q dtype {spec.dtype} and KV dtype {spec.kv_dtype} differ")
        if self.kernel == "flash" and (device.sm < 80 or spec.head_dim > 256 or spec.head_dim % 8):
            return Unsupported("sdpa:flash needs sm80+ and head_dim <= 256, a multiple of 8")
        try:
            mode = choose_ragged(self.kernel, spec)
        except ValueError as exc:
            return Unsupported(str(exc))
        return _budget(self.kernel, spec, mode)

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        chosen = {k: v[0] for k, v in self.knobs.items()} | dict(knobs or {})
        mode = choose_ragged(self.kernel, spec, str(chosen["ragged"]))
        why = _budget(self.kernel, spec, mode)
        if why is not None:
            raise MemoryError(why.reason)
        gqa = str(chosen["gqa"])
        tries = ["native", "repeat"] if gqa == "auto" else [gqa]
        if spec.group_size == 1:
            tries = ["native"]
        failures: list[str] = []
        for how in tries:
            t = _nested(spec, inputs, how) if mode == "nested" else _padded(spec, inputs, mode, how)
            native = how == "native" and spec.group_size > 1
            run = self._runner(t, spec.sm_scale, native_gqa=native)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    run()  # trial: kernel selection happens here, not in a timed call
                except torch.cuda.OutOfMemoryError:
                    raise
                except Exception as exc:  # no kernel for this input: try the next GQA form
                    notes = " | ".join(str(w.message) for w in caught)[:600]
                    msg = f"gqa={how}: {type(exc).__name__}: {exc}".strip()
                    failures.append(msg + (f" [{notes}]" if notes else ""))
                    continue
            t.details.update(kernel=self.kernel, gqa=how if spec.group_size > 1 else "none")
            return PlannedRun(
                run=run,
                resolved=self.kernel,
                details=t.details,
                unpack=t.unpack,
                extra_bytes=t.extra_bytes,
                graph_safe=mode != "nested",
            )
        raise UnsupportedCase(f"{self.name} cannot run this case: " + "; ".join(failures))

    def _runner(self, t: _Tensors, scale: float, *, native_gqa: bool) -> Callable[[], torch.Tensor]:
        backend = KERNELS[self.kernel]
        kw: dict[str, Any] = {"attn_mask": t.mask, "is_causal": t.is_causal, "scale": scale}
        if native_gqa:
            kw["enable_gqa"] = True

        def run() -> torch.Tensor:
            with sdpa_kernel([backend]):
                out: torch.Tensor = F.scaled_dot_product_attention(t.q, t.k, t.v, **kw)
            return out

        return run


def _budget(kernel: str, spec: WorkloadSpec, mode: str) -> Unsupported | None:
    if mode != "padded":
        return None
    max_q, max_kv = max(spec.qo_lens), max(spec.kv_lens)
    mask_bytes = spec.batch_size * max_q * max_kv
    if spec.sinks:  # additive, per query head, one sink column
        mask_bytes = spec.batch_size * spec.num_qo_heads * max_q * (max_kv + 1)
        mask_bytes *= ITEMSIZE[spec.dtype]
    if mask_bytes > MASK_BUDGET_BYTES:
        return Unsupported(f"the padded mask would take {mask_bytes / 2**30:.1f} GiB")
    scores = spec.batch_size * spec.num_qo_heads * max_q * max_kv * 4
    if kernel == "math" and scores > MATH_SCORES_BUDGET_BYTES:
        return Unsupported(f"the math kernel would materialise {scores / 2**30:.1f} GiB of scores")
    return None


def _repeat_heads(x: torch.Tensor, group: int, dim: int) -> torch.Tensor:
    return x.repeat_interleave(group, dim=dim) if group > 1 else x


def _padded(spec: WorkloadSpec, inputs: AttentionInputs, mode: str, gqa: str) -> _Tensors:
    """`[B, H, L, D]` views (padded unless uniform) and the mask a padded case needs."""
    dev = inputs.device
    max_q, max_kv = max(spec.qo_lens), max(spec.kv_lens)
    rows, cols = kvgather.padded_index(list(spec.qo_lens), dev)
    shape = (spec.batch_size, max_q, spec.num_qo_heads, spec.head_dim)
    q = torch.zeros(shape, dtype=inputs.q.dtype, device=dev)
    q[rows, cols] = inputs.q
    k, v = kvgather.padded_kv(inputs)  # [B, Lk, Hkv, D]
    heads = spec.num_kv_heads
    if gqa == "repeat":
        k, v = _repeat_heads(k, spec.group_size, 2), _repeat_heads(v, spec.group_size, 2)
        heads = spec.num_qo_heads
    mask = None
    is_causal = False
    if mode == "padded":
        mask = padded_mask(spec, max_q, max_kv, dev)
    elif needs_mask(spec):  # uniform and square causal
        is_causal = True
    if spec.sinks and mask is not None:
        assert inputs.sinks is not None, "spec.sinks needs inputs.sinks"
        zero = k.new_zeros(spec.batch_size, 1, heads, spec.head_dim)
        k, v = torch.cat([k, zero], dim=1), torch.cat([v, zero], dim=1)
        mask = sink_mask(mask, inputs.sinks, spec.num_qo_heads, q.dtype)

    def unpack(out: torch.Tensor) -> torch.Tensor:
        return out.transpose(1, 2)[rows, cols]

    item = ITEMSIZE[spec.dtype]
    pad_kv = spec.batch_size * max_kv - spec.total_kv
    pad_q = spec.batch_size * max_q - spec.total_q
    extra = pad_kv * heads * spec.head_dim * 2 * item
    extra += (heads - spec.num_kv_heads) * spec.total_kv * spec.head_dim * 2 * item
    extra += pad_q * spec.num_qo_heads * spec.head_dim * 2 * item
    extra += mask.numel() * mask.element_size() if mask is not None else 0
    extra += 2 * spec.batch_size * heads * spec.head_dim * item if spec.sinks else 0
    details: dict[str, str | int | float | bool] = {
        "ragged": mode,
        "padded_fraction": round(pad_kv / (spec.batch_size * max_kv), 4),
        "mask": mask is not None,
        **({"sinks": "mask-column"} if spec.sinks else {}),
        "kv_cache": "contiguous",
    }
    return _Tensors(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        mask,
        is_causal,
        unpack,
        extra,
        details,
    )


def sink_mask(
    allowed: torch.Tensor, sinks: torch.Tensor, num_qo_heads: int, dtype: torch.dtype
) -> torch.Tensor:
    """Additive mask `[B, Hq, Lq, Lk + 1]` from a boolean `[B, 1, Lq, Lk]`: 0 where a key is
    allowed, -inf where not, and a last column holding each head's sink logit (the logit of the
    zero key appended to K, whose zero value adds nothing to the output)."""
    b, _, lq, lk = allowed.shape
    out = torch.empty(b, num_qo_heads, lq, lk + 1, dtype=dtype, device=allowed.device)
    bias = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    out[..., :lk] = bias.masked_fill_(~allowed, float("-inf"))
    out[..., lk] = sinks.to(device=allowed.device, dtype=dtype).view(1, -1, 1)
    return out


def _jagged(values: torch.Tensor, lens: tuple[int, ...]) -> torch.Tensor:
    offsets = torch.tensor(kvgather.exclusive_cumsum(lens), dtype=torch.long, device=values.device)
    nt = torch.nested.nested_tensor_from_jagged(
        values, offsets, min_seqlen=min(lens), max_seqlen=max(lens)
    )
    return nt.transpose(1, 2)  # [B, H, j, D]


def _nested(spec: WorkloadSpec, inputs: AttentionInputs, gqa: str) -> _Tensors:
    """Jagged nested tensors over the packed (unpadded) batch."""
    k, v = kvgather.packed_kv(inputs)  # [total_kv, Hkv, D]
    heads = spec.num_kv_heads
    if gqa == "repeat":
        k, v = _repeat_heads(k, spec.group_size, 1), _repeat_heads(v, spec.group_size, 1)
        heads = spec.num_qo_heads

    def unpack(out: torch.Tensor) -> torch.Tensor:
        values: torch.Tensor = out.transpose(1, 2).values()
        return values

    item = ITEMSIZE[spec.dtype]
    extra = (heads - spec.num_kv_heads) * spec.total_kv * spec.head_dim * 2 * item
    details: dict[str, str | int | float | bool] = {
        "ragged": "nested",
        "padded_fraction": 0.0,
        "mask": False,
        "kv_cache": "packed",
    }
    return _Tensors(
        _jagged(inputs.q, spec.qo_lens),
        _jagged(k, spec.kv_lens),
        _jagged(v, spec.kv_lens),
        None,
        needs_mask(spec),  # only square causal reaches here with a mask need
        unpack,
        extra,
        details,
    )


def backends() -> list[SdpaBackend]:
    return [SdpaBackend(k) for k in KERNELS]
