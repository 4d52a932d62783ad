"""`attnbench replay`'s answer: `recommend --model M --tp T --engine none --trace X` on the
replay's rows, through the same decider and options (`deploy.decide.answer`), weighted by the
same running batch (`deploy.traffic.replay_trace` on the trace's first `--limit` requests).
It names the candidates the replay runs (the deployable options' variants at the replay's KV
dtype and page size: never `+tuned` nor a contiguous-copy baseline), its hybrid (the fastest
prefill call beside the decode choice, when they differ) and the rank of every option from the
paired statistics: rank 1 is the fastest decode and every option whose 95% CI overlaps it,
then the same among the rest, so a tie is a tie and a 60x difference never is."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnbench.deploy.decide import Answer, Option
    from attnbench.deploy.stats import PairedEstimate
    from attnbench.replay.records import PairedRank, ReplayAnswer


@dataclass(frozen=True)
class Ask:
    """The deployment and traffic the replay asks about."""

    model: str
    tp: int
    dtype: str
    kv_dtype: str
    page_size: int
    trace: str
    limit: int | None
    gpu: str | None


@dataclass(frozen=True)
class Decided:
    answer: Answer
    record: ReplayAnswer
    variants: tuple[str, ...]
    """The deployable variants the replay runs (options at its KV dtype and page size)."""
    hybrid: tuple[str, str] | None


def kv_of(ask: Ask) -> str:
    """The answer's KV key: `auto` for the model's 16-bit dtype, else the fp8 format."""
    fp8 = ask.kv_dtype.startswith("fp8") and ask.kv_dtype != ask.dtype
    return ask.kv_dtype if fp8 else "auto"


def recommend_command(ask: Ask) -> str:
    kv = "" if kv_of(ask) == "auto" else f" --kv-dtype {ask.kv_dtype}"
    return (
        f"attnbench recommend --model {ask.model} --tp {ask.tp} --engine none "
        f"--trace {ask.trace}{kv}"
    )


def decide(paths: Sequence[Path], ask: Ask) -> Decided | str:
    """The answer, or one line saying why the rows give none (the replay then runs every
    deployable variant it has a cost model for and builds no hybrid)."""
    from attnbench.analysis.frame import NoResultsError, load
    from attnbench.deploy.decide import answer, model_shape
    from attnbench.deploy.traffic import replay_trace
    from attnbench.results import ResultsFileError, is_results_path

    rows = [p for p in paths if is_results_path(p)]
    try:
        shape = model_shape(ask.model, ask.tp)
        frame = load(rows).frame
        run, _, _ = replay_trace(
            rows, ask.gpu, "vllm", ask.trace, ask.limit or 10**9, model=(ask.model, ask.tp)
        )
    except (ValueError, NoResultsError, FileNotFoundError, ResultsFileError) as exc:
        return f"no `recommend --engine none` answer: {exc}"  # ReplayError is a ValueError
    ans = answer(frame, shape, "none", kv_of(ask), run.histogram, run.source(), ask.trace, ask.gpu)
    if ans.choice is None:
        gap = ans.gaps[0].text if ans.gaps else "no option passed the accuracy gate"
        return f"no `recommend --engine none` answer: {gap}"
    variants = tuple(
        dict.fromkeys(o.key.variant for o in ans.options if o.key.page_size == ask.page_size)
    )
    hybrid = _hybrid(ans)
    return Decided(ans, record(ans, ask, hybrid), variants, hybrid)


def _hybrid(ans: Answer) -> tuple[str, str] | None:
    """(prefill, decode) when the fastest prefill call is another variant than the choice."""
    pre, dec = ans.prefill_choice, ans.choice
    if pre is None or dec is None or pre.key.variant == dec.key.variant:
        return None
    return pre.key.variant, dec.key.variant


def ranks(options: Sequence[Option]) -> dict[str, int]:
    """Per option (`key.text`), its rank from the paired decode estimates: the fastest left
    and every option whose CI overlaps it share a rank, then the same among the rest."""
    left = sorted(
        (o for o in options if o.decode is not None),
        key=lambda o: (o.decode.ratio, o.key.text),  # type: ignore[union-attr]
    )
    out: dict[str, int] = {}
    rank = 0
    while left:
        rank += 1
        best = left[0].decode
        assert best is not None
        group = [o for o in left if o.decode is not None and o.decode.overlaps(best)]
        for o in group:
            out[o.key.text] = rank
        left = [o for o in left if o not in group]
    return out


def _est(e: PairedEstimate | None) -> tuple[float, float, float, int]:
    if e is None:
        return math.nan, math.nan, math.nan, 0
    return e.ratio, e.ci_low, e.ci_high, e.cases


def record(ans: Answer, ask: Ask, hybrid: tuple[str, str] | None) -> ReplayAnswer:
    from attnbench.replay.records import PairedRank, ReplayAnswer

    order = ranks(ans.options)
    out: list[PairedRank] = []
    for o in ans.options:
        d, p = _est(o.decode), _est(o.prefill)
        out.append(
            PairedRank(
                option=o.key.text,
                variant=o.key.variant,
                rank=order.get(o.key.text),
                decode_ratio=d[0],
                decode_ci_low=d[1],
                decode_ci_high=d[2],
                decode_cases=d[3],
                prefill_ratio=p[0],
                prefill_ci_low=p[1],
                prefill_ci_high=p[2],
                prefill_cases=p[3],
            )
        )
    out.sort(key=lambda r: (r.rank or 10**6, r.decode_ratio, r.option))
    return ReplayAnswer(
        command=recommend_command(ask),
        weighting=ans.weighting,
        default=ans.default.key.variant if ans.default else "",
        choice=ans.choice.key.variant if ans.choice else None,
        tied=[o.key.variant for o in ans.tied],
        hybrid=hybrid,
        prefill=ans.prefill_choice.key.variant if ans.prefill_choice else None,
        ranks=out,
        not_deployable=list(ans.not_deployable),
    )
