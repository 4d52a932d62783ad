"""What one engine step computes: its batch composition and the features the cost model reads.

A step is one forward pass of the model over a batch: every decoding request contributes one
query token (its KV length `kv` includes that token), every prefilling request a chunk of `q`
prompt tokens attending to `kv` = tokens already in its cache + the chunk (causal).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Protocol

import numpy as np
import numpy.typing as npt

from attnbench.workload.spec import causal_pairs

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class StepBatch:
    """Exact composition of one step (request ids index the replayed request list)."""

    decode_ids: IntArray
    decode_kv_lens: IntArray
    """KV length each decoding request attends to, its new token included."""
    prefill_ids: IntArray
    prefill_qo_lens: IntArray
    """Prompt tokens computed this step (a chunk, or the whole uncached prompt)."""
    prefill_kv_lens: IntArray
    """Tokens in the request's cache after this chunk (cached prefix + earlier chunks + chunk)."""


@dataclass(frozen=True, slots=True)
class StepShape:
    """The features of one step (plain ints), named as `StepFeatures`' columns: what the
    simulator records for a step, or the first step of a run, and what `StepCost.step_s`
    reads."""

    n_decode: int
    kv_total: int
    kv_max: int
    n_prefill: int
    q_prefill: int
    kv_prefill: int
    pairs_prefill: int
    n_sample: int

    @classmethod
    def decode(cls, n_decode: int, kv_total: int, kv_max: int) -> StepShape:
        """A pure-decode step: every decoding request samples one token."""
        return cls(n_decode, kv_total, kv_max, 0, 0, 0, 0, n_decode)


@dataclass
class StepFeatures:
    """Per-step summaries, one entry per step; everything a `StepCost` may read.

    The decode part is one batched decode call per layer, the prefill part one batched
    prefill/append call per layer.
    """

    n_decode: IntArray
    kv_total: IntArray
    """Sum of the decoding requests' KV lengths."""
    kv_max: IntArray
    n_prefill: IntArray
    q_prefill: IntArray
    """Prompt tokens computed this step."""
    kv_prefill: IntArray
    pairs_prefill: IntArray
    """Causal (query, key) pairs of the prefill part (`workload.spec.causal_pairs`)."""
    n_sample: IntArray
    """Rows of logits: decoding requests plus prefills that complete their prompt this step."""

    def __len__(self) -> int:
        return int(self.n_decode.shape[0])

    @property
    def tokens(self) -> IntArray:
        """Tokens through the model's GEMMs: one per decoding request plus the prefill chunks."""
        return self.n_decode + self.q_prefill

    def shape(self, step: int) -> StepShape:
        """The features of step `step` as plain ints."""
        return StepShape(*(int(getattr(self, f.name)[step]) for f in fields(self)))

    def head(self, k: int) -> StepFeatures:
        """The first k steps."""
        return StepFeatures(**{f.name: getattr(self, f.name)[:k] for f in fields(self)})

    @classmethod
    def empty(cls) -> StepFeatures:
        return cls(**{f.name: np.zeros(0, dtype=np.int64) for f in fields(cls)})

    @classmethod
    def concat(cls, parts: list[StepFeatures]) -> StepFeatures:
        if not parts:
            return cls.empty()
        return cls(
            **{
                f.name: np.concatenate([getattr(p, f.name) for p in parts]).astype(np.int64)
                for f in fields(cls)
            }
        )

    @classmethod
    def of_batch(cls, batch: StepBatch, completing: int) -> StepFeatures:
        """Features of one step from its exact batch (`completing`: prompts finished in it)."""
        kv, q, pk = batch.decode_kv_lens, batch.prefill_qo_lens, batch.prefill_kv_lens
        pairs = int(np.sum(causal_pairs(q, pk))) if q.size else 0
        return cls(
            n_decode=np.array([kv.size]),
            kv_total=np.array([int(kv.sum())]),
            kv_max=np.array([int(kv.max()) if kv.size else 0]),
            n_prefill=np.array([q.size]),
            q_prefill=np.array([int(q.sum())]),
            kv_prefill=np.array([int(pk.sum())]),
            pairs_prefill=np.array([pairs]),
            n_sample=np.array([kv.size + completing]),
        )

    @classmethod
    def decode_run(cls, kv_lens: IntArray, k: int) -> StepFeatures:
        """Features of k consecutive pure-decode steps over the same requests, whose KV lengths
        are `kv_lens` at the first step and grow by one token per step."""
        n = kv_lens.size
        j = np.arange(k, dtype=np.int64)
        zeros = np.zeros(k, dtype=np.int64)
        return cls(
            n_decode=np.full(k, n, dtype=np.int64),
            kv_total=int(kv_lens.sum()) + j * n,
            kv_max=(int(kv_lens.max()) if n else 0) + j,
            n_prefill=zeros,
            q_prefill=zeros.copy(),
            kv_prefill=zeros.copy(),
            pairs_prefill=zeros.copy(),
            n_sample=np.full(k, n, dtype=np.int64),
        )


class StepCost(Protocol):
    """Time of steps from their features, in seconds.

    The simulator costs a run of pure-decode steps from its first two steps, so a step's time
    must be affine in `kv_total` and `kv_max` when the other features are fixed (true of the
    replay's fitted models, which are linear in them).
    """

    def durations_s(self, f: StepFeatures) -> FloatArray:
        """One duration per step (vectorised)."""
        ...

    def step_s(self, s: StepShape) -> float:
        """The duration of one step with these features (equal to `durations_s`)."""
        ...
