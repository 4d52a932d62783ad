"""FlashAttention backends: check() reasons, and every plan route (paged KV cache, contiguous
copy, varlen, tree by LSE merge, cascade, fp8) through the accuracy gate on CPU against a torch
emulation of FA3's API semantics; the build each row records and `attnbench backends` prints.
On the H200 (`pytest -m gpu tests/test_flash_attn.py`): paged FA3 at page sizes 1..256 in
bf16, fp16 and fp8 KV against the reference through the sweep's gate, every variant on small
cases of every kind and dtype, and repeated runs with every knob."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from attnbench.backends import fa_calls, kvgather
from attnbench.backends import flash_attn as fa
from attnbench.backends.base import UnsupportedCase
from attnbench.backends.fa_lib import FlashLib, build_summary
from attnbench.measure.config import MeasureConfig
from attnbench.measure.hardware import DeviceInfo, detect
from attnbench.run.sweep import SweepContext, run_backend
from attnbench.workload.inputs import make_inputs
from attnbench.workload.spec import WorkloadSpec
from attnbench.workload.trees import chain
from backend_cases import TREE, device, make_spec

# Argument names of `torch.ops.fa3_fwd.fwd` (fa3-fwd 0.0.3 schema, read from its _C.abi3.so).
FA3_FWD_ARGS = frozenset(
    [
        "q",
        "k",
        "v",
        "k_new",
        "v_new",
        "q_v",
        "out",
        "cu_seqlens_q",
        "cu_seqlens_k",
        "cu_seqlens_k_new",
        "seqused_q",
        "seqused_k",
        "max_seqlen_q",
        "max_seqlen_k",
        "page_table",
        "kv_batch_idx",
        "leftpad_k",
        "rotary_cos",
        "rotary_sin",
        "seqlens_rotary",
        "q_descale",
        "k_descale",
        "v_descale",
        "softmax_scale",
        "is_causal",
        "window_size_left",
        "window_size_right",
        "attention_chunk",
        "softcap",
        "is_rotary_interleaved",
        "scheduler_metadata",
        "num_splits",
        "pack_gqa",
        "sm_margin",
    ]
)
# flash_attn_interface 3.0 (tokenspeed-fa3 3.0.0.post20260810) adds attention sinks.
FA3_ARGS = FA3_FWD_ARGS | {"sinks"}
# flash_attn_config.CONFIG["build_flags"] of tokenspeed-fa3 3.0.0.post20260810.
TOKENSPEED_FLAGS = {
    "FLASHATTENTION_DISABLE_BACKWARD": True,
    "FLASHATTENTION_DISABLE_SPLIT": False,
    "FLASHATTENTION_DISABLE_PAGEDKV": False,
    "FLASHATTENTION_DISABLE_APPENDKV": False,
    "FLASHATTENTION_DISABLE_LOCAL": False,
    "FLASHATTENTION_DISABLE_SOFTCAP": True,
    "FLASHATTENTION_DISABLE_PACKGQA": False,
    "FLASHATTENTION_DISABLE_FP16": False,
    "FLASHATTENTION_DISABLE_FP8": False,
    "FLASHATTENTION_DISABLE_VARLEN": False,
    "FLASHATTENTION_DISABLE_CLUSTER": False,
    "FLASHATTENTION_DISABLE_HDIM64": False,
    "FLASHATTENTION_DISABLE_HDIM96": True,
    "FLASHATTENTION_DISABLE_HDIM128": False,
    "FLASHATTENTION_DISABLE_HDIM192": False,
    "FLASHATTENTION_DISABLE_HDIM256": False,
    "FLASHATTENTION_DISABLE_SM8x": True,
    "FLASHATTENTION_ENABLE_VCOLMAJOR": False,
    "FLASH_ATTENTION_DISABLE_HDIMDIFF64": True,
    "FLASH_ATTENTION_DISABLE_HDIMDIFF192": True,
}


# -- a torch emulation of FA3's forward semantics (bottom-right causal, GQA, varlen, fp8) -------


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> Any:
    """q [n, Hq, D], k/v [L, Hkv, D] (fp32) -> (o [n, Hq, D], lse [Hq, n]); empty: 0, +inf."""
    n, hq, dim = q.shape
    if k.shape[0] == 0:
        return torch.zeros(n, hq, dim), torch.full((hq, n), float("inf"))
    group = hq // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = torch.einsum("qhd,khd->hqk", q, k) * scale
    if causal:
        pos = torch.arange(n)[:, None] + (k.shape[0] - n)
        s = s.masked_fill(torch.arange(k.shape[0])[None, :] > pos, float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = torch.einsum("hqk,khd->qhd", torch.exp(s - lse[..., None]), v)
    return o, lse


class FakeFA3:
    """flash_attn_interface look-alike: public functions and a raw `fwd` taking `out`.

    Its scheduler metadata holds the arguments it was computed from, and the forward checks them
    against its own (FA3 sizes split buffers from the forward's arguments: metadata computed
    for another max_seqlen_k or page size would be wrong on the GPU, not merely slow)."""

    def __init__(self) -> None:
        self.metadata_calls = 0
        self.calls: list[dict[str, Any]] = []

    @staticmethod
    def _check_metadata(k: torch.Tensor, **kw: Any) -> None:
        table = kw.get("page_table")
        page_size = k.shape[1] if table is not None else 0
        seqlen_k = table.shape[1] * page_size if table is not None else k.shape[1]
        batch = kw["cu_seqlens_q"].numel() - 1
        expected = [batch, seqlen_k, page_size, int(kw["is_causal"]), kw["num_splits"]]
        assert kw["scheduler_metadata"].tolist() == expected

    def _fwd(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> Any:
        self.calls.append(kw)
        if kw.get("scheduler_metadata") is not None:
            self._check_metadata(k, **kw)
        fp8 = q.dtype == torch.float8_e4m3fn

        def deq(x: torch.Tensor, name: str) -> torch.Tensor:
            scale = float(kw[name][0, 0]) if fp8 and kw.get(name) is not None else 1.0
            return x.float() * scale

        qf, kf, vf = deq(q, "q_descale"), deq(k, "k_descale"), deq(v, "v_descale")
        cu_q = kw["cu_seqlens_q"].tolist()
        outs, lses = [], []
        for b in range(len(cu_q) - 1):
            if kw.get("cu_seqlens_k") is not None:
                c0, c1 = kw["cu_seqlens_k"][b : b + 2].tolist()
                kb, vb = kf[c0:c1], vf[c0:c1]
            elif kw.get("page_table") is not None:
                n = int(kw["seqused_k"][b])
                pages = kw["page_table"][b].long()
                kb = kf[pages].flatten(0, 1)[:n]
                vb = vf[pages].flatten(0, 1)[:n]
            else:
                n = int(kw["seqused_k"][b])
                kb, vb = kf[b, :n], vf[b, :n]
            o, lse = _attend(
                qf[cu_q[b] : cu_q[b + 1]], kb, vb, kw["is_causal"], kw["softmax_scale"]
            )
            outs.append(o)
            lses.append(lse)
        out = torch.cat(outs).to(torch.bfloat16 if fp8 else q.dtype)
        if kw.get("out") is not None:
            kw["out"].copy_(out)
            out = kw["out"]
        return out, torch.cat(lses, dim=1)

    # raw operator (torch.ops.fa3_fwd.fwd)
    def fwd(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> Any:
        assert set(kw) <= FA3_FWD_ARGS
        out, lse = self._fwd(q, k, v, **kw)
        return out, lse, None, None

    # public functions (fa3_fwd_interface)
    def flash_attn_varlen_func(
        self, q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, *a: Any, **kw: Any
    ) -> Any:
        kw = {"cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k, "is_causal": kw.pop("causal"), **kw}
        assert kw.pop("return_attn_probs")
        return self._fwd(q, k, v, **kw)

    def flash_attn_with_kvcache(self, q: Any, k_cache: Any, v_cache: Any, **kw: Any) -> Any:
        assert kw.pop("return_softmax_lse")
        kw["seqused_k"] = kw.pop("cache_seqlens")
        kw["is_causal"] = kw.pop("causal")
        return self._fwd(q, k_cache, v_cache, **kw)

    # flash_attn_interface.get_scheduler_metadata (tokenspeed-fa3 3.0.0.post20260810)
    def get_scheduler_metadata(
        self,
        batch_size: int,
        max_seqlen_q: int,
        max_seqlen_k: int,
        num_heads_q: int,
        num_heads_kv: int,
        headdim: int,
        cache_seqlens: torch.Tensor,
        qkv_dtype: torch.dtype = torch.bfloat16,
        cu_seqlens_q: torch.Tensor | None = None,
        page_size: int | None = None,
        causal: bool = False,
        num_splits: int = 0,
        pack_gqa: bool | None = None,
    ) -> torch.Tensor:
        assert cache_seqlens.dtype == torch.int32
        assert cache_seqlens.shape == (batch_size,)
        assert qkv_dtype in (torch.float16, torch.bfloat16, torch.float8_e4m3fn)
        self.metadata_calls += 1
        values = [batch_size, max_seqlen_k, page_size or 0, int(causal), num_splits]
        return torch.tensor(values, dtype=torch.int32)


def fake_lib(*, raw: bool = True, paged: bool = True, fp16: bool = True) -> FlashLib:
    """A FlashLib over FakeFA3; by default a build like tokenspeed-fa3 (paged KV, fp16)."""
    mod = FakeFA3()
    flags = {"FLASHATTENTION_DISABLE_PAGEDKV": not paged, "FLASHATTENTION_DISABLE_FP16": not fp16}
    module: Any = mod
    args = FA3_ARGS if paged else FA3_FWD_ARGS
    return FlashLib(module, "fake_fa3", "0", 3, flags, mod if raw else None, args, "fake-dist")


def fa3_fwd_lib() -> FlashLib:
    """A build like fa3-fwd 0.0.3: no paged KV, no fp16, no scheduler metadata function."""
    lib = fake_lib(paged=False, fp16=False)
    module = SimpleNamespace(
        flash_attn_varlen_func=lib.module.flash_attn_varlen_func,
        flash_attn_with_kvcache=lib.module.flash_attn_with_kvcache,
    )
    return FlashLib(module, "fa3_fwd_interface", "0.0.3", 3, lib.build_flags, lib.raw, FA3_FWD_ARGS)


@pytest.fixture
def ctx() -> SweepContext:
    cfg = MeasureConfig(timer="fake", warmup_ms=0.0, min_runs=3, max_runs=3)
    return SweepContext(run_id="test-flash-attn", info=detect("cpu"), measure_cfg=cfg)


def variant(name: str) -> fa.FlashAttnBackend:
    """`fa3`, `fa3-contiguous`, `fa3-cascade` or `fa2`."""
    return {b.name.split(":")[1]: b for b in fa.backends()}[name]


def _run(
    spec: WorkloadSpec, lib: FlashLib, ctx: SweepContext, name: str = "fa3", **knobs: Any
) -> Any:
    from attnbench.backends.reference import reference_attention

    backend = variant(name)
    inputs = make_inputs(spec, "cpu")
    oracle = reference_attention(inputs)
    mp = pytest.MonkeyPatch()
    mp.setattr(fa, "load_fa3", lambda: lib)
    try:
        return run_backend(spec, backend, inputs, oracle, ctx, knobs=knobs or None)
    finally:
        mp.undo()


# -- routes through the gate on CPU --------------------------------------------------------------

ROUTES = [  # (variant, knobs, kv_cache of a KV-cache kind, kv_cache of prefill)
    ("fa3", {}, "paged", "paged"),
    ("fa3-contiguous", {"api": "kvcache"}, "contiguous", "packed"),
    ("fa3-contiguous", {"api": "varlen"}, "packed", "packed"),
]


@pytest.mark.parametrize("kind", ["decode", "append", "prefill", "tree", "shared_prefix"])
@pytest.mark.parametrize(("name", "knobs", "cache", "prefill_cache"), ROUTES)
def test_every_kind_passes_the_gate(
    kind: str, name: str, knobs: dict[str, Any], cache: str, prefill_cache: str, ctx: SweepContext
) -> None:
    row = _run(make_spec(kind), fake_lib(), ctx, name, **knobs)
    assert row.status == "ok", (row.reason, row.details.get("traceback"))
    assert row.details["kv_cache"] == (prefill_cache if kind == "prefill" else cache)
    assert row.resolved == ("fa3+lse-merge" if kind == "tree" else "fa3")
    assert row.details["out_buffer"] == "fixed"


@pytest.mark.parametrize("page_size", [1, 2, 16, 64, 256])
@pytest.mark.parametrize("kind", ["decode", "append", "prefill", "tree"])
def test_paged_reads_every_page_size(kind: str, page_size: int, ctx: SweepContext) -> None:
    row = _run(make_spec(kind, page_size=page_size), fake_lib(), ctx)
    assert row.status == "ok", (row.reason, row.details.get("traceback"))
    assert row.details["kv_cache"] == "paged"
    assert row.spec.page_size == page_size


@pytest.mark.parametrize(
    ("dtype", "kv_dtype"),
    [("bfloat16", "bfloat16"), ("float16", "float16"), ("bfloat16", "fp8_e4m3")],
)
def test_paged_dtypes(dtype: str, kv_dtype: str, ctx: SweepContext) -> None:
    spec = make_spec("decode", kv_lens=(40, 9, 73, 1, 200), qo_lens=(1,) * 5)
    spec = spec.model_copy(update={"dtype": dtype, "kv_dtype": kv_dtype})
    row = _run(spec, fake_lib(), ctx)
    assert row.status == "ok", (row.reason, row.details.get("traceback"))
    assert row.details["kv_cache"] == "paged"
    assert row.accuracy.precision == ("fp8_e4m3" if kv_dtype == "fp8_e4m3" else dtype)


def test_paged_reads_the_pages_and_lengths_the_reference_reads() -> None:
    lib = fake_lib()
    spec = make_spec("append", page_size=4)
    inputs = make_inputs(spec, "cpu")
    mp = pytest.MonkeyPatch()
    mp.setattr(fa, "load_fa3", lambda: lib)
    try:
        planned = fa.FlashAttnBackend(3).plan(spec, inputs)
    finally:
        mp.undo()
    planned.run()
    kw = lib.module.calls[-1]
    assert kw["seqused_k"] is inputs.kv_lens  # the case's own lengths, not a copy
    table = kw["page_table"]
    assert table.dtype == torch.int32
    indptr = inputs.kv_indptr.tolist()
    for b in range(spec.batch_size):
        pages = indptr[b + 1] - indptr[b]
        assert torch.equal(table[b, :pages], inputs.kv_indices[indptr[b] : indptr[b + 1]])
        k_ref, v_ref = inputs.request_kv(b)
        n = spec.kv_lens[b]
        k_cache, v_cache = inputs.k_cache, inputs.v_cache
        assert torch.equal(k_cache[table[b].long()].flatten(0, 1)[:n], k_ref)
        assert torch.equal(v_cache[table[b].long()].flatten(0, 1)[:n], v_ref)
    k, v, _, _ = kvgather.paged_kv(inputs)
    assert k.data_ptr() == inputs.kv_cache.data_ptr()  # views of the cache: no copy
    assert k.shape == (inputs.kv_cache.shape[0], 4, spec.num_kv_heads, spec.head_dim)
    assert v.stride() == inputs.kv_cache[:, 1].stride()


def test_tree_context_reads_a_prefix_of_each_request(ctx: SweepContext) -> None:
    lib = fake_lib()
    row = _run(make_spec("tree"), lib, ctx)
    assert row.status == "ok", row.reason
    seqused = lib.module.calls[-1]["seqused_k"].tolist()
    assert seqused == [kv - 5 for kv in make_spec("tree").kv_lens]


def test_build_without_paged_kv_makes_fa3_unsupported(ctx: SweepContext) -> None:
    from attnbench.run.sweep import run_case

    lib = fa3_fwd_lib()
    spec = make_spec("decode")
    mp = pytest.MonkeyPatch()
    mp.setattr(fa, "load_fa3", lambda: lib)
    try:
        paged, contiguous = variant("fa3"), variant("fa3-contiguous")
        assert "without paged KV" in (paged.available() or "")
        assert contiguous.available() is None
        why = paged.check(spec, device())
        assert why is not None
        assert "fa3-contiguous" in why.reason
        with pytest.raises(UnsupportedCase, match="paged KV"):
            paged.plan(spec, make_inputs(spec, "cpu"))
        (row,) = run_case(spec, [paged], ctx)
    finally:
        mp.undo()
    assert row.status == "unsupported"
    assert "FLASHATTENTION_DISABLE_PAGEDKV" in row.reason
    copy = _run(spec, lib, ctx, "fa3-contiguous")
    assert copy.status == "ok", copy.reason
    assert copy.details["kv_cache"] == "contiguous"
    assert copy.details["scheduler_metadata"] == fa_calls.METADATA_IN_RUN


def test_hnd_cache_is_unsupported_paged_and_copied_contiguous(ctx: SweepContext) -> None:
    spec = make_spec("decode", kv_layout="HND")
    why = None
    mp = pytest.MonkeyPatch()
    mp.setattr(fa, "load_fa3", lambda: fake_lib())
    try:
        why = variant("fa3").check(spec, device())
    finally:
        mp.undo()
    assert why is not None
    assert "NHD" in why.reason
    row = _run(spec, fake_lib(), ctx, "fa3-contiguous")
    assert row.status == "ok", row.reason
    assert row.details["kv_cache"] == "contiguous"


def test_chain_tree_is_one_causal_call(ctx: SweepContext) -> None:
    spec = make_spec("tree", tree=chain(5))
    row = _run(spec, fake_lib(), ctx)
    assert row.status == "ok", row.reason
    assert row.resolved == "fa3"


def test_cascade_merges_prefix_and_suffix(ctx: SweepContext) -> None:
    spec = make_spec("shared_prefix", qo_lens=(2, 1, 3))
    row = _run(spec, fake_lib(), ctx, name="fa3-cascade")
    assert row.status == "ok", (row.reason, row.details.get("traceback"))
    assert row.resolved == "fa3+cascade"
    assert row.details["prefix_tokens"] == 16  # two whole pages of the 20 shared tokens
    assert row.details["kv_cache"] == "prefix:packed+suffix:contiguous"


@pytest.mark.parametrize("name", ["fa3", "fa3-contiguous"])
def test_public_functions_without_the_raw_operator(name: str, ctx: SweepContext) -> None:
    for kind in ("decode", "prefill", "tree"):
        row = _run(make_spec(kind), fake_lib(raw=False), ctx, name)
        assert row.status == "ok", (kind, row.reason, row.details.get("traceback"))
        assert row.details["out_buffer"] == "allocated"


@pytest.mark.parametrize("name", ["fa3", "fa3-contiguous"])
@pytest.mark.parametrize("kind", ["decode", "tree", "prefill"])
def test_fp8_quantises_q_and_passes_the_fp8_budget(name: str, kind: str, ctx: SweepContext) -> None:
    row = _run(make_spec(kind, kv_dtype="fp8_e4m3"), fake_lib(), ctx, name)
    assert row.status == "ok", (row.reason, row.details.get("traceback"))
    assert row.accuracy.precision == "fp8_e4m3"
    assert row.details["out_dtype"] == "bfloat16"
    assert row.details["q_scale"] > 0


# -- scheduler metadata, knobs, provenance --------------------------------------------------------


@pytest.mark.parametrize("name", ["fa3", "fa3-contiguous"])
def test_scheduler_metadata_is_the_replan(name: str) -> None:
    lib = fake_lib()
    spec = make_spec("decode")
    inputs = make_inputs(spec, "cpu")
    mp = pytest.MonkeyPatch()
    mp.setattr(fa, "load_fa3", lambda: lib)
    try:
        planned = variant(name).plan(spec, inputs)
        off = variant(name).plan(spec, inputs, {"scheduler_metadata": False})
    finally:
        mp.undo()
    calls = lib.module.metadata_calls
    assert planned.details["scheduler_metadata"] == "per-step, in plan"
    assert planned.replan is not None
    planned.replan()
    assert lib.module.metadata_calls == calls + 1
    planned.run()  # the recomputed metadata still matches the call (FakeFA3 checks)
    assert off.replan is None
    assert off.details["scheduler_metadata"] == "in each run"
    off.run()
    assert "scheduler_metadata" not in lib.module.calls[-1]


def test_the_sweep_times_the_metadata_as_plan_us(ctx: SweepContext) -> None:
    row = _run(make_spec("decode"), fake_lib(), ctx)
    assert row.status == "ok", row.reason
    assert row.plan_us is not None
    assert row.plan_us > 0
    off = _run(make_spec("decode"), fake_lib(), ctx, scheduler_metadata=False)
    assert off.plan_us == 0


def test_knobs_are_recorded(ctx: SweepContext) -> None:
    row = _run(make_spec("decode"), fake_lib(), ctx, num_splits=4, pack_gqa=False)
    assert row.details["num_splits"] == 4
    assert row.details["pack_gqa"] is False
    assert "api" not in row.details
    contiguous = _run(make_spec("decode"), fake_lib(), ctx, "fa3-contiguous", api="varlen")
    assert contiguous.details["api"] == "varlen"


def test_unknown_knob_is_refused() -> None:
    spec = make_spec("decode")
    mp = pytest.MonkeyPatch()
    mp.setattr(fa, "load_fa3", lambda: fake_lib())
    try:
        with pytest.raises(ValueError, match="api"):
            variant("fa3").plan(spec, make_inputs(spec, "cpu"), {"api": "varlen"})
    finally:
        mp.undo()


def test_knobs_ignored_where_they_cannot_matter(ctx: SweepContext) -> None:
    assert "knobs_ignored" not in _run(make_spec("decode"), fake_lib(), ctx).details
    prefill = _run(make_spec("prefill"), fake_lib(), ctx, "fa3-contiguous")
    assert prefill.details["knobs_ignored"] == "api,scheduler_metadata"
    assert "knobs_ignored" not in _run(make_spec("prefill"), fake_lib(), ctx).details
    no_meta = _run(make_spec("decode"), fa3_fwd_lib(), ctx, "fa3-contiguous")
    assert no_meta.details["knobs_ignored"] == "scheduler_metadata"


def test_rows_record_the_build(ctx: SweepContext) -> None:
    lib = fake_lib()
    flagged = FlashLib(lib.module, "flash_attn_interface", "3.0.0.post20260810", 3,
                       TOKENSPEED_FLAGS, lib.raw, FA3_ARGS, "tokenspeed-fa3")  # fmt: skip
    row = _run(make_spec("decode"), flagged, ctx)
    assert row.status == "ok", row.reason
    d = row.details
    assert d["library"] == "flash_attn_interface 3.0.0.post20260810"
    assert d["fa_module"] == "flash_attn_interface"
    assert d["fa_distribution"] == "tokenspeed-fa3"
    assert d["fa_version"] == "3.0.0.post20260810"
    assert d["fa_build_flags"].split(",") == [
        "DISABLE_BACKWARD",
        "DISABLE_SOFTCAP",
        "DISABLE_HDIM96",
        "DISABLE_SM8x",
        "DISABLE_HDIMDIFF64",
        "DISABLE_HDIMDIFF192",
    ]
    unknown = FlashLib(lib.module, "flash_attn_interface", "3", 3, {}, lib.raw, FA3_ARGS)
    assert unknown.provenance()["fa_build_flags"] == "unknown"


@pytest.mark.slow
def test_fa3_grid_searches_the_paged_knobs(ctx: SweepContext) -> None:
    from attnbench.backends.reference import reference_attention
    from attnbench.run.tune import Deadline, knob_grid, make_trial, tune_variant

    fa3 = variant("fa3")
    assert knob_grid(fa3.knobs)[0] == {
        "num_splits": 0,
        "pack_gqa": None,
        "scheduler_metadata": True,
    }
    spec = make_spec("decode")
    inputs = make_inputs(spec, "cpu")
    mp = pytest.MonkeyPatch()
    mp.setattr(fa, "load_fa3", lambda: fake_lib())
    try:
        trial = make_trial(spec, fa3, inputs, reference_attention(inputs), ctx)
        out = tune_variant(spec, fa3, ctx, trial, Deadline(None), lambda row: None)
    finally:
        mp.undo()
    assert out.search is not None
    assert out.search.configs == 36
    assert out.search.failed == 0, out.search.failures
    assert out.tuned.status == "ok"
    assert out.tuned.backend == "flash-attn:fa3+tuned"
    assert out.tuned.details["kv_cache"] == "paged"
    assert set(out.tuned.details["knobs"]) == {"num_splits", "pack_gqa", "scheduler_metadata"}


# -- the build: loading, summary, `attnbench backends` --------------------------------------------


def test_build_summary() -> None:
    lib = FlashLib(SimpleNamespace(), "flash_attn_interface", "3.0.0.post20260810", 3,
                   TOKENSPEED_FLAGS, distribution="tokenspeed-fa3")  # fmt: skip
    assert build_summary(lib) == (
        "flash_attn_interface 3.0.0.post20260810 (tokenspeed-fa3); lacks: backward, softcap, "
        "head_dim 96, sm8x kernels, head_dim_v != head_dim 64/192"
    )
    fwd = FlashLib(SimpleNamespace(), "fa3_fwd_interface", "0.0.3", 3, {
        "FLASHATTENTION_DISABLE_PAGEDKV": True, "FLASHATTENTION_DISABLE_FP16": True,
    }, distribution="fa3-fwd")  # fmt: skip
    assert build_summary(fwd) == "fa3_fwd_interface 0.0.3 (fa3-fwd); lacks: paged KV, fp16"
    bare = FlashLib(SimpleNamespace(), "flash_attn_interface", "3.0.0b1", 3)
    assert build_summary(bare) == (
        "flash_attn_interface 3.0.0b1; build flags unknown (no config module)"
    )
    full = FlashLib(SimpleNamespace(), "x", "1", 3, {"FLASHATTENTION_DISABLE_FP8": False})
    assert build_summary(full) == "x 1; lacks nothing"
    fa2 = FlashLib(SimpleNamespace(), "flash_attn", "2.7.4", 2, distribution="flash-attn")
    assert build_summary(fa2) == "flash_attn 2.7.4 (flash-attn)"
    assert build_summary("FlashAttention-3 not installed: x") == "FlashAttention-3 not installed: x"


def test_head_dim_buckets_follow_the_build_flags() -> None:
    lib = FlashLib(SimpleNamespace(), "flash_attn_interface", "3", 3, TOKENSPEED_FLAGS)
    assert lib.head_dim_bucket(80) == 128  # HDIM96 compiled out: the 128 kernel runs it
    assert lib.head_dim_bucket(64) == 64
    only_64 = {f"FLASHATTENTION_DISABLE_HDIM{d}": True for d in (96, 128, 192, 256)}
    small = FlashLib(SimpleNamespace(), "x", "1", 3, only_64)
    assert small.head_dim_bucket(128) is None
    mp = pytest.MonkeyPatch()
    mp.setattr(fa, "load_fa3", lambda: small)
    try:
        why = variant("fa3-contiguous").check(make_spec("decode", head_dim=128), device())
    finally:
        mp.undo()
    assert why is not None
    assert "head_dim kernel" in why.reason


def test_load_fa3_reads_the_official_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """flash_attn_interface with flash_attn_config, as tokenspeed-fa3 installs them: the raw
    operator is `flash_attn_3_gpu` (torch.ops.flash_attn_3), the distribution comes from the
    installed metadata."""
    import sys
    from importlib import metadata
    from types import ModuleType

    from attnbench.backends import fa_lib

    lib_def = torch.library.Library("attnbench_fa3_test", "DEF")
    lib_def.define(
        "fwd(Tensor q, Tensor k, Tensor v, Tensor(a!)? out=None, bool is_causal=False, "
        "int num_splits=0, Tensor? page_table=None) -> Tensor"
    )
    interface = ModuleType("flash_attn_interface")
    interface.flash_attn_3_gpu = torch.ops.attnbench_fa3_test  # type: ignore[attr-defined]
    interface.get_scheduler_metadata = lambda *a, **k: None  # type: ignore[attr-defined]
    config = ModuleType("flash_attn_config")
    config.CONFIG = {"build_flags": TOKENSPEED_FLAGS}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flash_attn_interface", interface)
    monkeypatch.setitem(sys.modules, "flash_attn_config", config)
    monkeypatch.setattr(
        metadata, "packages_distributions", lambda: {"flash_attn_interface": ["tokenspeed-fa3"]}
    )
    real_version = metadata.version
    monkeypatch.setattr(
        metadata,
        "version",
        lambda d: "3.0.0.post20260810" if d == "tokenspeed-fa3" else real_version(d),
    )
    lib = fa_lib.load_fa3.__wrapped__()
    assert isinstance(lib, FlashLib)
    assert (lib.import_name, lib.distribution) == ("flash_attn_interface", "tokenspeed-fa3")
    assert lib.version == "3.0.0.post20260810"
    assert lib.paged
    assert lib.fp16
    assert lib.fp8
    assert lib.has_scheduler_metadata
    assert lib.raw is torch.ops.attnbench_fa3_test
    assert {"out", "page_table", "num_splits"} <= lib.raw_args


def test_backends_command_names_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from attnbench.cli import app

    lib = FlashLib(SimpleNamespace(), "flash_attn_interface", "3.0.0.post20260810", 3,
                   TOKENSPEED_FLAGS, distribution="tokenspeed-fa3")  # fmt: skip
    monkeypatch.setattr(fa, "load_fa3", lambda: lib)
    res = CliRunner().invoke(app, ["backends", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "flash-attn:fa3-contiguous" in text
    assert "tokenspeed-fa3" in text
    assert "lacks: backward" in text.replace("│ ", "")


# -- check() reasons ----------------------------------------------------------------------------


def test_check_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fa, "load_fa3", lambda: fake_lib(fp16=False))
    fa3, cascade = fa.FlashAttnBackend(3), fa.FlashAttnBackend(3, cascade=True)

    def reason(b: fa.FlashAttnBackend, spec: WorkloadSpec, dev: DeviceInfo | None = None) -> str:
        why = b.check(spec, dev or device())
        return why.reason if why else ""

    assert reason(fa3, make_spec("decode")) == ""
    assert "CUDA" in reason(fa3, make_spec("decode"), device(kind="cpu"))
    assert "sm90" in reason(fa3, make_spec("decode"), device(sm=80))
    assert "fp16" in reason(fa3, make_spec("decode", dtype="float16", kv_dtype="float16"))
    assert "e5m2" in reason(fa3, make_spec("decode", kv_dtype="fp8_e5m2"))
    assert reason(fa3, make_spec("decode", dtype="float16", kv_dtype="fp8_e4m3")) == ""
    assert "differ" in reason(fa3, make_spec("decode", kv_dtype="float16"))
    assert "head_dim" in reason(fa3, make_spec("decode", head_dim=264, num_qo_heads=2))
    assert "shared_prefix" in reason(cascade, make_spec("decode"))
    assert "page" in reason(cascade, make_spec("shared_prefix", shared_prefix_len=5))
    assert reason(cascade, make_spec("shared_prefix")) == ""
    empty_ctx = make_spec("tree", kv_lens=(5, 12, 73))
    assert "context" in reason(fa3, empty_ctx)


def test_missing_library_is_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fa, "load_fa3", lambda: "FlashAttention-3 not installed: pip install x")
    b = fa.FlashAttnBackend(3)
    assert b.available() == "FlashAttention-3 not installed: pip install x"
    why = b.check(make_spec("decode"), device())
    assert why is not None
    assert "not installed" in why.reason


def test_names_and_knobs() -> None:
    names = [b.name for b in fa.backends()]
    assert names == [
        "flash-attn:fa3",
        "flash-attn:fa3-contiguous",
        "flash-attn:fa3-cascade",
        "flash-attn:fa2",
    ]
    paged = variant("fa3")
    assert paged.layout == "paged"
    assert list(paged.knobs) == ["num_splits", "pack_gqa", "scheduler_metadata"]
    assert [v[0] for v in paged.knobs.values()] == [0, None, True]  # the default comes first
    contiguous = variant("fa3-contiguous")
    assert contiguous.layout == "contiguous"
    assert list(contiguous.knobs) == ["num_splits", "pack_gqa", "api", "scheduler_metadata"]
    assert contiguous.knobs["api"][0] == "kvcache"
    assert variant("fa3-cascade").knobs == contiguous.knobs
    assert variant("fa2").knobs == {}
    assert variant("fa2").layout == "packed"


def test_fa3_fwd_build_flags_are_read() -> None:
    lib = FlashLib(SimpleNamespace(), "fa3_fwd_interface", "0.0.3", 3, {
        "FLASHATTENTION_DISABLE_PAGEDKV": True, "FLASHATTENTION_DISABLE_FP16": True,
    })  # fmt: skip
    assert not lib.paged
    assert not lib.fp16
    assert lib.fp8
    assert not lib.has_scheduler_metadata
    fa2 = FlashLib(SimpleNamespace(), "flash_attn", "2.7.4", 2)
    assert fa2.fp16
    assert not fa2.fp8
    assert not fa2.paged


def test_lse_layouts() -> None:
    lse = torch.arange(6.0).view(2, 3)  # [Hq, total_q]
    assert torch.equal(fa_calls.lse_tokens(lse, [1, 2]), lse.t())
    padded = torch.arange(12.0).view(2, 2, 3)  # [B, Hq, max_q], FA2 before varlen LSE
    got = fa_calls.lse_tokens(padded, [1, 3])
    assert got.shape == (4, 2)
    assert torch.equal(got[1], padded[1, :, 0])


# -- on the H200 ---------------------------------------------------------------------------------

GPU_KINDS = ["decode", "append", "prefill", "tree", "shared_prefix"]
GPU_DTYPES = [
    ("bfloat16", "bfloat16"),
    ("float16", "float16"),
    ("bfloat16", "fp8_e4m3"),
    ("float16", "fp8_e4m3"),
    ("bfloat16", "fp8_e5m2"),
]
PAGED_DTYPES = [("bfloat16", "bfloat16"), ("float16", "float16"), ("bfloat16", "fp8_e4m3")]
PAGED_SHAPES: dict[str, dict[str, Any]] = {  # Llama-3.1-8B heads: 32 query, 8 KV, d128
    "decode": {"kind": "decode", "kv_lens": (2048,) * 8, "qo_lens": (1,) * 8},
    "ragged-decode": {
        "kind": "decode",
        "kv_lens": (1, 17, 300, 1024, 5000, 129, 4096, 64),
        "qo_lens": (1,) * 8,
    },
    "ragged-append": {"kind": "append", "kv_lens": (40, 300, 1100, 7), "qo_lens": (4, 1, 16, 7)},
}


def _gpu_ctx() -> SweepContext:
    info = detect("cuda:0")
    cfg = MeasureConfig(warmup_ms=1.0, min_runs=3, max_runs=5, max_time_ms=5.0)
    return SweepContext(run_id="test-flash-attn-gpu", info=info, measure_cfg=cfg)


def _paged_fa3_or_skip() -> FlashLib:
    lib = fa.load_fa3()
    if isinstance(lib, str):
        pytest.skip(lib)
    if not lib.paged:
        pytest.skip(f"{build_summary(lib)}: no paged KV (pip install tokenspeed-fa3)")
    if detect("cuda:0").sm != 90:
        pytest.skip("FlashAttention-3 needs sm90")
    return lib


def _paged_spec(shape: str, page_size: int, dtype: str, kv_dtype: str) -> WorkloadSpec:
    fields = PAGED_SHAPES[shape]
    kind = fields["kind"]
    return make_spec(
        kind,
        kv_lens=fields["kv_lens"],
        qo_lens=fields["qo_lens"],
        num_qo_heads=32,
        num_kv_heads=8,
        head_dim=128,
        page_size=page_size,
        dtype=dtype,
        kv_dtype=kv_dtype,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("shape", list(PAGED_SHAPES))
@pytest.mark.parametrize(("dtype", "kv_dtype"), PAGED_DTYPES)
@pytest.mark.parametrize("page_size", [1, 16, 64, 256])
def test_gpu_paged_fa3_passes_the_gate(
    page_size: int, dtype: str, kv_dtype: str, shape: str
) -> None:
    """Paged FA3 (and its contiguous copy) against the fp64 reference through the sweep's gate,
    timed: ok rows that say they read the pages, with the metadata timed as plan_us."""
    from attnbench.run.sweep import run_case

    lib = _paged_fa3_or_skip()
    if dtype == "float16" and not lib.fp16:
        pytest.skip(f"{build_summary(lib)}")
    spec = _paged_spec(shape, page_size, dtype, kv_dtype)
    rows = {
        r.backend: r
        for r in run_case(spec, [variant("fa3"), variant("fa3-contiguous")], _gpu_ctx())
    }
    for row in rows.values():
        assert row.status == "ok", (
            row.backend,
            row.status,
            row.reason,
            row.details.get("traceback"),
        )
        assert "graph capture failed" not in row.reason, row.reason
        assert row.accuracy.passed
    paged, contiguous = rows["flash-attn:fa3"], rows["flash-attn:fa3-contiguous"]
    assert paged.details["kv_cache"] == "paged"
    assert contiguous.details["kv_cache"] == "contiguous"
    assert paged.spec.page_size == page_size
    if lib.has_scheduler_metadata:
        assert paged.details["scheduler_metadata"] == "per-step, in plan"
        assert paged.plan_us is not None
        assert paged.plan_us > 0
    assert paged.details["fa_module"] == lib.import_name
    assert paged.details["fa_distribution"] == lib.distribution
    assert paged.details["fa_version"] == lib.version
    assert paged.details["fa_build_flags"] == lib.provenance()["fa_build_flags"]


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("name", "knobs"),
    [
        ("fa3", {}),
        ("fa3", {"num_splits": 1}),
        ("fa3", {"num_splits": 4}),
        ("fa3", {"num_splits": 16, "pack_gqa": True}),
        ("fa3", {"pack_gqa": False}),
        ("fa3", {"pack_gqa": True}),
        ("fa3", {"scheduler_metadata": False}),
        ("fa3", {"num_splits": 4, "scheduler_metadata": False}),
        ("fa3-contiguous", {}),
        ("fa3-contiguous", {"api": "varlen"}),
        ("fa3-contiguous", {"num_splits": 4}),
        ("fa3-contiguous", {"scheduler_metadata": False}),
    ],
)
@pytest.mark.parametrize("page_size", [1, 16])
def test_gpu_repeated_runs_stay_correct(page_size: int, name: str, knobs: dict[str, Any]) -> None:
    """Scheduler metadata and the tile semaphore are reused across calls: the 5th output of a
    plan, and the output after a replan, must still be right (a stale semaphore would skip
    tiles after the first call; metadata sized for another call would corrupt split buffers)."""
    from attnbench.backends.reference import reference_attention
    from attnbench.measure.accuracy import check_accuracy

    lib = _paged_fa3_or_skip() if name == "fa3" else fa.load_fa3()
    if isinstance(lib, str):
        pytest.skip(lib)
    spec = make_spec(
        "decode", kv_lens=(4000, 37, 513, 2048), qo_lens=(1, 1, 1, 1), head_dim=128,
        page_size=page_size,
    )  # fmt: skip
    inputs = make_inputs(spec, "cuda:0")
    reference = reference_attention(inputs)
    planned = variant(name).plan(spec, inputs, knobs)
    for _ in range(5):
        out = planned.run()
    torch.cuda.synchronize()
    acc = check_accuracy(planned.unpack(out).clone(), reference, spec.dtype)
    assert acc.passed, acc.reason
    if planned.replan is not None:
        planned.replan()
        out = planned.run()
        torch.cuda.synchronize()
        acc = check_accuracy(planned.unpack(out), reference, spec.dtype)
        assert acc.passed, f"after replan: {acc.reason}"


@pytest.mark.gpu
@pytest.mark.parametrize("kind", GPU_KINDS)
@pytest.mark.parametrize(("dtype", "kv_dtype"), GPU_DTYPES)
def test_gpu_every_variant_passes_the_gate_or_says_why(
    kind: str, dtype: str, kv_dtype: str
) -> None:
    from attnbench.run.sweep import run_case

    ctx = _gpu_ctx()
    spec = make_spec(kind, head_dim=128, page_size=16, dtype=dtype, kv_dtype=kv_dtype)
    rows = run_case(spec, list(fa.backends()), ctx)
    failures = []
    for row in rows:
        if row.status == "unsupported":
            assert row.reason, row.backend
            continue
        if row.status != "ok":
            failures.append(
                f"{row.backend}: {row.status}: {row.reason}\n{row.details.get('traceback', '')}"
            )
        elif "graph capture failed" in row.reason:
            failures.append(f"{row.backend}: not graph-capturable: {row.reason}")
    assert not failures, "\n".join(failures)
    lib = fa.load_fa3()
    if isinstance(lib, str) or ctx.info.sm != 90:
        return
    runs = ("bfloat16", "fp8_e4m3") + (("float16",) if lib.fp16 else ())
    if kv_dtype in runs:  # these always run on FA3: paged where the build has it
        must = ["flash-attn:fa3-contiguous"] + (["flash-attn:fa3"] if lib.paged else [])
        by_name = {r.backend: r for r in rows}
        for name in must:
            assert by_name[name].status == "ok", (name, by_name[name].reason)


@pytest.mark.gpu
def test_gpu_fp8_budget_is_the_fp8_one() -> None:
    lib = fa.load_fa3()
    if isinstance(lib, str):
        pytest.skip(lib)
    spec = make_spec("prefill", head_dim=128, kv_dtype="fp8_e4m3")
    backend = variant("fa3" if lib.paged else "fa3-contiguous")
    planned = backend.plan(spec, make_inputs(spec, "cuda:0"))
    assert planned.precision == "fp8_e4m3"
    assert planned.q_effective is not None
    assert planned.run().dtype == torch.bfloat16
    assert math.isfinite(float(planned.q_effective.abs().max()))


# -- the LSE merge helpers ------------------------------------------------------------------------


def test_merge_states_equals_attention_over_all_keys() -> None:
    from attnbench.backends.merge import merge_states

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(6, 4, 16, generator=gen)
    k = torch.randn(30, 2, 16, generator=gen)
    v = torch.randn(30, 2, 16, generator=gen)
    scale = 16**-0.5
    full, full_lse = _attend(q, k, v, False, scale)
    o_a, lse_a = _attend(q, k[:11], v[:11], False, scale)
    o_b, lse_b = _attend(q, k[11:], v[11:], False, scale)
    out = torch.empty(6, 4, 16, dtype=torch.float64)
    merged, lse = merge_states(o_a, lse_a.t(), o_b, lse_b.t(), out=out)
    assert merged is out
    torch.testing.assert_close(merged.float(), full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, full_lse.t(), atol=1e-5, rtol=1e-5)


def test_merge_states_ignores_an_empty_part() -> None:
    """FA3 reports +inf as the LSE of a row with no keys; that part must weigh nothing."""
    from attnbench.backends.merge import merge_states

    o_a, lse_a = torch.ones(3, 2, 4), torch.full((3, 2), 0.7)
    o_b, lse_b = torch.zeros(3, 2, 4), torch.full((3, 2), float("inf"))
    merged, lse = merge_states(o_a, lse_a, o_b, lse_b)
    torch.testing.assert_close(merged, o_a)
    torch.testing.assert_close(lse, lse_a)
    merged, _ = merge_states(o_b, -lse_b, o_a, lse_a)
    torch.testing.assert_close(merged, o_a)


def test_masked_attention_lse_matches_per_row_softmax() -> None:
    from attnbench.backends.merge import masked_attention_lse
    from attnbench.workload.inputs import tree_ancestor_mask

    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 5, 4, 8, generator=gen)  # [B, n, Hq, D]
    k = torch.randn(2, 5, 2, 8, generator=gen)
    v = torch.randn(2, 5, 2, 8, generator=gen)
    allowed = tree_ancestor_mask(TREE.parents)
    o, lse = masked_attention_lse(q, k, v, allowed, 0.5)
    assert o.shape == (10, 4, 8)
    assert lse.shape == (10, 4)
    b, i, h = 1, 3, 2  # node 3 sees nodes 0, 1, 3; head 2 uses KV head 1
    keys = allowed[i].nonzero().flatten()
    s = (k[b, keys, h // 2] @ q[b, i, h]) * 0.5
    torch.testing.assert_close(lse[b * 5 + i, h], torch.logsumexp(s, 0))
    torch.testing.assert_close(o[b * 5 + i, h], torch.softmax(s, 0) @ v[b, keys, h // 2])
