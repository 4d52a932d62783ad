"""Text of `recommend`: the index of model shapes and one deployment's answer, as plain lines
of at most 80 columns. Prose wraps between words; a command wraps only between flags (a line
ends in ` \\`, the next is indented), never inside one. Pure: an answer in, lines out."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import Any

from attnbench.analysis.frame import fmt_us
from attnbench.deploy.decide import Answer, IndexLine
from attnbench.deploy.fp8 import fp8_evidence
from attnbench.deploy.options import Option
from attnbench.deploy.pooled import Pooled
from attnbench.deploy.stats import ESTIMAND, METHOD, PairedEstimate
from attnbench.engines.paths import Release

WIDTH = 80
ENGINE_NAME = {"vllm": "vLLM", "sglang": "SGLang", "none": "no engine (library calls)"}


def wrap(text: str, first: str = "", rest: str | None = None) -> list[str]:
    """`text` in lines of <= 80 columns, after `first` (the next lines: `rest`, default
    spaces as wide as `first`)."""
    rest = " " * len(first) if rest is None else rest
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [first.rstrip()]


def command_lines(units: Sequence[str], indent: str = "  ") -> list[str]:
    """Shell command units (`vllm serve MODEL`, `--block-size 16`...) packed into lines, each
    continued with ` \\`; library calls (no flag units) one per line."""
    if not units or not any(u.startswith("--") for u in units[1:]):
        return [indent + u for u in units]
    lines, cur = [], indent + units[0]
    for u in units[1:]:
        if len(cur) + 1 + len(u) + 2 > WIDTH:
            lines.append(cur + " \\")
            cur = indent + "    " + u
        else:
            cur += " " + u
    return [*lines, cur]


def index_lines(lines: Sequence[IndexLine], unknown: int, gpu: str = "") -> list[str]:
    out = wrap(f"Deployments measured{' on ' + gpu if gpu else ''}: one line per model shape.")
    out.append("Ask about one: attnbench recommend --model M --tp N --engine vllm|sglang")
    out.append("")
    for x in lines:
        kinds = "/".join(x.kinds)
        kv = ", ".join(x.kv_dtypes)
        eng = f", {x.engine_rows} engine rows" if x.engine_rows else ""
        out += wrap(
            f"{x.shape.label:<20} {x.shape.heads:<12} {x.cases} cases ({kinds}; KV {kv}{eng})",
            "",
            " " * 21,
        )
        out.append(f"{'':<21}attnbench recommend --model {x.shape.model} --tp {x.shape.tp}")
    if unknown:
        out += wrap(
            f"({unknown} further head shapes match no model preset: the GQA sweep, "
            "in `attnbench show`)"
        )
    return out


def _est(e: PairedEstimate | None, what: str = "the default") -> str:
    """`0.84x the default (95% CI 0.80-0.88, 12 cases): faster`; `slower` where the interval
    lies above 1, whatever was asked."""
    if e is None:
        return f"no case shared with {what}"
    if not e.has_interval:
        return f"{e.ratio:.2f}x {what} ({e.interval()})"
    verdict = {"faster": ": faster", "slower": ": SLOWER"}.get(e.verdict, "")
    return f"{e.ratio:.2f}x {what} (95% CI {e.interval()}, {e.cases} cases){verdict}"


def answer_lines(ans: Answer, verbose: bool = False, pooled: Pooled | None = None) -> list[str]:
    """The answer; `pooled` (no --trace, traffics measured on this GPU): the verdict over
    the traffics, each traffic's own answer beside it, in place of the pool's decision."""
    out = _head(ans)
    if ans.choice is None or ans.default is None:
        out += ["", "No answer from these rows."]
        return out + gap_lines(ans)
    out += _decision(ans) if pooled is None else pooled_lines(pooled)
    out += _fp8_lines(ans)
    out += _basis(ans)
    out += gap_lines(ans)
    if ans.not_deployable:
        out.append("not deployable (measured, never chosen):")
        for n in ans.not_deployable:
            out += wrap(n.replace(": not deployable:", ":"), "  ", "    ")
    if verbose:
        out += evidence_lines(ans)
    else:
        out.append("(--verbose: every option and bucket)")
    return out


def pooled_lines(p: Pooled) -> list[str]:
    """`decision: pooled over N traffics: ...`, its command, then one line per traffic and
    the command that asks about one."""
    out = ["", *wrap(p.verdict_text(), "decision: ", " " * len("decision: "))]
    out += command_lines(p.choice.command) if p.choice is not None else []
    for text in p.traffic_texts():
        out += wrap(text, "  ", "    ")
    s, first = p.pool.shape, p.traffics[0].trace
    ask = f"attnbench recommend --model {s.model} --tp {s.tp} --engine {p.pool.engine}"
    return [
        *out,
        "  one traffic's answer:",
        *command_lines(split_flags(f"{ask} --trace {first}"), "    "),
    ]


def pooled_json(p: Pooled) -> dict[str, Any]:
    def key(o: Option | None) -> str | None:
        return None if o is None else o.key.text

    return {
        "verdict": p.verdict_text(),
        "choice": key(p.choice),
        "keeps_default": p.keeps_default,
        "overruled": key(p.overruled),
        "traffics": [
            {
                "trace": t.trace,
                "choice": key(t.answer.choice),
                "keeps_default": t.answer.keeps_default,
                "decode_vs_default": None
                if t.answer.choice is None or t.answer.choice.decode is None
                else t.answer.choice.decode.__dict__,
                "weighting": t.answer.weighting,
            }
            for t in p.traffics
        ],
    }


def gap_lines(ans: Answer) -> list[str]:
    """`not covered: ...; measure with:` and the command, wrapped between flags; gaps that
    one command measures share it (printed once, after the last of them)."""
    out = []
    for i, g in enumerate(ans.gaps):
        last = i + 1 == len(ans.gaps) or ans.gaps[i + 1].command != g.command
        tail = ("; measure with:" if last else ";") if g.command else ""
        out += wrap(f"{g.text}{tail}", "not covered: ", "  ")
        out += command_lines(split_flags(g.command)) if last and g.command else []
    return out


def split_flags(command: str) -> list[str]:
    """`a b --x 1 --y` -> [`a b`, `--x 1`, `--y`]."""
    parts = command.split(" --")
    return [parts[0], *(f"--{p}" for p in parts[1:])]


def _head(ans: Answer) -> list[str]:
    kv = "16-bit KV" if ans.kv_dtype == "auto" else f"{ans.kv_dtype} KV"
    out = wrap(
        f"{ans.shape.label} ({ans.shape.heads}) on {ans.gpu}, {ENGINE_NAME[ans.engine]}, {kv}"
    )
    if ans.shape.also:
        out += wrap(f"same attention heads: {', '.join(ans.shape.also)}", "  ")
    out += wrap(f"traffic: {ans.weighting}", "  ")
    if ans.other_gpus:
        others = ", ".join(f"{g} ({n:,} rows)" for g, n in ans.other_gpus)
        out += wrap(f"other GPUs: {others}; --gpu NAME answers from one", "  ")
    return out


def _decision(ans: Answer) -> list[str]:
    c, d = ans.choice, ans.default
    assert c is not None
    assert d is not None
    base = "the stand-in" if ans.default_refused else "the default"
    if ans.default_refused and c.key == d.key:
        head = (
            f"decision: {_at(c)}, the fastest option measured here; the engine's default "
            "cannot run here (below)"
        )
    elif ans.default_refused:
        head = (
            f"decision: {_at(c)} over the stand-in {_at(d)}; the engine's default cannot run "
            "here (below)"
        )
    elif ans.keeps_default:
        why = "no option is faster beyond its 95% CI" if ans.tied else "the fastest measured"
        head = f"decision: keep the default, {c.name} ({why})"
    else:
        kv = c.key.kv != d.key.kv
        head = f"decision: {_at(c, kv)} instead of the default {_at(d, kv)}"
        if c.decode is not None and c.decode.verdict == "slower":
            head += " (the fastest at the asked KV dtype, yet SLOWER than the default)"
    out = ["", *wrap(head, "", " " * len("decision: "))]
    out += command_lines(c.command)
    us = ans.default_decode_us
    step = _per_step(ans)
    unit = "per layer" if step == "per layer and step" else step.replace("per step of", "over")
    t = f"; {fmt_us(us * c.decode.ratio)} {step}" if us and c.decode else ""
    same = c.key == d.key
    out += wrap((_itself(c.decode, base) if same else _est(c.decode, base)) + t, "decode   ")
    if ans.prefill_choice is not None and ans.prefill_choice is not c:
        p = ans.prefill_choice
        own = f"{p.name}: {_est(p.prefill)}{_pre_us(p, d, unit)} (a call of its own)"
        out += wrap(own, "prefill  ")
    else:
        pre = _itself(c.prefill, base) if same else _est(c.prefill, base)
        out += wrap(pre + _pre_us(c, d, unit), "prefill  ")
    if ans.tied:
        names = "; ".join(f"{o.key.text} {_short(o.decode)}" for o in ans.tied[:3])
        out += wrap(f"{names} (CIs overlap)", "tied     ")
    return out


def _per_step(ans: Answer) -> str:
    """The unit of a decode time: one layer's call per step, or for a model whose layers
    differ the model step (every layer of every kind, `deploy.options.model_step`)."""
    from attnbench.workload.models import get_model, layer_shapes

    kinds = layer_shapes(get_model(ans.shape.model), ans.shape.tp)
    if len(kinds) > 1:
        return f"per step of all {sum(k.num_layers for k in kinds)} layers"
    return "per layer and step"


def _itself(e: PairedEstimate | None, base: str = "the default") -> str:
    """The default (or the stand-in for a default that cannot run) against itself: its
    cases, no ratio."""
    if e is None:
        return f"no case of {base}"
    return f"{base}, {e.cases} case{'s' * (e.cases != 1)}"


def _at(o: Option, kv: bool = False) -> str:
    """`fa3 (page 1)`, or with `kv` its KV cache: `fa3 (page 1, fp8_e4m3 KV)`."""
    cache = (", 16-bit KV" if o.key.kv == "auto" else f", {o.key.kv} KV") if kv else ""
    return f"{o.name} (page {o.key.page_size}{cache})"


def _pre_us(o: Option, default: Option, unit: str = "per layer") -> str:
    """`; 1.2 ms per layer (geometric mean of its cases)`: the option's prefill time."""
    mine, base = o.cases("prefill"), default.cases("prefill")
    shared = sorted(set(mine) & set(base))
    if not shared:
        return ""
    logs = [math.log(mine[k].timing.median_us) for k in shared]
    us = math.exp(sum(logs) / len(logs))
    return f"; {fmt_us(us)} {unit}, geometric mean of those cases"


def _short(e: PairedEstimate | None) -> str:
    return "-" if e is None else e.short()


def _fp8_lines(ans: Answer) -> list[str]:
    f = ans.fp8
    if f is None:
        return wrap("no fp8 KV rows at this shape for this engine", "fp8 KV   ")
    head = (
        f"{f.option.key.kv} ({f.option.name}) vs {f.versus.key.text}: decode "
        f"{_est(f.decode, 'the 16-bit KV')}; KV memory {f.kv_bytes_ratio:.2f}x"
    )
    head += fp8_evidence(f.error)
    return wrap(head, "fp8 KV   ")


def _basis(ans: Answer) -> list[str]:
    c, d = ans.choice, ans.default
    assert c is not None
    assert d is not None
    n_dec = c.decode.cases if c.decode else 0
    n_pre = c.prefill.cases if c.prefill else 0
    text = (
        f"{n_dec} decode case{'s' * (n_dec != 1)} at batch "
        f"{', '.join(map(str, ans.measured_batches))}; {n_pre} prefill case{'s' * (n_pre != 1)}"
    )
    if ans.prefill_on_trace:
        text += " at the traffic's prompt lengths"
    share = ans.extrapolated_share
    if share is not None:
        text += (
            f"; {100 * share:.0f}% of the traffic's decode steps fall in capture buckets "
            "priced at another batch size (extrapolated)"
        )
    if c.inferred_from:
        text += f"; engine path inferred from raw rows of {', '.join(c.inferred_from)}"
    return wrap(text, "basis    ")


def evidence_lines(ans: Answer) -> list[str]:
    out = [""]
    if ans.buckets:
        out += wrap(f"estimand: {ESTIMAND}.")
        out += wrap(f"interval: {METHOD}; fewer than 3 cases print no interval.")
        out.append("")
    out.append("evidence: every option vs the default, paired on shared cases")
    out.append(f"  {'option':<38} {'decode':>18} {'prefill':>18}")
    for o in ans.options:
        dec, pre = _short(o.decode), _short(o.prefill)
        if ans.default is not None and o.key == ans.default.key:
            dec, pre = "the default", "the default"
        out.append(f"  {o.key.text[:38]:<38} {dec:>18} {pre:>18}")
    if ans.buckets:
        out += ["", "capture buckets (weight = share of decode steps):"]
        for b in ans.buckets:
            at = "no rows" if b.measured_at is None else f"batch {b.measured_at}"
            if b.own:
                at = f"{b.cases} drawn step{'s' * (b.cases != 1)}"
            mark = "  EXTRAPOLATED" if b.extrapolated else ""
            out.append(f"  bucket {b.size:>4} {100 * b.weight:6.2f}%  priced at {at}{mark}")
    return out


def answer_json(ans: Answer) -> dict[str, Any]:
    def opt(o: Option | None) -> dict[str, Any] | None:
        if o is None:
            return None
        return {
            "option": o.key.text,
            "variant": o.key.variant,
            "kv_dtype": o.key.kv,
            "page_size": o.key.page_size,
            "command": o.command,
            "decode_vs_default": None if o.decode is None else o.decode.__dict__,
            "prefill_vs_default": None if o.prefill is None else o.prefill.__dict__,
            "inferred_from": list(o.inferred_from),
        }

    f = ans.fp8
    return {
        "model": ans.shape.model,
        "tp": ans.shape.tp,
        "heads": ans.shape.heads,
        "gpu": ans.gpu,
        "other_gpus": [{"gpu": g, "rows": n} for g, n in ans.other_gpus],
        "engine": ans.engine,
        "kv_dtype": ans.kv_dtype,
        "weighting": ans.weighting,
        "choice": opt(ans.choice),
        "default": opt(ans.default),
        "keeps_default": ans.keeps_default,
        "default_refused": ans.default_refused,
        "tied": [o.key.text for o in ans.tied],
        "options": [opt(o) for o in ans.options],
        "measured_batches": ans.measured_batches,
        "extrapolated_share": ans.extrapolated_share,
        "buckets": [b.__dict__ for b in ans.buckets],
        "default_decode_us": ans.default_decode_us,
        "fp8": None
        if f is None
        else {
            "option": opt(f.option),
            "versus": f.versus.key.text,
            "decode": None if f.decode is None else f.decode.__dict__,
            "kv_bytes_ratio": f.kv_bytes_ratio,
            "error": dict(f.error),
        },
        "not_deployable": ans.not_deployable,
        "gaps": [g.__dict__ for g in ans.gaps],
    }


def release_lines(ans: Answer, rel: Release) -> list[str]:
    """The decision's command in release `rel` (`engines.paths.release_command`) and what
    changed in it since the pinned commits the rows reproduce."""
    from attnbench.engines.paths import release_command

    c = ans.choice
    if c is None or not c.key.variant.startswith(rel.engine + ":"):
        return []
    lines = release_command(c.key.variant, c.key.kv, c.key.page_size, ans.shape.tp, rel)
    out = ["", *wrap(f"{lines[0].removeprefix('# ')}:", "release  ")]
    out += command_lines(lines[1:])
    for change in rel.changes:
        out += wrap(change, "  changed since the rows' commits: ", "    ")
    return out
