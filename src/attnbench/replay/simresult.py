"""What the simulator takes and returns: the scheduler's limits (`SchedulerConfig`), the runs of
steps it records (`StepBlock` + `BlockRecord`) and the replay expanded step by step
(`SimResult`, built by `expand`).

A block is `num_steps` consecutive steps: one step with prefill work, or a run of pure-decode
steps over the same requests whose KV lengths grow by one token per step. A run's step j lasts
`first_dur_s + slope_s * j` (step time is affine in the KV lengths) and its features are the
first step's plus j tokens per decoding request.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property

import numpy as np

from attnbench.replay.steps import (
    BoolArray,
    FloatArray,
    IntArray,
    StepBatch,
    StepFeatures,
    StepShape,
)


@dataclass(frozen=True)
class SchedulerConfig:
    kv_pages: int
    """KV-cache budget in pages (all layers of one page each)."""
    page_size: int = 16
    max_batch: int = 256
    """Running requests at most (vLLM max_num_seqs)."""
    token_budget: int = 8192
    """Tokens per step at most (vLLM max_num_batched_tokens)."""
    chunked_prefill: bool = True
    prefix_cache: bool = False
    block_tokens: int = 512
    """Tokens per `hash_ids` block (Mooncake: 512)."""
    max_run_steps: int = 4096
    """Longest run of decode steps recorded as one block."""

    def __post_init__(self) -> None:
        for name in ("kv_pages", "page_size", "max_batch", "token_budget", "block_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be positive")

    def pages_for(self, tokens: int) -> int:
        return -(-tokens // self.page_size)


@dataclass(frozen=True)
class StepBlock:
    """`num_steps` consecutive steps from `first_step`: the same decoding requests (KV lengths
    `decode_kv0` at the first step, +1 per step) and, for a single step, its prefill chunks."""

    first_step: int
    num_steps: int
    decode_ids: IntArray
    decode_kv0: IntArray
    prefill_ids: IntArray
    prefill_qo_lens: IntArray
    prefill_kv_lens: IntArray


@dataclass(frozen=True, slots=True)
class BlockRecord:
    """The timing and features of one block, as the simulator records it."""

    num_steps: int
    start_s: float
    first_dur_s: float
    """Duration of the block's first step."""
    slope_s: float
    """How much longer each later step of a decode run is (0 for a single step)."""
    shape: StepShape
    """Features of the first step."""
    pages: int
    """Pages in use (reservations + prefix cache) during the block."""


@dataclass
class SimResult:
    config: SchedulerConfig
    arrival_s: FloatArray
    input_len: IntArray
    output_len: IntArray
    cached_tokens: IntArray
    """Prompt tokens served by the prefix cache (not recomputed)."""
    admit_s: FloatArray
    first_token_s: FloatArray
    finish_s: FloatArray
    rejected: BoolArray
    itl_s: FloatArray
    """Every inter-token gap of every request (token-weighted), seconds."""
    step_start_s: FloatArray
    step_dur_s: FloatArray
    features: StepFeatures
    pages_used: IntArray
    """Pages in use (reservations + prefix cache) during each step."""
    blocks: list[StepBlock] = field(default_factory=list)
    evicted_blocks: int = 0

    @property
    def num_steps(self) -> int:
        return int(self.step_dur_s.shape[0])

    @property
    def ttft_s(self) -> FloatArray:
        return self.first_token_s - self.arrival_s

    @cached_property
    def _block_starts(self) -> IntArray:
        return np.fromiter((b.first_step for b in self.blocks), dtype=np.int64)

    def batch(self, step: int) -> StepBatch:
        """The exact composition of step `step`."""
        i = int(np.searchsorted(self._block_starts, step, side="right")) - 1
        if i < 0 or not 0 <= step - self.blocks[i].first_step < self.blocks[i].num_steps:
            raise IndexError(f"step {step} is not in this replay ({self.num_steps} steps)")
        b = self.blocks[i]
        j = step - b.first_step
        return StepBatch(
            decode_ids=b.decode_ids,
            decode_kv_lens=b.decode_kv0 + j,
            prefill_ids=b.prefill_ids,
            prefill_qo_lens=b.prefill_qo_lens,
            prefill_kv_lens=b.prefill_kv_lens,
        )


@dataclass(frozen=True)
class Steps:
    """Per-step timing and features, expanded from the block records."""

    start_s: FloatArray
    dur_s: FloatArray
    features: StepFeatures
    pages: IntArray


def expand(records: list[BlockRecord]) -> tuple[Steps, FloatArray]:
    """Per-step arrays from the block records, and the inter-token gaps within the runs (one
    per decoding request for every step after a run's first; a run's first gaps are the
    simulator's, since they depend on when each request last emitted a token)."""
    k = np.fromiter((r.num_steps for r in records), dtype=np.int64, count=len(records))
    idx = np.repeat(np.arange(k.size), k)
    j = (np.arange(idx.size) - np.repeat(np.cumsum(k) - k, k)).astype(np.float64)
    ji = j.astype(np.int64)

    def ints(values: list[int]) -> IntArray:
        return np.asarray(values, dtype=np.int64)[idx] if idx.size else np.zeros(0, np.int64)

    def floats(values: list[float]) -> FloatArray:
        return np.asarray(values, dtype=np.float64)[idx] if idx.size else np.zeros(0)

    cols = {f.name: ints([getattr(r.shape, f.name) for r in records]) for f in fields(StepShape)}
    n = cols["n_decode"]
    cols["kv_total"] = cols["kv_total"] + ji * n
    cols["kv_max"] = cols["kv_max"] + np.where(n > 0, ji, 0)
    t0 = floats([r.start_s for r in records])
    d0 = floats([r.first_dur_s for r in records])
    slope = floats([r.slope_s for r in records])
    dur = d0 + slope * j
    later = (j >= 1) & (n > 0)
    steps = Steps(
        start_s=t0 + j * d0 + slope * j * (j - 1) / 2,
        dur_s=dur,
        features=StepFeatures(**cols),
        pages=ints([r.pages for r in records]),
    )
    return steps, np.repeat(dur[later], n[later])
