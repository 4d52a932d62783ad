"""Time of a step = attention (fitted, per layer x layers) + plan (once per step) + GEMMs.

    step_us = num_layers * (decode_call_us + prefill_call_us)      attention, per backend
            + decode_plan_us + prefill_plan_us                     once per step, shared by layers
            + gemm_roofline_us(tokens, sampled rows)               non-attention (replay.gemm)

Decode and prefill are separate attention calls per layer (as SGLang and vLLM's FlashInfer
backend issue them), so a hybrid takes its decode call from one backend and its prefill call
from another.

A model with several layer kinds (`models.layer_shapes`: gpt-oss's and Gemma-2's windowed and
full layers) is costed per kind (`kinds`): each kind's own models times its layer count, a plan
per kind and step. A windowed kind (window W = window_left + 1 tokens) reads at most W tokens
per request, so its decode call is priced at kv_total' = min(kv_total, n x W) and kv_max' =
min(kv_max, W), its prefill at pairs' = min(pairs, q x W): exact when every request is at least
W long (gpt-oss's 128-token window, nearly every request), an upper bound otherwise; within a
run of decode steps the simulator's affine step (first two steps) holds until the clip starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from attnbench.replay.costmodel import AttentionCostModel
from attnbench.replay.gemm import GemmRoofline
from attnbench.replay.steps import FloatArray, IntArray, StepFeatures, StepShape

FAR_EXTRAPOLATION = 1.5
"""A step whose features lie beyond 1.5x the fitted range (either side) counts as extrapolated
far; the replay reports the share of such steps instead of hiding it."""


@dataclass(frozen=True)
class KindCost:
    """One layer kind of a step: its layer count, window (0: none) and cost models."""

    num_layers: int
    window: int
    decode: AttentionCostModel
    prefill: AttentionCostModel

    def clip(self, n: IntArray, kv_total: IntArray, kv_max: IntArray) -> tuple[IntArray, ...]:
        """The decode features a windowed layer reads (see the module docstring)."""
        if not self.window:
            return n, kv_total, kv_max
        w = self.window
        return n, np.minimum(kv_total, np.asarray(n) * w), np.minimum(kv_max, w)

    def clip_pairs(self, q: IntArray, pairs: IntArray) -> IntArray:
        if not self.window:
            return pairs
        return np.minimum(pairs, np.asarray(q) * self.window)

    def step_us(self, s: StepShape) -> float:
        """Attention and plans of this kind in one step, microseconds (plain floats)."""
        us = 0.0
        w = self.window
        if s.n_decode > 0:
            total = min(s.kv_total, s.n_decode * w) if w else s.kv_total
            longest = min(s.kv_max, w) if w else s.kv_max
            attn = self.decode.decode_call_us(s.n_decode, total, longest)
            (dp0, dp1), _ = self.decode.plan_terms()
            us += self.num_layers * attn + dp0 + dp1 * s.n_decode
        if s.n_prefill > 0:
            p0, p1, p_q, p_pair = self.prefill.prefill_terms()
            pairs = min(s.pairs_prefill, s.q_prefill * w) if w else s.pairs_prefill
            attn = p0 + p1 * s.n_prefill + p_q * s.q_prefill + p_pair * pairs
            _, (pp0, pp1) = self.prefill.plan_terms()
            us += self.num_layers * attn + pp0 + pp1 * s.n_prefill
        return us


@dataclass(frozen=True)
class ReplayCost:
    name: str
    decode: AttentionCostModel
    prefill: AttentionCostModel
    gemm: GemmRoofline
    num_layers: int
    kinds: tuple[KindCost, ...] = ()
    """Per layer kind (empty: every layer is `decode`/`prefill`'s kind; see the module
    docstring)."""

    def parts_us(self, f: StepFeatures) -> dict[str, FloatArray]:
        """Each component of every step's time, microseconds."""
        zeros = np.zeros(len(f), dtype=np.int64)
        if self.kinds:
            return self._kinds_parts_us(f, zeros)
        return {
            "attention_decode": self.num_layers
            * self.decode.decode_us(f.n_decode, f.kv_total, f.kv_max),
            "attention_prefill": self.num_layers
            * self.prefill.prefill_us(f.n_prefill, f.q_prefill, f.pairs_prefill),
            "plan": self.decode.plan_us(f.n_decode, zeros)
            + self.prefill.plan_us(zeros, f.n_prefill),
            "gemm": self.gemm.step_us(f.tokens, f.n_sample),
        }

    def _kinds_parts_us(self, f: StepFeatures, zeros: IntArray) -> dict[str, FloatArray]:
        dec = pre = plan = np.zeros(len(f))
        for k in self.kinds:
            n, total, longest = k.clip(f.n_decode, f.kv_total, f.kv_max)
            dec = dec + k.num_layers * k.decode.decode_us(n, total, longest)
            pairs = k.clip_pairs(f.q_prefill, f.pairs_prefill)
            pre = pre + k.num_layers * k.prefill.prefill_us(f.n_prefill, f.q_prefill, pairs)
            plan = (
                plan + k.decode.plan_us(f.n_decode, zeros) + k.prefill.plan_us(zeros, f.n_prefill)
            )
        return {
            "attention_decode": dec,
            "attention_prefill": pre,
            "plan": plan,
            "gemm": self.gemm.step_us(f.tokens, f.n_sample),
        }

    def durations_s(self, f: StepFeatures) -> FloatArray:
        total = sum(self.parts_us(f).values(), np.zeros(len(f)))
        return np.asarray(total, dtype=np.float64) / 1e6

    def step_s(self, s: StepShape) -> float:
        """`durations_s` of one step, in plain floats (the simulator's hot path)."""
        if self.kinds:
            us = sum(k.step_us(s) for k in self.kinds)
            us += self.gemm.step_us_scalar(s.n_decode + s.q_prefill, s.n_sample)
            return us / 1e6
        dp0, dp1, p0, p1, p_q, p_pair, pp0, pp1 = self._terms
        us = 0.0
        n_decode, n_prefill = s.n_decode, s.n_prefill
        if n_decode > 0:
            attn = self.decode.decode_call_us(n_decode, s.kv_total, s.kv_max)
            us += self.num_layers * attn + dp0 + dp1 * n_decode
        if n_prefill > 0:
            attn = p0 + p1 * n_prefill + p_q * s.q_prefill + p_pair * s.pairs_prefill
            us += self.num_layers * attn + pp0 + pp1 * n_prefill
        us += self.gemm.step_us_scalar(n_decode + s.q_prefill, s.n_sample)
        return us / 1e6

    @cached_property
    def _terms(self) -> tuple[float, ...]:
        (dp0, dp1), _ = self.decode.plan_terms()
        _, (pp0, pp1) = self.prefill.plan_terms()
        return (
            dp0,
            dp1,
            *self.prefill.prefill_terms(),
            pp0,
            pp1,
        )

    def extrapolation(self, f: StepFeatures) -> FloatArray:
        """Per step, how far its attention features lie outside the fitted ranges."""
        return np.maximum(
            self.decode.decode_extrapolation(f.n_decode, f.kv_total, f.kv_max),
            self.prefill.prefill_extrapolation(f.n_prefill, f.q_prefill, f.pairs_prefill),
        )
