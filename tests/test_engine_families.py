"""Sinks, windows and soft-caps in the engine variants (`engines.paths`), each engine's
backend per attention family (`engines.families`) and the engines' Triton backends
(`engine_triton`). CPU only."""

from __future__ import annotations

from typing import Any

import pytest

from attnbench.backends import engine_triton, select_backends
from attnbench.backends.engine_variant import EngineVariant
from attnbench.engines.families import family_default, family_of, family_options
from attnbench.engines.paths import KernelPath, kernel_path
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.models import get_model, layer_shapes
from attnbench.workload.spec import WorkloadSpec

H200 = DeviceInfo("cuda", 0, "NVIDIA H200", (9, 0), 132, 50 << 20, 141 << 30)


def layer(model: str, kind: str, sliding: bool, page_size: int = 16) -> WorkloadSpec:
    """One layer kind of `model` at tp 1, three requests."""
    shape = next(
        s
        for s in layer_shapes(get_model(model))
        if (s.spec_fields.get("window_left", -1) >= 0) == sliding
    )
    kv = (300, 1000, 70)
    fields: dict[str, Any] = {
        "kind": kind,
        "kv_lens": kv,
        "qo_lens": (1, 1, 1) if kind == "decode" else kv,
        "num_qo_heads": shape.num_qo_heads,
        "num_kv_heads": shape.num_kv_heads,
        "head_dim": shape.head_dim,
        "page_size": page_size,
        "model": model,
        **shape.spec_fields,
    }
    return WorkloadSpec(**fields)


def found(variant: str, case: WorkloadSpec) -> KernelPath:
    got = kernel_path(variant, case)
    assert isinstance(got, KernelPath), got
    return got


@pytest.mark.parametrize("kind", ["decode", "prefill"])
@pytest.mark.parametrize("sliding", [True, False])
def test_gpt_oss_runs_on_both_engines_fa3_with_its_sinks(kind: str, sliding: bool) -> None:
    case = layer("gpt-oss-120b", kind, sliding)
    assert case.sinks
    assert (case.window_left == 127) == sliding
    vllm = found("vllm:flash-attn", case)
    assert vllm.variant == "flash-attn:fa3"
    # two sliding-window configs in the model: vLLM's FA3 builder turns the AOT schedule off
    assert vllm.knobs["scheduler_metadata"] is False
    assert "s_aux=sinks" in vllm.why
    assert "AOT schedule off" in vllm.why
    sglang = found("sglang:fa3", case)
    assert sglang.variant == "flash-attn:fa3"
    assert "sinks=" in sglang.why


@pytest.mark.parametrize("variant", ["vllm:flashinfer", "sglang:flashinfer"])
def test_flashinfer_backends_refuse_sinks_with_the_engines_reason(variant: str) -> None:
    page = 1 if variant.startswith("sglang") else 16
    case = layer("gpt-oss-20b", "decode", True, page_size=page)
    why = kernel_path(variant, case)
    assert isinstance(why, str)
    assert "attention sinks" in why
    assert ("GptOssForCausalLM" in why) == variant.startswith("sglang")
    refused = EngineVariant(variant).check(case, H200)
    assert refused is not None
    assert "sinks" in refused.reason


@pytest.mark.parametrize("kind", ["decode", "prefill"])
def test_gemma2_takes_window_and_soft_cap_on_every_backend(kind: str) -> None:
    case = layer("gemma-2-9b", kind, True, page_size=1)
    assert case.logits_soft_cap == 50.0
    assert case.window_left == 4095
    assert found("vllm:flash-attn", case.model_copy(update={"page_size": 16})).variant == (
        "flash-attn:fa3"
    )
    assert found("sglang:fa3", case).variant == "flash-attn:fa3"
    fi = found("sglang:flashinfer", case)
    # 16/8 heads: group size 2 < 4, so SGLang's decode wrapper runs without tensor cores
    assert fi.variant == ("flashinfer:fa2" if kind == "decode" else "flashinfer:ragged-fa3")
    vfi = found("vllm:flashinfer", case.model_copy(update={"page_size": 16}))
    assert vfi.variant == ("flashinfer:tc" if kind == "decode" else "flashinfer:auto")


def test_a_model_with_one_window_keeps_vllm_scheduler_metadata() -> None:
    plain = WorkloadSpec(
        kind="decode",
        kv_lens=(300,),
        qo_lens=(1,),
        num_qo_heads=32,
        num_kv_heads=8,
        head_dim=128,
        page_size=16,
    )
    assert found("vllm:flash-attn", plain).knobs["scheduler_metadata"] is True
    phi = layer("phi-3-medium-4k", "decode", True)  # every layer windowed: one config
    assert found("vllm:flash-attn", phi).knobs["scheduler_metadata"] is True


def test_family_defaults_per_engine() -> None:
    gpt_oss = layer("gpt-oss-120b", "decode", True).features()
    gemma = layer("gemma-2-9b", "decode", False).features()
    assert family_of(gpt_oss) == "sinks"
    assert family_of(gemma) == "softcap"
    assert family_of(("window",)) == "window"
    for features, vllm, sglang in ((gpt_oss, "FLASH_ATTN", "fa3"), (gemma, "FLASH_ATTN", "fa3")):
        v, s = family_default("vllm", features), family_default("sglang", features)
        assert not isinstance(v, str)
        assert not isinstance(s, str)
        assert (v.backend, s.backend) == (vllm, sglang)
        assert (v.variant, s.variant) == ("vllm:flash-attn", "sglang:fa3")
    assert isinstance(family_default("vllm", ("mla",)), str)
    assert isinstance(family_default("sglang", ()), str)


def test_family_options_name_the_engines_refusals() -> None:
    opts = family_options("sglang", ("window", "sinks"))
    assert not isinstance(opts, str)
    refused = {o.backend: o.why for o in opts if o.refused}
    assert "GptOssForCausalLM requires" in refused["flashinfer"]
    assert "triton" in {o.backend for o in opts if not o.refused}
    vllm = family_options("vllm", ("window", "sinks"))
    assert not isinstance(vllm, str)
    assert {o.backend for o in vllm if o.refused} == {"FLEX_ATTENTION"}
    fi = next(o for o in vllm if o.backend == "FLASHINFER")
    assert fi.variant is None
    assert "XQA" in fi.why
    for options in (opts, vllm):
        for o in options:
            assert o.source.commit
            assert o.source.path


def test_triton_engine_variants_are_registered_and_refuse_on_the_cpu() -> None:
    names = [b.name for b in select_backends(["sglang"])]
    assert names[-1] == "sglang:triton"
    cpu = DeviceInfo("cpu", None, "cpu", None, 0, 0, 0)
    variants = [*engine_triton.backends("sglang"), *engine_triton.backends("vllm")]
    assert [v.name for v in variants] == ["sglang:triton", "vllm:triton-attn"]
    for v in variants:
        why = v.available()
        assert why is not None
        assert v.name in why
        assert "Triton" in why or "pack_engine_triton.sh" in why
        refused = v.check(layer("gpt-oss-20b", "decode", True), cpu)
        assert refused is not None
        assert v.name in refused.reason
        assert "on a CUDA GPU; this is cpu" in refused.reason
    assert engine_triton.backends("trtllm") == []
