"""Gemma-2's attention (issue 36): logit soft-capping and the model's softmax scale
(query_pre_attn_scalar). The reference against attention written out query by query, Flex's
score_mod through the gate on the CPU, the variants that refuse a soft-cap and why, FlashInfer's
and FA3's arguments, the spec's serialisation, `attnbench run --model gemma-2-9b` on the CPU, and
the GPU variants on the H200 (`gpu_slow`: FlashInfer compiles soft-capped modules)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from attnbench.backends import flash_attn as fa
from attnbench.backends import sdpa
from attnbench.backends.fa_lib import FlashLib
from attnbench.backends.flashinfer_common import logits_kwargs
from attnbench.backends.flashinfer_rules import Route, route
from attnbench.backends.flex import FlexBackend
from attnbench.backends.reference import reference_attention
from attnbench.cli import app
from attnbench.measure.accuracy import check_accuracy
from attnbench.measure.config import MeasureConfig
from attnbench.measure.hardware import detect
from attnbench.run.sweep import SweepContext, run_backend, run_case
from attnbench.workload.inputs import make_inputs, soft_cap_query_scale
from attnbench.workload.spec import WorkloadSpec
from backend_cases import device, make_spec
from test_windows import RAW_ARGS, WindowSinkFA3

CAP = 50.0
WINDOW = 6


def capped(kind: str = "decode", **overrides: Any) -> WorkloadSpec:
    return make_spec(kind, **({"logits_soft_cap": CAP} | overrides))


def _dense(inputs: Any) -> torch.Tensor:
    """Every query on its own: its allowed keys (causal, within window_left before it), each
    logit scaled by the model's scale and soft-capped (cap * tanh(s / cap)), the softmax, the
    weighted values."""
    spec = inputs.spec
    scale = 1.0 / math.sqrt(spec.query_pre_attn_scalar or spec.head_dim)
    cap = spec.logits_soft_cap
    out = torch.zeros(spec.total_q, spec.num_qo_heads, spec.head_dim, dtype=torch.float64)
    row = 0
    for b, (kv_len, n) in enumerate(zip(spec.kv_lens, spec.qo_lens, strict=True)):
        k, v = (t.double() for t in inputs.request_kv(b))
        for i in range(n):
            pos = kv_len - n + i
            first = 0 if spec.window_left < 0 else max(0, pos - spec.window_left)
            keys = range(first, pos + 1)
            for h in range(spec.num_qo_heads):
                kvh = h // spec.group_size
                q = inputs.q[row, h].double()
                logits = [float(q @ k[j, kvh]) * scale for j in keys]
                if cap > 0:
                    logits = [cap * math.tanh(x / cap) for x in logits]
                top = max(logits)
                weights = [math.exp(x - top) for x in logits]
                for w, j in zip(weights, keys, strict=True):
                    out[row, h] += (w / sum(weights)) * v[j, kvh]
            row += 1
    return out


# -- the reference ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["decode", "append", "prefill"])
@pytest.mark.parametrize(
    ("cap", "window", "scalar"),
    [(CAP, -1, 0.0), (CAP, WINDOW, 0.0), (CAP, -1, 24.0), (0.0, -1, 24.0)],
)
def test_reference_soft_cap_and_scale_equal_the_written_out_softmax(
    kind: str, cap: float, window: int, scalar: float
) -> None:
    spec = make_spec(kind, logits_soft_cap=cap, window_left=window, query_pre_attn_scalar=scalar,
                     num_qo_heads=4, num_kv_heads=2, head_dim=16)  # fmt: skip
    inputs = make_inputs(spec)
    torch.testing.assert_close(reference_attention(inputs), _dense(inputs), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kind", ["decode", "prefill"])
def test_soft_capped_queries_make_the_cap_matter_to_the_gate(kind: str) -> None:
    """With unit-normal queries a cap of 50 would move the output less than bf16's budget, so a
    kernel that dropped it would pass: the inputs scale the queries (logit std 4 at cap 50), and
    then the uncapped answer fails the gate by far."""
    lens = (1500, 700, 2000) if kind == "decode" else (600, 300, 900)
    queries = (1, 1, 1) if kind == "decode" else lens
    spec = capped(kind, head_dim=64, kv_lens=lens, qo_lens=queries)
    assert soft_cap_query_scale(spec) == pytest.approx(4.0)
    inputs = make_inputs(spec)
    assert float(inputs.q.float().std()) == pytest.approx(4.0, rel=0.1)
    oracle = reference_attention(inputs)
    uncapped = make_inputs(spec)
    uncapped.spec = spec.model_copy(update={"logits_soft_cap": 0.0})
    dropped = reference_attention(uncapped)
    acc = check_accuracy(dropped.to(torch.bfloat16), oracle, "bfloat16")
    assert not acc.passed
    assert acc.rel_l2_err > 4 * acc.budget  # 10x (decode), 5x (causal prefill) at 1-2k keys
    # the model's own scale matters as much: 144 ** -0.5 against 128 ** -0.5
    big = capped(kind, head_dim=128, query_pre_attn_scalar=144.0, kv_lens=lens, qo_lens=queries)
    assert big.sm_scale == pytest.approx(1 / 12)
    wrong_scale = make_inputs(big)
    wrong_scale.spec = big.model_copy(update={"query_pre_attn_scalar": 0.0})
    acc = check_accuracy(
        reference_attention(wrong_scale).to(torch.bfloat16),
        reference_attention(make_inputs(big)),
        "bfloat16",
    )
    assert not acc.passed


# -- Flex's score_mod and SDPA's refusal on the CPU --------------------------------------------


@pytest.fixture
def ctx() -> SweepContext:
    cfg = MeasureConfig(timer="fake", warmup_ms=0.0, min_runs=3, max_runs=3)
    return SweepContext(run_id="test-softcap", info=detect("cpu"), measure_cfg=cfg)


@pytest.mark.parametrize("kind", ["decode", "append", "prefill"])
@pytest.mark.parametrize(("window", "scalar"), [(-1, 0.0), (WINDOW, 24.0)])
def test_flex_soft_cap_passes_the_gate_and_sdpa_refuses_it(
    kind: str, window: int, scalar: float, ctx: SweepContext
) -> None:
    spec = capped(kind, window_left=window, query_pre_attn_scalar=scalar)
    inputs = make_inputs(spec)
    oracle = reference_attention(inputs)
    row = run_backend(spec, FlexBackend(), inputs, oracle, ctx, knobs={"compiled": False})
    assert row.status == "ok", row.reason
    assert row.details["soft_cap"] == "score_mod-tanh"
    assert row.accuracy is not None
    assert row.accuracy.rel_l2_err < row.accuracy.budget
    why = sdpa.SdpaBackend("math").check(spec, detect("cpu"))
    assert why is not None
    assert "no logit soft-cap" in why.reason
    assert "flex (a score_mod)" in why.reason


@pytest.mark.parametrize("kind", ["decode", "prefill"])
def test_sdpa_math_and_flex_take_the_models_softmax_scale(kind: str, ctx: SweepContext) -> None:
    spec = make_spec(kind, query_pre_attn_scalar=24.0)
    inputs = make_inputs(spec)
    oracle = reference_attention(inputs)
    for backend, knobs in ((sdpa.SdpaBackend("math"), None), (FlexBackend(), {"compiled": False})):
        row = run_backend(spec, backend, inputs, oracle, ctx, knobs=knobs)
        assert row.status == "ok", f"{backend.name}: {row.reason}"


# -- the spec ------------------------------------------------------------------------------------


def test_soft_cap_spec_rules_serialisation_and_case_id() -> None:
    spec = capped(query_pre_attn_scalar=144.0)
    assert spec.features() == ("softcap",)
    assert "/cap50/qscale144/" in spec.case_id
    assert WorkloadSpec.model_validate(spec.model_dump(mode="json")) == spec
    plain = make_spec("decode")
    dumped = plain.model_dump(mode="json")
    assert not {"logits_soft_cap", "query_pre_attn_scalar"} & set(dumped)
    assert plain.sm_scale == pytest.approx(1 / math.sqrt(32))
    with pytest.raises(ValueError, match="decode, prefill, append only"):
        capped("tree")
    with pytest.raises(ValueError, match="no sinks and no MLA"):
        capped(sinks=True)


# -- who takes a soft-cap ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("short", "spec", "expected"),
    [
        ("fa2", capped(), "decode"),
        ("tc", capped(), "decode"),
        ("auto", capped("prefill"), "paged"),
        ("fa3", capped("prefill", head_dim=64), "paged"),
        ("ragged-fa2", capped("prefill", window_left=WINDOW), "ragged"),
        ("xqa", capped(head_dim=64, page_size=16), "XQA's call has no such argument"),
        ("cudnn", capped(), "cuDNN's decode graph takes none"),
        ("trtllm-gen", capped(), "takes no logit soft-cap"),
    ],
)
def test_flashinfer_routes_soft_caps_through_its_logits_soft_cap(
    short: str, spec: WorkloadSpec, expected: str
) -> None:
    found = route(short, spec, device(90))
    if isinstance(found, Route):
        assert found.api == expected
    else:
        assert expected in found.reason


def test_flashinfer_plan_keywords_carry_the_cap_and_the_models_scale() -> None:
    assert logits_kwargs(make_spec("decode")) == {}  # FlashInfer's defaults: the same scale
    assert logits_kwargs(capped()) == {"logits_soft_cap": CAP}
    both = logits_kwargs(capped(head_dim=128, query_pre_attn_scalar=144.0))
    assert both == {"logits_soft_cap": CAP, "sm_scale": pytest.approx(1 / 12)}


class SoftCapFA3(WindowSinkFA3):
    """Raw `fwd` of an FA3 build with `softcap`, as FA3 documents it (the scaled logits s become
    softcap * tanh(s / softcap)), on the paged decode path; without a cap, test_windows' FA3."""

    def fwd(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> Any:
        cap = kw.pop("softcap", 0.0)
        if cap <= 0:
            return super().fwd(q, k, v, **kw)
        self.calls.append(kw | {"softcap": cap})
        outs = []
        for b in range(spec_batch(kw)):
            n = int(kw["seqused_k"][b])
            pages = kw["page_table"][b].long()
            kb, vb = k[pages].flatten(0, 1)[:n].float(), v[pages].flatten(0, 1)[:n].float()
            group = q.shape[1] // kb.shape[1]
            kb, vb = kb.repeat_interleave(group, 1), vb.repeat_interleave(group, 1)
            qb = q[b : b + 1].float()  # decode: one query per request
            s = torch.tanh(torch.einsum("qhd,khd->hqk", qb, kb) * kw["softmax_scale"] / cap) * cap
            outs.append(torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), vb))
        kw["out"].copy_(torch.cat(outs).to(q.dtype))
        return kw["out"], torch.zeros(q.shape[1], q.shape[0]), None, None


def spec_batch(kw: dict[str, Any]) -> int:
    return int(kw["cu_seqlens_q"].numel()) - 1


def test_fa3_passes_softcap_where_the_build_has_it_and_tokenspeed_refuses(
    ctx: SweepContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = SoftCapFA3()
    lib = FlashLib(mod, "fake_fa3", "0", 3, {}, mod, RAW_ARGS | {"softcap"}, "fake")
    monkeypatch.setattr(fa, "load_fa3", lambda: lib)
    backend = {b.name: b for b in fa.backends()}["flash-attn:fa3"]
    spec = capped(query_pre_attn_scalar=24.0)
    assert backend.check(spec, device(90)) is None
    inputs = make_inputs(spec)
    row = run_backend(spec, backend, inputs, reference_attention(inputs), ctx)
    assert row.status == "ok", row.reason
    assert mod.calls[-1]["softcap"] == CAP
    assert mod.calls[-1]["softmax_scale"] == pytest.approx(24.0**-0.5)
    built_without = FlashLib(mod, "flash_attn_interface", "3.0.0.post20260810", 3,
                             {"FLASHATTENTION_DISABLE_SOFTCAP": True}, mod,
                             RAW_ARGS | {"softcap"}, "tokenspeed-fa3")  # fmt: skip
    monkeypatch.setattr(fa, "load_fa3", lambda: built_without)
    why = backend.check(spec, device(90))
    assert why is not None
    assert "without logit soft-capping (FLASHATTENTION_DISABLE_SOFTCAP" in why.reason


# -- `attnbench run --model gemma-2-9b` on the CPU ----------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("isolated", "fake_timer")
def test_run_gemma2_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemma-2-9b's windowed and full layers, soft-capped, pass the gate on the reference and
    on Flex (compiled, as `run` uses it); sdpa:math refuses the soft-cap with its reason.
    Inductor compiles into the test's own folder: a cache shared with other processes on the
    machine once raised a CppCompileError mid-write."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    out = tmp_path / "g.jsonl"
    args = ["run", "--device", "cpu", "--batch-size", "2", "--kind", "decode",
            "--kv-dtype", "bfloat16", "--out", str(out), "--model", "gemma-2-9b", "-l", "300",
            "-b", "reference", "-b", "sdpa:math", "-b", "flex"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    got = {(r["spec"]["layer_type"], r["backend"]): r for r in rows if r.get("type") == "result"}
    for layer in ("sliding_attention", "full_attention"):
        for backend in ("reference", "flex"):
            row = got[(layer, backend)]
            assert row["status"] == "ok", row["reason"]
            assert row["spec"]["logits_soft_cap"] == 50.0
        assert got[(layer, "sdpa:math")]["status"] == "unsupported"
    assert got[("sliding_attention", "flex")]["spec"]["window_left"] == 4095


# -- on the H200 ---------------------------------------------------------------------------------

GPU_SOFT_CAP_CASES: dict[str, WorkloadSpec] = {
    "decode-cap": capped(num_qo_heads=16, num_kv_heads=8, head_dim=256, page_size=16,
                         kv_lens=(400, 9, 5000)),
    "decode-cap-window-scale": capped(num_qo_heads=32, num_kv_heads=16, head_dim=128,
                                      page_size=16, kv_lens=(400, 9, 5000), window_left=127,
                                      query_pre_attn_scalar=144.0),
    "prefill-cap": capped("prefill", num_qo_heads=16, num_kv_heads=8, head_dim=256,
                          page_size=16, kv_lens=(300, 9, 700), qo_lens=(300, 9, 700)),
}  # fmt: skip
"""Gemma-2-9b's head shape (16/8, d256) and 27b's (32/16, d128, scale 144 ** -0.5, a window):
FlashInfer compiles its soft-capped decode and fa2 prefill modules for them (four, ~20 s each)."""


@pytest.mark.gpu
@pytest.mark.gpu_slow
@pytest.mark.parametrize("case", list(GPU_SOFT_CAP_CASES))
def test_gpu_soft_cap_variants_pass_the_gate(case: str) -> None:
    """FlashInfer's fa2 and tc (logits_soft_cap) and Flex (score_mod) pass the gate on soft-capped
    cases; XQA, cuDNN, SDPA and the installed FA3 build (no softcap) refuse with a reason."""
    from attnbench.backends import select_backends

    spec = GPU_SOFT_CAP_CASES[case]
    info = detect("cuda:0")
    cfg = MeasureConfig(warmup_ms=1.0, min_runs=3, max_runs=5, max_time_ms=5.0)
    ctx = SweepContext(run_id="test-softcap-gpu", info=info, measure_cfg=cfg)
    names = ["flashinfer:fa2", "flashinfer:tc", "flashinfer:xqa", "flash-attn:fa3", "sdpa:cudnn"]
    rows = run_case(spec, select_backends([*names, "flex"]), ctx)
    failures = [
        f"{r.backend}: {r.status}: {r.reason}"
        for r in rows
        if r.status != "ok" and not (r.status == "unsupported" and r.reason)
    ]
    assert not failures, "\n".join(failures)
    ok = {r.backend for r in rows if r.status == "ok"}
    assert "flashinfer:fa2" in ok, rows
    if spec.kind == "decode":
        assert "flashinfer:tc" in ok, rows
