"""`recommend --model M --engine E` without `--trace` (`deploy.pooled`): each measured traffic
answered on its own, and a pooled verdict that never calls a winner no single traffic calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.analysis.frame import load
from attnbench.deploy import decide
from attnbench.deploy.labels import decode_label
from attnbench.deploy.options import Option, OptionKey
from attnbench.deploy.pooled import (
    TrafficAnswer,
    answer_text,
    measured_traffics,
    pooled_answer,
    pooled_verdict,
)
from attnbench.deploy.stats import PairedEstimate
from fixtures_results import GPU, header, row, spec, write_results

SHAPE = decide.model_shape("llama-3.1-8b", 1)
FA = "vllm:flash-attn"
FI = "vllm:flashinfer"
H100 = "NVIDIA H100 80GB HBM3"


def _opt(variant: str, ratio: float, lo: float, hi: float, kv: str = "auto") -> Option:
    o = Option(OptionKey(variant, kv, 16), [])
    o.decode = PairedEstimate(ratio, lo, hi, 10)
    return o


def _ans(choice: str, fi: tuple[float, float, float], gpu: str = GPU) -> decide.Answer:
    """An answer whose default is FLASH_ATTN and whose FLASHINFER is at `fi`."""
    d, f = _opt(FA, 1.0, 1.0, 1.0), _opt(FI, *fi)
    ans = decide.Answer(SHAPE, "vllm", gpu, "auto", "", default=d, options=[d, f])
    ans.choice = d if choice == FA else f
    ans.tied = [f] if choice == FA and fi[1] <= 1.0 <= fi[2] else []
    return ans


def test_a_pool_winner_no_traffic_calls_is_overruled() -> None:
    """The issue's case: the pool calls FLASHINFER 0.97x [0.95-0.99]; each traffic alone
    keeps FLASH_ATTN. The verdict keeps the default and says the pool's winner has no
    traffic behind it."""
    pool = _ans(FI, (0.97, 0.95, 0.99))
    per = [TrafficAnswer(t, _ans(FA, (0.98, 0.95, 1.01))) for t in ("azure-code", "azure-conv")]
    p = pooled_verdict(pool, per)
    assert p.choice is not None
    assert p.choice.key.variant == FA
    assert p.keeps_default
    assert p.overruled is pool.choice
    text = p.verdict_text()
    assert text.startswith("pooled over 2 traffics: keep the default, FLASH_ATTN (page 16)")
    assert "(every traffic keeps it)" in text
    assert "would call FLASHINFER (page 16) 0.97x [0.95-0.99], which no traffic alone calls" in (
        text
    )
    assert p.traffic_texts()[0] == (
        "azure-code: keep the default, FLASH_ATTN (page 16) (tied: FLASHINFER (page 16) "
        "0.98x [0.95-1.01])"
    )


def test_traffics_that_disagree_keep_the_default() -> None:
    pool = _ans(FI, (0.9, 0.85, 0.95))
    per = [
        TrafficAnswer("azure-code", _ans(FI, (0.9, 0.82, 0.99))),
        TrafficAnswer("mooncake-conv", _ans(FA, (1.0, 0.98, 1.02))),
    ]
    p = pooled_verdict(pool, per)
    assert p.choice is not None
    assert p.choice.key.variant == FA
    assert not p.agree
    assert p.overruled is pool.choice
    text = p.verdict_text()
    assert "the traffics disagree: ask one with --trace" in text
    assert "only azure-code calls it" in text
    assert p.traffic_texts()[0] == "azure-code: FLASHINFER (page 16) 0.90x [0.82-0.99] the default"


def test_a_winner_every_traffic_calls_is_the_verdict() -> None:
    """Even where the pool alone keeps the default: every traffic calls it."""
    pool = _ans(FA, (0.99, 0.97, 1.01))
    per = [TrafficAnswer(t, _ans(FI, (0.9, 0.85, 0.95))) for t in ("a", "b", "c")]
    p = pooled_verdict(pool, per)
    assert p.choice is not None
    assert p.choice.key.variant == FI
    assert p.choice in pool.options  # the pool's option (its pooled estimate), same key
    assert p.overruled is None  # the pool kept the default: no winner of its own
    assert p.verdict_text() == (
        "pooled over 3 traffics: FLASHINFER (page 16) instead of the default "
        "(every traffic calls it)"
    )


def test_a_traffic_without_an_answer_says_why_and_calls_nothing() -> None:
    empty = decide.Answer(SHAPE, "vllm", GPU, "auto", "")
    empty.gaps.append(decide.Gap("no decode rows of the default", ""))
    assert answer_text(empty) == "no answer (no decode rows of the default)"
    pool = _ans(FI, (0.9, 0.85, 0.95))
    p = pooled_verdict(
        pool, [TrafficAnswer("a", empty), TrafficAnswer("b", _ans(FI, (0.9, 0.8, 0.95)))]
    )
    assert p.choice is not None
    assert p.choice.key.variant == FI  # every traffic that answers calls it
    assert not p.agree
    assert p.overruled is None


def test_an_fp8_call_names_its_kv_cache() -> None:
    d = _opt(FA, 1.0, 1.0, 1.0)
    f8 = _opt(FA, 0.65, 0.64, 0.66, kv="fp8_e4m3")
    ans = decide.Answer(SHAPE, "vllm", GPU, "fp8_e4m3", "", default=d, choice=f8, options=[f8])
    assert answer_text(ans) == "FLASH_ATTN (page 16, fp8_e4m3 KV) 0.65x [0.64-0.66] the default"


# --- from rows ------------------------------------------------------------------------------


def _rows(gpu_run: str, traces: dict[str, float]) -> list[object]:
    """Decode rows `--measure` labelled for each trace (two cases each: no interval alone),
    FLASHINFER at `traces[trace]` x FLASH_ATTN."""
    out = []
    for i, (trace, fi) in enumerate(traces.items()):
        for j, ctx in enumerate((1024, 4096)):
            label = decode_label(trace, 8, 1.0, GPU)
            s = spec("decode", [ctx + 64 * i] * 8, lengths=f"ctx{ctx}", label=label)
            for seed, (backend, scale) in enumerate(((FA, 1.0), (FI, fi))):
                r = row(s, "flash-attn:fa3", scale=scale, seed=10 * i + j + seed, run_id=gpu_run)
                out.append(r.model_copy(update={"backend": backend}))
    return out


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    """An H200 whose two traffics have two cases each (FLASHINFER 0.7x on both: no traffic
    alone can tell), and an H100 with rows but no measured traffic."""
    h200 = write_results(
        tmp_path / "h200.jsonl",
        _rows("fake-h200", {"azure-code": 0.7, "azure-conv": 0.7}),  # type: ignore[arg-type]
    )
    hdr = header("fake-h100")
    hdr = hdr.model_copy(
        update={"device": {"name": H100, "sm": 90}, "provenance": {**hdr.provenance, "gpu": H100}}
    )
    plain = [
        row(spec("decode", [c] * 32, lengths=f"ctx{c}"), "flash-attn:fa3", run_id="fake-h100")
        for c in (1024, 4096, 16384)
    ]
    h100 = write_results(
        tmp_path / "h100.jsonl", [r.model_copy(update={"backend": FA}) for r in plain], hdr
    )
    return [h200, h100]


def test_measured_traffics_are_per_gpu(files: list[Path]) -> None:
    frame = load(files).frame
    assert measured_traffics(frame, SHAPE, "vllm") == {GPU: ("azure-code", "azure-conv")}
    assert measured_traffics(frame, SHAPE, "sglang") == {}


def test_the_rows_pool_a_winner_no_traffic_calls_and_the_verdict_keeps_the_default(
    files: list[Path],
) -> None:
    frame = load(files).frame
    pool = decide.answer(frame, SHAPE, "vllm", gpu=GPU)
    assert pool.choice is not None
    assert pool.choice.key.variant == FI  # four cases pooled: a clear winner
    p = pooled_answer(files, frame, SHAPE, "vllm")
    assert p is not None
    assert p.gpu == GPU
    assert [t.trace for t in p.traffics] == ["azure-code", "azure-conv"]
    assert all(t.answer.keeps_default for t in p.traffics)  # two cases each: tied
    assert all(t.answer.gpu == GPU for t in p.traffics)
    assert p.choice is not None
    assert p.choice.key.variant == FA
    assert p.overruled is not None
    assert p.overruled.key.variant == FI
    assert "which no traffic alone calls" in p.verdict_text()


def test_no_measured_traffic_leaves_the_pool_as_it_is(files: list[Path]) -> None:
    frame = load(files).frame
    assert pooled_answer(files, frame, SHAPE, "vllm", gpu=H100) is None
    assert pooled_answer(files, frame, SHAPE, "sglang") is None
    assert pooled_answer(files, frame, SHAPE, "none") is None
