"""Continuous-batching simulator: requests in, exact step batches and per-token times out.

Scheduler (vLLM/SGLang-like, first come first served, deterministic):
- A request waits from its arrival until it is *admitted*: a batch slot is free (`max_batch`
  running requests at most) and pages for its whole prompt plus output are free in the KV
  budget (`kv_pages`). The reservation covers the trace's known output length, so a running
  request never runs out of pages and is never preempted; admission is head-of-line: a waiting
  request that does not fit blocks those behind it. A request that could never fit (more
  pages than the whole budget) is *rejected* and counted.
- Chunked prefill (`chunked_prefill=True`, vLLM v1 / Sarathi): every step runs all decoding
  requests (one token each) and fills the rest of `token_budget` with prompt chunks, oldest
  admitted first; new requests are admitted while budget is left.
- Without chunking (vLLM v0): if any waiting request can be admitted, the step is prefill-only:
  whole uncached prompts, oldest first, up to `token_budget` tokens (the first always goes, even
  when longer); decoding requests stall for that step. Otherwise the step is decode-only.
- A request's first output token comes at the end of the step that completes its prompt (TTFT
  = that time - arrival); each later token at the end of a step in which it decodes; the
  inter-token latency (ITL) is the time between a request's consecutive tokens.
- Prefix cache (`prefix_cache=True`, see `replay.prefix`): leading cached prompt blocks are
  neither recomputed nor reserved again.

Speed: between events (an arrival that could be admitted, a request finishing), the batch is the
same requests growing one token per step, so such a run of steps is costed from its first two
steps (step time is affine in the KV lengths) and recorded as one block; per-step results
(durations, features, compositions, inter-token gaps) are expanded exactly at the end.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np

from attnbench.replay.prefix import PrefixCache
from attnbench.replay.simresult import BlockRecord, SchedulerConfig, SimResult, StepBlock, expand
from attnbench.replay.steps import FloatArray, StepCost, StepShape
from attnbench.replay.traffic import ReplayRequest
from attnbench.workload.spec import causal_pairs

__all__ = ["SchedulerConfig", "SimResult", "simulate"]


@dataclass
class _Prefill:
    rid: int
    done: int
    """Prompt tokens already in the cache (prefix hit + chunks computed)."""
    input_len: int

    @property
    def remaining(self) -> int:
        return self.input_len - self.done


Admission = Literal["admitted", "blocked", "rejected"]


class _Sim:
    def __init__(self, requests: list[ReplayRequest], cfg: SchedulerConfig, cost: StepCost):
        for a, b in itertools.pairwise(requests):
            if b.arrival_s < a.arrival_s:
                raise ValueError("requests must be sorted by arrival_s")
        for r in requests:
            if r.input_len <= 0 or r.output_len <= 0:
                raise ValueError("every request needs input_len > 0 and output_len > 0")
        self.reqs, self.cfg, self.cost = requests, cfg, cost
        n = len(requests)
        self.arrival = np.array([r.arrival_s for r in requests], dtype=np.float64)
        self.input = np.array([r.input_len for r in requests], dtype=np.int64)
        self.output = np.array([r.output_len for r in requests], dtype=np.int64)
        self.cached = np.zeros(n, dtype=np.int64)
        self.admit_s = np.full(n, np.nan)
        self.first_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.rejected = np.zeros(n, dtype=bool)
        self.reserved = np.zeros(n, dtype=np.int64)
        self.acquired: dict[int, list[int]] = {}
        self.cache = PrefixCache(cfg.block_tokens, cfg.page_size)
        self.used_private = 0
        self.waiting: deque[int] = deque()
        self.prefilling: list[_Prefill] = []
        self.dec_ids = np.zeros(0, dtype=np.int64)
        self.dec_kv = np.zeros(0, dtype=np.int64)
        self.dec_left = np.zeros(0, dtype=np.int64)
        self.dec_last = np.zeros(0, dtype=np.float64)
        self.nxt = 0
        self.settled = 0  # finished or rejected
        self.steps = 0
        self.first_gaps: list[FloatArray] = []
        self.blocks: list[StepBlock] = []
        self.records: list[BlockRecord] = []
        """Per block, expanded into per-step arrays at the end (`simresult.expand`)."""

    # -- driver -----------------------------------------------------------------------------
    def run(self) -> SimResult:
        n = len(self.reqs)
        t = float(self.arrival[0]) if n else 0.0
        while self.settled < n:
            self._arrive(t)
            if not self.prefilling and not self.dec_ids.size and not self.waiting:
                t = max(t, float(self.arrival[self.nxt]))
                continue
            self._admit(t)
            if not self.prefilling and not self.dec_ids.size:
                continue  # everything waiting was rejected
            t = self._step(t) if self.prefilling else self._decode_run(t)
        return self._result()

    def _arrive(self, t: float) -> None:
        while self.nxt < len(self.reqs) and self.arrival[self.nxt] <= t:
            self.waiting.append(self.nxt)
            self.nxt += 1

    # -- admission --------------------------------------------------------------------------
    def _admit(self, t: float) -> None:
        cfg = self.cfg
        if cfg.chunked_prefill:
            left = cfg.token_budget - self.dec_ids.size - sum(p.remaining for p in self.prefilling)
        else:
            left = cfg.token_budget
        first = True
        while self.waiting and left > 0:
            if len(self.prefilling) + self.dec_ids.size >= cfg.max_batch:
                return
            rid = self.waiting[0]
            status, uncached = self._try_admit(rid, t, left, allow_over=first)
            if status == "blocked":
                return
            self.waiting.popleft()
            if status == "admitted":
                left -= uncached
                first = False

    def _try_admit(
        self, rid: int, t: float, token_left: int, *, allow_over: bool
    ) -> tuple[Admission, int]:
        cfg, cache = self.cfg, self.cache
        inp, out = int(self.input[rid]), int(self.output[rid])
        if cfg.pages_for(inp + out) > cfg.kv_pages:
            self.rejected[rid] = True
            self.settled += 1
            return "rejected", 0
        ids = self.reqs[rid].hash_ids if cfg.prefix_cache else ()
        hit = cache.match(ids) if ids else 0
        shared = sum(cache.block_tokens_of(i, inp) for i in range(hit))
        cached = min(shared, inp - 1)
        uncached = inp - cached
        if not cfg.chunked_prefill and uncached > token_left and not allow_over:
            return "blocked", 0
        need = cfg.pages_for(inp + out - shared)
        free = cfg.kv_pages - self.used_private - cache.pages
        pinned = list(ids[:hit])
        cache.acquire(pinned)
        if need > free + cache.free_pages:
            cache.release(pinned)
            return "blocked", 0
        if need > free:
            cache.evict(need - free)
        self.used_private += need
        self.reserved[rid] = need
        self.acquired[rid] = pinned
        self.cached[rid] = cached
        self.admit_s[rid] = t
        self.prefilling.append(_Prefill(rid, cached, inp))
        return "admitted", uncached

    # -- steps ------------------------------------------------------------------------------
    def _step(self, t: float) -> float:
        """One step with prefill work (and, when chunked, every decoding request)."""
        cfg = self.cfg
        chunks: list[tuple[_Prefill, int]] = []
        if cfg.chunked_prefill:
            decode = bool(self.dec_ids.size)
            left = cfg.token_budget - self.dec_ids.size
            for p in self.prefilling:
                if left <= 0:
                    break
                c = min(p.remaining, left)
                chunks.append((p, c))
                left -= c
        else:
            decode = False
            chunks = [(p, p.remaining) for p in self.prefilling]
        n_dec = self.dec_ids.size if decode else 0
        kv_total = int(self.dec_kv.sum()) if decode else 0
        kv_max = int(self.dec_kv.max()) if decode else 0
        q = [c for _, c in chunks]
        kv = [p.done + c for p, c in chunks]
        pairs = sum(causal_pairs(c, k) for c, k in zip(q, kv, strict=True))
        completing = sum(1 for p, c in chunks if c == p.remaining)
        shape = StepShape(
            n_dec, kv_total, kv_max, len(q), sum(q), sum(kv), pairs, n_dec + completing
        )
        dur = self.cost.step_s(shape)
        t_end = t + dur
        empty = np.zeros(0, dtype=np.int64)
        self._record(
            StepBlock(
                first_step=self.steps,
                num_steps=1,
                decode_ids=self.dec_ids.copy() if decode else empty,
                decode_kv0=self.dec_kv.copy() if decode else empty,
                prefill_ids=np.array([p.rid for p, _ in chunks], dtype=np.int64),
                prefill_qo_lens=np.array(q, dtype=np.int64),
                prefill_kv_lens=np.array(kv, dtype=np.int64),
            ),
            t,
            dur,
            0.0,
            shape,
        )
        if decode:
            self._advance_decode(1, t + dur, t_end)
        done: list[_Prefill] = []
        for p, c in chunks:
            p.done += c
            if p.done == p.input_len:
                done.append(p)
        for p in done:
            self.prefilling.remove(p)
            self._prompt_complete(p, t_end)
        return t_end

    def _decode_run(self, t: float) -> float:
        """Pure-decode steps until the first request finishes, or until an arrival could be
        admitted (nothing waiting and the next arrival is due), recorded as one block.

        Step j of the run has KV lengths +j, so its time is d0 + slope * j (StepCost is affine
        in the KV features) and it starts at t + j * d0 + slope * j * (j - 1) / 2.
        """
        n = self.dec_ids.size
        kv_total, kv_max = int(self.dec_kv.sum()), int(self.dec_kv.max())
        k = min(int(self.dec_left.min()), self.cfg.max_run_steps)
        first = StepShape.decode(n, kv_total, kv_max)
        d0 = self.cost.step_s(first)
        second = StepShape.decode(n, kv_total + n, kv_max + 1)
        slope = self.cost.step_s(second) - d0 if k > 1 else 0.0
        if not self.waiting and self.nxt < len(self.reqs):
            j = np.arange(k, dtype=np.float64)
            starts = t + j * d0 + slope * j * (j - 1) / 2
            # steps that start before the next arrival belong to this run (at least one)
            k = max(1, int(np.searchsorted(starts, self.arrival[self.nxt], side="left")))
        t_end = t + k * d0 + slope * k * (k - 1) / 2
        empty = np.zeros(0, dtype=np.int64)
        self._record(
            StepBlock(self.steps, k, self.dec_ids.copy(), self.dec_kv.copy(), empty, empty, empty),
            t,
            d0,
            slope,
            first,
        )
        self._advance_decode(k, t + d0, t_end)
        return t_end

    def _advance_decode(self, k: int, first_end: float, last_end: float) -> None:
        """Every decoding request emits one token at the end of each of k consecutive steps
        (the first ends at `first_end`, the last at `last_end`); later gaps are the steps'
        durations, expanded in _result."""
        self.first_gaps.append(first_end - self.dec_last)
        self.dec_kv += k
        self.dec_left -= k
        self.dec_last[:] = last_end
        fin = self.dec_left == 0
        if fin.any():
            for rid in self.dec_ids[fin].tolist():
                self._finish(int(rid), last_end)
            keep = ~fin
            self.dec_ids, self.dec_kv = self.dec_ids[keep], self.dec_kv[keep]
            self.dec_left, self.dec_last = self.dec_left[keep], self.dec_last[keep]

    def _prompt_complete(self, p: _Prefill, t_end: float) -> None:
        rid = p.rid
        self.first_s[rid] = t_end
        if self.cfg.prefix_cache:
            ids = self.reqs[rid].hash_ids
            for i in range(len(self.acquired[rid]), len(ids)):
                pages = self.cache.insert(ids[i], self.cache.block_tokens_of(i, p.input_len))
                if pages:
                    self.reserved[rid] -= pages
                    self.used_private -= pages
                    self.acquired[rid].append(ids[i])
        if self.output[rid] == 1:
            self._finish(rid, t_end)
            return
        self.dec_ids = np.append(self.dec_ids, rid)
        self.dec_kv = np.append(self.dec_kv, p.input_len + 1)
        self.dec_left = np.append(self.dec_left, self.output[rid] - 1)
        self.dec_last = np.append(self.dec_last, t_end)

    def _finish(self, rid: int, t: float) -> None:
        self.finish_s[rid] = t
        self.used_private -= int(self.reserved[rid])
        self.reserved[rid] = 0
        self.cache.release(self.acquired.pop(rid, []))
        self.settled += 1

    def _record(
        self, block: StepBlock, t: float, d0: float, slope: float, shape: StepShape
    ) -> None:
        self.blocks.append(block)
        pages = self.used_private + self.cache.pages
        self.records.append(BlockRecord(block.num_steps, t, d0, slope, shape, pages))
        self.steps += block.num_steps

    def _result(self) -> SimResult:
        steps, later_gaps = expand(self.records)
        return SimResult(
            config=self.cfg,
            arrival_s=self.arrival,
            input_len=self.input,
            output_len=self.output,
            cached_tokens=self.cached,
            admit_s=self.admit_s,
            first_token_s=self.first_s,
            finish_s=self.finish_s,
            rejected=self.rejected,
            itl_s=np.concatenate([*self.first_gaps, later_gaps]),
            step_start_s=steps.start_s,
            step_dur_s=steps.dur_s,
            features=steps.features,
            pages_used=steps.pages,
            blocks=self.blocks,
            evicted_blocks=self.cache.evicted_blocks,
        )


def simulate(requests: list[ReplayRequest], cfg: SchedulerConfig, cost: StepCost) -> SimResult:
    """Replay `requests` (sorted by arrival) through the scheduler, costing steps with `cost`."""
    return _Sim(requests, cfg, cost).run()
