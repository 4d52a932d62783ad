"""Model shapes of `recommend --model`: a preset at a tp, its shard's heads, the rows of those
heads (whatever model name a row carries), and the index of the shapes the rows hold."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pandas as pd

from attnbench.analysis.frame import ok_rows
from attnbench.workload.models import MODELS, get_model, layer_shapes, valid_tps


@dataclass(frozen=True)
class ModelShape:
    model: str
    tp: int
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    also: tuple[str, ...] = ()
    """Other presets whose shard at this tp has the same heads."""
    mla: bool = False
    """An MLA model: `num_kv_heads` 1 (the latent) and `head_dim` kv_lora_rank + rope."""

    @property
    def label(self) -> str:
        return f"{self.model} tp{self.tp}"

    @property
    def heads(self) -> str:
        return f"h{self.num_qo_heads}/{self.num_kv_heads} d{self.head_dim}"


def model_shape(model: str, tp: int) -> ModelShape:
    """The preset's shard at `tp`; ValueError naming the allowed values."""
    m = get_model(model)
    tps = valid_tps(m)
    if tp not in tps:
        raise ValueError(f"--tp={tp} for {model}; allowed: {', '.join(map(str, tps))}")
    name = model.strip().lower()
    if m.mla is not None:  # query heads split by tp, one latent of kv_lora_rank + rope per token
        layer = layer_shapes(m, tp)[0]
        return ModelShape(name, tp, layer.num_qo_heads, 1, layer.head_dim, mla=True)
    s = m.shard(tp)
    return ModelShape(name, tp, s.num_qo_heads, s.num_kv_heads, s.head_dim, _twins(name, s, tp))


def _twins(name: str, s: Any, tp: int) -> tuple[str, ...]:
    out = []
    for other, m in MODELS.items():
        if other == name or m.mla is not None or tp not in valid_tps(m):
            continue
        t = m.shard(tp)
        if (t.num_qo_heads, t.num_kv_heads, t.head_dim) == (
            s.num_qo_heads,
            s.num_kv_heads,
            s.head_dim,
        ):
            out.append(other)
    return tuple(out)


def shape_rows(ok: pd.DataFrame, shape: ModelShape) -> pd.DataFrame:
    """The ok rows of this shape's heads (MLA rows have other head dims)."""
    if ok.empty:
        return ok
    mask = (
        (ok["num_qo_heads"] == shape.num_qo_heads)
        & (ok["num_kv_heads"] == shape.num_kv_heads)
        & (ok["head_dim"] == shape.head_dim)
    )
    return ok[mask]


def preset_of(heads: tuple[int, int, int], named: Counter[tuple[str, int]]) -> ModelShape | None:
    """The preset the rows of these heads stand for: the model the rows name most, else the
    first preset (in `attnbench models` order) whose shard at some tp has these heads."""
    for (model, tp), _ in sorted(named.items(), key=lambda kv: (-kv[1], kv[0])):
        try:
            return model_shape(model, tp)
        except ValueError:
            continue
    for name, m in MODELS.items():
        if m.mla is not None or m.head_dim != heads[2]:
            continue
        for tp in valid_tps(m):
            s = m.shard(tp)
            if (s.num_qo_heads, s.num_kv_heads) == heads[:2]:
                return model_shape(name, tp)
    return None


def _mla_of(heads: tuple[int, int, int], named: Counter[tuple[str, int]]) -> ModelShape | None:
    for model, tp in sorted(named):
        if model in MODELS and MODELS[model].mla is not None:
            return ModelShape(model, tp, *heads, mla=True)
    return None


@dataclass(frozen=True)
class IndexLine:
    shape: ModelShape
    kinds: tuple[str, ...]
    kv_dtypes: tuple[str, ...]
    cases: int
    engine_rows: int


def index(frame: pd.DataFrame) -> tuple[list[IndexLine], int]:
    """One line per model shape present in the ok rows, and how many head shapes no preset
    has (the GQA sweep's)."""
    ok = ok_rows(frame)
    if ok.empty:
        return [], 0
    ok = ok[ok["head_dim"].notna()]
    out: list[IndexLine] = []
    unknown = 0
    for heads, sub in ok.groupby(["num_qo_heads", "num_kv_heads", "head_dim"]):
        key = (int(heads[0]), int(heads[1]), int(heads[2]))
        named = Counter((str(m), int(t)) for m, t in zip(sub["model"], sub["tp"], strict=True) if m)
        shape = preset_of(key, named) or _mla_of(key, named)
        if shape is None:
            unknown += 1
            continue
        kv = sorted(
            {
                "bf16/fp16" if not f else str(d)
                for f, d in zip(sub["fp8"], sub["kv_dtype"], strict=True)
            }
        )
        out.append(
            IndexLine(
                shape,
                tuple(sorted(set(sub["kind"]))),
                tuple(kv),
                int(sub["case_id"].nunique()),
                int(sub["library"].isin(["vllm", "sglang"]).sum()),
            )
        )
    return sorted(out, key=lambda x: (x.shape.model, x.shape.tp)), unknown
