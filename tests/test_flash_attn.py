"""FlashAttention backends: check() reasons, and every plan route (KV cache contiguous/paged,
varlen, tree by LSE merge, cascade, fp8) through the accuracy gate on CPU against a torch
emulation of FA3's API semantics; on the H200 (`pytest -m gpu tests/test_flash_attn.py`) every
variant on small cases of every kind and dtype, plus repeated runs with scheduler metadata."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from attnbench.backends import flash_attn as fa
from attnbench.backends.fa_lib import FlashLib
from attnbench.hardware import DeviceInfo, detect
from attnbench.measure.config import MeasureConfig
from attnbench.sweep import SweepContext, run_backend
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
    """flash_attn_interface look-alike: public functions and a raw `fwd` taking `out`."""

    def __init__(self) -> None:
        self.metadata_calls = 0

    @staticmethod
    def _fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> Any:
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

    def get_scheduler_metadata(self, *args: Any, **kw: Any) -> torch.Tensor:
        assert len(args) == 7
        assert isinstance(args[6], torch.Tensor)
        self.metadata_calls += 1
        return torch.zeros(4, dtype=torch.int32)


def fake_lib(*, raw: bool = True, paged: bool = False, fp16: bool = False) -> FlashLib:
    mod = FakeFA3()
    flags = {"FLASHATTENTION_DISABLE_PAGEDKV": not paged, "FLASHATTENTION_DISABLE_FP16": not fp16}
    module: Any = mod
    return FlashLib(module, "fake_fa3", "0", 3, flags, mod if raw else None, FA3_FWD_ARGS)


@pytest.fixture
def ctx() -> SweepContext:
    cfg = MeasureConfig(timer="fake", warmup_ms=0.0, min_runs=3, max_runs=3)
    return SweepContext(run_id="test-flash-attn", info=detect("cpu"), measure_cfg=cfg)


def _run(
    spec: WorkloadSpec, lib: FlashLib, ctx: SweepContext, name: str = "fa3", **knobs: Any
) -> Any:
    from attnbench.backends.reference import reference_attention

    variant = {b.name.split(":")[1]: b for b in fa.backends()}[name]
    inputs = make_inputs(spec, "cpu")
    oracle = reference_attention(inputs)
    mp = pytest.MonkeyPatch()
    mp.setattr(fa, "load_fa3", lambda: lib)
    try:
        return run_backend(spec, variant, inputs, oracle, ctx, knobs=knobs or None)
    finally:
        mp.undo()


# -- routes through the gate on CPU --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["decode", "append", "prefill", "tree", "shared_prefix"])
@pytest.mark.parametrize("api", ["kvcache", "varlen"])
def test_every_kind_passes_the_gate(kind: str, api: str, ctx: SweepContext) -> None:
    row = _run(make_spec(kind), fake_lib(), ctx, api=api)
    assert row.status == "ok", (row.reason, row.details.get("traceback"))
    expected_cache = "packed" if api == "varlen" or kind == "prefill" else "contiguous"
    assert row.details["kv_cache"] == expected_cache
    assert row.resolved == ("fa3+lse-merge" if kind == "tree" else "fa3")
    assert row.details["out_buffer"] == "fixed"


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


def test_paged_build_uses_the_page_table(ctx: SweepContext) -> None:
    row = _run(make_spec("decode"), fake_lib(paged=True), ctx)
    assert row.status == "ok", row.reason
    assert row.details["kv_cache"] == "paged"
    hnd = _run(make_spec("decode", kv_layout="HND"), fake_lib(paged=True), ctx)
    assert hnd.details["kv_cache"] == "contiguous"  # FA3 pages are NHD


def test_public_functions_without_the_raw_operator(ctx: SweepContext) -> None:
    for kind in ("decode", "prefill", "tree"):
        row = _run(make_spec(kind), fake_lib(raw=False), ctx)
        assert row.status == "ok", (kind, row.reason, row.details.get("traceback"))
        assert row.details["out_buffer"] == "allocated"


@pytest.mark.parametrize("kind", ["decode", "tree", "prefill"])
def test_fp8_quantises_q_and_passes_the_fp8_budget(kind: str, ctx: SweepContext) -> None:
    row = _run(make_spec(kind, kv_dtype="fp8_e4m3"), fake_lib(), ctx)
    assert row.status == "ok", (row.reason, row.details.get("traceback"))
    assert row.accuracy["precision"] == "fp8_e4m3"
    assert row.details["out_dtype"] == "bfloat16"
    assert row.details["q_scale"] > 0


def test_scheduler_metadata_is_the_replan(ctx: SweepContext) -> None:
    lib = fake_lib()
    spec = make_spec("decode")
    inputs = make_inputs(spec, "cpu")
    mp = pytest.MonkeyPatch()
    mp.setattr(fa, "load_fa3", lambda: lib)
    try:
        planned = fa.FlashAttnBackend(3).plan(spec, inputs)
        off = fa.FlashAttnBackend(3).plan(spec, inputs, {"scheduler_metadata": False})
    finally:
        mp.undo()
    calls = lib.module.metadata_calls
    assert planned.details["scheduler_metadata"] is True
    assert planned.replan is not None
    planned.replan()
    assert lib.module.metadata_calls == calls + 1
    assert off.replan is None
    assert "scheduler_metadata" not in off.details


def test_knobs_are_recorded(ctx: SweepContext) -> None:
    row = _run(make_spec("decode"), fake_lib(), ctx, num_splits=4, pack_gqa=False)
    assert row.details["num_splits"] == 4
    assert row.details["pack_gqa"] is False


# -- check() reasons ----------------------------------------------------------------------------


def test_check_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fa, "load_fa3", lambda: fake_lib())
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
    assert names == ["flash-attn:fa3", "flash-attn:fa3-cascade", "flash-attn:fa2"]
    b = fa.FlashAttnBackend(3)
    assert b.knobs["num_splits"][0] == 0
    assert b.knobs["api"][0] == "kvcache"


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
    assert torch.equal(fa._lse_tokens(lse, [1, 2]), lse.t())
    padded = torch.arange(12.0).view(2, 2, 3)  # [B, Hq, max_q], FA2 before varlen LSE
    got = fa._lse_tokens(padded, [1, 3])
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


@pytest.mark.gpu
@pytest.mark.parametrize("kind", GPU_KINDS)
@pytest.mark.parametrize(("dtype", "kv_dtype"), GPU_DTYPES)
def test_gpu_every_variant_passes_the_gate_or_says_why(
    kind: str, dtype: str, kv_dtype: str
) -> None:
    from attnbench.sweep import run_case

    info = detect("cuda:0")
    cfg = MeasureConfig(warmup_ms=1.0, min_runs=3, max_runs=5, max_time_ms=5.0)
    ctx = SweepContext(run_id="test-flash-attn-gpu", info=info, measure_cfg=cfg)
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
    fa3 = next(r for r in rows if r.backend == "flash-attn:fa3")
    if (
        not isinstance(fa.load_fa3(), str)
        and info.sm == 90
        and kv_dtype in ("bfloat16", "fp8_e4m3")
    ):
        assert fa3.status == "ok", fa3.reason  # bf16 and fp8_e4m3 KV always run on FA3


@pytest.mark.gpu
@pytest.mark.parametrize(
    "knobs", [{}, {"api": "varlen"}, {"num_splits": 4}, {"scheduler_metadata": False}]
)
def test_gpu_repeated_runs_stay_correct(knobs: dict[str, Any]) -> None:
    """Scheduler metadata and the tile semaphore are reused across calls: the 5th output of a
    plan must still be right (a stale semaphore would skip tiles after the first)."""
    from attnbench.accuracy import check_accuracy
    from attnbench.backends.reference import reference_attention

    lib = fa.load_fa3()
    if isinstance(lib, str):
        pytest.skip(lib)
    spec = make_spec("decode", kv_lens=(4000, 37, 513, 2048), qo_lens=(1, 1, 1, 1), head_dim=128)
    inputs = make_inputs(spec, "cuda:0")
    planned = fa.FlashAttnBackend(3).plan(spec, inputs, knobs)
    for _ in range(5):
        out = planned.run()
    if planned.replan is not None:
        planned.replan()
        out = planned.run()
    torch.cuda.synchronize()
    acc = check_accuracy(planned.unpack(out), reference_attention(inputs), spec.dtype)
    assert acc.passed, acc.reason


@pytest.mark.gpu
def test_gpu_fp8_budget_is_the_fp8_one() -> None:
    lib = fa.load_fa3()
    if isinstance(lib, str):
        pytest.skip(lib)
    spec = make_spec("prefill", head_dim=128, kv_dtype="fp8_e4m3")
    planned = fa.FlashAttnBackend(3).plan(spec, make_inputs(spec, "cuda:0"))
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
