"""The decider on the families beyond plain GQA: an MLA model whose engine default refused here
(a stand-in baseline, said, never "keep the default"), and a model whose layers differ (one
case per model step, its kinds summed by their layer counts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.analysis.compare import Timing
from attnbench.analysis.frame import load
from attnbench.cli.deploy_view import answer_lines
from attnbench.deploy import decide as deploy
from attnbench.deploy.options import model_step
from attnbench.results import ResultRow
from attnbench.workload.models import get_model, layer_shapes
from fixtures_results import row, spec, write_results

FA3_REFUSAL = "sglang:fa3 runs flash-attn:mla: tokenspeed-fa3 was built without HDIMDIFF64"


def test_a_model_step_sums_its_layer_kinds_by_their_counts() -> None:
    step = model_step([(Timing(10.0, 9.0, 11.0), 18, 8), (Timing(30.0, 29.0, 33.0), 18, 8)])
    assert step.median_us == pytest.approx(720.0)
    assert step.ci_low_us == pytest.approx(684.0)
    assert step.ci_high_us == pytest.approx(792.0)
    assert model_step([(Timing(10.0), 2, 8), (Timing(5.0, 4.0, 6.0), 1, 8)]).ci_low_us is None


def _mla_rows() -> list[ResultRow]:
    (layer,) = layer_shapes(get_model("deepseek-v3"), 8)
    rows: list[ResultRow] = []
    for batch in (8, 32, 64):
        for ctx in (1024, 4096):
            fields = dict(
                num_qo_heads=layer.num_qo_heads,
                num_kv_heads=1,
                head_dim=layer.head_dim,
                model="deepseek-v3",
                tp=8,
                lengths=f"ctx{ctx}",
                **layer.spec_fields,
            )
            one = spec("decode", [ctx] * batch, page_size=1, **fields)
            at64 = one.model_copy(update={"page_size": 64})
            fi = row(one, "flash-attn:fa3", seed=1)
            rows.append(fi.model_copy(update={"backend": "sglang:flashinfer"}))
            mla = row(at64, "flash-attn:fa3", scale=0.8, seed=2)
            rows.append(mla.model_copy(update={"backend": "sglang:flashmla"}))
            rows.append(
                ResultRow(
                    run_id="fake-h200",
                    case_id=one.case_id,
                    spec=one.model_dump(mode="json"),
                    backend="sglang:fa3",
                    status="unsupported",
                    reason=FA3_REFUSAL,
                )
            )
    return rows


def test_an_mla_answer_stands_in_for_the_refused_engine_default(tmp_path: Path) -> None:
    path = write_results(tmp_path / "h200-mla.jsonl", _mla_rows())
    frame = load([path]).frame
    shape = deploy.model_shape("deepseek-v3", 8)
    assert (shape.num_qo_heads, shape.num_kv_heads, shape.head_dim, shape.mla) == (16, 1, 576, True)
    ans = deploy.answer(frame, shape, "sglang")
    assert ans.default is not None
    assert ans.default_refused is not None
    assert "fa3" in ans.default_refused
    assert "HDIMDIFF64" in ans.default_refused
    assert ans.choice is not None
    assert not ans.keeps_default  # a stand-in is never "the default" to keep
    stand_in = ans.default.key.variant
    assert any(f"{ans.default.name} stands in as the baseline" in g.text for g in ans.gaps)
    assert stand_in in ("sglang:flashinfer", "sglang:flashmla")
    text = "\n".join(answer_lines(ans))
    assert "keep the default" not in text


def _layered_rows(scale_sliding: float, drop_one: bool = False) -> list[ResultRow]:
    kinds = layer_shapes(get_model("gpt-oss-120b"), 8)
    assert len(kinds) == 2
    rows: list[ResultRow] = []
    for batch in (8, 32, 64):
        for ctx in (1024, 4096):
            for i, kind in enumerate(kinds):
                if drop_one and batch == 64 and i == 1:
                    continue
                s = spec(
                    "decode",
                    [ctx] * batch,
                    num_qo_heads=kind.num_qo_heads,
                    num_kv_heads=kind.num_kv_heads,
                    head_dim=kind.head_dim,
                    num_layers=kind.num_layers,
                    model="gpt-oss-120b",
                    tp=8,
                    lengths=f"ctx{ctx}",
                    **kind.spec_fields,
                )
                sliding = kind.spec_fields.get("layer_type") == "sliding_attention"
                scale = scale_sliding if sliding else 1.0
                for seed, backend in enumerate(("vllm:flash-attn", "vllm:flashinfer")):
                    r = row(s, "flash-attn:fa3", scale=scale if seed else 1.0, seed=seed + 1)
                    rows.append(r.model_copy(update={"backend": backend}))
    return rows


def test_layer_kinds_are_decided_per_model_step(tmp_path: Path) -> None:
    path = write_results(tmp_path / "h200-oss.jsonl", _layered_rows(0.5))
    frame = load([path]).frame
    ans = deploy.answer(frame, deploy.model_shape("gpt-oss-120b", 8), "vllm")
    assert ans.default is not None
    steps = ans.default.cases("decode")
    assert len(steps) == 6  # 3 batches x 2 contexts, each one model step of both kinds
    fi = next(o for o in ans.options if o.key.variant == "vllm:flashinfer")
    assert fi.decode is not None
    assert 0.6 < fi.decode.ratio < 0.9  # half as fast on half the layers: ~0.75, not 0.5


def test_a_step_missing_a_layer_kind_is_left_out(tmp_path: Path) -> None:
    path = write_results(tmp_path / "h200-oss.jsonl", _layered_rows(0.5, drop_one=True))
    ans = deploy.answer(load([path]).frame, deploy.model_shape("gpt-oss-120b", 8), "vllm")
    assert ans.default is not None
    assert ans.measured_batches == [8, 32]


def test_a_default_missing_from_the_pack_names_the_builds_own_refusal(tmp_path: Path) -> None:
    missing = "sglang:fa3 runs flash-attn:mla: FlashAttention-3 not installed: pip install x"
    build = "flash_attn_interface 3.0 was built with FLASH_ATTENTION_DISABLE_HDIMDIFF64: no kernel"
    rows = [
        r.model_copy(update={"reason": missing}) if r.status == "unsupported" else r
        for r in _mla_rows()
    ]
    one = rows[0]
    rows.append(
        ResultRow(
            run_id="fake-h200",
            case_id=one.case_id,
            spec=one.spec,
            backend="flash-attn:mla",
            status="unsupported",
            reason=build,
        )
    )
    path = write_results(tmp_path / "h200-mla.jsonl", rows)
    ans = deploy.answer(load([path]).frame, deploy.model_shape("deepseek-v3", 8), "sglang")
    assert ans.default_refused is not None
    assert "not installed" in ans.default_refused
    assert "a run with the library refused by its build: " + build in ans.default_refused


def test_an_option_whose_decode_failed_the_gate_says_so_with_its_errors(tmp_path: Path) -> None:
    """A variant whose decode cases are `mismatch` rows prices no decode: the answer names it,
    how many of its decode cases failed and their rel-L2 errors against the budget."""
    rows = [r for r in _mla_rows() if r.backend != "sglang:flashmla"]
    failed = []
    for r in [r for r in rows if r.backend == "sglang:flashinfer"][:3]:
        bad = r.model_copy(update={"backend": "sglang:flashmla", "status": "mismatch"})
        assert bad.accuracy is not None
        acc = bad.accuracy.model_copy(update={"rel_l2_err": 0.05, "budget": 0.007})
        failed.append(bad.model_copy(update={"accuracy": acc, "measurement": None}))
    path = write_results(tmp_path / "h200-mla.jsonl", rows + failed)
    ans = deploy.answer(load([path]).frame, deploy.model_shape("deepseek-v3", 8), "sglang")
    (gap,) = [g for g in ans.gaps if "failed the accuracy gate" in g.text]
    assert gap.text.startswith("sglang:flashmla failed the accuracy gate on 3 of 3 decode cases")
    assert gap.text.endswith(": rel-L2 error 0.05 against budgets of at most 0.007")
    assert not deploy.gate_gaps(load([path]).frame.iloc[:0], ans)


def test_another_engines_failed_rows_are_not_this_answers(tmp_path: Path) -> None:
    rows = _mla_rows()
    bad = next(r for r in rows if r.backend == "sglang:flashinfer")
    assert bad.accuracy is not None
    other = bad.model_copy(update={"backend": "vllm:flashinfer", "status": "mismatch"})
    path = write_results(tmp_path / "h200-mla.jsonl", [*rows, other])
    ans = deploy.answer(load([path]).frame, deploy.model_shape("deepseek-v3", 8), "sglang")
    assert not [g for g in ans.gaps if "failed the accuracy gate" in g.text]
