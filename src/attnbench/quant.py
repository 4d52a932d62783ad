"""FP8 quantisation of KV caches.

Convention (FlashInfer's k_scale/v_scale, FA3's descale): real value = stored fp8 value * scale.
"""

from __future__ import annotations

import torch

FP8_MAX: dict[torch.dtype, float] = {
    torch.float8_e4m3fn: 448.0,
    torch.float8_e5m2: 57344.0,
}


def per_tensor_scale(x: torch.Tensor, fp8_dtype: torch.dtype) -> float:
    """Scale that maps the tensor's largest magnitude onto the format's largest finite value."""
    amax = float(x.abs().amax().float())
    if amax == 0.0:
        return 1.0
    return amax / FP8_MAX[fp8_dtype]


def quantize(x: torch.Tensor, scale: float | torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    """x / scale, saturated to the format's range, cast to fp8."""
    limit = FP8_MAX[fp8_dtype]
    return (x.float() / scale).clamp_(-limit, limit).to(fp8_dtype)


def dequantize(
    x: torch.Tensor, scale: float | torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    return x.to(dtype) * scale
