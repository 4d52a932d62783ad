"""Sliding windows and attention sinks (issue 18): the reference against a dense masked softmax
written out per query, windowed bytes and FLOPs, presets with their layer pattern, SDPA/Flex
windows through the gate on the CPU, FA3's window and sink arguments (a fake build that follows
FA3's documented semantics), refusals, and the GPU variants on the H200."""

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
from attnbench.backends.flashinfer_rules import Route, route
from attnbench.backends.flex import FlexBackend
from attnbench.backends.reference import reference_attention
from attnbench.cli import app
from attnbench.measure import metrics
from attnbench.measure.config import MeasureConfig
from attnbench.measure.hardware import detect
from attnbench.run.sweep import SweepContext, run_backend, run_case
from attnbench.workload.inputs import make_inputs
from attnbench.workload.models import get_model, layer_shapes
from attnbench.workload.spec import MlaSpec, WorkloadSpec, window_tokens, windowed_pairs
from backend_cases import device, make_spec

WINDOW = 6


def windowed(kind: str = "decode", **overrides: Any) -> WorkloadSpec:
    return make_spec(kind, **({"window_left": WINDOW} | overrides))


# -- the reference against attention written out query by query --------------------------------


def _dense(inputs: Any) -> torch.Tensor:
    """Every query on its own: its allowed keys (causal, within window_left before it), the
    softmax over their scaled logits plus the head's sink logit, the weighted values."""
    spec = inputs.spec
    out = torch.zeros(spec.total_q, spec.num_qo_heads, spec.head_dim, dtype=torch.float64)
    row = 0
    for b, (kv_len, n) in enumerate(zip(spec.kv_lens, spec.qo_lens, strict=True)):
        k, v = (t.double() for t in inputs.request_kv(b))
        for i in range(n):
            pos = kv_len - n + i
            first = 0 if spec.window_left < 0 else max(0, pos - spec.window_left)
            for h in range(spec.num_qo_heads):
                kvh = h // spec.group_size
                q = inputs.q[row, h].double()
                logits = [
                    float(q @ k[j, kvh]) / math.sqrt(spec.head_dim) for j in range(first, pos + 1)
                ]
                sink = [float(inputs.sinks[h])] if spec.sinks else []
                top = max(logits + sink)
                weights = [math.exp(x - top) for x in logits]
                denom = sum(weights) + sum(math.exp(s - top) for s in sink)
                for w, j in zip(weights, range(first, pos + 1), strict=True):
                    out[row, h] += (w / denom) * v[j, kvh]
            row += 1
    return out


@pytest.mark.parametrize("kind", ["decode", "append", "prefill"])
@pytest.mark.parametrize(("window", "sinks"), [(WINDOW, False), (-1, True), (WINDOW, True)])
def test_reference_window_and_sinks_equal_the_written_out_softmax(
    kind: str, window: int, sinks: bool
) -> None:
    spec = make_spec(kind, window_left=window, sinks=sinks, num_qo_heads=4, num_kv_heads=2,
                     head_dim=16)  # fmt: skip
    inputs = make_inputs(spec)
    if sinks:
        assert inputs.sinks is not None
        assert inputs.sinks.dtype == torch.bfloat16
    torch.testing.assert_close(reference_attention(inputs), _dense(inputs), rtol=1e-9, atol=1e-9)


def test_sinks_take_a_visible_share_of_the_probability_mass() -> None:
    """out_with_sink = out_without * sigmoid(lse - sink): a kernel dropping the sink is off by
    that factor, far beyond any error budget."""
    spec = make_spec("decode", sinks=True)
    inputs = make_inputs(spec)
    with_sink = reference_attention(inputs)
    inputs.sinks = None
    without = reference_attention(inputs)
    ratio = (with_sink.norm(dim=-1) / without.norm(dim=-1)).flatten()
    assert float(ratio.max()) < 0.99
    assert float(ratio.median()) < 0.8


# -- bytes and FLOPs under a window ----------------------------------------------------------


def test_windowed_pairs_and_tokens_match_brute_force() -> None:
    for n in range(1, 9):
        for kv in range(n, 30):
            for w in range(-1, 33):
                seen = [min(p + 1, w + 1) if w >= 0 else p + 1 for p in range(kv - n, kv)]
                assert windowed_pairs(n, kv, w) == sum(seen)
                first = 0 if w < 0 else max(0, kv - n - w)
                assert window_tokens(n, kv, w) == kv - first


def test_window_bytes_and_flops_count_what_the_window_reads() -> None:
    spec = windowed("decode", kv_lens=(40, 5, 73))
    read = [min(kv, 1 + WINDOW) for kv in spec.kv_lens]
    b = metrics.bytes_moved(spec)
    assert b.kv == sum(read) * 2 * 2 * 32 * 2  # tokens x K,V x 2 heads x d32 x bf16
    assert metrics.flops(spec) == 4 * 32 * 8 * sum(read)
    pre = windowed("prefill")
    pairs = sum(sum(min(p + 1, WINDOW + 1) for p in range(n)) for n in pre.kv_lens)
    assert metrics.attended_pairs(pre) == pairs
    assert metrics.bytes_moved(pre).kv == pre.total_kv * 2 * 2 * 32 * 2  # prefill reads all


def test_model_per_token_ms_adds_the_layer_kinds() -> None:
    sliding, full = (12.0, 30.0, 18), (40.0, 25.0, 18)
    expected = (12.0 * 18 + 30.0 + 40.0 * 18 + 25.0) / 1e3
    assert metrics.model_per_token_ms([sliding, full]) == pytest.approx(expected)
    assert metrics.model_per_token_ms([full]) == metrics.per_token_ms(40.0, 25.0, 18)


# -- presets -> specs ---------------------------------------------------------------------------


def test_gpt_oss_and_gemma3_become_one_case_per_layer_kind() -> None:
    sliding, full = layer_shapes(get_model("gpt-oss-120b"))
    assert (sliding.num_qo_heads, sliding.num_kv_heads, sliding.head_dim) == (64, 8, 64)
    assert sliding.spec_fields == {
        "layer_type": "sliding_attention",
        "sinks": True,
        "window_left": 127,  # HF sliding_window 128: keys q-127..q
    }
    assert full.spec_fields == {"layer_type": "full_attention", "sinks": True}
    assert sliding.num_layers == full.num_layers == 18
    g_sliding, g_full = layer_shapes(get_model("gemma-3-27b"), tp=2)
    assert (g_sliding.num_layers, g_full.num_layers) == (52, 10)
    assert g_sliding.spec_fields["window_left"] == 1023
    assert "sinks" not in g_full.spec_fields
    (plain,) = layer_shapes(get_model("llama-3.1-8b"))
    assert plain.spec_fields == {}


def test_gptoss_suite_runs_both_layer_kinds_of_every_point() -> None:
    from collections import Counter

    from attnbench.config import Settings
    from attnbench.workload.suite import load_suite, suite_specs

    specs = suite_specs(load_suite("gptoss"), Settings())
    kinds = Counter(s.layer_type for s in specs)
    assert kinds == {"sliding_attention": 9, "full_attention": 9}
    assert all(s.sinks and s.num_layers == 18 for s in specs)
    assert {s.window_left for s in specs} == {127, -1}
    assert {s.batch_size for s in specs if s.kind == "decode"} == {1, 32, 128}


def test_window_spec_rules_and_case_id() -> None:
    with pytest.raises(ValueError, match="window_left needs causal=True"):
        windowed(causal=False)
    with pytest.raises(ValueError, match="decode, prefill, append only"):
        windowed("tree")
    spec = windowed(sinks=True, layer_type="sliding_attention")
    assert "/sliding/win6/sinks/" in spec.case_id
    assert WorkloadSpec.model_validate(spec.model_dump(mode="json")) == spec
    plain = make_spec("decode")
    assert not {"window_left", "sinks", "layer_type", "mla"} & set(plain.model_dump())


# -- SDPA and Flex windows through the gate on the CPU -------------------------------------------


@pytest.fixture
def ctx() -> SweepContext:
    cfg = MeasureConfig(timer="fake", warmup_ms=0.0, min_runs=3, max_runs=3)
    return SweepContext(run_id="test-windows", info=detect("cpu"), measure_cfg=cfg)


@pytest.mark.parametrize("kind", ["decode", "append", "prefill"])
def test_sdpa_math_and_flex_windows_pass_the_gate(kind: str, ctx: SweepContext) -> None:
    spec = windowed(kind)
    inputs = make_inputs(spec)
    oracle = reference_attention(inputs)
    row = run_backend(spec, sdpa.SdpaBackend("math"), inputs, oracle, ctx)
    assert row.status == "ok", row.reason
    row = run_backend(spec, FlexBackend(), inputs, oracle, ctx, knobs={"compiled": False})
    assert row.status == "ok", row.reason
    # and the unwindowed kernel would be wrong: the gate sees the window
    plain = make_spec(kind)
    plain_out = reference_attention(make_inputs(plain))
    assert not torch.allclose(plain_out, oracle)


@pytest.mark.parametrize("kind", ["decode", "append", "prefill"])
@pytest.mark.parametrize("window", [-1, WINDOW])
def test_sdpa_math_and_flex_sinks_pass_the_gate(kind: str, window: int, ctx: SweepContext) -> None:
    """SDPA takes the sink as an extra key column of an additive mask, Flex as an extra key whose
    score a score_mod replaces: both match the fp64 reference, which a sink-less kernel does not."""
    spec = make_spec(kind, sinks=True, window_left=window)
    inputs = make_inputs(spec)
    oracle = reference_attention(inputs)
    row = run_backend(spec, sdpa.SdpaBackend("math"), inputs, oracle, ctx)
    assert row.status == "ok", row.reason
    assert row.details["sinks"] == "mask-column"
    assert row.accuracy is not None
    assert row.accuracy.rel_l2_err < 0.01
    row = run_backend(spec, FlexBackend(), inputs, oracle, ctx, knobs={"compiled": False})
    assert row.status == "ok", row.reason
    assert row.details["sinks"] == "score_mod-key"
    assert row.accuracy is not None
    assert row.accuracy.rel_l2_err < 0.01
    sinkless = make_inputs(spec)
    sinkless.sinks = None
    dropped = reference_attention(sinkless)
    assert float((dropped - oracle).norm() / oracle.norm()) > 0.3  # the gate would see it


def test_sink_mask_holds_each_heads_sink_in_its_last_column() -> None:
    allowed = torch.tensor([[[[True, False, True]]]])  # [B=1, 1, Lq=1, Lk=3]
    sinks = torch.tensor([0.5, -2.0], dtype=torch.bfloat16)
    mask = sdpa.sink_mask(allowed, sinks, 2, torch.float32)
    assert mask.shape == (1, 2, 1, 4)
    inf = float("-inf")
    assert mask[0, :, 0].tolist() == [[0.0, inf, 0.0, 0.5], [0.0, inf, 0.0, -2.0]]


def test_sinks_refusals_name_the_kernels_that_take_them() -> None:
    spec = make_spec("decode", sinks=True)
    with pytest.raises(ValueError, match="sdpa:flash takes no attn_mask: attention sinks"):
        sdpa.choose_ragged("flash", spec)
    with pytest.raises(ValueError, match="ragged=nested: attention sinks need the padded path"):
        sdpa.choose_ragged("efficient", spec, "nested")
    assert sdpa.choose_ragged("efficient", spec) == "padded"
    assert sdpa.SdpaBackend("math").check(spec, detect("cpu")) is None
    assert FlexBackend().check(spec, detect("cpu")) is None


# -- FA3's window_size and sinks, on a build that follows FA3's documented semantics ------------


class WindowSinkFA3:
    """Raw `fwd` of an FA3 build with local attention and sinks: query i of a request with Lq
    queries and Lk keys sees keys [i + Lk - Lq - left, i + Lk - Lq + right] (flash_attn_interface
    docstring), each head's sink logit joins the denominator."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def fwd(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> Any:
        self.calls.append(kw)
        left, right = kw.get("window_size_left", -1), kw.get("window_size_right", -1)
        if kw["is_causal"]:
            right = 0
        sinks = kw.get("sinks")
        cu_q = kw["cu_seqlens_q"].tolist()
        outs, lses = [], []
        for b in range(len(cu_q) - 1):
            if kw.get("cu_seqlens_k") is not None:
                c0, c1 = kw["cu_seqlens_k"][b : b + 2].tolist()
                kb, vb = k[c0:c1], v[c0:c1]
            elif kw.get("page_table") is not None:
                n = int(kw["seqused_k"][b])
                pages = kw["page_table"][b].long()
                kb, vb = k[pages].flatten(0, 1)[:n], v[pages].flatten(0, 1)[:n]
            else:
                n = int(kw["seqused_k"][b])
                kb, vb = k[b, :n], v[b, :n]
            qb = q[cu_q[b] : cu_q[b + 1]].float()
            nq, nk, group = qb.shape[0], kb.shape[0], q.shape[1] // kb.shape[1]
            kf = kb.float().repeat_interleave(group, 1)
            vf = vb.float().repeat_interleave(group, 1)
            s = torch.einsum("qhd,khd->hqk", qb, kf) * kw["softmax_scale"]
            i = torch.arange(nq)[:, None] + nk - nq
            j = torch.arange(nk)[None, :]
            allowed = torch.ones(nq, nk, dtype=torch.bool)
            if left >= 0:
                allowed &= j >= i - left
            if right >= 0:
                allowed &= j <= i + right
            s = s.masked_fill(~allowed, float("-inf"))
            if sinks is not None:
                col = sinks.float()[:, None, None].expand(-1, nq, 1)
                lse = torch.logsumexp(torch.cat([s, col], -1), -1)
            else:
                lse = torch.logsumexp(s, -1)
            outs.append(torch.einsum("hqk,khd->qhd", torch.exp(s - lse[..., None]), vf))
            lses.append(lse)
        out = torch.cat(outs).to(q.dtype)
        if kw.get("out") is not None:
            kw["out"].copy_(out)
            out = kw["out"]
        return out, torch.cat(lses, dim=1), None, None


RAW_ARGS = frozenset(
    {"out", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "max_seqlen_q", "max_seqlen_k",
     "page_table", "softmax_scale", "is_causal", "window_size_left", "window_size_right",
     "num_splits", "pack_gqa", "scheduler_metadata", "q_descale", "k_descale", "v_descale",
     "sinks"}
)  # fmt: skip


def _window_sink_lib(sinks: bool = True) -> tuple[FlashLib, WindowSinkFA3]:
    mod = WindowSinkFA3()
    args = RAW_ARGS if sinks else RAW_ARGS - {"sinks"}
    return FlashLib(mod, "fake_fa3", "0", 3, {}, mod, args, "fake"), mod


@pytest.mark.parametrize("kind", ["decode", "append", "prefill"])
@pytest.mark.parametrize("name", ["fa3", "fa3-contiguous"])
def test_fa3_passes_window_and_sinks_and_passes_the_gate(
    kind: str, name: str, ctx: SweepContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib, mod = _window_sink_lib()
    monkeypatch.setattr(fa, "load_fa3", lambda: lib)
    backend = {b.name: b for b in fa.backends()}[f"flash-attn:{name}"]
    spec = windowed(kind, sinks=True)
    assert backend.check(spec, device(90)) is None
    inputs = make_inputs(spec)
    row = run_backend(spec, backend, inputs, reference_attention(inputs), ctx)
    assert row.status == "ok", row.reason
    call = mod.calls[-1]
    assert (call["window_size_left"], call["window_size_right"]) == (WINDOW, 0)
    assert call["sinks"].dtype == torch.bfloat16
    assert call["sinks"].shape == (spec.num_qo_heads,)


def test_fa3_without_sinks_refuses_them_and_fa3_without_local_refuses_windows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lib, _ = _window_sink_lib(sinks=False)
    monkeypatch.setattr(fa, "load_fa3", lambda: lib)
    backend = {b.name: b for b in fa.backends()}["flash-attn:fa3"]
    why = backend.check(make_spec("decode", sinks=True), device(90))
    assert why is not None
    assert "takes no `sinks`" in why.reason
    no_local = FlashLib(lib.module, "fake_fa3", "0", 3, {"FLASHATTENTION_DISABLE_LOCAL": True},
                        lib.raw, lib.raw_args)  # fmt: skip
    monkeypatch.setattr(fa, "load_fa3", lambda: no_local)
    why = backend.check(windowed(), device(90))
    assert why is not None
    assert "without local (sliding-window) kernels" in why.reason


# -- FlashInfer rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("short", "spec", "expected"),
    [
        ("fa2", windowed(), "decode"),
        ("tc", windowed(), "decode"),
        ("fa3", windowed("prefill", head_dim=64), "paged"),
        ("ragged-fa2", windowed("prefill"), "ragged"),
        ("xqa", windowed(head_dim=64, sinks=True, page_size=16), "xqa"),
        ("fa2", make_spec("decode", sinks=True), "drop `sinks`"),
        ("fa3", make_spec("prefill", head_dim=64, sinks=True), "flashinfer:xqa serves sinks"),
        ("auto", make_spec("decode", sinks=True), "drop `sinks`"),
        ("cudnn", make_spec("decode", sinks=True), "cudnn-frontend 1.30+"),
        ("cascade", windowed(), "takes no window_left"),
        ("fa2", make_spec("decode", num_kv_heads=1, head_dim=576, mla=MlaSpec()), "mla-fa2"),
    ],
)
def test_flashinfer_routes_windows_everywhere_and_sinks_through_xqa(
    short: str, spec: WorkloadSpec, expected: str
) -> None:
    found = route(short, spec, device(90))
    if isinstance(found, Route):
        assert found.api == expected
    else:
        assert expected in found.reason


# -- end to end on the CPU -------------------------------------------------------------------------


@pytest.mark.usefixtures("isolated", "fake_timer")
@pytest.mark.slow
def test_run_gemma3_and_gpt_oss_on_the_cpu(tmp_path: Path) -> None:
    """Gemma-3's windowed and full layers, and gpt-oss's windowed and full layers with sinks, pass
    the gate on sdpa:math (flex: above, eager) through `attnbench run --model`."""
    out = tmp_path / "w.jsonl"
    oss_out = tmp_path / "oss.jsonl"  # --resume refuses to mix two models in one file
    base = ["run", "--device", "cpu", "--batch-size", "2", "--kind", "decode"]
    base += ["--kv-dtype", "bfloat16", "--backend", "sdpa:math", "--backend", "reference"]
    gemma = ["--model", "gemma-3-27b", "--tp", "16", "-l", "1100", "--out", str(out)]
    res = CliRunner().invoke(app, [*base, *gemma])
    assert res.exit_code == 0, res.output
    oss = ["--model", "gpt-oss-120b", "--tp", "8", "-l", "200", "--out", str(oss_out)]
    res = CliRunner().invoke(app, [*base, *oss])
    assert res.exit_code == 0, res.output
    text = out.read_text() + oss_out.read_text()
    rows = [json.loads(x) for x in text.splitlines()]
    rows = [r for r in rows if r.get("type") == "result"]
    got = {(r["spec"]["model"], r["spec"]["layer_type"], r["backend"]): r for r in rows}
    for layer in ("sliding_attention", "full_attention"):
        for backend in ("sdpa:math", "reference"):
            assert got[("gemma-3-27b", layer, backend)]["status"] == "ok"
        assert got[("gpt-oss-120b", layer, "reference")]["status"] == "ok"
        oss = got[("gpt-oss-120b", layer, "sdpa:math")]
        assert oss["status"] == "ok", oss["reason"]
        assert oss["spec"]["sinks"]
        assert oss["details"]["sinks"] == "mask-column"
    sliding = got[("gemma-3-27b", "sliding_attention", "reference")]
    assert sliding["spec"]["window_left"] == 1023
    assert sliding["spec"]["num_layers"] == 52


# -- on the H200 ---------------------------------------------------------------------------------


def _oss(kind: str, **overrides: Any) -> WorkloadSpec:
    """gpt-oss's head shape at a small scale: 16 query / 2 KV heads (group 8), d64."""
    shape = {"num_qo_heads": 16, "num_kv_heads": 2, "head_dim": 64, "page_size": 16}
    return make_spec(kind, **(shape | overrides))


GPU_WINDOW_CASES: dict[str, WorkloadSpec] = {
    "decode-window": _oss("decode", window_left=WINDOW, kv_lens=(400, 9, 1000)),
    "decode-window-sinks": _oss("decode", window_left=127, sinks=True, kv_lens=(400, 9, 1000)),
    "decode-sinks": _oss("decode", sinks=True, kv_lens=(400, 9, 1000)),
    "append-window-sinks": _oss("append", window_left=WINDOW, sinks=True),
    "prefill-window": _oss(
        "prefill", window_left=WINDOW, kv_lens=(300, 9, 40), qo_lens=(300, 9, 40)
    ),
    "prefill-window-sinks": _oss("prefill", window_left=WINDOW, sinks=True),
    "decode-window-fp16": _oss("decode", window_left=WINDOW, dtype="float16", kv_dtype="float16"),
}  # fmt: skip
GPU_SLOW_WINDOW_CASES = {"decode-window-fp16"}
"""FlashInfer modules the carried JIT cache holds for these cases: XQA at d64, group 8, with and
without a window (the gptoss suite's). The bf16 window cases compile three more (decode, fa2 and
fa3 prefill with a sliding window, shared by decode-window and prefill-window); the fp16 one
compiles four of its own (the same three in fp16 and XQA fp16), so it runs apart (`gpu_slow`,
group d of scripts/h200/gpu_tests.sh)."""


@pytest.mark.gpu
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=c, marks=pytest.mark.gpu_slow if c in GPU_SLOW_WINDOW_CASES else ())
        for c in GPU_WINDOW_CASES
    ],
)
def test_gpu_window_and_sink_variants_pass_the_gate(case: str) -> None:
    """Every variant check() admits for a windowed / sink case passes the gate (FlashInfer's
    window_left routes, XQA's sinks, FA3's window_size and sinks, SDPA/Flex masks); the others
    are unsupported rows with a reason. FA3 (tokenspeed-fa3) must run every case, XQA every
    decode case."""
    from attnbench.backends import select_backends

    spec = GPU_WINDOW_CASES[case]
    info = detect("cuda:0")
    cfg = MeasureConfig(warmup_ms=1.0, min_runs=3, max_runs=5, max_time_ms=5.0)
    ctx = SweepContext(run_id="test-windows-gpu", info=info, measure_cfg=cfg)
    chosen = select_backends(["flashinfer", "flash-attn", "sdpa", "flex"])
    chosen = [b for b in chosen if b.name not in ("sdpa:math", "flashinfer:cudnn")]
    rows = run_case(spec, chosen, ctx)
    failures = [
        f"{r.backend}: {r.status}: {r.reason}"
        for r in rows
        if r.status != "ok" and not (r.status == "unsupported" and r.reason)
    ]
    assert not failures, "\n".join(failures)
    ok = {r.backend for r in rows if r.status == "ok"}
    assert "flash-attn:fa3" in ok, rows
    if spec.kind == "decode" and spec.dtype == "bfloat16":
        assert "flashinfer:xqa" in ok, rows
    if not spec.sinks:
        assert {"flashinfer:fa2", "flashinfer:tc"} <= ok or spec.kind != "decode", rows
