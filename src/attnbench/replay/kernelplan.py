"""How each decode kernel splits a batch over the GPU: the features its cost follows.

A decode call reads every request's KV once; how long it takes depends on how the library's plan
cuts the batch into work units (CTAs) and how those units fill the SMs. From a step's summary
(requests `n`, total KV tokens, longest request) each variant's plan is modelled as its library
documents it:

    flashinfer-decode   FlashInfer BatchDecodeWithPagedKVCache (flashinfer:fa2): grid of
                        blocks_per_sm x SMs CTAs; when n x kv_heads fills it, no split (one CTA per
                        request and KV head); else the smallest KV chunk (>= 128 / page_size pages)
                        with sum ceil(pages_i / chunk) x kv_heads <= grid
                        (scheduler.cuh, PartitionPagedKVCacheBinarySearchMinNumPagePerBatch).
    flashinfer-prefill  FlashInfer's prefill kernel used for decode (flashinfer:tc): 2 CTAs per
                        SM, the same chunk search against grid / kv_heads (PrefillSplitQOKVIndptr,
                        PrefillBinarySearchKVChunkSize); a batch of >= grid / kv_heads requests is
                        not split, so its longest request is one CTA's work (the skew tail).
    fa3                 FlashAttention-3 with per-step scheduler metadata (hopper/heuristics.h
                        num_splits_heuristic, flash_api.cpp get_num_splits): a paged/varlen batch
                        splits dynamically, so the static split count is the heuristic's for
                        batch 1 ("one long sequence and the rest short") and each request gets
                        min(ceil(kv_blocks_i / blocks_per_sm), that) splits with blocks_per_sm =
                        ceil(total_blocks x 1.1 x kv_heads / SMs) (flash_prepare_scheduler.cu).
    xqa                 TensorRT-LLM XQA (flashinfer:xqa; mha.cu / mha_sm90.cu
                        computeNbSubSeqPerSeq*): every request is cut into the same number of
                        sub-sequences, min(max(1, SMs // (n x kv_heads)), ceil(longest / tile))
                        for the generic kernel (tile 256), so a batch of >= SMs requests is not
                        split at all; the SM90 fp8 GMMA kernel (tile 64, gemm0CtaTileNbTokens)
                        takes round((3 x SMs // (n x kv_heads)) x 0.25) instead
                        (launchHopperF8MHA; newer FlashInfer sources search a cost model here,
                        which fits the FlashInfer 0.7.4 rows worse), and splits a request only
                        with >= 2 tiles, into at most its tiles. Sub-sequence j takes the tiles
                        j, j + sub, ... of its request. The last CTA of a request merges its
                        sub-sequences one after another. Both kernels fit 2 CTAs per SM.
    padded              kernels that compute every request to the longest length (SDPA over a
                        padded batch, cuDNN): the KV bytes are n x longest; the work is split to
                        fill the SMs, at least `chunk` tokens per CTA (chosen by the fit from
                        `CHUNK_GRID`, in each held-out fold). A ragged batch runs with a padding
                        mask (sdpa's `padded` path), a slower kernel than the maskless uniform
                        one: the `ragged` term.
    ideal               a kernel splitting to fill the SMs (unknown ones).

Features per call (one layer), all non-negative, that `costmodel` fits:

    kv_mb      streamed MB: the KV bytes the kernel reads (the padded shape for padded kernels),
               or `streams` x the longest work unit's bytes when that is more. A machine streams
               at full bandwidth only with enough CTAs in flight; the longest unit streams at
               1 / streams of it, so the call takes max(total, streams x unit) / bandwidth (a
               skew tail, or a split too coarse for the batch). Where the plan knows every
               unit's tokens (XQA on the requests' lengths) the max becomes the integral over the
               call (`in_flight_tokens`): each unit in flight streams at bandwidth / max(in flight,
               streams), so as a skewed batch's short units finish the rest leave the memory
               underused for a while before the longest runs alone. 1e3 / the coefficient is the
               bandwidth, bounded by the measured ceiling; `streams` is fitted per variant from
               `STREAMS_GRID` (inf: never the tail).
    crit_mb    the longest work unit's MB: per-CTA latency the bandwidth term does not hide.
    splits     work units beyond one per request and KV head (the partial outputs a merge
               kernel combines); 0 without a split.
    chain      partial outputs the longest request merges beyond its first (its split count -
               1): merges run per request, one partial after another.
    ragged     1 for a padded kernel's ragged batch (the masked path), else 0.
    odd        1 for such a masked call whose padded key length L (the longest request) is odd:
               torch hands cuDNN the mask as a contiguous bf16 bias [n, 1, 1, L], every other
               row of which then starts off a 4-byte boundary (H200 rows: ~2 us more a call).
    odd_row_mb one request's (one KV head's) padded KV MB, for an `odd` call of more than
               half the SMs' requests x KV heads (`ODD_UNSPLIT_SEQS`), else 0.
    odd_pad_mb such a call's padded KV MB (n x longest), else 0. The call is costed by these two
               alone (its other plan features are 0): on the H200 rows (cuDNN 9.19, Llama-70B
               at TP 8, one KV head) 64 odd requests run at the usual rate, while 72..200 take
               L x (a + b x n) with L the padded length, 1.1-2.3x their even twins; b x n x L
               is faster per padded byte than the memory, so it is not a bandwidth. Where
               between 64 and 72 requests the switch lies is not measured. A call with these
               beyond the odd rows counts as extrapolated.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnbench.backends.variant import Variant
from attnbench.replay.fa3plan import FA3Call, FA3Decision, fa3_split, fa3_static_splits
from attnbench.replay.fa3plan import num_splits_heuristic as num_splits_heuristic
from attnbench.replay.steps import FloatArray, IntArray
from attnbench.replay.xqaplan import XQA_TILE_TOKENS, xqa_split_exact
from attnbench.replay.xqaplan import xqa_sm90_sub_seqs as xqa_sm90_sub_seqs
from attnbench.replay.xqaplan import xqa_sub_seqs as xqa_sub_seqs
from attnbench.replay.xqaplan import xqa_unit_tokens as xqa_unit_tokens

FAMILIES = ("flashinfer-decode", "flashinfer-prefill", "fa3", "xqa", "padded", "ideal")
DEFAULT_NUM_SMS = 132
"""H200 / H100 SXM; a result header's device.num_sms overrides it."""
PLAN_FEATURES_OF_DECODE = (
    "kv_mb",
    "crit_mb",
    "splits",
    "chain",
    "ragged",
    "odd",
    "odd_row_mb",
    "odd_pad_mb",
    "combine",
)
STREAMS_GRID = (8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, math.inf)
"""The `streams` a fit may choose (CTAs in flight that saturate the memory: HBM bandwidth over
one CTA's streaming rate, tens to hundreds on an H200); inf: the tail term off."""
CHUNK_GRID = (2048.0, 1024.0, 512.0, 256.0, 128.0)
"""The smallest KV tokens per CTA a `padded` plan's fit may choose (cuDNN's split of a decode
batch is not documented; 128 last, the default). Other plans follow their library's split."""

ODD_UNSPLIT_SEQS = 0.5
"""A `padded` call whose longest request is odd runs unsplit above this fraction of the SMs in
requests x KV heads (H200: split at 64, unsplit from 72 of 132; SMs / 2 is assumed)."""

_BLOCKS_PER_SM = {
    "flashinfer-decode": 4,
    "flashinfer-prefill": 2,
    "fa3": 1,
    "xqa": 2,
    "padded": 1,
    "ideal": 1,
}
"""CTA slots per SM. FlashInfer's prefill plan hard-codes 2; its decode plan asks the occupancy
API (4 for the group-8, d128 decode kernel's 128 threads and ~64 registers each is an estimate);
FA3 is persistent, one CTA per SM; XQA sizes its grid by SMs and fits 2 CTAs per SM on sm90
(mha.cu nbCtaPerSM = 2; mha_sm90.cu __launch_bounds__(384, 2) at 64 q rows x d128)."""


def family_of(backend: str) -> str:
    """The split plan a backend variant follows (`ideal` for variants not modelled here)."""
    variant = Variant.maybe(backend)
    if variant is None:
        return "ideal"
    library, kernel = variant.library, variant.kernel
    if library == "flash-attn":
        return "fa3"
    if library == "flashinfer" and kernel in ("fa2", "auto", "decode"):
        return "flashinfer-decode"
    if library == "flashinfer" and kernel in ("tc", "prefill"):
        return "flashinfer-prefill"
    if library == "flashinfer" and kernel == "xqa":
        return "xqa"
    if library in ("sdpa", "flex"):
        return "padded"
    return "ideal"


@dataclass(frozen=True)
class Split:
    """One call's plan: tokens read, the longest work unit, all units, the longest request's
    partial outputs (1: not split)."""

    kv_tokens: float
    unit_tokens: float
    units: float
    chain: float
    unit_lens: tuple[int, ...] | None = None
    """Every work unit's KV tokens (one KV head), in launch order; None from a summary."""
    heads_in_units: bool = False
    """`unit_lens` already lists every KV head's units (FA3's tiles), else one head's."""
    combine: bool = False
    """A separate kernel merges the partial outputs (FA3 with a static split above 1)."""


@dataclass(frozen=True)
class KernelPlan:
    """One variant's split plan at one shape (see the module docstring)."""

    family: str
    num_kv_heads: int
    page_size: int
    head_dim: int
    kv_bytes_per_token: int
    """K and V of one token, all KV heads of the call."""
    num_sms: int = DEFAULT_NUM_SMS
    kv_dtype: str = "bfloat16"
    streams: float = math.inf
    """CTAs in flight that saturate the memory (module docstring, kv_mb); inf: no tail term."""
    chunk: float = 128.0
    """The smallest KV tokens per CTA of the `padded` / `ideal` split (`CHUNK_GRID`)."""
    num_qo_heads: int = 0
    """Query heads of the call (FA3's pack-GQA and tile); 0: 8 per KV head."""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family={self.family!r}; allowed: {', '.join(FAMILIES)}")

    @property
    def padded(self) -> bool:
        return self.family == "padded"

    @property
    def slots(self) -> int:
        return _BLOCKS_PER_SM[self.family] * self.num_sms

    @property
    def fa3_call(self) -> FA3Call:
        """What FA3's planning is told about a decode call of this shape (`fa3plan`)."""
        return FA3Call(
            num_qo_heads=self.num_qo_heads or 8 * self.num_kv_heads,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            kv_itemsize=1 if self.kv_dtype.startswith("fp8") else 2,
            page_size=self.page_size,
            num_sms=self.num_sms,
        )

    def split(
        self,
        n: int,
        kv_total: int,
        kv_max: int,
        kv_lens: Sequence[int] | None = None,
        decision: FA3Decision | None = None,
    ) -> Split:
        """The plan of one call (n > 0); with `kv_lens` (the n requests' KV lengths, when
        known) FlashInfer's chunk search runs on them exactly instead of on the summary, and
        FA3's plan on them (`decision`: the one FA3 recorded, when a row has it)."""
        h, mx = self.num_kv_heads, float(kv_max)
        total = float(n) * mx if self.padded else float(kv_total)
        if self.family == "fa3":
            call = self.fa3_call
            unit, units, chain, lens = fa3_split(n, total, mx, call, kv_lens, decision)
            static = decision.num_splits if decision else fa3_static_splits(call, kv_max)
            return Split(
                total,
                unit,
                units,
                chain,
                None if lens is None else tuple(lens),
                heads_in_units=True,
                combine=static > 1,
            )
        if self.family in ("flashinfer-decode", "flashinfer-prefill"):
            if self.family == "flashinfer-prefill" and kv_lens is not None and len(kv_lens) == n:
                unit, units = _flashinfer_split_exact(kv_lens, h, self.page_size, self.slots)
            else:
                unit, units = _flashinfer_split(
                    self.family, n, total, mx, h, self.page_size, self.slots
                )
        elif self.family == "xqa" and kv_lens is not None and len(kv_lens) == n:
            chain, tiles = xqa_split_exact(kv_lens, h, self.num_sms, self.kv_dtype)
            return Split(
                total, float(max(tiles)), float(len(tiles) * h), float(chain), tuple(tiles)
            )
        elif self.family == "xqa":
            if self.kv_dtype == "fp8_e4m3":
                sub = xqa_sm90_sub_seqs(n * h, self.num_sms, kv_max, XQA_TILE_TOKENS["mha_sm90"])
            else:
                sub = xqa_sub_seqs(n * h, self.num_sms, kv_max, XQA_TILE_TOKENS["mha"])
            unit, units = float(math.ceil(mx / sub)), float(n * h * sub)
        elif self.odd_unsplit(n, kv_total, kv_max):
            unit, units = mx, float(n * h)
        else:
            units = max(float(n * h), min(float(self.slots), total * h / self.chunk))
            unit = min(mx, max(total * h / units, 1.0))
        return Split(total, unit, units, float(math.ceil(mx / max(unit, 1.0))))

    def odd_mask(self, n: int, kv_total: int, kv_max: int) -> bool:
        """A padded kernel's masked call whose padded key length (the longest) is odd."""
        return self.padded and kv_total < n * kv_max and kv_max % 2 == 1

    def odd_unsplit(self, n: int, kv_total: int, kv_max: int) -> bool:
        """An `odd_mask` call too many requests x KV heads to be split (`ODD_UNSPLIT_SEQS`)."""
        many = n * self.num_kv_heads > ODD_UNSPLIT_SEQS * self.num_sms
        return many and self.odd_mask(n, kv_total, kv_max)

    def features(
        self,
        n: int,
        kv_total: int,
        kv_max: int,
        kv_lens: Sequence[int] | None = None,
        decision: FA3Decision | None = None,
    ) -> tuple[float, ...]:
        """`PLAN_FEATURES_OF_DECODE` of one call (`kv_lens`, `decision`: see `split`)."""
        if n <= 0:
            return (0.0,) * len(PLAN_FEATURES_OF_DECODE)
        s = self.split(n, kv_total, kv_max, kv_lens, decision)
        per_head_mb = self.kv_bytes_per_token / self.num_kv_heads / 1e6
        kv_mb = s.kv_tokens * self.kv_bytes_per_token / 1e6
        unit_mb = s.unit_tokens * per_head_mb
        if self.odd_unsplit(n, kv_total, kv_max):  # its own two terms (module docstring)
            return (0.0, 0.0, 0.0, 0.0, 1.0, 1.0, unit_mb, kv_mb, 0.0)
        tail_mb = self.streams * unit_mb if math.isfinite(self.streams) else 0.0
        if s.unit_lens is not None and math.isfinite(self.streams):
            lens = np.asarray(s.unit_lens, dtype=np.float64)
            if not s.heads_in_units:
                lens = np.tile(lens, self.num_kv_heads)
            streamed_mb = in_flight_tokens(lens, self.slots, self.streams) * per_head_mb
        else:
            streamed_mb = max(kv_mb, tail_mb)
        ragged = self.padded and kv_total < n * kv_max
        return (
            streamed_mb,
            unit_mb,
            max(0.0, s.units - n * self.num_kv_heads),
            max(0.0, s.chain - 1.0),
            1.0 if ragged else 0.0,
            1.0 if self.odd_mask(n, kv_total, kv_max) else 0.0,
            0.0,
            0.0,
            1.0 if s.combine else 0.0,
        )

    def feature_matrix(self, n: IntArray, kv_total: IntArray, kv_max: IntArray) -> FloatArray:
        """`features` of many calls `[calls, len(PLAN_FEATURES_OF_DECODE)]`."""
        n_a, t_a, m_a = (np.asarray(v, dtype=np.int64).ravel() for v in (n, kv_total, kv_max))
        out = np.zeros((n_a.size, len(PLAN_FEATURES_OF_DECODE)))
        for i, (a, b, c) in enumerate(zip(n_a.tolist(), t_a.tolist(), m_a.tolist(), strict=True)):
            out[i] = self.features(a, b, c)
        return out

    def describe(self) -> dict[str, object]:
        return {
            "family": self.family,
            "slots": self.slots,
            "num_sms": self.num_sms,
            "streams": self.streams if math.isfinite(self.streams) else None,
            "chunk": self.chunk if self.padded else None,
        }


def _flashinfer_split(
    family: str, n: int, total: float, mx: float, h: int, page: int, grid: int
) -> tuple[float, float]:
    """(longest unit tokens, units) of FlashInfer's chunk search, from the batch summary: the
    sum of ceil(pages_i / chunk) is taken as total_pages / chunk + n / 2 (half a page of rounding
    per request)."""
    max_pages = max(1, math.ceil(mx / page))
    per_head = grid // h
    if family == "flashinfer-decode" and n * h >= grid:
        return mx, float(n * h)
    lo = max(128 // page, 1)
    pages = total / page + n / 2.0
    room = per_head - n / 2.0
    chunk = max_pages if room <= 0 else max(lo, math.ceil(pages / room))
    chunk = min(chunk, max_pages)
    units = max(float(n), min(pages / chunk + n / 2.0, float(n) * max_pages))
    return min(mx, float(chunk * page)), units * h


def in_flight_tokens(unit_lens: FloatArray, slots: int, streams: float) -> float:
    """The call's streaming time in KV tokens at full bandwidth: units (KV tokens each, in
    launch order) run `slots` at a time, a unit starting when a slot frees; while k units are in
    flight each streams at bandwidth / max(k, streams) (the memory saturates with `streams`
    CTAs in flight; fewer each go at one CTA's rate). So the time is sum over the call of
    d(tokens per unit) x max(k, streams): the total KV where k >= streams throughout, streams x
    the longest unit for a lone one, and the partial tail of a skewed batch in between (as its
    shorter units finish, the rest run with the memory underused)."""
    lens = np.asarray(unit_lens, dtype=np.float64)
    if lens.size <= slots:  # one wave: units end in order of length
        desc = np.sort(lens)[::-1]
        drops = desc - np.append(desc[1:], 0.0)
        k = np.arange(1, desc.size + 1, dtype=np.float64)
        return float((drops * np.maximum(k, streams)).sum())
    ends = [float(v) for v in lens[:slots]]
    heapq.heapify(ends)
    done, t, nxt = 0.0, 0.0, slots
    while ends:
        end = heapq.heappop(ends)
        t += (end - done) * max(len(ends) + 1.0, streams)
        done = end
        if nxt < lens.size:
            heapq.heappush(ends, done + float(lens[nxt]))
            nxt += 1
    return t


def _flashinfer_split_exact(
    kv_lens: Sequence[int], h: int, page: int, grid: int
) -> tuple[float, float]:
    """(longest unit tokens, units) of FlashInfer's prefill-plan chunk search on the requests'
    page counts (PrefillBinarySearchKVChunkSize): the smallest chunk (>= 128 / page_size pages)
    with sum ceil(pages_i / chunk) <= grid / h."""
    pages = np.maximum(1, -(-np.asarray(kv_lens, dtype=np.int64) // page))
    max_pages = int(pages.max())
    lo, hi, cap = max(128 // page, 1), max_pages, grid // h
    while lo < hi:
        mid = (lo + hi) // 2
        if int((-(-pages // mid)).sum()) > cap:
            lo = mid + 1
        else:
            hi = mid
    chunk = min(lo, max_pages)
    units = float((-(-pages // chunk)).sum())
    return min(float(max(kv_lens)), float(chunk * page)), units * h
