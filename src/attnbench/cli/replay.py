"""`attnbench replay`: per-token latency (ITL) and TTFT of a serving trace, per backend variant,
from measured results (and, with --live, checked against the GPU)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnbench.cli.app import app
from attnbench.cli.common import (
    EXIT_NOTHING_RAN,
    check_output_file,
    console,
    err_console,
    every_if_all,
    fail,
    note,
    print_fitted,
    write_output,
)
from attnbench.cli.paths import runs_dir
from attnbench.measure.limits import MAX_SEED

if TYPE_CHECKING:
    from attnbench.cli.replay_answer import Ask, Decided
    from attnbench.replay.deployment import Deployment
    from attnbench.replay.pipeline import ReplayOutcome
    from attnbench.replay.records import LiveValidation

Opt = typer.Option
Arg = typer.Argument
DEFAULT_LIMIT = 2000
"""Requests replayed by default: those `recommend --trace` replays for its running batch
(`deploy.traffic.TRACE_LIMIT`), so both answer on the same traffic, in well under a minute."""


def _floats(text: str, flag: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        fail(f"{flag}={text!r}: expected comma-separated numbers, e.g. 0.5,1,2,4")
    if not values or not all(0 < v < float("inf") for v in values):
        fail(f"{flag}={text!r}: every value must be a positive finite number")
    return values


def _hybrid(text: str | None) -> tuple[str, str] | None:
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(parts):
        fail(f"--hybrid={text!r}: expected PREFILL,DECODE, e.g. flash-attn:fa3,flashinfer:fa2")
    return parts[0], parts[1]


@app.command()
def replay(
    results: Annotated[
        list[Path] | None, Arg(help="Results files or folders (default: results/).")
    ] = None,
    trace: Annotated[
        str, Opt(help="azure-code, azure-conv, mooncake-conv, a trace file, or agents:N[@LO-HI].")
    ] = "azure-conv",
    limit: Annotated[
        int, Opt(min=0, help="Replay the first N requests (0: the whole trace).")
    ] = DEFAULT_LIMIT,
    model: Annotated[str, Opt(help="Model shape.")] = "llama-3.1-70b",
    tp: Annotated[int, Opt(min=1, help="Tensor-parallel degree.")] = 8,
    dtype: Annotated[str, Opt(help="Weights/activations dtype.")] = "bfloat16",
    kv_dtype: Annotated[
        str, Opt(help="KV-cache dtype (rows of this dtype are used).")
    ] = "bfloat16",
    page_size: Annotated[int, Opt(help="KV page size.")] = 16,
    weight_dtype: Annotated[
        str,
        Opt(
            help="Weights' dtype: bfloat16, float16, fp8_e4m3, mxfp4 (default: what engines load)."
        ),
    ] = "",
    gpu_mem_gib: Annotated[float, Opt(help="Memory of one GPU, GiB.")] = 139.8,
    mem_utilization: Annotated[float, Opt(help="Usable fraction of GPU memory.")] = 0.9,
    max_batch: Annotated[
        int | None, Opt(min=1, help="Running requests at most (default 256; N for agents:N).")
    ] = None,
    token_budget: Annotated[int, Opt(min=1, help="Tokens per step at most.")] = 8192,
    chunked_prefill: Annotated[
        bool,
        Opt(
            "--chunked-prefill/--no-chunked-prefill",
            help="Fill each step's token budget with prompt chunks beside decode (vLLM v1).",
        ),
    ] = True,
    prefix_cache: Annotated[
        bool | None,
        Opt("--prefix-cache/--no-prefix-cache", help="Default: on when the trace has hash_ids."),
    ] = None,
    spread_arrivals: Annotated[
        bool, Opt("--spread-arrivals/--no-spread-arrivals", help="Spread tied timestamps.")
    ] = True,
    backend: Annotated[
        list[str] | None,
        Opt(
            "--backend",
            "-b",
            help="Variants to replay; repeatable (default: those `recommend --engine none` "
            "may choose).",
        ),
    ] = None,
    hybrid: Annotated[
        str | None,
        Opt(help="PREFILL,DECODE variants (default: `recommend --engine none`'s, if any)."),
    ] = None,
    padded: Annotated[
        bool | None, Opt("--padded/--no-padded", help="Add padded twins (default: agents only).")
    ] = None,
    rate_scale: Annotated[str, Opt(help="Arrival-rate multipliers, e.g. 0.5,1,2,4.")] = "1",
    itl_target_ms: Annotated[
        float | None, Opt(help="Find the rate where p99 ITL crosses this many ms.")
    ] = None,
    gpu: Annotated[str | None, Opt(help="Use rows of this GPU (when files hold several).")] = None,
    copy_gbps: Annotated[float | None, Opt(help="Override the measured copy GB/s.")] = None,
    matmul_tflops: Annotated[float | None, Opt(help="Override the measured TFLOP/s.")] = None,
    allreduce_us: Annotated[
        float, Opt(help="Fixed cost per all-reduce (2 per layer); 0 = not modelled.")
    ] = 0.0,
    allreduce_gbps: Annotated[float, Opt(help="All-reduce bus bandwidth, GB/s.")] = 0.0,
    seed: Annotated[
        int, Opt(min=0, max=MAX_SEED, help="Seed of the generated traffic (agents:N).")
    ] = 0,
    out: Annotated[Path | None, Opt(help="Write the replay document (JSON) here.")] = None,
    validation: Annotated[
        Path | None,
        Opt(help="`replay-validate` document (default: one among or beside the results)."),
    ] = None,
    live: Annotated[
        int, Opt(min=0, help="Measure this many replayed steps on the GPU (CUDA only).")
    ] = 0,
    live_prefill: Annotated[
        bool, Opt("--live-prefill", help="--live: also prefill steps.")
    ] = False,
    live_out: Annotated[Path | None, Opt(help="--live: results file for the rows.")] = None,
    device: Annotated[str, Opt(help="--live: auto, cuda, cuda:N.")] = "auto",
) -> None:
    """Replay a serving trace through a continuous-batching simulator whose step times come from
    the measured attention rows: ITL, TTFT and throughput per deployable variant and the hybrid
    of `recommend --engine none`, ranked as it ranks them (paired statistics of the rows)."""
    from attnbench.cli.replay_answer import Ask, decide
    from attnbench.replay.document import ReplayConfig
    from attnbench.replay.pipeline import ReplayError, run_replay

    _check_numbers(
        gpu_mem_gib=gpu_mem_gib,
        mem_utilization=mem_utilization,
        itl_target_ms=itl_target_ms,
        copy_gbps=copy_gbps,
        matmul_tflops=matmul_tflops,
        allreduce_us=allreduce_us,
        allreduce_gbps=allreduce_gbps,
        page_size=page_size,
    )
    _check_files(out, validation, live, live_out, device)
    paths = _results_paths(results)
    deployment = _deployment(
        model, tp, (dtype, kv_dtype, weight_dtype), page_size, gpu_mem_gib, mem_utilization
    )
    ask = Ask(model, tp, dtype, kv_dtype, page_size, trace, limit or None, gpu)
    _say_plan(ask)
    got = decide(paths, ask)
    decided = None if isinstance(got, str) else got
    if isinstance(got, str):
        note(got)
    chosen = tuple(every_if_all(backend)) or (decided.variants if decided else ())
    pair, source = _hybrid_of(hybrid, decided)
    cfg = ReplayConfig(
        trace=trace,
        limit=limit or None,
        seed=seed,
        deployment=deployment,
        max_batch=max_batch,
        token_budget=token_budget,
        chunked_prefill=chunked_prefill,
        prefix_cache=prefix_cache,
        spread_arrivals=spread_arrivals,
        backends=chosen,
        rate_scales=_floats(rate_scale, "--rate-scale"),
        itl_target_ms=itl_target_ms,
        hybrid=pair,
        hybrid_source=source,
        auto_hybrid=False,
        error_bands=False,
        padded=padded,
        gpu=gpu,
        copy_gbps=copy_gbps,
        matmul_tflops=matmul_tflops,
        allreduce_us=allreduce_us,
        allreduce_gbps=allreduce_gbps,
    )
    try:
        outcome = run_replay(cfg, paths, validation, progress=_progress)
    except (ReplayError, ValueError) as exc:
        fail(str(exc))
    outcome.document.answer = decided.record if decided else None
    _finish(outcome, (live, live_prefill, live_out, device), out)


def _hybrid_of(hybrid: str | None, decided: Decided | None) -> tuple[tuple[str, str] | None, str]:
    """The hybrid to replay and where it comes from: `--hybrid`, else `recommend --engine
    none`'s decode choice beside its fastest prefill call."""
    pair = _hybrid(hybrid)
    if pair is None and decided is not None and decided.hybrid is not None:
        return decided.hybrid, "`recommend --engine none` (its decode choice and fastest prefill)"
    return pair, "--hybrid"


def _finish(
    outcome: ReplayOutcome, live: tuple[int, bool, Path | None, str], out: Path | None
) -> None:
    """Print the replay, time `--live` steps, write `--out`."""
    from attnbench.cli.show_documents import print_replay_summary
    from attnbench.report.replay_tables import escape

    doc = outcome.document
    for n in doc.notes:
        note(n)
    print_replay_summary(doc)
    steps, prefill, live_out, device = live
    if steps:
        doc.live = _live(outcome, steps, prefill, live_out, out, device)
    if out is not None:
        write_output(out, doc.to_json(), "--out")
        console.print(f"replay -> {escape(str(out))}", highlight=False)


def _say_plan(ask: Ask) -> None:
    """What the replay is about to do, before the seconds it takes."""
    from rich.markup import escape

    part = f"the first {ask.limit:,} requests" if ask.limit else "every request"
    more = " (--limit N: more; 0: all)" if ask.limit == DEFAULT_LIMIT else ""
    err_console.print(
        f"[dim]replaying {part} of {escape(ask.trace)}{more} on {escape(ask.model)} at tp "
        f"{ask.tp}: the running batch for `recommend --engine none`'s answer, then each "
        "deployable variant and its hybrid[/]",
        highlight=False,
    )


def _progress(message: str) -> None:
    from rich.markup import escape

    err_console.print(f"[dim]{escape(message)}[/]", highlight=False)


def _check_files(
    out: Path | None, validation: Path | None, live: int, live_out: Path | None, device: str
) -> None:
    """The files `replay` writes and reads, and --live's GPU, checked before the replay."""
    if out is not None:
        check_output_file(out, "--out")
    if validation is not None and not validation.is_file():
        fail(f"--validation={validation}: no such file (`attnbench replay-validate` writes one)")
    if live:
        _check_live_device(device)
        check_output_file(_live_path(live_out, out), "--live-out" if live_out else "--live")


def _results_paths(results: list[Path] | None) -> list[Path]:
    from attnbench.analysis.frame import NoResultsError, resolve_paths

    try:
        return resolve_paths([str(p) for p in results] if results else None)
    except (NoResultsError, FileNotFoundError) as exc:
        fail(str(exc))


def _deployment(
    model: str,
    tp: int,
    dtypes: tuple[str, str, str],
    page_size: int,
    gpu_mem_gib: float,
    mem_utilization: float,
) -> Deployment:
    from attnbench.replay.deployment import Deployment

    dtype, kv_dtype, weight_dtype = dtypes
    try:
        return Deployment(
            model=model,
            tp=tp,
            dtype=dtype,
            kv_dtype=kv_dtype,
            weight_dtype=weight_dtype,
            page_size=page_size,
            gpu_mem_gib=gpu_mem_gib,
            mem_utilization=mem_utilization,
        )
    except ValueError as exc:
        fail(str(exc))


def _check_numbers(**values: float | None) -> None:
    """Memory, rates and costs that must be positive (or, for all-reduce, not negative)."""
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        if value is None:
            continue
        if name == "mem_utilization" and not 0 < value <= 1:
            fail(f"{flag}={value:g}: must be a fraction in (0, 1], e.g. 0.9")
        elif name.startswith("allreduce") and not 0 <= value < float("inf"):
            fail(f"{flag}={value:g}: must be 0 (not modelled) or positive")
        elif not name.startswith("allreduce") and not 0 < value < float("inf"):
            fail(f"{flag}={value:g}: must be a positive number")


def _check_live_device(device: str, command: str = "replay") -> None:
    """--live (replay) and replay-validate measure on a GPU: say so before the replay, not
    after it, with what works without one."""
    from attnbench.measure.hardware import detect, resolve_device

    try:
        dev, _ = resolve_device(device)
    except ValueError as exc:
        fail(f"--device: {exc}")
    if detect(dev).kind != "cuda":
        what, instead = (
            ("--live needs", "replay without --live")
            if command == "replay"
            else (
                "replay-validate needs",
                "--rescore FILE scores a validation measured before, without a GPU",
            )
        )
        fail(
            f"{what} a CUDA GPU (it measures the replayed steps on it); --device={device} "
            f"is {dev} here: {instead}",
            EXIT_NOTHING_RAN,
        )


def _check_live_gpu(rows_gpu: str, device: str) -> None:
    """--live compares the replay's predictions, fitted on `rows_gpu`'s rows, with steps timed
    here: on another GPU that would be two GPUs' figures in one error, so it refuses."""
    from attnbench.measure.hardware import detect, resolve_device

    here = detect(resolve_device(device)[0]).name
    if here != rows_gpu:
        fail(
            f"--live: the replay's step costs come from {rows_gpu} rows and this GPU is {here}; "
            f"pass rows measured on {here} (or replay without --live)",
            EXIT_NOTHING_RAN,
        )


def _live_path(live_out: Path | None, out: Path | None) -> Path:
    if live_out is not None:
        return live_out
    if out is not None:
        return out.with_name(out.stem + "-live.jsonl")
    return runs_dir() / f"{datetime.now().strftime('%Y%m%d-%H%M%S')}_replay-live.jsonl"


def _live(
    outcome: ReplayOutcome,
    count: int,
    prefill: bool,
    live_out: Path | None,
    out: Path | None,
    device: str,
) -> LiveValidation:
    from attnbench.replay.live import LiveOptions, run_live
    from attnbench.report.replay_tables import escape, live_table

    _check_live_gpu(outcome.document.gpu, device)
    path = _live_path(live_out, out)
    study = outcome.study
    try:
        res = run_live(
            study.sims[study.main], study.models, outcome.document.config.deployment,
            LiveOptions(count, prefill, device), path, sampled_from=study.main,
            progress=lambda msg: console.print(f"[dim]{escape(msg)}[/]"),
        )  # fmt: skip
    except (RuntimeError, ValueError) as exc:
        fail(str(exc))
    print_fitted(live_table(res), keys=1)
    return res
