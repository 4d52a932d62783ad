"""Loading FlashAttention builds and calling them uniformly.

Three builds are known:

- `flash_attn_interface`: the official FlashAttention-3 Hopper package, from the
  `tokenspeed-fa3` wheel (forward only; paged KV, fp16/bf16/fp8_e4m3, split-KV, pack-GQA) or
  built from source (flash-attention/hopper); `flash_attn_config.CONFIG["build_flags"]` says
  what was compiled out.
- `fa3_fwd_interface`: fa3-fwd, a forward-only wheel of the same code; its `fa3_fwd_config`
  says what was compiled out (0.0.3: no paged KV, no fp16: bf16 and fp8_e4m3 only).
- `flash_attn`: FlashAttention-2 (fp16/bf16, no fp8).

FA3's raw operator (`torch.ops.fa3_fwd.fwd`, `torch.ops.flash_attn_3.fwd`) takes an `out`
buffer, so a run writes into a fixed tensor; the Python wrappers are `torch.library.custom_op`s
that may not return an input, so they always allocate. `FlashLib.forward` uses the raw operator
when its schema is known and the public functions otherwise.

Every row records the build that ran (`FlashLib.provenance`: module, distribution, version and
the build flags that are set); `build_summary` is the line `attnbench backends` prints.
"""

from __future__ import annotations

import importlib
import inspect
import re
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
    "flash_attn_interface": ("tokenspeed-fa3", "flash_attn_3", "flash-attn-3", "flashattn-hopper"),
    "fa3_fwd_interface": ("fa3-fwd", "fa3_fwd"),
    "flash_attn": ("flash-attn", "flash_attn"),
}
FA3_INSTALL_HINT = (
    "pip install tokenspeed-fa3 (the official FlashAttention-3 Hopper build with paged KV; "
    "Linux x86_64/aarch64 wheels), or fa3-fwd (forward kernels, no paged KV), or build "
    "flash-attention/hopper (`python setup.py install`)"
)
_FLAG_PREFIX = re.compile(r"^FLASH_?ATTENTION_")
_FEATURES = {
    "BACKWARD": "backward",
    "SPLIT": "split-KV",
    "PAGEDKV": "paged KV",
    "APPENDKV": "append-KV",
    "LOCAL": "sliding window",
    "SOFTCAP": "softcap",
    "PACKGQA": "pack-GQA",
    "FP16": "fp16",
    "FP8": "fp8",
    "VARLEN": "varlen",
    "CLUSTER": "clusters",
    "SM8x": "sm8x kernels",
}
"""Friendly names of the features a `FLASHATTENTION_DISABLE_<X>` flag compiles out."""
HEAD_DIM_BUCKETS = (64, 96, 128, 192, 256)
"""FA3's head_dim kernels: a head_dim runs on the smallest bucket built that holds it."""
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
    distribution: str = ""
    """The installed distribution that provides `import_name` (e.g. `tokenspeed-fa3`)."""

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
    def sinks(self) -> bool:
        """The build takes attention `sinks` (tokenspeed-fa3 does; upstream FA3 and FA2 do not):
        in the raw operator's schema, else in the public function's signature."""
        if self.raw is not None:
            return "sinks" in self.raw_args
        func = getattr(self.module, "flash_attn_with_kvcache", None)
        try:
            return func is not None and "sinks" in inspect.signature(func).parameters
        except (TypeError, ValueError):
            return False

    @property
    def softcap(self) -> bool:
        """The build applies logit soft-capping (`softcap=`): not compiled out
        (FLASHATTENTION_DISABLE_SOFTCAP, set in tokenspeed-fa3 3.0.0.post20260810) and in the
        raw operator's schema, else in the public function's signature (FA2 since 2.6)."""
        if self.disabled("SOFTCAP"):
            return False
        if self.raw is not None:
            return "softcap" in self.raw_args
        name = "flash_attn_with_kvcache" if self.generation == 3 else "flash_attn_varlen_func"
        func = getattr(self.module, name, None)
        try:
            return func is not None and "softcap" in inspect.signature(func).parameters
        except (TypeError, ValueError):
            return False

    @property
    def window(self) -> bool:
        """The build has sliding-window (local) kernels (FLASHATTENTION_DISABLE_LOCAL unset)."""
        return not self.disabled("LOCAL")

    @property
    def label(self) -> str:
        return f"{self.import_name} {self.version}".strip()

    def head_dim_bucket(self, head_dim: int) -> int | None:
        """The FA3 kernel head_dim that runs `head_dim` in this build, or None (none built)."""
        built = [d for d in HEAD_DIM_BUCKETS if not self.disabled(f"HDIM{d}")]
        return next((d for d in built if head_dim <= d), None)

    def lacks(self) -> list[str]:
        """Features the build flags compiled out, in the config's order (friendly names; head_dim
        kernels grouped: `head_dim 64/96`)."""
        groups: dict[str, list[str]] = {}
        for flag, on in self.build_flags.items():
            if on and _is_disable(flag):
                name, size = _feature(flag)
                groups.setdefault(name, []).extend([size] if size else [])
        return [f"{name} {'/'.join(sizes)}".strip() for name, sizes in groups.items()]

    def provenance(self) -> dict[str, str]:
        """Which build ran, for a row's details: module, distribution, version, and the build
        flags that are set (`DISABLE_BACKWARD,...`; `unknown` without a config module)."""
        flags = [_FLAG_PREFIX.sub("", k) for k, on in self.build_flags.items() if on]
        return {
            "fa_module": self.import_name,
            "fa_distribution": self.distribution,
            "fa_version": self.version,
            "fa_build_flags": ",".join(flags) if self.build_flags else "unknown",
        }

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> Any:
        """FA3 forward; returns (out, softmax_lse). `kw` uses the raw operator's argument names
        (out, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, page_table,
        q_descale, k_descale, v_descale, softmax_scale, is_causal, window_size_left,
        window_size_right, scheduler_metadata, num_splits, pack_gqa, sinks). softmax_lse is
        `[num_qo_heads, total_q]` for varlen q."""
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
        if "window_size_left" in kw:  # the public functions take one (left, right) pair
            kw["window_size"] = (kw.pop("window_size_left"), kw.pop("window_size_right", -1))
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


def build_summary(lib: FlashLib | str) -> str:
    """One line on the build found: `flash_attn_interface 3.0.0.post20260810 (tokenspeed-fa3);
    lacks: backward, softcap` (or why none loads, when `lib` is that reason)."""
    if isinstance(lib, str):
        return lib
    head = lib.label
    if lib.distribution and lib.distribution != lib.import_name:
        head += f" ({lib.distribution})"
    if not lib.build_flags:
        return head if lib.generation == 2 else f"{head}; build flags unknown (no config module)"
    lacks = lib.lacks()
    return f"{head}; lacks: {', '.join(lacks)}" if lacks else f"{head}; lacks nothing"


def _is_disable(flag: str) -> bool:
    return _FLAG_PREFIX.sub("", flag).startswith("DISABLE_")


def _feature(flag: str) -> tuple[str, str]:
    """(feature, size) a DISABLE flag compiles out: (`paged KV`, ``), (`head_dim`, `96`)."""
    name = _FLAG_PREFIX.sub("", flag).removeprefix("DISABLE_")
    if m := re.fullmatch(r"HDIMDIFF(\d+)", name):
        return "head_dim_v != head_dim", m[1]
    if m := re.fullmatch(r"HDIM(\d+)", name):
        return "head_dim", m[1]
    return _FEATURES.get(name, name.lower()), ""


def _distribution(import_name: str) -> tuple[str, str]:
    """(distribution, version) of the installed package that provides `import_name`."""
    try:
        providers = metadata.packages_distributions().get(import_name, [])
    except Exception:  # a broken distribution elsewhere must not hide this one
        providers = []
    for dist in [*providers, *_DISTRIBUTIONS.get(import_name, ())]:
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "", ""


def _raw_namespace(module: ModuleType) -> tuple[Any, frozenset[str]]:
    """The module's torch.ops namespace if its `fwd` schema has an `out` argument
    (`flash_attn_3_gpu`: flash_attn_interface 3.0; `flash_attn_3_cuda`: older source builds)."""
    for attr in ("fa3_fwd_cuda", "flash_attn_3_gpu", "flash_attn_3_cuda"):
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
        dist, version = _distribution(name)
        return FlashLib(module, name, version, 3, _build_flags(name), raw, names, dist)
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
    dist, dist_version = _distribution("flash_attn")
    version = str(getattr(module, "__version__", "")) or dist_version
    if not version.startswith("2."):
        return f"flash_attn {version} is not FlashAttention-2 (2.x expected)"
    return FlashLib(module, "flash_attn", version, 2, distribution=dist)
