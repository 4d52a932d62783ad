"""`attnbench recommend`: the answer for one deployment (model, tp, engine, traffic), or the
index of deployments the results hold. The decision is `deploy.decide`; the text is
`cli.deploy_view`; `--measure` (GPU) and `--dry-run` are `cli.deploy_measure`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnbench.cli.analyze import ResultsArg
from attnbench.cli.app import app
from attnbench.cli.common import check_output_file, console, fail, note, write_output

if TYPE_CHECKING:
    import pandas as pd

    from attnbench.cli.deploy_measure import MeasureRequest
    from attnbench.deploy.decide import Answer, ModelShape
    from attnbench.deploy.traffic import Traffic
    from attnbench.engines.paths import Release

KV_HELP = "auto (the model's 16-bit dtype), fp8_e4m3 or fp8_e5m2"


def _echo(lines: list[str]) -> None:
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _row_paths(results: list[Path] | None) -> list[Path]:
    from attnbench.analysis.frame import NoResultsError, resolve_paths
    from attnbench.results import is_results_path

    try:
        paths = resolve_paths(results)
    except (NoResultsError, FileNotFoundError) as exc:
        fail(str(exc))
    return [p for p in paths if is_results_path(p)]


def _frame(paths: list[Path]) -> pd.DataFrame:
    from attnbench.analysis.frame import NoResultsError, load
    from attnbench.results import ResultsFileError

    try:
        loaded = load(paths)
    except (NoResultsError, FileNotFoundError, ResultsFileError) as exc:
        fail(str(exc))
    for w in loaded.warnings:
        note(w)
    return loaded.frame


def _check_kv(kv_dtype: str) -> str:
    kv = kv_dtype.strip().lower()
    aliases = {"bf16": "auto", "fp16": "auto", "bfloat16": "auto", "float16": "auto"}
    kv = aliases.get(kv, kv)
    if kv not in ("auto", "fp8_e4m3", "fp8_e5m2"):
        fail(f"--kv-dtype={kv_dtype!r} is not known; allowed: {KV_HELP}")
    return kv


def _shape(model: str, tp: int | None, frame: pd.DataFrame) -> ModelShape:
    from attnbench.deploy.decide import model_shape
    from attnbench.workload.models import get_model, valid_tps

    try:
        m = get_model(model)
        if tp is None:
            tp = _tp_with_rows(model, valid_tps(m), frame)
        return model_shape(model, tp)
    except ValueError as exc:
        fail(str(exc))


def _tp_with_rows(model: str, tps: list[int], frame: pd.DataFrame) -> int:
    """Without --tp: the tp whose shard has the most rows (1 when none has any)."""
    from attnbench.analysis.frame import ok_rows
    from attnbench.deploy.decide import model_shape, shape_rows

    ok = ok_rows(frame)
    counts = {tp: len(shape_rows(ok, model_shape(model, tp))) for tp in tps}
    best = max(tps, key=lambda t: (counts[t], -t))
    return best if counts[best] else 1


@app.command()
def recommend(
    results: ResultsArg = None,
    model: Annotated[
        str | None, typer.Option(help="Model preset (`attnbench models`); without it: an index.")
    ] = None,
    tp: Annotated[
        int | None, typer.Option(help="Tensor-parallel degree (default: the tp with rows).")
    ] = None,
    engine: Annotated[
        str | None, typer.Option(help="vllm (default), sglang or none (library calls).")
    ] = None,
    trace: Annotated[
        list[str] | None,
        typer.Option(
            help="Weight decode by this trace's running batch over the engine's "
            "CUDA-graph buckets: azure-code, azure-conv, mooncake-conv, agents:N or a file. "
            "With --measure it may repeat: the traces are timed in one session."
        ),
    ] = None,
    lengths: Annotated[
        str | None, typer.Option(help="Only cases of this length distribution label.")
    ] = None,
    kv_dtype: Annotated[str, typer.Option(help=KV_HELP)] = "auto",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Every option, bucket.")] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write JSON here.")] = None,
    measure: Annotated[
        bool, typer.Option("--measure", help="GPU: time the trace's own batches, then answer.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="With --measure: print the plan, time nothing.")
    ] = False,
    out: Annotated[Path | None, typer.Option(help="--measure: rows file (appended).")] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="--measure: skip pairs already in --out.")
    ] = False,
    into_results: Annotated[
        bool,
        typer.Option("--into-results", help="--measure: allow an --out in the committed results/."),
    ] = False,
    budget_s: Annotated[
        float, typer.Option(help="--measure: stop starting cases after this many seconds.")
    ] = 0.0,
    per_bucket: Annotated[
        int,
        typer.Option(help="--measure: replayed steps drawn at random per bucket of >= 5% weight."),
    ] = 5,
    cover: Annotated[
        float | None,
        typer.Option(
            help="--measure: also the heaviest buckets under 5% (2 steps each) until this share "
            "of the decode steps is measured on its own batches (0: buckets of >= 5% only; "
            "default 0.9)."
        ),
    ] = None,
    engine_version: Annotated[
        str | None,
        typer.Option(
            help="Also print the decision's command for this engine release (vLLM: pinned, "
            "0.34.0; SGLang: pinned, 0.5.23), with what changed since the rows' pinned commits."
        ),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            help="Answer from this GPU's rows: its name or a part of it, e.g. H100 (default: "
            "the GPU with the most rows of the model's shape; with --measure, the one measured)."
        ),
    ] = None,
) -> None:
    """The answer for one deployment: the deploy command, its decode and prefill time against
    the engine's default with paired 95% CIs, and its basis. Without --model: the index of the
    model shapes the results hold, one line each."""
    from attnbench.deploy.decide import TARGETS

    name = (engine or "vllm").strip().lower()
    if name not in TARGETS:
        fail(f"--engine={engine!r} is not known; allowed: {', '.join(TARGETS)}")
    kv = _check_kv(kv_dtype)
    rel = _check_release(name, engine_version)
    traces = _check_traces(trace, lengths, measure or dry_run)
    if json_out is not None:
        check_output_file(json_out, "--json")
    if dry_run and not measure:
        fail("--dry-run prints the plan of a --measure run: add --measure (and --out FILE.jsonl)")
    if not measure:
        _refuse_measure_only(out, resume, budget_s, per_bucket, cover, into_results)
    if budget_s < 0 or budget_s != budget_s:
        fail(f"--budget-s={budget_s:g}: must be 0 (no limit) or a positive number of seconds")
    if model is None:
        _refuse_without_model(measure, engine is not None, verbose, bool(traces), lengths)
    paths = _row_paths(results)
    if not paths:
        fail("no results files (.jsonl or .jsonl.gz) among the given paths: nothing to answer")
    frame = _frame(paths)
    gpu_name = _gpu(frame, gpu)
    if model is None:
        _index(frame, json_out)
        return
    shape = _shape(model, tp, frame)
    if measure or dry_run:
        from attnbench.cli.deploy_measure import MeasureRequest

        cover = 0.9 if cover is None else cover
        if not 0.0 <= cover <= 1.0:
            fail(f"--cover={cover:g}: must be a share of the decode steps in [0, 1], e.g. 0.9")
        req = MeasureRequest(
            tuple(traces),
            kv,
            out,
            resume,
            budget_s,
            dry_run,
            per_bucket,
            cover,
            gpu_name,
            into_results,
        )
        ask = Ask(shape, name, None, lengths, kv, gpu_name)
        _measured(paths, frame, ask, req, verbose, json_out)
        return
    one = traces[0] if traces else None
    ask = Ask(shape, name, one, lengths, kv, gpu_name, rel)
    why = _answer(paths, frame, ask, verbose, json_out)
    if why is not None:
        fail(why)


def _check_traces(trace: list[str] | None, lengths: str | None, measuring: bool) -> list[str]:
    """The asked traces, each once; one line where they cannot go together."""
    traces = list(dict.fromkeys(trace or []))  # a repeated value runs once
    if traces and lengths is not None:
        fail("--trace and --lengths both weight the cases: give one")
    if len(traces) > 1 and not measuring:
        fail(
            f"--trace given {len(traces)} traces: one answer weights one trace (several "
            "only with --measure, which times them in one session)"
        )
    return traces


def _refuse_without_model(
    measure: bool, engine: bool, verbose: bool, traces: bool, lengths: str | None
) -> None:
    """Without --model the answer is the index: flags that shape one deployment's answer are
    refused, not ignored."""
    if measure:
        fail("--measure plans the batches of one deployment: give --model (and --trace)")
    flags = (("--engine", engine), ("--verbose", verbose), ("--trace", traces))
    given = [f for f, on in (*flags, ("--lengths", lengths is not None)) if on]
    if given:
        fail(
            f"{given[0]} shapes the answer for one deployment: give --model (without it: the index)"
        )


def _refuse_measure_only(
    out: Path | None,
    resume: bool,
    budget_s: float,
    per_bucket: int,
    cover: float | None,
    into: bool,
) -> None:
    """Flags that only --measure reads: refused without it, not silently ignored."""
    given = [
        flag
        for flag, set_ in (
            ("--out", out is not None),
            ("--resume", resume),
            ("--budget-s", budget_s != 0.0),
            ("--per-bucket", per_bucket != 5),
            ("--cover", cover is not None),
            ("--into-results", into),
        )
        if set_
    ]
    if given:
        fail(f"{', '.join(given)}: only --measure reads this: add --measure, or leave it out")


def _measured(
    paths: list[Path],
    frame: pd.DataFrame,
    ask: Ask,
    req: MeasureRequest,
    verbose: bool,
    json_out: Path | None,
) -> None:
    """`--measure`: time the traces' batches, then answer each trace, one after another
    (without a GPU, from the given rows with every bucket shown)."""
    from dataclasses import replace

    from attnbench.cli.deploy_measure import run_measure

    got = run_measure(paths, ask.shape, ask.engine, req)
    if got is None:
        return
    extra, replayed = got
    if extra is not None:
        measured = _frame([extra])
        if extra.resolve() not in {p.resolve() for p in paths}:
            import pandas as pd

            paths = [*paths, extra]  # only the new file is read again
            frame = pd.concat([frame, measured], ignore_index=True)
        if "gpu" in measured and not measured.empty:  # the GPU just measured answers
            ask = replace(ask, gpu=str(measured["gpu"].astype(str).value_counts().index[0]))
    whys: list[str] = []
    for i, (trace, traffic) in enumerate(replayed):
        if i:
            console.print("", markup=False, highlight=False)
        one_json = json_out if len(replayed) == 1 or json_out is None else None
        if json_out is not None and one_json is None:
            one_json = json_out.with_name(f"{json_out.stem}-{_slug(trace)}{json_out.suffix}")
        why = _answer(
            paths,
            frame,
            replace(ask, trace=trace),
            verbose or extra is None,
            one_json,
            traffic,
        )
        whys += [f"{trace}: {why}"] if why is not None else []
    if whys:
        fail("; ".join(whys))


def _slug(trace: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in Path(trace).stem or trace)


def _index(frame: pd.DataFrame, json_out: Path | None) -> None:
    from attnbench.cli.deploy_view import index_lines
    from attnbench.deploy.decide import index

    lines, unknown = index(frame)
    decode = frame[frame["kind"] == "decode"] if "kind" in frame else frame
    if not lines or decode.empty:
        fail(
            "no decode row of a model preset's shape passed the accuracy gate: nothing to "
            "answer; measure one with `attnbench run --model M --tp N`"
        )
    gpus = sorted(set(frame["gpu"])) if "gpu" in frame else []
    _echo(index_lines(lines, unknown, ", ".join(gpus)))
    if json_out is not None:
        rows = [
            {
                "model": x.shape.model,
                "tp": x.shape.tp,
                "heads": x.shape.heads,
                "kinds": list(x.kinds),
                "kv_dtypes": list(x.kv_dtypes),
                "cases": x.cases,
            }
            for x in lines
        ]
        write_output(json_out, json.dumps(rows, indent=2) + "\n", "--json")


@dataclass(frozen=True)
class Ask:
    shape: ModelShape
    engine: str
    trace: str | None
    lengths: str | None
    kv: str
    gpu: str | None = None
    release: Release | None = None


def _gpu(frame: pd.DataFrame, text: str | None) -> str | None:
    """The GPU `--gpu` names: its full name, or the one name containing `text` (any case)."""
    if text is None:
        return None
    gpus: list[str] = sorted(set(frame["gpu"].dropna().astype(str))) if "gpu" in frame else []
    exact = [g for g in gpus if g.lower() == text.strip().lower()]
    found = exact or [g for g in gpus if text.strip().lower() in g.lower()]
    if len(found) == 1 and text.strip():
        return found[0]
    held = f"the results hold rows of: {'; '.join(gpus)}" if gpus else "no row names a GPU"
    if len(found) > 1:
        fail(f"--gpu={text!r} names {len(found)} GPUs ({'; '.join(found)}): give more of it")
    fail(f"--gpu={text!r}: no rows of such a GPU; {held}")


def _answer(
    paths: list[Path],
    frame: pd.DataFrame,
    ask: Ask,
    verbose: bool,
    json_out: Path | None,
    replayed: Traffic | None = None,
) -> str | None:
    """Print the answer; None, or the error line of an answer the rows cannot give."""
    from attnbench.cli.deploy_view import answer_json, answer_lines, pooled_json
    from attnbench.deploy.ask import DeployAsk, answer_for
    from attnbench.deploy.pooled import pooled_answer
    from attnbench.deploy.traffic import check_trace
    from attnbench.replay.pipeline import ReplayError

    if ask.lengths is not None:
        frame = _only_lengths(frame, ask.lengths)
    if ask.trace is not None and (why := check_trace(ask.trace)) is not None:
        fail(why)
    one = DeployAsk(ask.shape, ask.engine, ask.kv, ask.trace, ask.gpu)  # type: ignore[arg-type]
    pooled = None
    try:
        with console.status(f"the traffic of {ask.trace}"):
            ans = answer_for(paths, frame, one, replayed)
            if ask.trace is None and ask.lengths is None:  # never a winner no traffic calls
                pooled = pooled_answer(paths, frame, ask.shape, one.engine, ask.kv, ans.gpu, ans)
    except ReplayError as exc:
        fail(str(exc))
    if ask.lengths is not None:
        ans.weighting = f"cases of lengths {ask.lengths}, weighted equally per batch size"
    _echo(answer_lines(ans, verbose, pooled))
    if verbose:
        _echo(_anchor_lines(frame, ans))
    if ask.release is not None:
        from attnbench.cli.deploy_view import release_lines

        _echo(release_lines(ans, ask.release))
    if json_out is not None:
        from attnbench.results import dumps

        doc = answer_json(ans) | ({"pooled": pooled_json(pooled)} if pooled else {})
        write_output(json_out, dumps(doc, indent=2) + "\n", "--json")
    return None if ans.choice is not None else _no_answer(ans)


def _anchor_lines(frame: pd.DataFrame, ans: Answer) -> list[str]:
    """AIConfigurator's figures beside the answer's options at its GPU and heads (`-v`)."""
    from attnbench.analysis.aic import load_anchors, pairs
    from attnbench.deploy.shapes import shape_rows
    from attnbench.report.anchor_tables import answer_anchor_lines

    rows = shape_rows(frame, ans.shape)
    rows = rows[rows["gpu"].astype(str) == ans.gpu] if not rows.empty else rows
    variants = [o.key.variant for o in ans.options]
    return answer_anchor_lines(pairs(rows, load_anchors()), variants, ans.gpu)


def _no_answer(ans: Answer) -> str:
    """The one error line of an answer the rows cannot give: what is missing (the first gap)
    and that the command printed above measures it."""
    who = {"vllm": "vLLM", "sglang": "SGLang", "none": "library calls"}[ans.engine]
    missing = ans.gaps[0].text if ans.gaps else "no option passed the accuracy gate"
    return (
        f"no answer for {ans.shape.label} with {who} from these rows: "
        f"{missing}; the command above measures it (or pass other RESULTS)"
    )


def _only_lengths(frame: pd.DataFrame, lengths: str) -> pd.DataFrame:
    sub = frame[frame["lengths"] == lengths]
    if sub.empty:
        labels = sorted(set(frame["lengths"]) - {""})[:8]
        fail(f"--lengths={lengths!r}: no rows; labels present include {', '.join(labels)}")
    return sub


def _check_release(engine: str, version: str | None) -> Release | None:
    """The engine release `--engine-version` names (None when not given); one line naming
    the known releases when it is not one."""
    from attnbench.engines.paths import release

    if version is None:
        return None
    if engine == "none":
        fail("--engine-version needs --engine vllm or sglang")
    try:
        return release(engine, version)  # type: ignore[arg-type]
    except ValueError as exc:
        fail(str(exc))
