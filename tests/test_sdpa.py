"""torch SDPA backends: ragged strategies (uniform, padded + mask, nested), masks and KV gathers
on CPU through the accuracy gate with `sdpa:math`; every pinned kernel on the H200 (`-m gpu`)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from attnbench.backends import kvgather, sdpa
from attnbench.backends.masks import padded_mask, request_mask
from attnbench.backends.reference import _mask, reference_attention
from attnbench.measure.config import MeasureConfig
from attnbench.measure.hardware import DeviceInfo, detect
from attnbench.run.sweep import SweepContext, run_backend, run_case
from attnbench.workload.inputs import make_inputs, tree_ancestor_mask
from attnbench.workload.spec import WorkloadSpec
from backend_cases import KINDS, device, make_spec


@pytest.fixture
def ctx() -> SweepContext:
    cfg = MeasureConfig(timer="fake", warmup_ms=0.0, min_runs=3, max_runs=3)
    return SweepContext(run_id="test-sdpa", info=detect("cpu"), measure_cfg=cfg)


MATH = sdpa.SdpaBackend("math")


def _run(spec: WorkloadSpec, ctx: SweepContext, **knobs: Any) -> Any:
    inputs = make_inputs(spec, "cpu")
    return run_backend(spec, MATH, inputs, reference_attention(inputs), ctx, knobs=knobs or None)


# -- math on CPU through the gate ----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_math_every_kind_passes_the_gate(kind: str, layout: str, ctx: SweepContext) -> None:
    spec = make_spec(kind, kv_layout=layout)
    rows = run_case(spec, [MATH], ctx)
    assert [r.status for r in rows] == ["ok"], rows[0].reason
    row = rows[0]
    assert row.resolved == "math"
    assert row.details["ragged"] == "padded"
    assert row.details["gqa"] == "native"
    assert 0 < row.details["padded_fraction"] < 1
    assert row.details["extra_bytes"] > 0


@pytest.mark.parametrize("kind", ["decode", "shared_prefix"])
def test_math_nested_serves_decode(kind: str, ctx: SweepContext) -> None:
    row = _run(make_spec(kind), ctx, ragged="nested")
    assert row.status == "ok", (row.reason, row.details.get("traceback"))
    assert row.details["ragged"] == "nested"
    assert row.details["padded_fraction"] == 0.0


def test_uniform_lengths_need_no_padding(ctx: SweepContext) -> None:
    for kind, kv, qo in (("decode", (30, 30), (1, 1)), ("prefill", (17, 17), (17, 17))):
        row = _run(
            make_spec(kind, kv_lens=kv, qo_lens=qo, dtype="float16", kv_dtype="float16"), ctx
        )
        assert row.status == "ok", row.reason
        assert row.details["ragged"] == "uniform"
        assert row.details["mask"] is False
        assert row.details["padded_fraction"] == 0.0


def test_repeated_kv_heads_pass_and_count_extra_bytes(ctx: SweepContext) -> None:
    native = _run(make_spec("decode"), ctx)
    repeat = _run(make_spec("decode"), ctx, gqa="repeat")
    assert repeat.status == "ok", repeat.reason
    assert repeat.details["gqa"] == "repeat"
    assert repeat.details["extra_bytes"] > native.details["extra_bytes"]


def test_plan_refuses_a_wrong_strategy() -> None:
    spec = make_spec("append")
    with pytest.raises(ValueError, match="nested"):
        MATH.plan(spec, make_inputs(spec, "cpu"), {"ragged": "nested"})
    with pytest.raises(ValueError, match="uniform"):
        MATH.plan(spec, make_inputs(spec, "cpu"), {"ragged": "uniform"})


# -- strategy choice and check() reasons --------------------------------------------------------


def test_choose_ragged() -> None:
    choose = sdpa.choose_ragged
    assert choose("cudnn", make_spec("decode")) == "padded"
    assert choose("flash", make_spec("decode")) == "nested"
    assert choose("flash", make_spec("prefill")) == "nested"
    assert choose("flash", make_spec("prefill", kv_lens=(9, 9), qo_lens=(9, 9))) == "uniform"
    assert choose("math", make_spec("decode", kv_lens=(9, 9), qo_lens=(1, 1))) == "uniform"
    uniform_append = make_spec("append", kv_lens=(20, 20), qo_lens=(4, 4))
    assert choose("efficient", uniform_append) == "padded"  # top-left is_causal would be wrong
    with pytest.raises(ValueError, match="no mask"):
        choose("flash", uniform_append)
    with pytest.raises(ValueError, match="no mask"):
        choose("flash", make_spec("tree"))
    with pytest.raises(ValueError, match="attn_mask"):
        choose("flash", make_spec("decode"), "padded")


def test_check_reasons() -> None:
    def reason(kernel: str, spec: WorkloadSpec, dev: DeviceInfo | None = None) -> str:
        why = sdpa.SdpaBackend(kernel).check(spec, dev or device())
        return why.reason if why else ""

    assert reason("cudnn", make_spec("decode")) == ""
    assert "CUDA" in reason("cudnn", make_spec("decode"), device(kind="cpu"))
    assert reason("math", make_spec("decode"), device(kind="cpu")) == ""
    assert "fp8" in reason("math", make_spec("decode", kv_dtype="fp8_e4m3"))
    assert "differ" in reason("efficient", make_spec("decode", kv_dtype="float16"))
    assert "no mask" in reason("flash", make_spec("append"))
    assert "sm80" in reason("flash", make_spec("decode"), device(sm=75))
    big = make_spec("prefill", kv_lens=(60000, 70000), qo_lens=(60000, 70000), num_qo_heads=2)
    assert "GiB" in reason("math", big)
    assert [b.name for b in sdpa.backends()] == [
        "sdpa:cudnn",
        "sdpa:flash",
        "sdpa:efficient",
        "sdpa:math",
    ]
    assert sdpa.SdpaBackend("math").devices == ("cpu", "cuda")


# -- masks and gathers ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_request_mask_matches_the_reference(kind: str) -> None:
    spec = make_spec(kind)
    tree = tree_ancestor_mask(spec.tree.parents) if spec.tree else None
    for n, seq_len in zip(spec.qo_lens, spec.kv_lens, strict=True):
        ours = request_mask(spec, n, seq_len)
        theirs = _mask(spec, seq_len, n, 0, n, tree, torch.device("cpu"))
        if theirs is None:
            assert ours is None
        else:
            assert ours is not None
            assert torch.equal(ours, theirs)


def test_padded_mask_hides_padding() -> None:
    spec = make_spec("append")
    mask = padded_mask(spec, 5, 73)
    assert mask.shape == (3, 1, 5, 73)
    assert not mask[1, 0, :3, 12:].any()  # request 1 has 12 keys
    assert mask[1, 0, 2, :12].all()  # its last query sees all of them
    assert not mask[1, 0, 0, 10:].any()  # its first query sits at position 9
    assert mask[1, 0, 3:, 0].all()  # padding queries see key 0 only
    assert mask[1, 0, 3:].sum() == 2


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("kv_dtype", ["bfloat16", "fp8_e4m3"])
def test_gathers_match_request_kv(layout: str, kv_dtype: str) -> None:
    spec = make_spec("decode", kv_layout=layout, kv_dtype=kv_dtype)
    inputs = make_inputs(spec, "cpu")
    k, v = kvgather.packed_kv(inputs)
    kp, vp = kvgather.padded_kv(inputs)
    assert v.shape == k.shape
    assert k.shape == (spec.total_kv, 2, 32)
    assert kp.shape == (3, 73, 2, 32)
    assert k.dtype == inputs.kv_cache.dtype
    start = 0
    for b, n in enumerate(spec.kv_lens):
        rk, rv = inputs.request_kv(b)
        assert torch.equal(k[start : start + n].float(), rk.float())
        assert torch.equal(vp[b, :n].float(), rv.float())
        assert not kp[b, n:].float().any()
        start += n
    # a sub-range of chosen requests
    ks, _ = kvgather.packed_kv(inputs, [3, 0], [9, 2], requests=[2, 0])
    assert torch.equal(ks[:6].float(), inputs.request_kv(2)[0][3:9].float())
    assert torch.equal(ks[6:].float(), inputs.request_kv(0)[0][:2].float())


def test_page_table_is_dense_and_padded() -> None:
    spec = make_spec("decode")
    inputs = make_inputs(spec, "cpu")
    table = kvgather.page_table(inputs)
    assert table.shape == (3, 10)  # 73 tokens in pages of 8
    assert table.dtype == torch.int32
    indptr = inputs.kv_indptr.tolist()
    assert torch.equal(table[1, :2], inputs.kv_indices[indptr[1] : indptr[2]])
    assert not table[1, 2:].any()


# -- on the H200 ---------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "fp8_e4m3"])
def test_gpu_every_kernel_passes_the_gate_or_says_why(kind: str, dtype: str) -> None:
    """Every pinned kernel: ok, or unsupported with a reason, or (kernel selection refused by
    torch at plan time) an error naming the case; never a mismatch or a crash."""
    info = detect("cuda:0")
    cfg = MeasureConfig(warmup_ms=1.0, min_runs=3, max_runs=5, max_time_ms=5.0)
    ctx = SweepContext(run_id="test-sdpa-gpu", info=info, measure_cfg=cfg)
    q_dtype = "bfloat16" if dtype.startswith("fp8") else dtype
    spec = make_spec(kind, head_dim=128, page_size=16, dtype=q_dtype, kv_dtype=dtype)
    rows = run_case(spec, sdpa.backends(), ctx)
    failures, refused = [], []
    for row in rows:
        if row.status == "unsupported":
            assert row.reason, row.backend
        elif row.status == "error" and "cannot run this case" in row.reason:
            refused.append(f"{row.backend}: {row.reason}")
        elif row.status != "ok":
            failures.append(f"{row.backend}: {row.status}: {row.reason}")
    if refused:
        warnings.warn("torch refused: " + " || ".join(refused), stacklevel=1)
    assert not failures, "\n".join(failures)
    if not dtype.startswith("fp8"):
        statuses = {r.backend: r.status for r in rows}
        assert statuses["sdpa:math"] == "ok"
        assert statuses["sdpa:efficient"] == "ok"


@pytest.mark.gpu
def test_gpu_nested_runs_on_flash_and_efficient() -> None:
    info = detect("cuda:0")
    cfg = MeasureConfig(warmup_ms=1.0, min_runs=3, max_runs=5, max_time_ms=5.0)
    ctx = SweepContext(run_id="test-sdpa-gpu", info=info, measure_cfg=cfg)
    for kind in ("decode", "prefill"):
        spec = make_spec(kind, head_dim=128, page_size=16)
        inputs = make_inputs(spec, "cuda:0")
        oracle = reference_attention(inputs)
        for kernel in ("flash", "efficient"):
            row = run_backend(
                spec, sdpa.SdpaBackend(kernel), inputs, oracle, ctx, knobs={"ragged": "nested"}
            )
            assert row.status == "ok", (kind, kernel, row.reason)
            assert row.details["ragged"] == "nested"
