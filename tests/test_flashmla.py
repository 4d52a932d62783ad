"""`flashmla:dense` (issue 47): FlashMLA's dense SM90 decode from sgl-flash-mla. Its refusal
rules without a GPU, its place in the registry, and what `attnbench backends` says where the
wheel is missing."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from attnbench.backends import select_backends
from attnbench.backends.features import MLA_VARIANTS
from attnbench.backends.flashmla import FP8_REASON, FlashMlaBackend, flashmla_refusal
from attnbench.backends.variant import Variant
from attnbench.cli import app
from attnbench.workload.spec import MlaSpec, WorkloadSpec
from backend_cases import device, make_spec

runner = CliRunner()


def v3_decode(**overrides: Any) -> WorkloadSpec:
    """DeepSeek-V3 at tp 8 (16 query heads on one 512 + 64 latent), ragged decode, page 64."""
    fields: dict[str, Any] = {
        "kind": "decode",
        "num_qo_heads": 16,
        "num_kv_heads": 1,
        "head_dim": 576,
        "page_size": 64,
        "mla": MlaSpec(),
        "kv_lens": (700, 65, 4000),
        "qo_lens": (1, 1, 1),
    }
    return WorkloadSpec(**(fields | overrides))


@pytest.mark.parametrize(
    ("overrides", "sm", "message"),
    [
        ({}, 90, None),
        ({"num_qo_heads": 128}, 90, None),
        ({"dtype": "float16", "kv_dtype": "float16"}, 90, None),
        ({"kind": "append", "qo_lens": (2, 2, 2)}, 90, None),
        ({}, 80, "SM90 (Hopper) only; this is SM80"),
        ({}, 100, "SM90 (Hopper) only; this is SM100"),
        ({"page_size": 16}, 90, "block size is 64; page_size 16"),
        ({"kind": "append", "qo_lens": (2, 3, 2)}, 90, "qo_lens differ (2..3)"),
        ({"kind": "prefill", "kv_lens": (64, 64), "qo_lens": (64, 64)}, 90, "decode kernel"),
        ({"kv_dtype": "fp8_e4m3"}, 90, "separate ckv and kpe scales"),
        ({"kv_dtype": "float16"}, 90, "in the query dtype"),
        ({"mla": MlaSpec(kv_lora_rank=256), "head_dim": 320}, 90, "576-wide latent"),
    ],
)
def test_flashmla_rules(overrides: dict[str, Any], sm: int, message: str | None) -> None:
    why = flashmla_refusal(v3_decode(**overrides), device(sm))
    if message is None:
        assert why is None
    else:
        assert why is not None
        assert message in why
        assert why.startswith("flashmla:dense")


def test_flashmla_refuses_plain_attention_and_the_cpu() -> None:
    why = flashmla_refusal(make_spec(), device(90))
    assert why is not None
    assert "runs MLA cases only" in why
    assert "this is cpu" in (flashmla_refusal(v3_decode(), device(kind="cpu")) or "")
    assert FlashMlaBackend().check(v3_decode(), device(90)) is None


def test_fp8_refusal_names_what_differs() -> None:
    assert "descale_k" in FP8_REASON
    assert "fp8 query" in FP8_REASON
    assert len(FP8_REASON.splitlines()) == 1


def test_registry_lists_flashmla_dense() -> None:
    (backend,) = select_backends(["flashmla"])
    assert backend.name == "flashmla:dense"
    assert [b.name for b in select_backends(["flashmla:dense"])] == ["flashmla:dense"]
    assert "flashmla:dense" in [b.name for b in select_backends(["all"])]
    assert Variant.parse("flashmla:dense").library == "flashmla"
    assert Variant.parse("flashmla:dense").cache == "paged"
    assert "flashmla:dense" in MLA_VARIANTS


def test_backends_view_says_why_flashmla_is_unavailable() -> None:
    """On a machine without the wheel (this CPU machine), one line with the install hint."""
    if FlashMlaBackend().available() is None:
        pytest.skip("flash_mla is importable here")
    res = runner.invoke(app, ["backends", "--device", "cpu"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "flashmla:dense" in res.output
    assert "pip install sgl-flash-mla==1.0.0 --no-deps" in res.output
    assert "flash_mla not importable" in res.output


@pytest.mark.gpu
@pytest.mark.parametrize("qo_len", [1, 2])
def test_gpu_flashmla_passes_the_gate(qo_len: int) -> None:
    """DeepSeek-V3 at tp 8, ragged decode and a 2-token causal append (MTP), page 64: gated
    against the fp64 reference and timed; the per-step schedule is the replan."""
    from attnbench.measure.config import MeasureConfig
    from attnbench.measure.hardware import detect
    from attnbench.run.sweep import SweepContext, run_case

    backend = FlashMlaBackend()
    if backend.available() is not None:
        pytest.skip(str(backend.available()))
    info = detect("cuda:0")
    if info.sm != 90:
        pytest.skip(f"FlashMLA's dense kernel is SM90 only; this GPU is SM{info.sm}")
    spec = v3_decode(qo_lens=(qo_len,) * 3, kind="decode" if qo_len == 1 else "append")
    cfg = MeasureConfig(warmup_ms=1.0, min_runs=3, max_runs=5, max_time_ms=5.0)
    ctx = SweepContext(run_id="test-flashmla-gpu", info=info, measure_cfg=cfg)
    (row,) = run_case(spec, [backend], ctx)
    assert row.status == "ok", row.reason
    assert row.plan_us is not None
    assert row.plan_us > 0
    assert row.details["ops"] == "flash_mla_legacy"
