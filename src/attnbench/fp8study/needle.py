"""Needle in a haystack, one attention head at a time, in fp64 on dequantised K/V.

Construction (per trial, per KV head h; one query per head):

1. Draw a haystack of L keys and values and a query q from a data kind (see `data.py`); the
   exact logits are s_i = q . k_i / sqrt(head_dim).
2. The needle sits at position p = round(depth * (L - 1)). Its target logit is set from the
   *other* L - 1 logits: `max+m` puts it m above the strongest distractor (top-1 by exactly m,
   so the fp64 answer always retrieves it and every miss is the cache's rounding; the number of
   distractors within m of the top grows with L, so a fixed margin gets harder with context);
   `lse+m` puts it m above the log-sum-exp of the distractors (attention weight sigmoid(m) on
   the needle: a dominant retrieval, for output closeness).
3. The needle key is the haystack key at p moved along q until its logit hits the target:
   k_n = k_p + (target / sm - q . k_p) q / |q|^2. The needle value is a fresh value draw.
4. Static schemes take their scales from the haystack (the needle is a later token quantised
   with them, so it may saturate); `token` scales each row on its own.

Per cell (data, format, scheme, L, depth, target) over trials x heads: recall = fraction whose
argmax logit is the needle, the needle's attention weight, cos(output, needle value) and
cos(output, exact output).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import torch

from attnbench.fp8study.data import QKVShape, make_qkv
from attnbench.workload.quant import Scheme, fp8_format, kv_schemes, quantize_tensor

if TYPE_CHECKING:
    from attnbench.fp8study.config import StudyConfig


@dataclass(frozen=True)
class NeedleTarget:
    """Where the needle's logit sits: `offset` above the distractors' max or log-sum-exp."""

    ref: Literal["max", "lse"]
    offset: float

    @property
    def label(self) -> str:
        return f"{self.ref}+{self.offset:g}"

    @classmethod
    def parse(cls, text: str) -> NeedleTarget:
        ref, sep, off = text.strip().lower().partition("+")
        if ref not in ("max", "lse") or not sep:
            raise ValueError(f"needle target {text!r}: expected max+M or lse+M, e.g. max+0.1")
        try:
            offset = float(off)
        except ValueError:
            raise ValueError(f"needle target {text!r}: {off!r} is not a number") from None
        if ref == "max" and offset <= 0:
            raise ValueError(f"needle target {text!r}: a max margin must be positive")
        return cls("max" if ref == "max" else "lse", offset)


def target_logits(hay_logits: torch.Tensor, p: int, target: NeedleTarget) -> torch.Tensor:
    """`[heads]` needle logits for position p from the other positions' `[heads, L]` logits."""
    others = hay_logits.clone()
    others[:, p] = float("-inf")
    base = others.amax(dim=-1) if target.ref == "max" else torch.logsumexp(others, dim=-1)
    return base + target.offset


def needle_key(q: torch.Tensor, k_p: torch.Tensor, logit: torch.Tensor, sm: float) -> torch.Tensor:
    """`[heads, head_dim]`: k_p moved along q so that sm * q . k equals `logit` per head."""
    dot = (q * k_p).sum(-1)
    step = (logit / sm - dot) / (q * q).sum(-1)
    return k_p + step[:, None] * q


@dataclass
class _Cell:
    n: int = 0
    hits: int = 0
    weight: list[float] = field(default_factory=list)
    cos_needle: list[float] = field(default_factory=list)
    cos_out: list[float] = field(default_factory=list)

    def add(self, hit: torch.Tensor, w: torch.Tensor, cn: torch.Tensor, co: torch.Tensor) -> None:
        self.n += hit.numel()
        self.hits += int(hit.sum())
        self.weight += w.tolist()
        self.cos_needle += cn.tolist()
        self.cos_out += co.tolist()


Rounder = Callable[[torch.Tensor], torch.Tensor]


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


@dataclass
class _Variant:
    """One way of storing the cache: `exact` (fp64) or (format, scheme)."""

    fmt: str
    scheme: str
    k: torch.Tensor
    v: torch.Tensor
    round_k: Rounder
    round_v: Rounder


def _variants(cfg: StudyConfig, k: torch.Tensor, v: torch.Tensor) -> Iterator[_Variant]:
    """The exact cache first, then each (format, scheme), one at a time (a 64k haystack's
    dequantised K/V take 1 GiB in fp64)."""
    yield _Variant("fp64", "exact", k, v, _identity, _identity)
    for fmt_name in cfg.formats:
        fmt = fp8_format(fmt_name)
        for scheme in cfg.schemes:
            ks, vs = kv_schemes(scheme)
            kq = quantize_tensor(k, ks, fmt.dtype, calibration_tokens=None)
            vq = quantize_tensor(v, vs, fmt.dtype, calibration_tokens=None)
            yield _Variant(
                fmt.name,
                scheme,
                kq.dequantize(torch.float64),
                vq.dequantize(torch.float64),
                _rounder(ks, fmt.dtype, kq.scales),
                _rounder(vs, fmt.dtype, vq.scales),
            )


def _rounder(scheme: Scheme, dtype: torch.dtype, scales: torch.Tensor) -> Rounder:
    """Quantise-dequantise new rows `[n, heads, head_dim]` the way the scheme stores them."""

    def round_rows(x: torch.Tensor) -> torch.Tensor:
        if scheme == "token":  # dynamic: each new row gets its own scale
            q = quantize_tensor(x, scheme, dtype)
        else:  # none or static: the scales the cache was calibrated with
            q = quantize_tensor(x, scheme, dtype, scales=scales)
        return q.dequantize(torch.float64)

    return round_rows


def _cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a, b, dim=-1, eps=1e-300)


CellKey = tuple[str, str, str, int, float, str]


def needle_study(cfg: StudyConfig) -> list[dict[str, Any]]:
    """One record per (data, format, scheme, length, depth, target) cell; format `fp64`,
    scheme `exact` is the unquantised cache (recall 1 by construction for `max+m`)."""
    targets = [NeedleTarget.parse(t) for t in cfg.needle_targets]
    cells: dict[CellKey, _Cell] = defaultdict(_Cell)
    for kind in cfg.needle_data:
        for length in cfg.needle_lengths:
            for trial in range(cfg.needle_trials):
                _trial(cfg, kind, length, trial, targets, cells)
    return [_record(key, cell) for key, cell in cells.items()]


def _trial(
    cfg: StudyConfig,
    kind: str,
    length: int,
    trial: int,
    targets: list[NeedleTarget],
    cells: dict[CellKey, _Cell],
) -> None:
    """One haystack: every (depth, target) needle at once, for every cache variant.

    n = depths x targets needles; logits `[n, heads, L]` are the haystack's with column p(n)
    replaced by the needle's logit; out = probs @ V with V's row p(n) replaced by the needle
    value (added as a correction, so V is never copied per needle).
    """
    device = torch.device(cfg.device)
    sm = 1.0 / math.sqrt(cfg.head_dim)
    sample = cfg.seed * 7919 + length * 31 + trial
    shape = QKVShape(length, 1, cfg.needle_heads, cfg.needle_heads, cfg.head_dim)
    data = make_qkv(kind, shape, seed=cfg.seed, sample_seed=sample, device=device)
    one = replace(shape, num_tokens=1)
    v_needle = make_qkv(kind, one, seed=cfg.seed, sample_seed=sample + 1, device=device).v
    q = data.q[0]  # [heads, head_dim]
    hay = torch.einsum("hd,lhd->hl", q, data.k) * sm
    grid = [(p, t) for p in (round(d * (length - 1)) for d in cfg.needle_depths) for t in targets]
    labels = [(d, t.label) for d in cfg.needle_depths for t in targets]
    pos = torch.tensor([p for p, _ in grid], device=device)
    keys = torch.stack([needle_key(q, data.k[p], target_logits(hay, p, t), sm) for p, t in grid])
    n, heads = len(grid), cfg.needle_heads
    exact_out: torch.Tensor | None = None
    for var in _variants(cfg, data.k, data.v):
        hay_v = hay if var.scheme == "exact" else torch.einsum("hd,lhd->hl", q, var.k) * sm
        needle_logits = torch.einsum("hd,nhd->nh", q, var.round_k(keys)) * sm
        logits = hay_v.expand(n, heads, length).clone()
        logits.scatter_(2, pos[:, None, None].expand(n, heads, 1), needle_logits[..., None])
        probs = torch.softmax(logits, dim=-1)
        weight = probs.gather(2, pos[:, None, None].expand(n, heads, 1))  # [n, heads, 1]
        out = torch.einsum("nhl,lhd->nhd", probs, var.v)
        out += weight * (var.round_v(v_needle) - var.v[pos])
        if exact_out is None:
            exact_out = out
        # one device-to-host copy per variant, then per-cell bookkeeping on the host
        hits = (logits.argmax(dim=-1) == pos[:, None]).cpu()
        w, cos_needle, cos_out = (
            t.cpu() for t in (weight[..., 0], _cos(out, v_needle), _cos(out, exact_out))
        )
        for i, (depth, label) in enumerate(labels):
            cells[kind, var.fmt, var.scheme, length, depth, label].add(
                hits[i], w[i], cos_needle[i], cos_out[i]
            )


def _record(key: tuple[str, str, str, int, float, str], cell: _Cell) -> dict[str, Any]:
    kind, fmt, scheme, length, depth, target = key
    return {
        "data": kind,
        "format": fmt,
        "scheme": scheme,
        "length": length,
        "depth": depth,
        "target": target,
        "trials": cell.n,
        "hits": cell.hits,
        "recall": cell.hits / cell.n if cell.n else 0.0,
        "needle_weight_mean": _mean(cell.weight),
        "needle_cosine_mean": _mean(cell.cos_needle),
        "needle_cosine_min": min(cell.cos_needle, default=float("nan")),
        "output_cosine_mean": _mean(cell.cos_out),
        "output_cosine_min": min(cell.cos_out, default=float("nan")),
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
