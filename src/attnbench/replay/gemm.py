"""Non-attention cost of a step: a stated roofline for the model's weight GEMMs.

For each weight GEMM of a layer on one GPU (QKV, O, MLP gate+up, down; shapes in
`replay.deployment`) over the step's T tokens, and for the LM head over the step's S sampled
rows:

    bytes = k * n * itemsize (weights, read once) + T * (k + n) * itemsize (activations in, out)
    flops = 2 * T * k * n
    time  = max(bytes / copy_bandwidth, flops / matmul_tflops)

summed over the layer's GEMMs, times the number of layers, plus the LM head. Layers are
grouped by the GEMMs they run (`Deployment.layer_groups`: an MLA model's dense and MoE layers),
weights read at their own dtype (`Gemm.bytes_per_param`). A routed expert GEMM reads the
experts the step touches, E x (1 - (1 - k / E) ** T) under uniform routing, and computes
2 x T x k x its parameters (`replay.served`). The two ceilings
are the ones measured on the GPU in the results file's header (`ceilings`: device-to-device copy
bandwidth, read + write bytes over time; bf16 8192^3 matmul TFLOP/s). At small T the weights'
bytes dominate (decode is a weight stream); at large T the FLOPs do. Not modelled: norms, RoPE,
activation functions, sampling, kernel launch gaps, and the imperfect efficiency of skinny
GEMMs (a real engine is somewhat slower than this bound).

Tensor parallelism: each GPU holds 1/tp of every GEMM (`replay.deployment`). The all-reduce
after O and after down (2 per layer) is *not modelled by default*; with `allreduce_us` > 0 each
costs `allreduce_us + 2 (tp - 1) / tp * T * hidden * itemsize / allreduce_gbps` (a ring
all-reduce with a fixed latency; both figures are the user's, not measured here).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from attnbench.replay.deployment import Deployment, Gemm
from attnbench.replay.steps import FloatArray, IntArray
from attnbench.workload.spec import ITEMSIZE


@dataclass(frozen=True)
class GemmRoofline:
    deployment: Deployment
    copy_gbps: float
    """Measured copy bandwidth, GB/s (1e9 B/s)."""
    matmul_tflops: float
    """Measured matmul rate in the weights' dtype, TFLOP/s."""
    allreduce_us: float = 0.0
    """Fixed cost of one all-reduce; 0 = all-reduce not modelled."""
    allreduce_gbps: float = 0.0
    """Bus bandwidth of the all-reduce, GB/s; 0 = latency term only."""

    def __post_init__(self) -> None:
        if self.copy_gbps <= 0 or self.matmul_tflops <= 0:
            raise ValueError("copy_gbps and matmul_tflops must be positive")

    @property
    def allreduce_modelled(self) -> bool:
        return self.allreduce_us > 0 or self.allreduce_gbps > 0

    def gemm_us(self, g: Gemm, tokens: FloatArray) -> FloatArray:
        """Roofline time of one GEMM over `tokens` rows (0 for 0 tokens), microseconds."""
        item = ITEMSIZE[self.deployment.dtype]
        t = np.asarray(tokens, dtype=np.float64)
        nbytes = g.params * item + t * (g.k + g.n) * item
        flops = 2.0 * t * g.params
        us = np.maximum(nbytes / (self.copy_gbps * 1e3), flops / (self.matmul_tflops * 1e6))
        return np.where(t > 0, us, 0.0)

    def allreduce_step_us(self, tokens: FloatArray) -> FloatArray:
        d = self.deployment
        t = np.asarray(tokens, dtype=np.float64)
        if not self.allreduce_modelled or d.tp == 1:
            return np.zeros_like(t)
        per_call = np.full_like(t, self.allreduce_us)
        if self.allreduce_gbps > 0:
            nbytes = 2 * (d.tp - 1) / d.tp * t * d.hidden_size * ITEMSIZE[d.dtype]
            per_call += nbytes / (self.allreduce_gbps * 1e3)
        return np.where(t > 0, 2 * d.num_layers * per_call, 0.0)

    def step_us(self, tokens: IntArray, sampled: IntArray) -> FloatArray:
        """Non-attention time of steps with `tokens` tokens and `sampled` logits rows, us."""
        t = np.asarray(tokens, dtype=np.float64)
        total = np.zeros_like(t)
        for count, (fixed, per_token, flop_per_token), experts in self._group_terms:
            # [steps, gemms]: each GEMM's roofline, summed over the layer's GEMMs
            mem = fixed[None, :] + t[:, None] * per_token[None, :]
            layer = np.maximum(mem, t[:, None] * flop_per_token[None, :]).sum(axis=1)
            for g in experts:
                layer = layer + self._expert_us(g, t)
            layer = np.where(t > 0, layer, 0.0)
            total = total + layer * count
        head = self.gemm_us(self.deployment.lm_head(), np.asarray(sampled, dtype=np.float64))
        return total + head + self.allreduce_step_us(t)

    def step_us_scalar(self, tokens: int, sampled: int) -> float:
        """`step_us` for one step, in plain floats (the simulator's hot path)."""
        us = 0.0
        if tokens > 0:
            for count, (fixed, per_token, flop), experts in self._scalar_groups:
                layer = sum(
                    max(f + tokens * p, tokens * c)
                    for f, p, c in zip(fixed, per_token, flop, strict=True)
                )
                for g in experts:
                    layer += float(self._expert_us(g, np.array([float(tokens)]))[0])
                us += layer * count
            if self.allreduce_modelled and self.deployment.tp > 1:
                us += self._allreduce_scalar(tokens)
        if sampled > 0:
            f, p, c = self._head_terms
            us += max(f + sampled * p, sampled * c)
        return us

    def _expert_us(self, g: Gemm, tokens: FloatArray) -> FloatArray:
        """Roofline of a routed expert GEMM over `tokens` tokens: the experts the step touches
        (E x (1 - (1 - k / E) ** T), uniform routing) read once, T x k rows through them."""
        act = ITEMSIZE[self.deployment.dtype]
        t = np.asarray(tokens, dtype=np.float64)
        touched = g.experts * (1.0 - (1.0 - g.top_k / g.experts) ** t)
        nbytes = touched * g.params * g.bytes_per_param + t * g.top_k * (g.k + g.n) * act
        flops = 2.0 * t * g.top_k * g.params
        us = np.maximum(nbytes / (self.copy_gbps * 1e3), flops / (self.matmul_tflops * 1e6))
        return np.asarray(us, dtype=np.float64)

    def _allreduce_scalar(self, tokens: int) -> float:
        d = self.deployment
        per_call = self.allreduce_us
        if self.allreduce_gbps > 0:
            nbytes = 2 * (d.tp - 1) / d.tp * tokens * d.hidden_size * ITEMSIZE[d.dtype]
            per_call += nbytes / (self.allreduce_gbps * 1e3)
        return 2 * d.num_layers * per_call

    @cached_property
    def _head_terms(self) -> tuple[float, float, float]:
        g, item = self.deployment.lm_head(), ITEMSIZE[self.deployment.dtype]
        bw, tf = self.copy_gbps * 1e3, self.matmul_tflops * 1e6
        return g.params * item / bw, (g.k + g.n) * item / bw, 2.0 * g.params / tf

    @cached_property
    def _scalar_groups(
        self,
    ) -> list[tuple[int, tuple[tuple[float, ...], ...], tuple[Gemm, ...]]]:
        return [
            (count, tuple(tuple(a.tolist()) for a in terms), experts)
            for count, terms, experts in self._group_terms
        ]

    @cached_property
    def _group_terms(
        self,
    ) -> list[tuple[int, tuple[FloatArray, FloatArray, FloatArray], tuple[Gemm, ...]]]:
        """Per layer group: its layer count, the per-GEMM terms of its dense GEMMs (weight-read
        us, activation us per token, FLOP us per token) and its routed-expert GEMMs."""
        out = []
        for group in self.deployment.layer_groups():
            dense = [g for g in group.gemms if not g.experts]
            experts = tuple(g for g in group.gemms if g.experts)
            out.append((group.count, self._terms_of(dense), experts))
        return out

    def _terms_of(self, gemms: list[Gemm]) -> tuple[FloatArray, FloatArray, FloatArray]:
        item = ITEMSIZE[self.deployment.dtype]
        bw, tf = self.copy_gbps * 1e3, self.matmul_tflops * 1e6
        return (
            np.array([g.params * (g.bytes_per_param or item) / bw for g in gemms]),
            np.array([(g.k + g.n) * item / bw for g in gemms]),
            np.array([2.0 * g.params / tf for g in gemms]),
        )

    def describe(self) -> dict[str, object]:
        return {
            "copy_gbps": self.copy_gbps,
            "matmul_tflops": self.matmul_tflops,
            "allreduce": (
                f"modelled: {self.allreduce_us} us + bytes / {self.allreduce_gbps} GB/s per call, "
                "2 per layer"
                if self.allreduce_modelled
                else "not modelled"
            ),
            "method": "per GEMM max(bytes / copy bandwidth, FLOPs / matmul TFLOP/s)",
        }
