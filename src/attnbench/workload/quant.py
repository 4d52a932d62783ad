"""FP8 quantisation of KV caches: formats, scaling schemes, and what rounding does to the values.

Convention (FlashInfer's k_scale/v_scale, FA3's descale): real value = stored fp8 value * scale.

Tensors are laid out like one request's gathered cache, `[num_tokens, num_kv_heads, head_dim]`.
A scheme decides which values share one scale; scales are float32 and broadcast against `x`:

    none     scale 1                                  scales [1, 1, 1]
    tensor   static, one per tensor (calibrated)      scales [1, 1, 1]
    head     static, one per KV head (calibrated)     scales [1, num_kv_heads, 1]
    token    dynamic, one per (token, head) row       scales [num_tokens, num_kv_heads, 1]
    channel  static, one per (head, dim) (calibrated) scales [1, num_kv_heads, head_dim]

Static schemes are calibrated once on a sample of tokens (as a serving engine calibrates before
serving), so a value larger than anything in the sample saturates; the dynamic `token` scheme
sees every row it quantises. `channel` is the KIVI/KVQuant scheme for K; for V those papers
quantise per token, which `kv_schemes` applies.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import torch

FP8_MAX: dict[torch.dtype, float] = {
    torch.float8_e4m3fn: 448.0,
    torch.float8_e5m2: 57344.0,
}

Scheme = Literal["none", "tensor", "head", "token", "channel"]
SCHEMES: tuple[Scheme, ...] = ("none", "tensor", "head", "token", "channel")
STATIC_SCHEMES: frozenset[str] = frozenset({"tensor", "head", "channel"})
DEFAULT_CALIBRATION_TOKENS = 256
SATURATION_RTOL = 1e-6


@dataclass(frozen=True)
class FP8Format:
    """An fp8 format's name and range (OCP FP8: e4m3 without infinities, e5m2 IEEE-like)."""

    name: str
    dtype: torch.dtype
    max_value: float
    """Largest finite magnitude: 448 (e4m3), 57344 (e5m2)."""
    min_normal: float
    """Smallest normal magnitude: 2**-6 (e4m3), 2**-14 (e5m2)."""
    min_subnormal: float
    """Smallest nonzero magnitude: 2**-9 (e4m3), 2**-16 (e5m2); half of it rounds to 0."""
    mantissa_bits: int


FP8_FORMATS: dict[str, FP8Format] = {
    "e4m3": FP8Format("e4m3", torch.float8_e4m3fn, 448.0, 2.0**-6, 2.0**-9, 3),
    "e5m2": FP8Format("e5m2", torch.float8_e5m2, 57344.0, 2.0**-14, 2.0**-16, 2),
}
_ALIASES = {
    "e4m3": "e4m3",
    "fp8_e4m3": "e4m3",
    "float8_e4m3fn": "e4m3",
    "e5m2": "e5m2",
    "fp8_e5m2": "e5m2",
    "float8_e5m2": "e5m2",
}


def fp8_format(name: str | torch.dtype) -> FP8Format:
    """The format for `e4m3`/`fp8_e4m3`/`torch.float8_e4m3fn` (or the e5m2 spellings)."""
    if isinstance(name, torch.dtype):
        for fmt in FP8_FORMATS.values():
            if fmt.dtype == name:
                return fmt
        raise ValueError(f"{name} is not an fp8 dtype; allowed: float8_e4m3fn, float8_e5m2")
    key = _ALIASES.get(name.strip().lower())
    if key is None:
        raise ValueError(f"fp8 format {name!r} is not known; allowed: e4m3, e5m2")
    return FP8_FORMATS[key]


def per_tensor_scale(x: torch.Tensor, fp8_dtype: torch.dtype) -> float:
    """Scale that maps the tensor's largest magnitude onto the format's largest finite value."""
    amax = float(x.abs().amax().float())
    if amax == 0.0:
        return 1.0
    return amax / FP8_MAX[fp8_dtype]


def quantize(x: torch.Tensor, scale: float | torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    """x / scale, saturated to the format's range, cast to fp8 (round to nearest even)."""
    limit = FP8_MAX[fp8_dtype]
    return (x.float() / scale).clamp_(-limit, limit).to(fp8_dtype)


def dequantize(
    x: torch.Tensor, scale: float | torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """stored * scale in `dtype` (scales broadcast against `x`)."""
    scale_t = scale.to(dtype) if isinstance(scale, torch.Tensor) else scale
    out: torch.Tensor = x.to(dtype) * scale_t
    return out


def calibration_rows(num_tokens: int, calibration_tokens: int | None) -> torch.Tensor:
    """Indices of the tokens a static scheme calibrates on: `calibration_tokens` evenly spaced
    over the context (all tokens when None or when the context is shorter)."""
    if calibration_tokens is None or calibration_tokens >= num_tokens:
        return torch.arange(num_tokens)
    if calibration_tokens <= 0:
        raise ValueError(f"calibration_tokens={calibration_tokens} must be positive")
    # spacing (num_tokens - 1) / (calibration_tokens - 1) >= 1, so rounding keeps them distinct
    return torch.linspace(0, num_tokens - 1, calibration_tokens).round().long()


def scale_shape(scheme: Scheme, shape: tuple[int, ...]) -> tuple[int, int, int]:
    """Broadcast shape of a scheme's scales for `x` `[num_tokens, num_kv_heads, head_dim]`."""
    if len(shape) != 3:
        raise ValueError(f"expected [num_tokens, num_kv_heads, head_dim], got shape {shape}")
    n, h, d = shape
    shapes: dict[str, tuple[int, int, int]] = {
        "none": (1, 1, 1),
        "tensor": (1, 1, 1),
        "head": (1, h, 1),
        "token": (n, h, 1),
        "channel": (1, h, d),
    }
    if scheme not in shapes:
        raise ValueError(f"scheme={scheme!r} is not known; allowed: {', '.join(SCHEMES)}")
    return shapes[scheme]


def compute_scales(
    x: torch.Tensor,
    scheme: Scheme,
    fp8_dtype: torch.dtype,
    *,
    calibration_tokens: int | None = DEFAULT_CALIBRATION_TOKENS,
) -> torch.Tensor:
    """float32 scales of shape `scale_shape(scheme, x.shape)`: amax / format max per group.

    Args:
        x: `[num_tokens, num_kv_heads, head_dim]` values to quantise.
        scheme: which values share a scale (see the module docstring).
        fp8_dtype: torch.float8_e4m3fn or torch.float8_e5m2.
        calibration_tokens: tokens a static scheme (tensor, head, channel) sees; None: all.

    A group whose calibration amax is 0 gets scale 1.
    """
    target = scale_shape(scheme, tuple(x.shape))
    if scheme == "none":
        return torch.ones(target, dtype=torch.float32, device=x.device)
    sample = x
    if scheme in STATIC_SCHEMES:
        sample = x[calibration_rows(x.shape[0], calibration_tokens).to(x.device)]
    mag = sample.abs().float()
    if scheme == "tensor":
        amax = mag.amax().reshape(1, 1, 1)
    elif scheme == "head":
        amax = mag.amax(dim=(0, 2), keepdim=True)
    elif scheme == "token":
        amax = mag.amax(dim=2, keepdim=True)
    else:  # channel
        amax = mag.amax(dim=0, keepdim=True)
    scales = amax / FP8_MAX[fp8_dtype]
    return torch.where(amax > 0, scales, torch.ones_like(scales))


@dataclass(frozen=True)
class QuantStats:
    """What rounding to fp8 did to a tensor's values (counts over all elements)."""

    numel: int
    nonzero: int
    """Inputs that are not exactly 0."""
    underflow: int
    """Nonzero inputs stored as 0 (|x / scale| < half the smallest subnormal)."""
    saturated: int
    """Inputs beyond the format's range (|x / scale| > max): clipped to +-max."""
    subnormal: int
    """Inputs stored as a nonzero subnormal (fewer mantissa bits than a normal value)."""

    @property
    def underflow_fraction(self) -> float:
        return self.underflow / self.numel if self.numel else 0.0

    @property
    def saturated_fraction(self) -> float:
        return self.saturated / self.numel if self.numel else 0.0

    @property
    def subnormal_fraction(self) -> float:
        return self.subnormal / self.numel if self.numel else 0.0

    def as_dict(self) -> dict[str, int | float]:
        d: dict[str, int | float] = dict(asdict(self))
        d["underflow_fraction"] = self.underflow_fraction
        d["saturated_fraction"] = self.saturated_fraction
        d["subnormal_fraction"] = self.subnormal_fraction
        return d


def quant_stats(
    x: torch.Tensor, stored: torch.Tensor, scales: torch.Tensor | float, fp8_dtype: torch.dtype
) -> QuantStats:
    """Count underflow, saturation and subnormals of `stored = quantize(x, scales, fp8_dtype)`."""
    fmt = fp8_format(fp8_dtype)
    # amax / max rounds in float32, so the largest value may land one ulp above max: not clipped.
    limit = fmt.max_value * (1.0 + SATURATION_RTOL)
    s = stored.float().abs()
    stored_zero = s == 0
    return QuantStats(
        numel=x.numel(),
        nonzero=int(torch.count_nonzero(x)),
        underflow=int(torch.count_nonzero(stored_zero & (x != 0))),
        saturated=int(torch.count_nonzero((x.float() / scales).abs_() > limit)),
        subnormal=int(torch.count_nonzero(~stored_zero & (s < fmt.min_normal))),
    )


@dataclass
class QuantizedTensor:
    """An fp8 tensor with its scales: real value ~ data * scales."""

    data: torch.Tensor
    """fp8 values, same shape as the input."""
    scales: torch.Tensor
    """float32, broadcast shape of the scheme (see `scale_shape`)."""
    scheme: Scheme
    stats: QuantStats

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return dequantize(self.data, self.scales, dtype)


def quantize_tensor(
    x: torch.Tensor,
    scheme: Scheme,
    fp8_dtype: torch.dtype,
    *,
    calibration_tokens: int | None = DEFAULT_CALIBRATION_TOKENS,
    scales: torch.Tensor | None = None,
) -> QuantizedTensor:
    """Quantise `x` `[num_tokens, num_kv_heads, head_dim]` with a scheme.

    `scales` reuses scales calibrated elsewhere (a static scheme quantising new tokens with the
    scales it was calibrated with); it must broadcast against `x`.
    """
    if scales is None:
        scales = compute_scales(x, scheme, fp8_dtype, calibration_tokens=calibration_tokens)
    stored = quantize(x, scales, fp8_dtype)
    return QuantizedTensor(stored, scales, scheme, quant_stats(x, stored, scales, fp8_dtype))


def kv_schemes(scheme: Scheme) -> tuple[Scheme, Scheme]:
    """(K scheme, V scheme) for a study scheme: `channel` is per-channel K with per-token V
    (KIVI, KVQuant); every other scheme applies to both."""
    return ("channel", "token") if scheme == "channel" else (scheme, scheme)


def quantize_calibrated(
    x: torch.Tensor,
    scheme: Scheme,
    fp8_dtype: torch.dtype,
    calibration: torch.Tensor | None = None,
) -> QuantizedTensor:
    """Quantise `x` `[num_tokens, num_kv_heads, head_dim]`; a static scheme takes its scales from
    `calibration` (other tokens of the same model, `[n, num_kv_heads, head_dim]`, all of them)
    when given, else from all of `x`. `none` and the dynamic `token` scheme ignore it."""
    if scheme in STATIC_SCHEMES and calibration is not None:
        scales = compute_scales(calibration, scheme, fp8_dtype, calibration_tokens=None)
        return quantize_tensor(x, scheme, fp8_dtype, scales=scales)
    return quantize_tensor(x, scheme, fp8_dtype, calibration_tokens=None)


def token_head_quantize(
    kv_source: torch.Tensor, fp8_dtype: torch.dtype
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Per-(token, head) fp8 copy of an NHD cache `[num_pages, 2, page_size, num_kv_heads, D]`.

    Returns (fp8 cache, (k_sf, v_sf) float32 `[num_pages, page_size, num_kv_heads]`, the
    dequantised cache in float32): sf = amax over head_dim / format max (1 for an all-zero row).
    The scales' layout is FlashInfer 0.7.4's `use_token_head_sf` one (real = stored * sf).
    """
    amax = kv_source.abs().float().amax(dim=-1)  # [P, 2, S, H]
    sf = torch.where(amax > 0, amax / FP8_MAX[fp8_dtype], torch.ones_like(amax))
    stored = quantize(kv_source, sf[..., None], fp8_dtype)
    dequant = stored.float() * sf[..., None]
    return stored, (sf[:, 0].contiguous(), sf[:, 1].contiguous()), dequant
