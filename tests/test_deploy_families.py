"""`recommend --measure` for every attention family: the dry-run plans of DeepSeek-V3 (MLA) on
SGLang and vLLM, gpt-oss-120b and Gemma-2-9b (a windowed and a full layer kind) on vLLM, the
keys `--resume` skips by, and plain GQA plans as they were."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.cli.common import EXIT_NOTHING_RAN
from attnbench.cli.deploy_measure import finished, plan_lines, resume_key
from attnbench.deploy.plan import (
    SGLANG_PAGE,
    PlanAsk,
    PlannedCase,
    engine_variants,
    plan_cases,
    prefill_cases,
    prefill_refusal,
)
from attnbench.deploy.traffic import RunningBatches, fit_paths, replay_trace
from attnbench.engines.paths import Engine
from attnbench.replay.live import step_spec
from attnbench.results import ResultRow
from fixtures_results import write_results

RESULTS = Path(__file__).resolve().parents[1] / "results"
H200 = sorted(RESULTS.glob("h200-*.jsonl.gz"))
runner = CliRunner()

ASKS: dict[str, tuple[str, int, Engine, str]] = {
    "ds-sglang": ("deepseek-v3", 8, "sglang", "mooncake-conv"),
    "ds-vllm": ("deepseek-v3", 8, "vllm", "mooncake-conv"),
    "oss-vllm": ("gpt-oss-120b", 8, "vllm", "azure-conv"),
    "gemma-vllm": ("gemma-2-9b", 1, "vllm", "azure-conv"),
}

Planned = tuple[list[PlannedCase], str | None, RunningBatches]


@pytest.fixture(scope="module")
def plans() -> dict[str, Planned]:
    if not H200:
        pytest.skip("no committed H200 rows")
    out = {}
    for name, (model, tp, engine, trace) in ASKS.items():
        run, sim, dep = replay_trace(fit_paths(H200), None, engine, trace, model=(model, tp))
        ask = PlanAsk(run.trace, costs_gpu=run.costs_gpu)
        cases = plan_cases(sim, dep, engine, ask) + prefill_cases(run.prompts, dep, engine, ask)
        out[name] = (cases, prefill_refusal(run.prompts, dep, engine, ask), run)
    return out


def _decode(cases: list[PlannedCase]) -> list[PlannedCase]:
    return [c for c in cases if c.spec.kind == "decode"]


def test_deepseek_sglang_times_each_step_at_page_1_and_page_64(plans: dict[str, Planned]) -> None:
    cases, skipped, run = plans["ds-sglang"]
    decode = _decode(cases)
    at = Counter((c.spec.page_size, c.backends) for c in decode)
    steps = {c.step for c in decode}
    assert at == {
        (1, ("sglang:fa3", "sglang:flashinfer")): len(steps),
        (64, ("sglang:flashmla",)): len(steps),
    }
    for c in decode:
        s = c.spec
        assert (s.num_qo_heads, s.num_kv_heads, s.head_dim) == (16, 1, 576)
        assert s.mla is not None
        assert s.num_layers == 61
        assert s.layer_type == ""
    # the two page sizes of a step are one batch: same lengths and label
    by_step: dict[int, set[tuple[tuple[int, ...], str]]] = {}
    for c in decode:
        by_step.setdefault(c.step, set()).add((c.spec.kv_lens, c.spec.label))
    assert all(len(v) == 1 for v in by_step.values())
    assert not [c for c in cases if c.spec.kind == "prefill"]
    assert skipped is not None
    assert skipped.startswith("prefill: not planned (6 of 6 drawn prompts")
    assert "non-absorbed" in skipped
    assert "\n" not in skipped
    assert "stated roofline" in run.source()


def test_deepseek_vllm_runs_its_mla_backends_at_block_64(plans: dict[str, Planned]) -> None:
    cases, skipped, _ = plans["ds-vllm"]
    decode = _decode(cases)
    assert decode
    assert {c.spec.page_size for c in decode} == {64}
    assert {c.backends for c in decode} == {
        ("vllm:flash-attn-mla", "vllm:flashmla", "vllm:flashinfer-mla", "vllm:triton-mla")
    }
    assert len({c.step for c in decode}) == len(decode)  # one kind, one page: a case a step
    assert all(c.spec.head_dim == 576 and c.spec.num_qo_heads == 16 for c in decode)
    assert skipped is not None
    assert "mla_prefill_backend" in skipped


@pytest.mark.parametrize(("name", "windows"), [("oss-vllm", 127), ("gemma-vllm", 4095)])
def test_layer_kind_models_plan_one_case_per_kind(
    plans: dict[str, Planned], name: str, windows: int
) -> None:
    cases, skipped, run = plans[name]
    assert skipped is None
    for kind in ("decode", "prefill"):
        part = [c for c in cases if c.spec.kind == kind]
        assert part
        per_step: dict[int, list[PlannedCase]] = {}
        for c in part:
            per_step.setdefault(c.step, []).append(c)
        for both in per_step.values():
            assert [c.spec.layer_type for c in both] == ["sliding_attention", "full_attention"]
            assert [c.spec.window_left for c in both] == [windows, -1]
            sliding, full = (c.spec.model_dump(mode="json") for c in both)
            differ = {k for k in {*sliding, *full} if sliding.get(k) != full.get(k)}
            assert differ <= {"layer_type", "window_left", "num_layers"}  # options sums them
            assert len({c.spec.label for c in both}) == 1
    assert len([c for c in cases if c.spec.kind == "prefill"]) == 2 * 6
    assert {c.backends for c in cases} == {
        ("vllm:flash-attn", "vllm:flashinfer", "vllm:triton-attn")
    }
    assert {c.spec.page_size for c in cases} == {16}
    assert "18 layers" in run.deployment or "21 layers" in run.deployment


def test_plan_lines_name_kinds_pages_and_the_skipped_prefill(plans: dict[str, Planned]) -> None:
    cases, skipped, _ = plans["ds-sglang"]
    lines = plan_lines(cases, skipped)
    steps = len({c.step for c in cases})
    assert lines[0].startswith(f"plan: {steps} batches as {2 * steps} cases")
    assert all(line.endswith(", pages 1+64") for line in lines[1 : steps + 1])
    assert "  backends at page 1: sglang:fa3, sglang:flashinfer" in lines
    assert "  backends at page 64: sglang:flashmla" in lines
    assert lines[-1].startswith("  prefill: not planned (")
    oss = plan_lines(plans["oss-vllm"][0])
    assert oss[1].endswith(", sliding+full")
    assert oss[-1] == "  backends: vllm:flash-attn, vllm:flashinfer, vllm:triton-attn"


@pytest.mark.parametrize("name", list(ASKS))
def test_resume_keys_tell_every_kind_and_page_apart(
    plans: dict[str, Planned], name: str, tmp_path: Path
) -> None:
    cases = plans[name][0]
    keys = [resume_key(c, b) for c in cases for b in c.backends]
    assert len(keys) == len(set(keys))  # no case of one kind or page stands for another
    done = [(c, b) for i, c in enumerate(cases) for b in c.backends if i % 2 == 0]
    rows = [
        ResultRow(
            run_id="r",
            case_id=c.spec.case_id,
            backend=b,
            spec=c.spec.model_dump(mode="json"),
            status="unsupported",
            reason="x",
        )
        for c, b in done
    ]
    out = write_results(tmp_path / "deploy.jsonl", rows)
    assert finished(out) == {resume_key(c, b) for c, b in done}  # none lost, none re-timed


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_gqa_plans_are_the_single_kind_plans_they_were(engine: Engine) -> None:
    """Llama-3.1-8B: the plan is the one-kind plan `recommend --measure` drew before layer
    kinds (each step's `step_spec` at the engine's page size, every GQA variant)."""
    if not H200:
        pytest.skip("no committed H200 rows")
    model = ("llama-3.1-8b", 1)
    run, sim, dep = replay_trace(fit_paths(H200), None, engine, "azure-conv", model=model)
    ask = PlanAsk(run.trace, costs_gpu=run.costs_gpu)
    cases = plan_cases(sim, dep, engine, ask)
    page = SGLANG_PAGE if engine == "sglang" else dep.page_size
    assert cases
    for c in cases:
        was = step_spec(sim, c.step, dep).model_copy(
            update={
                "kv_dtype": dep.dtype,
                "page_size": page,
                "lengths": f"{ask.trace}-step{c.step}",
                "label": c.spec.label,
            }
        )
        assert c.spec == was
        assert c.backends == engine_variants(engine, "auto")
    assert "fitted cost on NVIDIA H200" in run.source()
    assert prefill_refusal(run.prompts, dep, engine, ask) is None
    lines = plan_lines(cases)
    pairs = len(engine_variants(engine, "auto")) * len(cases)
    assert lines[0] == f"plan: {len(cases)} batches x their backends = {pairs} timed pairs"


def test_dry_run_and_cpu_measure_of_deepseek_on_sglang(tmp_path: Path) -> None:
    if not H200:
        pytest.skip("no committed H200 rows")
    out = tmp_path / "deploy.jsonl"
    args = ["recommend", *map(str, H200), "--model", "deepseek-v3", "--tp", "8"]
    args += ["--engine", "sglang", "--trace", "mooncake-conv", "--measure", "--out", str(out)]
    res = runner.invoke(app, [*args, "--dry-run"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "prefill: not planned (" in res.output
    plan = json.loads(out.with_suffix(".plan.json").read_text())
    assert {c["page_size"] for c in plan} == {1, 64}
    assert {c["kind"] for c in plan} == {"decode"}
    cpu = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert cpu.exit_code == EXIT_NOTHING_RAN, cpu.output
    error = [line for line in cpu.output.splitlines() if "no CUDA GPU here" in line]
    assert len(error) == 1
    assert not out.exists()
