from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from attnbench.backends import flash_attn as fa
from attnbench.backends import flashinfer as fi
from attnbench.backends.base import PlannedRun
from attnbench.backends.fa_calls import setup as fa3_setup
from attnbench.backends.flashinfer_common import quantize_query
from attnbench.backends.flashinfer_decode import token_head_scales
from attnbench.backends.reference import reference_attention
from attnbench.cli import app
from attnbench.fp8study import StudyConfig, kernel_fa3, load_study, run_study, write_study
from attnbench.fp8study import kernel as kernel_mod
from attnbench.fp8study.data import DATA_KINDS, QKVShape, make_qkv
from attnbench.fp8study.errors import dense_attention, error_metrics, error_study
from attnbench.fp8study.needle import NeedleTarget, needle_key, needle_study, target_logits
from attnbench.fp8study.summary import summarize
from attnbench.fp8study.tables import kernel_table, summary_table
from attnbench.measure.hardware import DeviceInfo
from attnbench.run.kernel_error import error_split
from attnbench.workload.inputs import AttentionInputs, make_inputs
from attnbench.workload.quant import token_head_quantize
from attnbench.workload.spec import WorkloadSpec
from test_flash_attn import fake_lib

TINY = StudyConfig(
    data_kinds=("random", "small"),
    num_tokens=128,
    num_queries=4,
    num_qo_heads=8,
    num_kv_heads=2,
    head_dim=64,
    needle_data=("random",),
    needle_lengths=(64, 256),
    needle_depths=(0.0, 0.5, 1.0),
    needle_targets=("max+0.1", "max+2", "lse+0"),
    needle_heads=4,
    needle_trials=2,
    kernel=False,
)


@pytest.mark.parametrize("kind", list(DATA_KINDS))
def test_make_qkv_shapes_and_determinism(kind: str) -> None:
    shape = QKVShape(num_tokens=32, num_queries=3, num_qo_heads=8, num_kv_heads=2, head_dim=16)
    a = make_qkv(kind, shape, seed=1, sample_seed=5)
    b = make_qkv(kind, shape, seed=1, sample_seed=5)
    c = make_qkv(kind, shape, seed=1, sample_seed=6)
    assert a.q.shape == (3, 8, 16)
    assert a.k.shape == (32, 2, 16)
    assert a.v.shape == (32, 2, 16)
    assert a.k.dtype == torch.float64
    assert torch.equal(a.k, b.k)
    assert not torch.equal(a.k, c.k)


def test_make_qkv_rejects_unknown_kind() -> None:
    with pytest.raises(ValueError, match="allowed"):
        make_qkv("gaussian", QKVShape(4, 1, 2, 2, 8), seed=0, sample_seed=0)


def test_dense_attention_matches_the_paged_reference() -> None:
    spec = WorkloadSpec(
        kind="decode", num_qo_heads=8, num_kv_heads=2, head_dim=32, kv_lens=(50,), qo_lens=(1,)
    )
    inputs = make_inputs(spec)
    k, v = inputs.request_kv(0)
    out = dense_attention(inputs.q.double(), k.double(), v.double())
    torch.testing.assert_close(out, reference_attention(inputs), rtol=1e-12, atol=1e-12)


def test_error_metrics_on_known_values() -> None:
    ref = torch.tensor([[3.0, 4.0], [0.0, 1.0]])
    out = torch.tensor([[3.0, 4.0], [0.0, 2.0]])
    m = error_metrics(out, ref)
    assert m["max_abs_err"] == 1.0
    assert m["rmse"] == pytest.approx(0.5)
    assert m["rel_l2_err"] == pytest.approx(1 / math.sqrt(26))
    assert m["min_row_cosine"] == pytest.approx(1.0)
    assert 0.98 < m["cosine"] < 1.0


def test_error_study_separates_formats_and_schemes() -> None:
    records = error_study(TINY)
    keys = {(r["data"], r["format"], r["scheme"]) for r in records}
    assert len(records) == len(keys) == 2 * (1 + 2 * 5)
    by = {(r["data"], r["format"], r["scheme"]): r for r in records}
    # 16-bit rounding is an order of magnitude below fp8's; e5m2 (2 mantissa bits) is worse
    assert (
        by["random", "bf16", "none"]["rel_l2_err"] * 5
        < by["random", "e4m3", "tensor"]["rel_l2_err"]
    )
    assert (
        by["random", "e4m3", "tensor"]["rel_l2_err"] < by["random", "e5m2", "tensor"]["rel_l2_err"]
    )
    # unscaled e4m3 underflows small values; a per-tensor scale does not
    none, tensor = by["small", "e4m3", "none"], by["small", "e4m3", "tensor"]
    assert none["k"]["underflow_fraction"] > 0.01
    assert tensor["k"]["underflow"] == 0
    assert none["rel_l2_err"] > tensor["rel_l2_err"]
    assert by["random", "e4m3", "channel"]["v_scheme"] == "token"


def test_needle_key_hits_its_target_logit() -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, 16, generator=gen, dtype=torch.float64)
    keys = torch.randn(100, 3, 16, generator=gen, dtype=torch.float64)
    sm = 0.25
    hay = torch.einsum("hd,lhd->hl", q, keys) * sm
    for target in (NeedleTarget("max", 0.1), NeedleTarget("lse", 0.0)):
        logit = target_logits(hay, 40, target)
        k = needle_key(q, keys[40], logit, sm)
        torch.testing.assert_close((q * k).sum(-1) * sm, logit)
    others = hay.clone()
    others[:, 40] = -math.inf
    torch.testing.assert_close(
        target_logits(hay, 40, NeedleTarget("max", 0.1)), others.amax(-1) + 0.1
    )


def test_needle_target_parsing() -> None:
    assert NeedleTarget.parse("max+0.1") == NeedleTarget("max", 0.1)
    assert NeedleTarget.parse("lse+0").label == "lse+0"
    for bad in ("top+1", "max", "max+x", "max+0"):
        with pytest.raises(ValueError, match="needle target"):
            NeedleTarget.parse(bad)


def test_needle_retrieves_at_fp64_and_covers_every_cell() -> None:
    records = needle_study(TINY)
    cells = {(r["format"], r["scheme"], r["length"], r["depth"], r["target"]) for r in records}
    assert len(records) == len(cells) == (1 + 2 * 5) * 2 * 3 * 3
    exact = [r for r in records if r["scheme"] == "exact"]
    assert all(r["recall"] == 1.0 and r["trials"] == 8 for r in exact)
    assert all(r["output_cosine_min"] == pytest.approx(1.0) for r in exact)
    # lse+0 puts half the attention on the needle
    half = [r for r in exact if r["target"] == "lse+0"]
    assert all(r["needle_weight_mean"] == pytest.approx(0.5) for r in half)
    # a 2-logit margin survives any fp8 rounding of N(0,1) data
    wide = [r for r in records if r["target"] == "max+2"]
    assert all(r["recall"] == 1.0 for r in wide)


def test_summary_bounds() -> None:
    errors = [
        {
            "data": "a",
            "format": "e4m3",
            "scheme": "tensor",
            "rel_l2_err": 0.03,
            "cosine": 0.999,
            "k": {"underflow_fraction": 0.0, "saturated_fraction": 0.0},
            "v": {"underflow_fraction": 0.0, "saturated_fraction": 0.0},
        },
        {
            "data": "b",
            "format": "e4m3",
            "scheme": "tensor",
            "rel_l2_err": 0.04,
            "cosine": 0.998,
            "k": {"underflow_fraction": 0.1, "saturated_fraction": 0.0},
            "v": {"underflow_fraction": 0.0, "saturated_fraction": 0.2},
        },
    ]
    needle = [
        {
            "format": "e4m3",
            "scheme": "tensor",
            "target": "max+0.1",
            "length": n,
            "depth": 0.0,
            "trials": 10,
            "hits": h,
            "recall": h / 10,
            "needle_cosine_mean": 0.5,
            "output_cosine_min": 0.9,
        }
        for n, h in ((100, 10), (1000, 9))
    ]
    kernel = [{"format": "e4m3", "scheme": "tensor", "kernel": {"rel_l2_err": 0.004}}]
    (row,) = summarize(errors, needle, kernel, recall_bound=0.95, rel_l2_bound=0.05)
    assert row["rel_l2_err_max"] == 0.04
    assert row["rel_l2_err_max_data"] == "b"
    assert row["k_underflow_fraction_max"] == 0.1
    assert row["v_saturated_fraction_max"] == 0.2
    n = row["needle"]["max+0.1"]
    assert n["recall"] == 0.95
    assert n["recall_min"] == 0.9
    assert n["recall_min_at"] == {"length": 1000, "depth": 0.0}
    assert n["recall_longest"] == 0.9
    assert row["kernel_rel_l2_err_max"] == 0.004
    assert row["within_bounds"]
    (strict,) = summarize(errors, needle, kernel, recall_bound=0.99, rel_l2_bound=0.05)
    assert not strict["within_bounds"]


def test_token_head_quantize_round_trip() -> None:
    spec = WorkloadSpec(
        kind="decode", num_qo_heads=4, num_kv_heads=2, head_dim=32, kv_lens=(40,), qo_lens=(1,)
    )
    kv = make_inputs(spec).kv_cache  # bf16 [pages, 2, 16, 2, 32]
    stored, (k_sf, v_sf), dequant = token_head_quantize(kv, torch.float8_e4m3fn)
    assert stored.dtype == torch.float8_e4m3fn
    assert stored.shape == kv.shape
    assert k_sf.shape == (kv.shape[0], 16, 2)
    assert k_sf.dtype == torch.float32
    assert k_sf.is_contiguous()
    assert v_sf.is_contiguous()
    torch.testing.assert_close(k_sf, kv[:, 0].float().abs().amax(-1) / 448.0)
    rel = (dequant - kv.float()).norm() / kv.float().norm()
    assert float(rel) < 2.0**-4


def _fake_decode(inputs: AttentionInputs, use_tensor_cores: bool) -> tuple[torch.Tensor, str]:
    """Stand-in for FlashInfer on the CPU: the fp32 reference on what the kernel would read
    (the cache with its per-(token, head) scales, when the inputs carry them)."""
    kv_cache_sf = token_head_scales(inputs)
    if kv_cache_sf is not None:
        sf = torch.stack(kv_cache_sf, dim=1)[..., None]
        inputs = replace(inputs, kv_cache=inputs.kv_cache.float() * sf, k_scale=1, v_scale=1)
    out = reference_attention(inputs, accum_dtype=torch.float32).to(torch.bfloat16)
    return out, "fake-tc" if use_tensor_cores else "fake"


PLANNED_KNOBS: list[object] = []


def _fake_flashinfer_plan(
    self: fi.FlashInferBackend, spec: WorkloadSpec, inputs: AttentionInputs, knobs: Any = None
) -> PlannedRun:
    PLANNED_KNOBS.append(knobs)
    out, resolved = _fake_decode(inputs, self.short == "tc")
    return PlannedRun(run=lambda: out, resolved=resolved)


def _fake_flashinfer(monkeypatch: pytest.MonkeyPatch, plan: Any = _fake_flashinfer_plan) -> None:
    """FlashInfer's decode variants through the sweep on the CPU: importable, accepting every
    case, and planning `plan` (by default `_fake_decode`'s kernel)."""
    monkeypatch.setattr(kernel_mod, "kernel_unavailable", lambda device: None)
    monkeypatch.setattr(fi.FlashInferBackend, "available", lambda self: None)
    monkeypatch.setattr(fi.FlashInferBackend, "check", lambda self, spec, device: None)
    monkeypatch.setattr(fi.FlashInferBackend, "plan", plan)


H200 = DeviceInfo("cuda", 0, "NVIDIA H200", (9, 0), 132, 60 << 20, 141 << 30)
TINY_KERNEL = replace(
    TINY, kernel=True, num_qo_heads=4, num_kv_heads=2, kernel_shapes=(("tiny", 2, "40,70"),)
)


def _fake_fa3(monkeypatch: pytest.MonkeyPatch) -> None:
    """FA3 through the backend's own check, plan and run on the CPU: test_flash_attn's torch
    emulation of FA3's API (it dequantises q, K and V with the descales it is given) as the
    library, and check() judging the case as on an H200."""
    lib = fake_lib()
    check = fa.FlashAttnBackend.check
    monkeypatch.setattr(kernel_mod, "cuda_unavailable", lambda device: None)
    monkeypatch.setattr(kernel_fa3, "fa3_unavailable", lambda device: None)
    monkeypatch.setattr(fa, "load_fa3", lambda: lib)
    monkeypatch.setattr(
        fa.FlashAttnBackend, "check", lambda self, spec, device: check(self, spec, H200)
    )


@pytest.mark.slow
def test_kernel_study_plumbing_with_a_fake_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_flashinfer(monkeypatch)
    _fake_fa3(monkeypatch)
    PLANNED_KNOBS.clear()
    records, skipped = kernel_mod.kernel_study(TINY_KERNEL)
    assert skipped is None
    # FlashInfer's wrapper as the study builds it: a plain one, not in CUDA-graph mode
    assert PLANNED_KNOBS
    assert all(k == {"use_cuda_graph": False} for k in PLANNED_KNOBS)
    # per-tensor scales first (e4m3, then e5m2; FA3 after FlashInfer on each shape), the
    # per-(token, head) modules last
    assert [(r["format"], r["scheme"], r["variant"], r["status"]) for r in records] == [
        ("e4m3", "tensor", "flashinfer:fa2", "ok"),
        ("e4m3", "tensor", "flashinfer:tc", "ok"),
        ("e4m3", "tensor", "flash-attn:fa3", "ok"),
        ("e5m2", "tensor", "flashinfer:fa2", "ok"),
        ("e5m2", "tensor", "flashinfer:tc", "ok"),
        ("e5m2", "tensor", "flash-attn:fa3", "unsupported"),
        ("e4m3", "token", "flashinfer:tc", "ok"),
        ("e5m2", "token", "flashinfer:tc", "ok"),
    ]
    for r in records:
        if r["status"] != "ok":
            continue
        # the fake kernels are exact up to bf16 output rounding; quantisation error is fp8's
        assert r["kernel"]["rel_l2_err"] < 0.01 < r["quant"]["rel_l2_err"]
        assert r["bf16_kernel"]["rel_l2_err"] < 0.01
    fa3, e5m2 = records[2], records[5]
    assert fa3["resolved"] == "fa3"
    assert fa3["bf16_resolved"] == "fa3"
    assert fa3["details"]["kv_cache"] == "paged"
    assert fa3["q_scale"] > 0
    assert fa3["k_scale"] == records[0]["k_scale"]  # one fp8 cache for every kernel
    assert fa3["quant"] == records[0]["quant"]
    # the query's rounding is its own entry, not kernel error
    assert fa3["kernel"]["rel_l2_err"] < 0.01 < fa3["q_quant"]["rel_l2_err"]
    assert fa3["total"]["rel_l2_err"] > fa3["quant"]["rel_l2_err"]
    assert "q_quant" not in records[0]
    # e5m2: a record that says why, not a silent gap
    assert "e5m2" in e5m2["reason"]
    assert "e4m3 only" in e5m2["reason"]
    assert "kernel" not in e5m2
    assert e5m2["quant"]["rel_l2_err"] > 0


def test_fa3_error_split_keeps_query_quantisation_apart() -> None:
    """FA3 reads an fp8 query: the kernel is judged against the fp64 reference on the
    dequantised fp8 q and K/V, and the query's rounding is `q_quant`."""
    spec = WorkloadSpec(
        kind="decode",
        num_qo_heads=8,
        num_kv_heads=2,
        head_dim=64,
        kv_lens=(300, 77),
        qo_lens=(1, 1),
        kv_dtype="fp8_e4m3",
    )
    inputs = make_inputs(spec, keep_high_precision=True)
    source = replace(inputs, kv_cache=inputs.extras.pop("kv_cache_hp"), k_scale=1.0, v_scale=1.0)
    ref_source, ref_fp8 = reference_attention(source), reference_attention(inputs)
    q8, q_scale, q_eff = quantize_query(inputs.q, spec.kv_dtype)
    # the backend's fp8 setup quantises the query with this very function
    knobs = {"num_splits": 0, "pack_gqa": None, "scheduler_metadata": False}
    s = fa3_setup(fake_lib(), spec, inputs, knobs, "paged")
    assert s.q_scale == q_scale
    assert torch.equal(s.q.float(), q8.float())
    ref_q8 = reference_attention(inputs, q=q_eff)
    # a kernel exact on what it read (fp8 q and K/V) up to its bf16 output
    out = reference_attention(inputs, q=q_eff, accum_dtype=torch.float32).to(torch.bfloat16)
    errs = error_split(out, ref_source, ref_fp8, ref_q8)
    kernel, q_quant = errs["kernel"]["rel_l2_err"], errs["q_quant"]["rel_l2_err"]
    assert kernel < 0.005 < q_quant
    # against the K/V-only reference (FlashInfer's) the query's rounding would pass as kernel
    kv_only = error_metrics(out, ref_fp8)["rel_l2_err"]
    assert kv_only > 4 * kernel
    assert kv_only == pytest.approx(q_quant, rel=0.2)
    quant = error_metrics(ref_fp8, ref_source)["rel_l2_err"]
    assert errs["total"]["rel_l2_err"] <= 1.05 * (quant + q_quant + kernel)
    # an unrounded query has no query error
    assert (
        error_metrics(reference_attention(inputs, q=inputs.q.float()), ref_fp8)["max_abs_err"] == 0
    )


@pytest.mark.slow
def test_kernel_study_records_why_fa3_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """No importable FA3 build: FlashInfer's records as before, and the reason FA3 is missing."""
    _fake_flashinfer(monkeypatch)
    monkeypatch.setattr(kernel_mod, "cuda_unavailable", lambda device: None)
    monkeypatch.setattr(fa, "load_fa3", lambda: "FlashAttention-3 not installed: pip install x")
    real = kernel_fa3.fa3_unavailable
    assert real("cuda") == "FlashAttention-3 not installed: pip install x"
    # the study's device is the CPU here: ask as for a CUDA device
    monkeypatch.setattr(kernel_fa3, "fa3_unavailable", lambda device: real("cuda"))
    saved: list[dict[str, Any]] = []
    doc = run_study(replace(TINY_KERNEL, needle_lengths=(64,)), saved.append)
    assert doc["kernel_skipped"] == "flash-attn:fa3: FlashAttention-3 not installed: pip install x"
    assert {r["variant"] for r in doc["kernel"]} == {"flashinfer:fa2", "flashinfer:tc"}
    assert len(doc["kernel"]) == 6


@pytest.mark.slow
def test_kernel_study_runs_fa3_without_flashinfer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel_mod, "kernel_unavailable", lambda device: "no flashinfer here")
    _fake_fa3(monkeypatch)
    records, skipped = kernel_mod.kernel_study(TINY_KERNEL)
    assert skipped == "flashinfer: no flashinfer here"
    assert [(r["format"], r["scheme"], r["variant"], r["status"]) for r in records] == [
        ("e4m3", "tensor", "flash-attn:fa3", "ok"),
        ("e5m2", "tensor", "flash-attn:fa3", "unsupported"),
    ]


def test_kernel_tables_show_fa3_beside_flashinfer() -> None:
    from rich.console import Console

    base = {"shape": "ctx", "batch_size": 2, "format": "e4m3", "scheme": "tensor"}
    kernel = [
        {**base, "variant": "flashinfer:tc", "status": "ok", "reason": "", "resolved": "fa2"}
        | {"quant": {"rel_l2_err": 0.04}, "kernel": {"rel_l2_err": 0.003}},
        {**base, "variant": "flash-attn:fa3", "status": "ok", "reason": "", "resolved": "fa3"}
        | {"quant": {"rel_l2_err": 0.04}, "q_quant": {"rel_l2_err": 0.027}}
        | {"kernel": {"rel_l2_err": 0.025}, "total": {"rel_l2_err": 0.05}},
        {**base, "format": "e5m2", "variant": "flash-attn:fa3", "status": "unsupported"}
        | {"reason": "FlashAttention has no fp8_e5m2 kernels (its fp8 path is e4m3 only)"},
    ]
    errors = [
        {"data": "a", "format": f, "scheme": "tensor", "rel_l2_err": 0.04, "cosine": 0.99}
        for f in ("e4m3", "e5m2")
    ]
    rows = summarize(errors, [], kernel, recall_bound=0.99, rel_l2_bound=0.05)
    assert rows[0]["kernel_rel_l2_err_by_variant"] == {
        "flashinfer:tc": 0.003,
        "flash-attn:fa3": 0.025,
    }
    assert rows[0]["kernel_rel_l2_err_max"] == 0.025
    assert rows[1]["kernel_rel_l2_err_by_variant"] == {}
    doc = {"kernel": kernel, "summary": rows, "settings": {"rel_l2_bound": 0.05}}
    doc["settings"]["recall_bound"] = 0.99
    console = Console(width=300, record=True)
    console.print(kernel_table(doc))
    console.print(summary_table(doc))
    text = console.export_text()
    assert "flash-attn:fa3" in text
    assert "2.700%" in text  # FA3's query quantisation, its own column
    assert "unsupported: FlashAttention has no fp8_e5m2" in text
    assert "flashinfer:tc 0.300%, flash-attn:fa3 2.500%" in text


@pytest.mark.slow
def test_a_run_cut_during_the_kernel_part_keeps_the_records_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step limit while FlashInfer compiles the e5m2 modules: the e4m3 records are already
    in the checkpointed document, marked partial."""

    def slow_compile(self: Any, spec: WorkloadSpec, inputs: Any, knobs: Any = None) -> Any:
        if inputs.kv_cache.dtype == torch.float8_e5m2:
            raise KeyboardInterrupt  # the limit, while the e5m2 module compiles
        return _fake_flashinfer_plan(self, spec, inputs, knobs)

    _fake_flashinfer(monkeypatch, slow_compile)
    cfg = replace(
        TINY, kernel=True, num_qo_heads=4, num_kv_heads=2, kernel_shapes=(("tiny", 2, "40,70"),)
    )
    saved: list[dict[str, Any]] = []
    with pytest.raises(KeyboardInterrupt):
        run_study(cfg, lambda doc: saved.append(json.loads(json.dumps(doc, default=str))))
    last = saved[-1]
    assert not last["complete"]
    assert last["kernel_skipped"].startswith("partial")
    assert [(r["format"], r["variant"]) for r in last["kernel"]] == [
        ("e4m3", "flashinfer:fa2"),
        ("e4m3", "flashinfer:tc"),
    ]


def test_kernel_study_skips_with_a_reason_on_cpu() -> None:
    records, reason = kernel_mod.kernel_study(replace(TINY, kernel=True))
    assert records == []
    assert reason is not None
    assert reason.count("not CUDA") == 1  # one cause for FlashInfer and FA3, said once
    assert "not CUDA" in (kernel_fa3.fa3_unavailable("cpu") or "")


def test_study_document_round_trips_as_strict_json(tmp_path: Path) -> None:
    doc = run_study(replace(TINY, needle_lengths=(64,), data_kinds=("random",)))
    assert doc["type"] == "fp8-study"
    assert doc["provenance"]["torch"]
    assert doc["kernel_skipped"] == "disabled (--no-kernel)"
    path = write_study(doc, tmp_path / "fp8.json")
    text = path.read_text()
    assert "NaN" not in text
    back = load_study(path)
    assert len(back["errors"]) == len(doc["errors"])
    assert back["summary"]
    bogus = tmp_path / "bogus.json"
    bogus.write_text(json.dumps({"type": "header"}))
    with pytest.raises(ValueError, match="not an attnbench fp8 study"):
        load_study(bogus)


@pytest.mark.slow
def test_cli_fp8_small_cpu_run(tmp_path: Path) -> None:
    out = tmp_path / "fp8.json"
    result = CliRunner().invoke(
        app,
        [
            "fp8",
            "--device",
            "cpu",
            "--no-kernel",
            "--needle-lengths",
            "128",
            "--trials",
            "1",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert {r["data"] for r in doc["errors"]} == set(StudyConfig().data_kinds)
    assert {r["length"] for r in doc["needle"]} == {128}
    assert "Summary" in result.output
    assert "Needle retrieval" in result.output


def test_cli_fp8_rejects_bad_lengths() -> None:
    result = CliRunner().invoke(app, ["fp8", "--device", "cpu", "--needle-lengths", "a,b"])
    assert result.exit_code == 2
    assert "comma-separated" in result.output


def test_cli_fp8_capacity_prints_the_brief_scenario() -> None:
    result = CliRunner().invoke(app, ["fp8", "--capacity"])
    assert result.exit_code == 0, result.output
    assert "llama-3.1-70b TP8" in result.output
    assert "50.0%" in result.output
    assert "h200" in result.output


def test_fp8_suite_compares_kv_dtypes() -> None:
    from attnbench.config import Settings
    from attnbench.workload.suite import load_suite, suite_specs

    specs = suite_specs(load_suite("fp8"), Settings())
    assert len(specs) == 25
    assert {s.kv_dtype for s in specs} == {"bfloat16", "float16", "fp8_e4m3", "fp8_e5m2"}
    assert {s.kind for s in specs} == {"decode", "append", "prefill"}
    decode_bf16 = [s for s in specs if s.kind == "decode" and s.dtype == "bfloat16"]
    assert len(decode_bf16) == 15
    assert all(s.batch_size == 32 for s in decode_bf16)


def _gpu_kernel_config() -> StudyConfig:
    """The GPU kernel tests' study: small, on a uniform and a mixed batch of 8 requests."""
    return replace(
        StudyConfig.small("cuda:0"), kernel_shapes=(("ctx1024", 8, "1024"), ("mixed", 8, "mixed"))
    )


@pytest.mark.gpu
def test_flashinfer_fp8_kernel_error_is_below_quantisation_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("flashinfer")
    monkeypatch.setattr(kernel_fa3, "fa3_unavailable", lambda device: "FA3: its own test")
    records, skipped = kernel_mod.kernel_study(_gpu_kernel_config())
    assert skipped == "flash-attn:fa3: FA3: its own test"
    by = {(r["format"], r["scheme"], r["variant"], r["shape"]): r for r in records}
    assert len(by) == 2 * 3 * 2
    for key in (
        ("e4m3", "tensor", "flashinfer:fa2", "ctx1024"),
        ("e4m3", "tensor", "flashinfer:tc", "mixed"),
    ):
        r = by[key]
        assert r["status"] == "ok", r["reason"]
        assert r["kernel"]["rel_l2_err"] < 0.02
        assert r["kernel"]["rel_l2_err"] < r["quant"]["rel_l2_err"]
    # every record is a value: ok, or an error/mismatch with a reason
    assert all(r["status"] == "ok" or r["reason"] for r in records)


@pytest.mark.gpu
def test_fa3_fp8_kernel_error_is_below_quantisation_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """FA3's fp8 paged decode on the H200 (FlashInfer left out: no JIT compiles here)."""
    pytest.importorskip("flash_attn_interface")
    monkeypatch.setattr(kernel_mod, "kernel_unavailable", lambda device: "its own test")
    records, skipped = kernel_mod.kernel_study(_gpu_kernel_config())
    assert skipped == "flashinfer: its own test"
    by = {(r["format"], r["shape"]): r for r in records}
    assert len(records) == len(by) == 2 * 2
    assert {r["variant"] for r in records} == {"flash-attn:fa3"}
    for shape in ("ctx1024", "mixed"):
        r = by["e4m3", shape]
        assert r["status"] == "ok", r["reason"]
        assert r["resolved"] == "fa3"
        assert r["details"]["kv_cache"] == "paged"
        assert r["kernel"]["rel_l2_err"] < r["quant"]["rel_l2_err"]
        assert 0 < r["q_quant"]["rel_l2_err"] < r["quant"]["rel_l2_err"]
        assert r["bf16_kernel"]["rel_l2_err"] < 0.01
        e5m2 = by["e5m2", shape]
        assert e5m2["status"] == "unsupported"
        assert "e5m2" in e5m2["reason"]


@pytest.mark.slow
def test_cli_fp8_cut_short_keeps_the_finished_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step limit (Ctrl-C) during the needle part leaves the error part on disk, marked
    incomplete, and the report says which parts finished."""
    import attnbench.fp8study.needle as needle

    def interrupted(cfg: object) -> list[object]:
        raise KeyboardInterrupt

    monkeypatch.setattr(needle, "needle_study", interrupted)
    out = tmp_path / "fp8.json"
    args = ["fp8", "--device", "cpu", "--no-kernel", "--needle-lengths", "128", "--trials", "1"]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 130, result.output
    assert "the parts finished (errors) are in" in result.output
    doc = json.loads(out.read_text())
    assert doc["complete"] is False
    assert {r["data"] for r in doc["errors"]} == set(StudyConfig().data_kinds)
    assert doc["needle"] == []
    report = CliRunner().invoke(app, ["report", str(out), "--out", str(tmp_path / "rep")])
    assert report.exit_code == 0, report.output
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "the run stopped early: only errors finished" in text
