"""recommend per model (issue 18): with rows of several models, each model gets its own decode
and prefill answer, the ceiling its decode winner is bound by (MLA decode: compute), and for a
model with sliding and full layers the model step that adds them."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from attnbench.analysis import per_model
from attnbench.analysis.frame import load, ok_rows, shape_label
from attnbench.analysis.hybrid import recommend
from attnbench.cli import app
from attnbench.measure import metrics
from attnbench.results import ResultRow
from attnbench.workload.models import get_model, layer_shapes
from attnbench.workload.spec import WorkloadSpec
from fixtures_results import MODELS, CostModel, row, spec, write_results

MLA_FAST = CostModel(10.0, 3000.0, 600.0, dtypes=("bfloat16",))
MLA_SLOW = CostModel(30.0, 2500.0, 400.0, dtypes=("bfloat16",))
XQA = CostModel(6.0, 3100.0, 300.0, dtypes=("bfloat16",))


def _model_specs(name: str, kind: str, contexts: tuple[int, ...], batch: int) -> list[WorkloadSpec]:
    out = []
    for layer in layer_shapes(get_model(name)):
        for ctx in contexts:
            qo = (1,) * batch if kind == "decode" else (ctx,) * batch
            out.append(
                WorkloadSpec(
                    kind=kind,
                    num_qo_heads=layer.num_qo_heads,
                    num_kv_heads=layer.num_kv_heads,
                    head_dim=layer.head_dim,
                    num_layers=layer.num_layers,
                    kv_lens=(ctx,) * batch,
                    qo_lens=qo,
                    model=name,
                    page_size=64,
                    lengths=f"ctx{ctx}",
                    **layer.spec_fields,
                )
            )
    return out


def _rows() -> list[ResultRow]:
    rows = []
    for s in _model_specs("deepseek-v3", "decode", (1024, 8192, 65536), 32):
        rows += [
            row(s, "flashinfer:mla-fa3", model=MLA_FAST),
            row(s, "flashinfer:mla-fa2", model=MLA_SLOW),
        ]
    for s in _model_specs("deepseek-v3", "prefill", (4096,), 1):
        rows += [
            row(s, "flashinfer:mla-fa3", model=MLA_FAST),
            row(s, "flashinfer:mla-fa2", model=MLA_SLOW),
        ]
    for s in _model_specs("llama-3.1-8b", "decode", (1024, 8192, 65536), 32):
        rows += [row(s, b) for b in ("flashinfer:tc", "flash-attn:fa3")]
    for s in _model_specs("gpt-oss-120b", "decode", (1024, 8192), 32):
        rows += [row(s, "flashinfer:xqa", model=XQA), row(s, "flash-attn:fa3")]
    return rows  # fmt: skip


@pytest.fixture
def frame(tmp_path: Path) -> pd.DataFrame:
    return load([write_results(tmp_path / "models.jsonl", _rows())]).frame


def test_each_model_gets_its_own_winners(frame: pd.DataFrame) -> None:
    (rec,) = recommend(frame)
    answers = {a.model: a for a in rec.models}
    assert set(answers) == {"deepseek-v3", "llama-3.1-8b", "gpt-oss-120b"}
    v3 = answers["deepseek-v3"]
    assert v3.decode.winner == "flashinfer:mla-fa3"
    assert v3.prefill.winner == "flashinfer:mla-fa3"
    assert v3.decode.n_cases == 3
    assert answers["llama-3.1-8b"].decode.winner in MODELS
    assert answers["llama-3.1-8b"].prefill.winner is None
    sentence = v3.sentence(rec.gpu)
    assert sentence.startswith("for deepseek-v3 on NVIDIA H200: decode use **flashinfer:mla-fa3**")
    assert "prefill use **flashinfer:mla-fa3**" in sentence


def test_mla_decode_is_judged_against_the_matmul_ceiling(frame: pd.DataFrame) -> None:
    (rec,) = recommend(frame)
    answers = {a.model: a for a in rec.models}
    v3, llama = answers["deepseek-v3"], answers["llama-3.1-8b"]
    assert v3.bound == "compute"
    assert llama.bound == "memory"
    won = frame[(frame["model"] == "deepseek-v3") & (frame["backend"] == "flashinfer:mla-fa3")]
    won = won[won["kind"] == "decode"]
    assert v3.roof_frac == pytest.approx(float(won["tflops_frac_measured"].median()))
    assert "compute-bound" in v3.sentence(rec.gpu)
    assert "of the measured matmul ceiling" in v3.sentence(rec.gpu)


def test_gpt_oss_model_step_adds_sliding_and_full_layers(frame: pd.DataFrame) -> None:
    (rec,) = recommend(frame)
    oss = next(a for a in rec.models if a.model == "gpt-oss-120b")
    assert oss.step_batches == 2
    won = frame[(frame["model"] == "gpt-oss-120b") & (frame["backend"] == oss.decode.winner)]
    steps = []
    for _, batch in won.groupby("total_kv"):
        parts = [(r["latency_us"], r["plan_us"], r["num_layers"]) for _, r in batch.iterrows()]
        assert sorted(int(p[2]) for p in parts) == [18, 18]
        steps.append(metrics.model_per_token_ms(parts))
    assert oss.step_ms == pytest.approx(sorted(steps)[0] / 2 + sorted(steps)[1] / 2)
    assert next(a for a in rec.models if a.model == "deepseek-v3").step_ms is None


def _anonymous() -> list[ResultRow]:
    """Decode rows of head shapes run without a model preset (as the GQA sweep's are)."""
    rows = []
    for heads in (8, 64):
        for ctx in (1024, 8192):
            s = spec("decode", [ctx] * 16, num_qo_heads=heads)
            rows += [row(s, b) for b in ("flashinfer:tc", "flash-attn:fa3")]
    return rows


def test_anonymous_head_shapes_are_no_model(tmp_path: Path) -> None:
    """Only named presets get a per-model answer; shapes run without one stay in the decision
    matrix (and the GQA-sweep section), yet still make the rows hold several shapes."""
    path = write_results(tmp_path / "mixed.jsonl", _rows() + _anonymous())
    (rec,) = recommend(load([path]).frame)
    assert [a.model for a in rec.models] == ["deepseek-v3", "gpt-oss-120b", "llama-3.1-8b"]
    llama = [r for r in _rows() if r.case_id.split("/")[1] == "llama-3.1-8b"]
    path = write_results(tmp_path / "one.jsonl", llama + _anonymous())
    (rec,) = recommend(load([path]).frame)
    assert [a.model for a in rec.models] == ["llama-3.1-8b"]
    assert rec.models[0].decode.n_cases == 3  # its own cases only, not the anonymous ones
    path = write_results(tmp_path / "anon.jsonl", _anonymous())
    (rec,) = recommend(load([path]).frame)
    assert rec.models == []


def test_one_model_gets_no_per_model_answer(tmp_path: Path) -> None:
    rows = [r for r in _rows() if r.case_id.split("/")[1] == "llama-3.1-8b"]
    (rec,) = recommend(load([write_results(tmp_path / "one.jsonl", rows)]).frame)
    assert rec.models == []


@pytest.mark.usefixtures("isolated")
def test_recommend_command_answers_per_model(tmp_path: Path) -> None:
    path = write_results(tmp_path / "models.jsonl", _rows())
    out = tmp_path / "rec.json"
    res = CliRunner().invoke(
        app, ["recommend", str(path), "--json", str(out)], env={"COLUMNS": "80"}
    )
    assert res.exit_code == 0, res.output
    # `recommend` without --model is the index: one line per model shape, each with the
    # command that asks about it (MLA models too: their engines' MLA backends)
    text = " ".join(res.output.split())
    assert "deepseek-v3 tp1 h128/1 d576" in text
    assert "attnbench recommend --model deepseek-v3 --tp 1" in text
    assert "attnbench recommend --model gpt-oss-120b --tp 1" in text
    models = {m["model"] for m in json.loads(out.read_text())}
    assert {"deepseek-v3", "gpt-oss-120b"} <= models
    assert "vllm serve" not in res.output


def test_mla_engine_options_say_which_engine_runs_the_winner() -> None:
    """SGLang's `flashinfer` backend runs FlashInfer's MLA wrapper with backend auto (fa3 on
    SM90); vLLM's FLASHINFER_MLA is trtllm-gen on SM100 only, so no vLLM option runs it on an
    H200; FA3's MLA path is vLLM's FLASH_ATTN_MLA and SGLang's fa3."""
    fa3 = per_model.mla_engines("flashinfer:mla-fa3")
    assert "SGLang `--attention-backend flashinfer`" in fa3
    assert "FLASHINFER_MLA is trtllm-gen, SM100 only" in fa3
    assert per_model.mla_engines("flashinfer:mla-fa3+tuned") == fa3
    assert "no option picks fa2" in per_model.mla_engines("flashinfer:mla-fa2")
    assert "vLLM `--attention-backend FLASH_ATTN_MLA`" in per_model.mla_engines("flash-attn:mla")
    assert per_model.mla_engines("sdpa:mla") == (
        "attnbench knows no vLLM or SGLang option that runs sdpa:mla"
    )


def test_committed_h200_rows_answer_for_deepseek_v3() -> None:
    """From the committed H200 MLA rows (beside the GQA sweep, so there are several models):
    DeepSeek-V3 decode on the H200 is flashinfer:mla-fa3, judged against the matmul ceiling,
    with the engine options that run it."""
    root = Path(__file__).resolve().parents[1] / "results"
    paths = [
        Path(p) for stem in ("h200-mla", "h200-gqa") for p in glob.glob(f"{root}/{stem}.jsonl*")
    ]
    if len(paths) < 2:
        pytest.skip("no committed MLA and GQA rows")
    frame = load(paths).frame
    (rec,) = recommend(frame)
    ok = ok_rows(frame)
    named = {shape_label(r) for r in ok.to_dict("records") if r["model"]}
    assert [a.model for a in rec.models] == sorted(named)  # the GQA sweep's shapes are none
    v3 = next(a for a in rec.models if a.model == "deepseek-v3")
    assert v3.decode.winner == "flashinfer:mla-fa3"
    assert v3.decode.runner_up == "flashinfer:mla-fa2"
    assert v3.prefill.winner == "flashinfer:mla-fa3"
    assert v3.bound == "compute"
    assert v3.roof_frac is not None
    assert 0.4 < v3.roof_frac < 0.8
    sentence = v3.sentence(rec.gpu)
    assert sentence.startswith("for deepseek-v3 on NVIDIA H200: decode use **flashinfer:mla-fa3**")
    assert "compute-bound" in sentence
    assert "engines: SGLang `--attention-backend flashinfer`" in sentence


@pytest.mark.usefixtures("isolated")
@pytest.mark.slow
def test_recommend_on_committed_results_lists_named_models_only() -> None:
    """`attnbench recommend results/`: the per-model table holds the named presets of the
    committed rows, not each GQA-sweep head shape (h8/8 d128 ... h128/8 d128)."""
    root = Path(__file__).resolve().parents[1] / "results"
    if not any(root.glob("h200-gqa.jsonl*")):
        pytest.skip("no committed GQA rows")
    out = Path("rec.json")
    res = CliRunner().invoke(
        app, ["recommend", str(root), "--json", str(out)], env={"COLUMNS": "80"}
    )
    assert res.exit_code == 0, res.output
    models = {(m["model"], m["tp"]) for m in json.loads(out.read_text())}
    assert {("deepseek-v3", 1), ("llama-3.1-70b", 8), ("llama-3.1-8b", 1)} <= models
    assert "h104/8 d128" not in res.output
    assert "further head shapes match no model preset" in res.output
