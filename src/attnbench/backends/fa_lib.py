"""Loading FlashAttention builds and calling them uniformly.

Three builds are known:

- `flash_attn_interface`: the official FlashAttention-3 Hopper package (built from source).
- `fa3_fwd_interface`: fa3-fwd, a forward-only wheel of the same code; its `fa3_fwd_config`
  says what was compiled out (0.0.3: no paged KV, no fp16: bf16 and fp8_e4m3 only).
- `flash_attn`: FlashAttention-2 (fp16/bf16, no fp8).

FA3's raw operator (`torch.ops.fa3_fwd.fwd`, `torch.ops.flash_attn_3.fwd`) takes an `out`
buffer, so a run writes into a fixed tensor; the Python wrappers are `torch.library.custom_op`s
that may not return an input, so they always allocate. `FlashLib.forward` uses the raw operator
when its schema is known and the public functions otherwise.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from types import ModuleType
from typing import Any

import torch

FA3_MODULES = ("flash_attn_interface", "fa3_fwd_interface")
_CONFIG_MODULES = {
    "flash_attn_interface": "flash_attn_config",
    "fa3_fwd_interface": "fa3_fwd_config",
}
_DISTRIBUTIONS = {
    "flash_attn_interface": ("flash_attn_3", "flash-attn-3", "flashattn-hopper"),
    "fa3_fwd_interface": ("fa3-fwd", "fa3_fwd"),
    "flash_attn": ("flash-attn", "flash_attn"),
}
FA3_INSTALL_HINT = (
    "pip install fa3-fwd (FlashAttention-3 forward kernels), or build "
    "flash-attention/hopper (`python setup.py install`) for the official flash_attn_interface"
)
FA2_INSTALL_HINT = "pip install flash-attn --no-build-isolation (FlashAttention-2)"


@dataclass(frozen=True)
class FlashLib:
    """A loaded FlashAttention build and what it supports."""

    module: ModuleType
    import_name: str
    version: str
    generation: int
    """2 (flash_attn) or 3 (Hopper builds)."""
    build_flags: dict[str, bool] = field(default_factory=dict)
    raw: Any = None
    """The torch.ops namespace with `fwd(..., out=...)`, or None (then public functions)."""
    raw_args: frozenset[str] = frozenset()

    def disabled(self, flag: str) -> bool:
        """True when the build compiled feature `flag` out (e.g. `FP16`, `PAGEDKV`)."""
        return bool(self.build_flags.get(f"FLASHATTENTION_DISABLE_{flag}", False))

    @property
    def paged(self) -> bool:
        return self.generation == 3 and not self.disabled("PAGEDKV")

    @property
    def fp16(self) -> bool:
        return not self.disabled("FP16")

    @property
    def fp8(self) -> bool:
        return self.generation == 3 and not self.disabled("FP8")

    @property
    def has_scheduler_metadata(self) -> bool:
        return hasattr(self.module, "get_scheduler_metadata")

    @property
    def label(self) -> str:
        return f"{self.import_name} {self.version}".strip()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> Any:
        """FA3 forward; returns (out, softmax_lse). `kw` uses the raw operator's argument names
        (out, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, page_table,
        q_descale, k_descale, v_descale, softmax_scale, is_causal, scheduler_metadata,
        num_splits, pack_gqa). softmax_lse is `[num_qo_heads, total_q]` for varlen q."""
        if self.raw is not None:
            unknown = set(kw) - self.raw_args
            if unknown:
                raise TypeError(f"{self.label}: fwd has no argument(s) {sorted(unknown)}")
            res = self.raw.fwd(q, k, v, **kw)
            return res[0], res[1]
        return self._public_forward(q, k, v, **kw)

    def _public_forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> Any:
        kw.pop("out", None)
        causal = kw.pop("is_causal", False)
        if "cu_seqlens_k" in kw:  # packed K/V
            res = self.module.flash_attn_varlen_func(
                q,
                k,
                v,
                kw.pop("cu_seqlens_q"),
                kw.pop("cu_seqlens_k"),
                kw.pop("max_seqlen_q"),
                kw.pop("max_seqlen_k"),
                causal=causal,
                return_attn_probs=True,
                **kw,
            )
        else:  # a KV cache (contiguous or paged) with per-request lengths
            kw["cache_seqlens"] = kw.pop("seqused_k")
            res = self.module.flash_attn_with_kvcache(
                q, k, v, causal=causal, return_softmax_lse=True, **kw
            )
        return res[0], res[1]


def _version(import_name: str) -> str:
    for dist in _DISTRIBUTIONS.get(import_name, ()):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return ""


def _raw_namespace(module: ModuleType) -> tuple[Any, frozenset[str]]:
    """The module's torch.ops namespace if its `fwd` schema has an `out` argument."""
    for attr in ("fa3_fwd_cuda", "flash_attn_3_cuda"):
        ns = getattr(module, attr, None)
        if not isinstance(ns, torch._ops._OpNamespace):
            continue
        try:
            schema = ns.fwd.default._schema
        except (AttributeError, RuntimeError):
            continue
        names = frozenset(a.name for a in schema.arguments)
        if {"out", "is_causal", "num_splits"} <= names:
            return ns, names
    return None, frozenset()


def _build_flags(import_name: str) -> dict[str, bool]:
    name = _CONFIG_MODULES.get(import_name)
    if name is None:
        return {}
    try:
        config = importlib.import_module(name).CONFIG
    except Exception:  # no config module: assume everything was built
        return {}
    flags = config.get("build_flags", {}) if isinstance(config, dict) else {}
    return {str(k): bool(v) for k, v in flags.items()}


@cache
def load_fa3() -> FlashLib | str:
    """The first importable FA3 build, or why none loads (with the install hint)."""
    errors = []
    for name in FA3_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
            continue
        except Exception as exc:  # a broken build (missing CUDA libs...) is unavailable
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        raw, names = _raw_namespace(module)
        return FlashLib(module, name, _version(name), 3, _build_flags(name), raw, names)
    missing = all("No module named" in e for e in errors)
    if missing:
        return f"FlashAttention-3 not installed: {FA3_INSTALL_HINT}"
    return "FlashAttention-3 does not load: " + "; ".join(errors)[:300]


@cache
def load_fa2() -> FlashLib | str:
    """flash_attn (FlashAttention-2), or why it does not load."""
    try:
        module = importlib.import_module("flash_attn")
    except ImportError:
        return f"FlashAttention-2 not installed: {FA2_INSTALL_HINT}"
    except Exception as exc:
        return f"flash_attn does not load: {type(exc).__name__}: {exc}"[:300]
    version = str(getattr(module, "__version__", "")) or _version("flash_attn")
    if not version.startswith("2."):
        return f"flash_attn {version} is not FlashAttention-2 (2.x expected)"
    return FlashLib(module, "flash_attn", version, 2)
