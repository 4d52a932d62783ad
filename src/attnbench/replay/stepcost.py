"""Time of a step = attention (fitted, per layer x layers) + plan (once per step) + GEMMs.

    step_us = num_layers * (decode_call_us + prefill_call_us)      attention, per backend
            + decode_plan_us + prefill_plan_us                     once per step, shared by layers
            + gemm_roofline_us(tokens, sampled rows)               non-attention (replay.gemm)

Decode and prefill are separate attention calls per layer (as SGLang and vLLM's FlashInfer
backend issue them), so a hybrid takes its decode call from one backend and its prefill call
from another.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from attnbench.replay.costmodel import AttentionCostModel
from attnbench.replay.gemm import GemmRoofline
from attnbench.replay.steps import FloatArray, StepFeatures, StepShape

FAR_EXTRAPOLATION = 1.5
"""A step whose features lie beyond 1.5x the fitted range (either side) counts as extrapolated
far; the replay reports the share of such steps instead of hiding it."""


@dataclass(frozen=True)
class ReplayCost:
    name: str
    decode: AttentionCostModel
    prefill: AttentionCostModel
    gemm: GemmRoofline
    num_layers: int

    def parts_us(self, f: StepFeatures) -> dict[str, FloatArray]:
        """Each component of every step's time, microseconds."""
        zeros = np.zeros(len(f), dtype=np.int64)
        return {
            "attention_decode": self.num_layers
            * self.decode.decode_us(f.n_decode, f.kv_total, f.kv_max),
            "attention_prefill": self.num_layers
            * self.prefill.prefill_us(f.n_prefill, f.q_prefill, f.pairs_prefill),
            "plan": self.decode.plan_us(f.n_decode, zeros)
            + self.prefill.plan_us(zeros, f.n_prefill),
            "gemm": self.gemm.step_us(f.tokens, f.n_sample),
        }

    def durations_s(self, f: StepFeatures) -> FloatArray:
        total = sum(self.parts_us(f).values(), np.zeros(len(f)))
        return np.asarray(total, dtype=np.float64) / 1e6

    def step_s(self, s: StepShape) -> float:
        """`durations_s` of one step, in plain floats (the simulator's hot path)."""
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
