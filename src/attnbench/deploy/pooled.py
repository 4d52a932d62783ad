"""`recommend --model M --engine E` without `--trace`: one verdict over the traffics the rows
measured, never a winner that no single traffic calls.

Without a trace the answer pools every decode row of the GPU, each batch size weighted
equally, and prefill of every length: the batches `recommend --measure` drew from several
traffics sit in one pool, and the pool can call a winner that none of them calls on its own
(llama-3.1-70b tp8 on vLLM, H100: FLASHINFER at 0.97x on the pool of four traffics, while
each traffic keeps FLASH_ATTN). So where the rows hold traffics measured on the answer's GPU
(decode rows labelled by `recommend --measure`, `deploy.labels`), each traffic is answered on
its own (`ask.answer_for`, its own weights) and the verdict is:

- the call every traffic makes, where all that answer make the same one;
- else the default (the traffics disagree: ask one with `--trace`).

The pool's own winner, where it differs from the verdict, is kept as `overruled`. Pure: the
rows (and the paths `answer_for` reads a kept traffic from) in, a `Pooled` out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from attnbench.analysis.frame import ok_rows
from attnbench.deploy.ask import DeployAsk, answer_for
from attnbench.deploy.decide import Answer, ModelShape, Target, shape_rows
from attnbench.deploy.labels import parse_decode
from attnbench.deploy.options import Option, OptionKey


@dataclass(frozen=True)
class TrafficAnswer:
    """One traffic's own answer (its decode on its own batches, its weights)."""

    trace: str
    answer: Answer

    @property
    def call(self) -> OptionKey | None:
        """The option this traffic's answer chooses (None: no answer)."""
        return self.answer.choice.key if self.answer.choice is not None else None


@dataclass(frozen=True)
class Pooled:
    """The verdict over the traffics: `choice` (a call every answering traffic makes, else
    the default), the pool's answer (`pool`: every row, equal weight per batch size), each
    traffic's answer, and the pool's winner where the verdict overrules it."""

    pool: Answer
    traffics: tuple[TrafficAnswer, ...]
    choice: Option | None
    overruled: Option | None = None

    @property
    def gpu(self) -> str:
        return self.pool.gpu

    @property
    def agree(self) -> bool:
        """Every traffic answers, and all make the same call."""
        calls = {t.call for t in self.traffics}
        return len(calls) == 1 and None not in calls

    @property
    def keeps_default(self) -> bool:
        d = self.pool.default
        return self.choice is not None and d is not None and self.choice.key == d.key

    def callers(self, key: OptionKey) -> list[str]:
        """The traffics whose own answer chooses `key`."""
        return [t.trace for t in self.traffics if t.call == key]

    def verdict_text(self) -> str:
        """`pooled over 4 traffics: keep the default, FLASH_ATTN (every traffic keeps it);
        the pool of their rows would call FLASHINFER 0.97x [0.95-0.99], which no traffic
        alone calls`."""
        n = len(self.traffics)
        head = f"pooled over {n} traffic{'s' * (n != 1)}"
        if self.choice is None:
            return f"{head}: no answer from these rows"
        name = _at(self.choice, self.pool.default)
        if self.agree:
            every = "every traffic keeps it" if self.keeps_default else "every traffic calls it"
            text = f"{head}: " + (
                f"keep the default, {name} ({every})"
                if self.keeps_default
                else f"{name} instead of the default ({every})"
            )
        else:
            text = f"{head}: keep the default, {name} (the traffics disagree: ask one with --trace)"
        w = self.overruled
        if w is not None:
            by = self.callers(w.key)
            who = f"only {', '.join(by)} calls it" if by else "which no traffic alone calls"
            est = f" {w.decode.short()}" if w.decode is not None else ""
            text += f"; the pool of their rows would call {_at(w, self.pool.default)}{est}, {who}"
        return text

    def traffic_texts(self) -> list[str]:
        """One line per traffic: `azure-conv: keep the default, FLASH_ATTN (tied: ...)`."""
        return [f"{t.trace}: {answer_text(t.answer)}" for t in self.traffics]


def _at(o: Option, default: Option | None = None) -> str:
    """`FLASH_ATTN (page 16)`; with the KV cache where it is not `default`'s."""
    kv = default is not None and o.key.kv != default.key.kv
    cache = (", 16-bit KV" if o.key.kv == "auto" else f", {o.key.kv} KV") if kv else ""
    return f"{o.name} (page {o.key.page_size}{cache})"


def answer_text(ans: Answer) -> str:
    """A traffic's answer in a few words: its choice against the default, with the interval."""
    c, d = ans.choice, ans.default
    if c is None or d is None:
        why = ans.gaps[0].text if ans.gaps else "no option passed the accuracy gate"
        return f"no answer ({why})"
    if ans.keeps_default:
        tied = [o for o in ans.tied if o.key != c.key and o.decode is not None]
        near = f" (tied: {_at(tied[0])} {tied[0].decode.short()})" if tied else ""  # type: ignore[union-attr]
        return f"keep the default, {_at(c)}{near}"
    est = f" {c.decode.short()} the default" if c.decode is not None else ""
    return f"{_at(c, d)}{est}"


def measured_traffics(
    frame: pd.DataFrame, shape: ModelShape, engine: str
) -> dict[str, tuple[str, ...]]:
    """Per GPU, the traffics whose batches `recommend --measure` timed for `engine` at
    `shape` there (the traces its decode rows' labels name), in name order."""
    ok = shape_rows(ok_rows(frame), shape)
    if ok.empty or "label" not in ok:
        return {}
    ok = ok[(ok["kind"] == "decode").to_numpy() & (ok["library"].astype(str) == engine).to_numpy()]
    out: dict[str, set[str]] = {}
    for gpu, label in zip(ok["gpu"].astype(str), ok["label"].astype(str), strict=True):
        got = parse_decode(label)
        if got is not None:
            out.setdefault(gpu, set()).add(got.trace)
    return {g: tuple(sorted(t)) for g, t in sorted(out.items())}


def pooled_verdict(pool: Answer, traffics: Sequence[TrafficAnswer]) -> Pooled:
    """The verdict over `traffics` (module docstring): a call all answering traffics make,
    else the pool's default; the pool's own winner where it differs (`overruled`)."""
    calls = [t.call for t in traffics if t.call is not None]
    options = [*pool.options, *([pool.default] if pool.default else [])]
    choice: Option | None = pool.default
    if calls and all(c == calls[0] for c in calls):
        own = next(t.answer.choice for t in traffics if t.call == calls[0])
        choice = next((o for o in options if o.key == calls[0]), own)
    win = pool.choice
    differs = win is not None and (choice is None or win.key != choice.key)
    overruled = win if differs and not pool.keeps_default else None
    return Pooled(pool, tuple(traffics), choice, overruled)


def pooled_answer(
    paths: Sequence[Path],
    frame: pd.DataFrame,
    shape: ModelShape,
    engine: Target,
    kv: str = "auto",
    gpu: str | None = None,
    pool: Answer | None = None,
) -> Pooled | None:
    """The verdict over the traffics measured on one GPU (`gpu`, else the one that measured
    the most traffics, then rows), or None where no traffic was measured there for
    `engine`: then the pool's answer stands as it is. `pool`: the answer without a trace on
    that GPU, where the caller has it."""
    if engine == "none":
        return None
    by_gpu = measured_traffics(frame, shape, engine)
    if gpu is None and by_gpu:
        gpu = max(by_gpu, key=lambda g: (len(by_gpu[g]), _rows(frame, g), g))
    traces = by_gpu.get(gpu or "", ())
    if not traces:
        return None
    if pool is None or pool.gpu != gpu:
        pool = answer_for(paths, frame, DeployAsk(shape, engine, kv, None, gpu))
    per = [
        TrafficAnswer(t, answer_for(paths, frame, DeployAsk(shape, engine, kv, t, gpu)))
        for t in traces
    ]
    return pooled_verdict(pool, per)


def _rows(frame: pd.DataFrame, gpu: str) -> int:
    return int((frame["gpu"].astype(str) == gpu).sum()) if "gpu" in frame else 0
