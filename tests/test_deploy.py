"""`attnbench recommend --model`: the answer per deployment (deploy.decide, cli.recommend)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from attnbench.analysis.compare import Timing
from attnbench.analysis.frame import load
from attnbench.cli import app
from attnbench.cli.deploy_view import WIDTH, answer_lines, command_lines
from attnbench.deploy import decide as deploy
from attnbench.deploy.stats import Pair, PairedEstimate, paired_ratio
from fixtures_results import row, spec, write_results

RESULTS = Path(__file__).resolve().parents[1] / "results"
H200 = sorted(RESULTS.glob("h200-*.jsonl.gz"))
runner = CliRunner()


def _fits(text: str) -> None:
    # a line that is one unbreakable token (a file path) is the only exception; an `error:`
    # is one logical line the terminal wraps (`cli.common.fail`, soft wrap)
    long = [
        line
        for line in text.splitlines()
        if len(line) > WIDTH and " " in line.strip() and not line.startswith("error:")
    ]
    assert not long, long


def _timing(us: float, n: int = 32, noise: float = 0.01, seed: int = 0) -> Timing:
    rng = np.random.default_rng(seed)
    samples = us * np.exp(rng.normal(0.0, noise, n))
    return Timing(float(np.median(samples)), samples_us=samples)


@pytest.fixture(scope="module")
def committed() -> object:
    if not H200:
        pytest.skip("no committed H200 rows")
    return load(H200).frame


# --- paired CI math ---------------------------------------------------------------------


def test_paired_ratio_is_the_ratio_of_weighted_mean_times() -> None:
    """The estimand: sum_h W_h mean(option) / sum_h W_h mean(default) over the strata."""
    pairs = [Pair(_timing(50.0, seed=i), _timing(100.0, seed=i), 0.75, 1) for i in range(6)]
    pairs += [Pair(_timing(100.0, seed=9), _timing(100.0, seed=9), 0.25, 2)]
    est = paired_ratio(pairs)
    assert est is not None
    last = pairs[6].baseline.median_us
    num = 0.75 * np.mean([p.option.median_us for p in pairs[:6]]) + 0.25 * last
    den = 0.75 * np.mean([p.baseline.median_us for p in pairs[:6]]) + 0.25 * last
    assert est.ratio == pytest.approx(num / den, rel=1e-12)
    assert est.ci_low < est.ratio < est.ci_high
    assert (est.cases, est.strata) == (7, 2)
    assert paired_ratio(pairs) == est  # the same rows give the same interval
    assert paired_ratio([]) is None
    assert paired_ratio([Pair(_timing(1.0), _timing(2.0), 0.0)]) is None


def test_paired_ci_widens_with_case_spread() -> None:
    steady = [Pair(_timing(80.0, seed=i), _timing(100.0, seed=i + 50)) for i in range(8)]
    spread = [
        Pair(_timing(80.0 * f, seed=i), _timing(100.0, seed=i + 50))
        for i, f in enumerate([0.6, 1.4, 0.7, 1.3, 0.8, 1.2, 0.9, 1.1])
    ]
    a, b = paired_ratio(steady), paired_ratio(spread)
    assert a is not None
    assert b is not None
    assert a.differs
    assert (b.ci_high - b.ci_low) > 3 * (a.ci_high - a.ci_low)


def test_overlapping_intervals_are_a_tie() -> None:
    a = PairedEstimate(0.90, 0.85, 0.95, 10)
    assert a.overlaps(PairedEstimate(0.94, 0.92, 0.99, 10))
    assert not a.overlaps(PairedEstimate(1.00, 0.97, 1.03, 10))


# --- synthetic deployment: ties and the default -----------------------------------------


def _engine_rows(scale_fi: float) -> list[object]:
    rows = []
    for batch in (8, 32):
        for ctx in (1024, 4096, 16384):
            s = spec("decode", [ctx] * batch, lengths=f"ctx{ctx}")
            for seed, (backend, scale) in enumerate(
                (("vllm:flash-attn", 1.0), ("vllm:flashinfer", scale_fi))
            ):  # a fixed seed per backend (str hash() changes with every process)
                r = row(s, "flash-attn:fa3", scale=scale, seed=seed + 1)
                rows.append(r.model_copy(update={"backend": backend}))
    return rows


def _answer(tmp_path: Path, scale_fi: float) -> deploy.Answer:
    path = write_results(tmp_path / f"e{scale_fi}.jsonl", _engine_rows(scale_fi))  # type: ignore[arg-type]
    frame = load([path]).frame
    return deploy.answer(frame, deploy.model_shape("llama-3.1-8b", 1), "vllm")


def test_a_clear_winner_replaces_the_default(tmp_path: Path) -> None:
    ans = _answer(tmp_path, 0.7)
    assert ans.choice is not None
    assert ans.default is not None
    assert ans.choice.key.variant == "vllm:flashinfer"
    assert ans.choice.decode is not None
    assert ans.choice.decode.ci_high < 1.0
    assert not ans.keeps_default
    assert ans.measured_batches == [8, 32]
    text = "\n".join(answer_lines(ans))
    assert "--attention-backend FLASHINFER" in text
    assert text.count("vllm serve MODEL") == 1


def test_a_tie_with_the_default_keeps_the_default(tmp_path: Path) -> None:
    ans = _answer(tmp_path, 0.998)
    assert ans.choice is not None
    assert ans.keeps_default
    assert ans.choice.key.variant == "vllm:flash-attn"
    assert [o.key.variant for o in ans.tied] == ["vllm:flashinfer"]
    text = "\n".join(answer_lines(ans))
    assert "keep the default" in text
    assert "tied" in text


def test_trace_buckets_mark_extrapolation(tmp_path: Path) -> None:
    path = write_results(tmp_path / "e.jsonl", _engine_rows(0.7))  # type: ignore[arg-type]
    frame = load([path]).frame
    shape = deploy.model_shape("llama-3.1-8b", 1)
    ans = deploy.answer(frame, shape, "vllm", running={3: 10, 8: 70, 30: 20}, trace="azure-conv")
    sizes = {b.size: b for b in ans.buckets}
    assert set(sizes) == {4, 8, 32}
    assert not sizes[8].extrapolated
    assert not sizes[32].extrapolated
    assert sizes[4].extrapolated
    assert sizes[4].measured_at == 8
    assert ans.extrapolated_share == pytest.approx(0.1)
    assert any("buckets 4 (10% of decode steps)" in g.text for g in ans.gaps)
    assert "--measure" in ans.gaps[0].command


# --- committed results ------------------------------------------------------------------


def test_index_has_one_line_per_model_shape_and_no_winner() -> None:
    if not H200:
        pytest.skip("no committed H200 rows")
    res = runner.invoke(app, ["recommend", *map(str, H200)], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    _fits(res.output)
    assert "llama-3.1-70b tp8" in res.output
    assert "attnbench recommend --model llama-3.1-70b --tp 8" in res.output
    assert "vllm serve" not in res.output
    assert "decision" not in res.output


def test_nothing_to_answer_is_one_line_and_nonzero(tmp_path: Path) -> None:
    s = spec("prefill", [1024])
    path = write_results(tmp_path / "p.jsonl", [row(s, "flash-attn:fa3")])
    res = runner.invoke(app, ["recommend", str(path)])
    assert res.exit_code == 2
    assert "nothing to answer" in res.output


def test_scoped_answer_70b_tp8_library_calls(committed: object) -> None:
    shape = deploy.model_shape("llama-3.1-70b", 8)
    ans = deploy.answer(committed, shape, "none")  # type: ignore[arg-type]
    assert ans.choice is not None
    assert ans.choice.decode is not None
    assert ans.default is not None
    assert ans.default.key.variant == "flash-attn:fa3"
    assert ans.choice.decode.cases >= 20
    assert 1 in ans.measured_batches
    assert 256 in ans.measured_batches
    assert ans.fp8 is not None
    assert shape.also
    assert "qwen2.5-72b" in shape.also


def test_gemma2_library_answer_stands_in_for_the_refusing_fa3(committed: object) -> None:
    """FA3 (the library default) refuses Gemma-2's soft-cap: the answer compares with the
    variant that ran (FlashInfer fa2 on the committed H200 rows) and says so."""
    shape = deploy.model_shape("gemma-2-9b", 1)
    ans = deploy.answer(committed, shape, "none")  # type: ignore[arg-type]
    assert ans.default is not None
    assert ans.default.key.variant == "flashinfer:fa2"
    assert ans.choice is not None
    (gap,) = [g for g in ans.gaps if g.text.startswith("flash-attn:fa3 refused gemma-2-9b")]
    assert "soft-capping" in gap.text  # the refusal FA3 recorded, not a guess
    assert gap.command == ""  # measuring again would not help
    text = "\n".join(answer_lines(ans, False))
    assert "flashinfer:fa2 stands in" in text
    assert all(len(line) <= 80 for line in text.splitlines())


def test_no_contiguous_or_knobless_tuned_winner(committed: object) -> None:
    lines, _ = deploy.index(committed)  # type: ignore[arg-type]
    for line in lines:
        if line.shape.mla:
            continue
        for engine in deploy.TARGETS:
            ans = deploy.answer(committed, line.shape, engine)  # type: ignore[arg-type]
            for o in [ans.choice, *ans.options, *(x for x in [ans.fp8] if x)]:
                if o is None:
                    continue
                name = o.option.key.variant if isinstance(o, deploy.Fp8Decision) else o.key.variant
                assert "+tuned" not in name, (line.shape, name)
                assert "contiguous" not in name, (line.shape, name)
    ans = deploy.answer(committed, deploy.model_shape("llama-3.1-8b", 1), "vllm")  # type: ignore[arg-type]
    assert any(
        n.startswith("flashinfer:xqa+tuned: not deployable: needs") for n in ans.not_deployable
    )


def test_vllm_70b_without_engine_rows_names_the_measuring_command(committed: object) -> None:
    ans = deploy.answer(
        committed, deploy.model_shape("llama-3.1-70b", 8), "vllm", trace="azure-conv"
    )  # type: ignore[arg-type]
    text = "\n".join(answer_lines(ans))
    _fits(text)
    assert ans.gaps
    assert "attnbench recommend --model llama-3.1-70b --tp 8 --engine vllm \\" in text
    assert "--trace azure-conv --measure --out runs/deploy.jsonl" in text


@pytest.mark.parametrize(
    "extra",
    [
        ["--model", "llama-3.1-8b", "--engine", "vllm"],
        ["--model", "llama-3.1-8b", "--engine", "sglang", "--verbose"],
        ["--model", "llama-3.1-8b", "--engine", "sglang", "--kv-dtype", "fp8_e4m3"],
        ["--model", "llama-3.1-70b", "--tp", "8", "--engine", "none", "-v"],
        ["--model", "llama-3.1-70b", "--tp", "8", "--engine", "vllm"],
        ["--model", "llama-3.1-8b", "--engine", "vllm", "--trace", "azure-conv", "-v"],
    ],
)
def test_every_mode_fits_80_columns(extra: list[str]) -> None:
    if not H200:
        pytest.skip("no committed H200 rows")
    res = runner.invoke(app, ["recommend", *map(str, H200), *extra], env={"COLUMNS": "80"})
    assert res.exit_code in (0, 2), res.output  # 2: no answer from these rows (one error line)
    _fits(res.output)
    for line in res.output.splitlines():
        if line.rstrip().endswith("\\"):
            assert not line.rstrip()[:-1].rstrip().endswith(("--kv-cache-dtype", "--tp"))


def test_fp8_line_has_time_memory_and_study_error() -> None:
    if not H200:
        pytest.skip("no committed H200 rows")
    args = ["recommend", *map(str, H200), "--model", "llama-3.1-8b", "--engine", "vllm"]
    res = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    fp8 = text[text.index("fp8 KV") : text.index("basis")]
    assert "fp8_e4m3" in fp8
    assert "95% CI" in fp8
    assert "KV memory 0.50x" in fp8
    assert "rel. L2 <=" in fp8
    assert "needle recall >=" in fp8
    assert "max+0.1" in fp8


def test_an_h100_70b_fp8_line_names_the_study_it_quotes() -> None:
    """The H100's 70B tp8 answer (8/1 heads) quotes the H100's own study at its heads, and
    says so, with FA3's query quantisation and the study's verdict on its bounds (issue 44)."""
    h100 = sorted(RESULTS.glob("h100-deploy*.jsonl.gz"))
    if not h100 or not (RESULTS / "h100-fp8-study-llama-3.1-70b.json.gz").exists():
        pytest.skip("no committed H100 deploy rows or fp8 study at 8/1 heads")
    args = ["recommend", *map(str, h100), "--model", "llama-3.1-70b", "--tp", "8"]
    args += ["--engine", "vllm", "--trace", "azure-conv"]
    res = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    _fits(res.output)
    text = " ".join(res.output.split())
    fp8 = text[text.index("fp8 KV") : text.index("basis")]
    assert "flash-attn:fa3 with q and KV in e4m3" in fp8
    assert "KV quantisation only" in fp8
    assert "outside its bounds" in fp8
    assert "fp8 study on NVIDIA H100 80GB HBM3, heads 8/1 d128 (this answer's GPU and heads)" in fp8


def test_an_fp8_decision_names_the_kv_cache_of_both_sides() -> None:
    """Asked with `--kv-dtype fp8_e4m3`, a decision that keeps the default backend but moves
    its KV cache to fp8 says so (it read "fa3 (page 1) instead of the default fa3 (page 1)")."""
    files = sorted(RESULTS.glob("h100-deploy*.jsonl.gz"))
    if not files:
        pytest.skip("no committed H100 deploy rows")
    args = ["recommend", *map(str, files), "--model", "llama-3.1-8b", "--engine", "sglang"]
    args += ["--trace", "azure-conv", "--kv-dtype", "fp8_e4m3"]
    res = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    head = text[text.index("decision:") : text.index("--model-path")]
    assert "fp8_e4m3 KV) instead of the default" in head
    assert head.endswith("16-bit KV) python -m sglang.launch_server ")


def test_command_lines_break_between_flags_only() -> None:
    units = ["vllm serve MODEL", "--tensor-parallel-size 8", "--attention-backend FLASH_ATTN"]
    units += ["--kv-cache-dtype fp8_e4m3", "--block-size 16"]
    lines = command_lines(units)
    assert all(len(x) <= WIDTH for x in lines)
    assert all(x.endswith(" \\") for x in lines[:-1])
    joined = " ".join(x.rstrip(" \\").strip() for x in lines)
    assert joined == " ".join(units)


def test_dry_run_plans_real_batches_per_heavy_bucket(tmp_path: Path) -> None:
    if not H200:
        pytest.skip("no committed H200 rows")
    out = tmp_path / "deploy.jsonl"
    args = ["recommend", *map(str, H200), "--model", "llama-3.1-8b", "--engine", "vllm"]
    args += ["--trace", "azure-conv", "--measure", "--dry-run", "--out", str(out)]
    res = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    _fits(res.output)
    plan = json.loads(out.with_suffix(".plan.json").read_text())
    assert plan
    assert not out.exists()  # nothing timed
    from attnbench.analysis.engine_buckets import bucket_of, capture_sizes

    sizes = capture_sizes("vllm")
    decode = [c for c in plan if c["kind"] == "decode"]
    prefill = [c for c in plan if c["kind"] == "prefill"]
    per_bucket: dict[int, int] = {}
    for c in decode:
        assert bucket_of(c["batch_size"], sizes) == c["bucket"]
        per_bucket[c["bucket"]] = per_bucket.get(c["bucket"], 0) + 1
    for c in plan:
        assert c["backends"] == ["vllm:flash-attn", "vllm:flashinfer", "vllm:triton-attn"]
        assert c["page_size"] == 16
    weights = {c["bucket"]: c["weight"] for c in decode}
    assert sum(weights.values()) >= 0.9  # the default cover
    for b, w in weights.items():  # every heavy bucket is a stratum of 5 random steps
        assert per_bucket[b] == (5 if w >= deploy.MEASURE_SHARE else 2)
    assert len(prefill) == 6  # prompts drawn from the trace: enough for an interval
    assert len({c["case_id"] for c in prefill}) >= 3


def test_cover_adds_the_heaviest_small_buckets_until_the_share_is_measured() -> None:
    from attnbench.deploy.plan import heavy_buckets

    sizes = [1, 2, 4, 8, 16, 24, 32]
    # bucket 8: 50%; 16: 20%; 24, 32: 4% each; 1, 2, 4: 22%, 0%, 0%... (shares of 100 steps)
    hist = {1: 22, 8: 50, 16: 20, 24: 4, 32: 4}
    assert heavy_buckets(hist, sizes) == {1: 0.22, 8: 0.5, 16: 0.2}  # >= 5% only
    assert heavy_buckets(hist, sizes, cover=0.9) == {1: 0.22, 8: 0.5, 16: 0.2}  # 92% already
    got = heavy_buckets(hist, sizes, cover=0.95)
    assert got == {1: 0.22, 8: 0.5, 16: 0.2, 24: 0.04}  # the heavier of the ties, then stop
    assert set(heavy_buckets(hist, sizes, cover=1.0)) == {1, 8, 16, 24, 32}


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan"])
def test_cover_outside_zero_to_one_is_refused(value: str) -> None:
    args = ["recommend", "--model", "llama-3.1-8b", "--trace", "azure-conv", "--measure"]
    res = runner.invoke(app, [*args, "--dry-run", "--out", "x.jsonl", "--cover", value])
    assert res.exit_code == 2
    assert f"--cover={value}: must be a share of the decode steps in [0, 1]" in res.output


def test_recommend_is_fast_on_committed_results() -> None:
    if not H200:
        pytest.skip("no committed H200 rows")
    t = time.monotonic()
    args = ["recommend", *map(str, H200), "--model", "llama-3.1-70b", "--tp", "8"]
    res = runner.invoke(app, [*args, "--engine", "none"])
    assert res.exit_code == 0, res.output
    assert time.monotonic() - t < 10.0  # ~2 s alone; the CI machine is shared


def test_answers_by_model_is_per_model(committed: object) -> None:
    got = deploy.answers_by_model(committed)  # type: ignore[arg-type]
    models = {(s.model, s.tp) for s, _ in got}
    assert ("llama-3.1-8b", 1) in models
    for _, answers in got:
        assert [a.engine for a in answers] == ["vllm", "sglang"]


def _fake_gpu(calls: list[tuple[str, list[str]]], gpu: str = "NVIDIA H200") -> object:
    """A `replay.validate.gpu_timer` stand-in: rows from the fixtures' cost model, written to
    the rows file as the RunSession would (a header naming `gpu`, then one row per backend)."""
    from attnbench.results import ResultWriter
    from fixtures_results import header

    def make(device: str, rows_path: str, max_time_ms: float = 100.0) -> object:
        w = ResultWriter(Path(rows_path)).__enter__()
        head = header()
        prov = {**head.provenance, "gpu": gpu}
        w.write(head.model_copy(update={"provenance": prov, "device": {"name": gpu, "sm": 90}}))

        def timer(s: object, names: list[str]) -> dict[str, float | None]:
            calls.append((s.case_id, names))  # type: ignore[attr-defined]
            out: dict[str, float | None] = {}
            for i, n in enumerate(names):
                r = row(s, "flash-attn:fa3", scale=1.0 + 0.2 * i)  # type: ignore[arg-type]
                r = r.model_copy(update={"backend": n})
                w.write(r)
                out[n] = r.latency_us
            return out

        return timer, lambda: w.__exit__(None, None, None), gpu

    return make


def test_measure_cut_short_resumes_and_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not H200:
        pytest.skip("no committed H200 rows")
    import attnbench.replay.validate as validate

    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(validate, "gpu_timer", _fake_gpu(calls))
    out = tmp_path / "deploy.jsonl"
    args = ["recommend", *map(str, H200), "--model", "llama-3.1-70b", "--tp", "8"]
    args += ["--engine", "vllm", "--trace", "azure-conv", "--measure", "--per-bucket", "1"]
    args += ["--out", str(out)]
    cut = runner.invoke(app, [*args, "--budget-s", "1e-9"], env={"COLUMNS": "80"})
    assert "rerun with --resume" in cut.output
    assert not calls
    again = runner.invoke(app, args)
    assert again.exit_code == 2
    assert "--resume" in again.output
    done = runner.invoke(app, [*args, "--resume", "-v"], env={"COLUMNS": "80"})
    assert done.exit_code == 0, done.output
    _fits(done.output)
    assert calls
    vllm = ["vllm:flash-attn", "vllm:flashinfer", "vllm:triton-attn"]
    assert all(names == vllm for _, names in calls)
    assert "vllm serve MODEL --tensor-parallel-size 8" in done.output
    # the heavy buckets are now priced by their own batches
    assert "not measured here" not in done.output
    n = len(calls)
    rerun = runner.invoke(app, [*args, "--resume"], env={"COLUMNS": "80"})
    assert rerun.exit_code == 0, rerun.output
    assert len(calls) == n  # nothing measured twice
    # the findings' answer table reads the traffic kept beside the rows, as `recommend` does
    from attnbench.analysis.frame import ok_rows
    from attnbench.deploy.table import answer_table
    from attnbench.deploy.traffic import committed_traffic

    measured = ok_rows(load([out]).frame)
    ok = ok_rows(load([*H200, out]).frame)
    table = answer_table(ok, measured, [("llama-3.1-70b", 8)], committed_traffic([out]))
    (mine,) = [r for r in table if r[1] == "vllm" and r[2] == "azure-conv" and r[3] == "bf16"]
    assert mine[4] == "H200"
    assert mine[5].startswith("`--attention-backend")
    # the share of decode steps in buckets under 5% is the one `recommend` prices elsewhere
    import re

    said = re.search(r"(\d+)% of the\s+traffic's\s+decode", done.output)
    assert said is not None, done.output
    assert f"; {said.group(1)}% extrapolated" in mine[8]


def test_measure_without_a_gpu_is_an_error_that_measures_nothing(tmp_path: Path) -> None:
    import torch

    if not H200 or torch.cuda.is_available():
        pytest.skip("needs the committed rows and no CUDA GPU")
    out = tmp_path / "deploy.jsonl"
    args = ["recommend", *map(str, H200), "--model", "llama-3.1-8b", "--engine", "sglang"]
    args += ["--trace", "azure-conv", "--measure", "--out", str(out)]
    res = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert res.exit_code == 3, res.output
    assert "no CUDA GPU here" in res.output
    assert "nothing measured" in res.output
    assert "Traceback" not in res.output
    assert not out.exists()


def test_several_traces_are_timed_in_one_session_and_answered_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not H200:
        pytest.skip("no committed H200 rows")
    import attnbench.replay.validate as validate

    calls: list[tuple[str, list[str]]] = []
    sessions: list[str] = []
    fake = _fake_gpu(calls)

    def one_session(device: str, rows_path: str, max_time_ms: float = 100.0) -> object:
        sessions.append(rows_path)
        return fake(device, rows_path, max_time_ms)  # type: ignore[operator]

    monkeypatch.setattr(validate, "gpu_timer", one_session)
    out = tmp_path / "deploy.jsonl"
    args = ["recommend", *map(str, H200), "--model", "llama-3.1-8b", "--engine", "sglang"]
    args += ["--trace", "azure-conv", "--trace", "azure-code", "--trace", "azure-conv"]
    args += ["--measure", "--per-bucket", "1", "--out", str(out)]
    res = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    _fits(res.output)
    assert len(sessions) == 1  # one worker start and one set of ceilings for both traces
    assert len(calls) == len({c for c, _ in calls})  # no batch timed twice
    assert res.output.count("decision:") == 2  # the repeated trace answers once
    assert "trace azure-code:" in res.output
    assert res.output.index("azure-conv") < res.output.index("trace azure-code:")


def test_several_traces_without_measure_are_refused() -> None:
    args = ["recommend", "--model", "llama-3.1-8b", "--trace", "azure-conv"]
    res = runner.invoke(app, [*args, "--trace", "azure-code"])
    assert res.exit_code == 2
    assert "--trace given 2 traces" in res.output


@pytest.mark.parametrize(
    ("trace", "lengths"),
    [(None, "mixed"), ("azure-conv", "trace:azure-conv"), ("agents:450", "mixed")],
)
def test_the_library_calls_measuring_command_is_one_run_accepts(
    trace: str | None, lengths: str
) -> None:
    import shlex

    from attnbench.workload.lengths import parse_lengths

    shape = deploy.model_shape("llama-3.1-70b", 8)
    argv = shlex.split(deploy.measure_command(shape, "none", trace, "fp8_e4m3"))  # shell-safe
    assert argv[:2] == ["attnbench", "run"]
    given = argv[argv.index("-l") + 1]
    assert given == lengths
    assert parse_lengths(given, 4, 0)  # `run --lengths` reads it
    assert argv[argv.index("--kv-dtype") + 1] == "fp8_e4m3"


def test_measuring_on_another_gpu_answers_from_that_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--measure` on an H100 beside committed H200 rows: the answer is the H100's, priced on
    the trace's own batches, and names the other GPU; asked later without --measure, the
    trace's measured GPU answers again, and `--gpu` picks the other one."""
    if not H200:
        pytest.skip("no committed H200 rows")
    import attnbench.replay.validate as validate

    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(validate, "gpu_timer", _fake_gpu(calls, "NVIDIA H100 80GB HBM3"))
    out = tmp_path / "deploy.jsonl"
    ask = ["recommend", *map(str, H200), "--model", "llama-3.1-70b", "--tp", "8"]
    ask += ["--engine", "vllm", "--trace", "azure-conv"]
    res = runner.invoke(app, [*ask, "--measure", "--per-bucket", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert calls
    for output in (res.output, runner.invoke(app, [*ask, str(out)]).output):
        assert "on NVIDIA H100 80GB HBM3, vLLM" in output
        assert "decode on its own batches (--measure)" in output
        assert "other GPUs: NVIDIA H200" in output
        assert "not measured here" not in output
    h200 = runner.invoke(app, [*ask, str(out), "--gpu", "h200"])
    assert "on NVIDIA H200, vLLM" in h200.output
    assert "decode on its own batches" not in h200.output


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("B200", "--gpu='B200': no rows of such a GPU; the results hold rows of: NVIDIA H200"),
        ("", "--gpu='': no rows of such a GPU"),
    ],
)
def test_gpu_that_names_no_rows_is_refused(value: str, message: str) -> None:
    if not H200:
        pytest.skip("no committed H200 rows")
    args = ["recommend", *map(str, H200), "--model", "llama-3.1-8b", "--gpu", value]
    res = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 2
    assert message in res.output


def test_prefill_is_priced_on_the_traffics_prompt_lengths() -> None:
    """With `--trace`, prefill pairs only the cases at that traffic's prompt lengths when the
    rows have them (`trace(NAME)`, `mixed(...)` for agents), else every prefill case."""
    rows = pd.DataFrame(
        {
            "kind": ["prefill", "prefill", "prefill", "decode"],
            "lengths": ["trace(azure-conv)", "trace(azure-code)", "mixed(256..65536)", "x"],
        }
    )
    conv, on = deploy.prefill_on_traffic(rows, "azure-conv")
    assert on
    assert list(conv["lengths"]) == ["trace(azure-conv)", "x"]
    agents, on = deploy.prefill_on_traffic(rows, "agents:450")
    assert on
    assert list(agents["lengths"]) == ["mixed(256..65536)", "x"]
    other, on = deploy.prefill_on_traffic(rows, "mooncake-conv")  # not measured: all of them
    assert not on
    assert len(other) == 4
    none, on = deploy.prefill_on_traffic(rows, None)
    assert not on
    assert none is rows


def test_prefill_run_is_named_at_the_engines_page_size() -> None:
    """SGLang's default page size is 1: prefill rows at the run's default 16 would be another
    option than the default's, and its prefill would stay unpriced (the H100, session 16)."""
    shape = deploy.model_shape("llama-3.1-70b", 8)
    ans = deploy.Answer(shape, "sglang", "NVIDIA H100 80GB HBM3", "fp8_e4m3", "")
    assert deploy.prefill_command(ans, "mooncake-conv") == (
        "attnbench run --model llama-3.1-70b --tp 8 --kind prefill --lengths "
        "trace:mooncake-conv --kv-dtype fp8_e4m3 --page-size 1 --backend sglang "
        "--out runs/deploy-prefill.jsonl"
    )


def test_missing_prefill_rows_name_a_prefill_run(tmp_path: Path) -> None:
    """`--measure` times decode only: the prefill gap names the run that times the engine's
    configurations on prefill, a command `run` accepts."""
    path = write_results(tmp_path / "e.jsonl", _engine_rows(0.7))  # type: ignore[arg-type]
    shape = deploy.model_shape("llama-3.1-8b", 1)
    ans = deploy.answer(load([path]).frame, shape, "vllm", trace="azure-conv")
    (gap,) = [g for g in ans.gaps if g.text == "no prefill rows of the default"]
    assert gap.command == (
        "attnbench run --model llama-3.1-8b --tp 1 --kind prefill --lengths trace:azure-conv "
        "--page-size 16 --backend vllm --out runs/deploy-prefill.jsonl"
    )
    from attnbench.backends import select_backends
    from attnbench.workload.lengths import parse_lengths

    argv = gap.command.split()
    assert parse_lengths(argv[argv.index("--lengths") + 1], 4, 0)
    chosen = {b.name for b in select_backends([argv[argv.index("--backend") + 1]])}
    assert chosen >= {"vllm:flash-attn", "vllm:flashinfer"}  # MLA-only ones refuse GQA cases


def test_without_a_trace_the_h100s_traffics_are_pooled() -> None:
    """Issue 44: without --trace the answer pools the traffics `--measure` timed on the H100;
    the decision is the pooled verdict with each traffic's own answer beside it."""
    h100 = sorted(RESULTS.glob("h100-deploy*.jsonl.gz"))
    if not h100:
        pytest.skip("no committed H100 deploy rows")
    args = ["recommend", *map(str, h100), "--model", "llama-3.1-70b", "--tp", "8"]
    res = runner.invoke(app, [*args, "--engine", "sglang"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    _fits(res.output)
    text = " ".join(res.output.split())
    assert "decision: pooled over 4 traffics:" in text
    for trace in ("agents:450", "azure-code", "azure-conv", "mooncake-conv"):
        assert f"{trace}: " in text
    assert "--engine sglang \\ --trace agents:450" in text
    decision = text[text.index("decision:") : text.index("python -m sglang")]
    assert "instead of the default" not in decision or "every traffic calls it" in decision
