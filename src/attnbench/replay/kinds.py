"""Layer kinds in the replay: the attention shape each kind's rows must have, its cost models
per variant, and a stated roofline where no rows exist yet.

A deployment runs one attention call per layer kind (`models.layer_shapes`): gpt-oss and Gemma-2
a windowed and a full kind, an MLA model its absorbed latent call. Each kind's rows are those of
its heads and its features (`shape.feature_names`: window size, sinks, soft-cap, MLA), so a
windowed kernel's rows never fit a full layer's model. The main kind (most layers; full before
windowed on a tie) names the replay's candidates; a variant without rows at another kind prices
it with its main-kind model at that kind's window (`stepcost.KindCost`), and says so.

Roofline (`roofline_model`), for a model with attention features beyond plain GQA whose main kind
has no rows on the GPU (a family nothing has measured yet; plain GQA models still refuse):

    decode  per call = LAUNCH_US + KV bytes read / the headers' read bandwidth
    prefill per call = LAUNCH_US + FLOPs / the headers' matmul TFLOP/s

KV bytes as the fitted models count them (`ShapeKey.kv_bytes_per_token`: MLA reads its one
latent of kv_lora_rank + rope values per token, shared by every head). MLA prefill is priced in
the decompressed form engines run it in (qk_nope + qk_rope and v per head, not the absorbed
576 + 512): its FLOP coefficient is scaled by that ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnbench.replay.costmodel import DECODE_FEATURES, PREFILL_FEATURES, AttentionCostModel
from attnbench.replay.deployment import Deployment
from attnbench.replay.fit import LinearFit
from attnbench.replay.shape import ShapeKey
from attnbench.replay.stepcost import KindCost
from attnbench.workload.models import LayerShape

ROOFLINE = "roofline"
"""The candidate name of the stated roofline (no variant has that name)."""
LAUNCH_US = 5.0
"""Fixed cost of one attention call in the roofline: a stated assumption (a launch and its
tail), not a measurement."""


def kind_key(dep: Deployment, kind: LayerShape) -> ShapeKey:
    """The shape rows of `kind` must have; a kind without features keeps features=None (any
    row of its heads, as the replay matched before layer kinds)."""
    f = kind.spec_fields
    names: list[str] = []
    v_dim = 0
    if f.get("mla") is not None:
        names.append("mla")
        v_dim = f["mla"].kv_lora_rank
    if f.get("window_left", -1) >= 0:
        names.append(f"win{f['window_left']}")
    if f.get("sinks"):
        names.append("sinks")
    if f.get("logits_soft_cap"):
        names.append(f"cap{f['logits_soft_cap']:g}")
    return ShapeKey(
        kind.num_qo_heads,
        kind.num_kv_heads,
        kind.head_dim,
        dep.dtype,
        dep.kv_dtype,
        dep.page_size,
        tuple(names) if names else None,
        v_dim,
    )


def window_of(kind: LayerShape) -> int:
    """Tokens a layer of `kind` reads per request at most (window_left + 1); 0: all."""
    left = int(kind.spec_fields.get("window_left", -1))
    return left + 1 if left >= 0 else 0


def main_kind(kinds: list[LayerShape]) -> int:
    """Index of the kind that names the replay's candidates: most layers, full on a tie."""
    return max(range(len(kinds)), key=lambda i: (kinds[i].num_layers, not window_of(kinds[i])))


@dataclass(frozen=True)
class LayerKinds:
    """Per variant, one cost model per layer kind (in `Deployment.kinds` order)."""

    counts: tuple[int, ...]
    windows: tuple[int, ...]
    models: dict[str, tuple[AttentionCostModel, ...]]

    def costs(
        self, dec: str, pre: str, padded: AttentionCostModel | None = None
    ) -> tuple[KindCost, ...]:
        """The kinds of a candidate whose decode is `dec`'s (or the padded twin `padded`,
        at every kind) and prefill `pre`'s."""
        out = []
        for i, (count, window) in enumerate(zip(self.counts, self.windows, strict=True)):
            d = padded if padded is not None else self.models[dec][i]
            out.append(KindCost(count, window, d, self.models[pre][i]))
        return tuple(out)


def _unbounded(features: tuple[str, ...], coef: tuple[float, ...]) -> LinearFit:
    n = len(features)
    return LinearFit(
        features=features,
        coef=coef,
        lo=(0.0,) * n,
        hi=(math.inf,) * n,
        n_rows=0,
        train_rel_rmse=math.nan,
        cv_rel_rmse=math.nan,
        cv_max_rel_err=math.nan,
    )


def roofline_model(
    key: ShapeKey, read_gbps: float, tflops: float, prefill_flop_ratio: float = 1.0
) -> AttentionCostModel:
    """The stated roofline at `key` (see the module docstring)."""
    assert "kv_mb" in DECODE_FEATURES
    assert "gflop" in PREFILL_FEATURES
    decode = _unbounded(("const", "kv_mb"), (LAUNCH_US, 1e3 / read_gbps))
    prefill = _unbounded(("const", "gflop"), (LAUNCH_US, 1e3 / tflops * prefill_flop_ratio))
    return AttentionCostModel(
        ROOFLINE,
        key,
        decode,
        prefill,
        source=f"roofline: {read_gbps:.0f} GB/s read, {tflops:.0f} TFLOP/s, {LAUNCH_US:g} us/call",
        notes=("no rows at this shape: a stated roofline, not a fit",),
    )


def mla_prefill_ratio(dep: Deployment) -> float:
    """Decompressed over absorbed FLOPs per pair of an MLA model (1.0 for others)."""
    m = dep.model_shape.mla
    if m is None:
        return 1.0
    return (m.qk_head_dim + m.v_head_dim) / (m.latent_dim + m.kv_lora_rank)
