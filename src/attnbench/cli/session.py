"""The one run path of `run` and `tune`: settings -> device -> cases -> variants -> where they
run -> output files, as a `run.plan.RunPlan`; then `run.session.run_session` (header, rows,
trials) with a live progress line. Each command prints its own table and decides its exit code
from the `Outcome`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from attnbench.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_NOTHING_RAN,
    RowWriteFailed,
    check_output_file,
    console,
    fail,
    flag_for,
    note,
)
from attnbench.cli.outpath import OutFlags, guard_out
from attnbench.cli.paths import runs_dir
from attnbench.cli.run_options import check_resume_shape
from attnbench.cli.run_suite import cases, suite_measurement

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.cli.progress import LiveProgress
    from attnbench.config import Settings
    from attnbench.measure.hardware import DeviceInfo
    from attnbench.results import Footer, Header, ResultRow, ResultWriter
    from attnbench.run.plan import Placement, RunPlan, RunSink, TunePlan


@dataclass
class Outcome:
    """What a session wrote, for the command's table, notes and exit code."""

    rows: list[ResultRow]
    out_path: Path
    suite_name: str
    device_name: str
    todo: int
    """(case, variant) pairs this session set out to run."""
    resume: bool
    trials: int = 0
    trials_path: Path | None = None
    skipped: list[str] = field(default_factory=list)
    """`case_id variant` pairs the tune budget left untouched."""


def trials_path_for(out: Path) -> Path:
    """`results/x.jsonl` -> `results/x.trials.jsonl`."""
    return out.with_name(out.stem + ".trials.jsonl")


def execute_session(
    cli: dict[str, Any],
    config_file: Path | None = None,
    tune: TunePlan | None = None,
    out_flags: OutFlags | None = None,
) -> Outcome:
    """Everything up to the last row: settings -> a `RunPlan` -> `run.session.run_session`.
    Exits with one line on bad input."""
    from attnbench.config_load import ConfigError, load_settings

    try:
        settings, sources = load_settings(cli, config_file=config_file)
    except ConfigError as exc:
        fail(str(exc))
    plan, suite, files = _plan(settings, sources, tune, out_flags or OutFlags())
    _announce(plan, suite, files)
    outcome = Outcome([], files.out, suite, plan.device.name, plan.todo, settings.resume)
    outcome.trials_path = files.trials
    _execute(plan, files, outcome)
    return outcome


@dataclass(frozen=True)
class _Files:
    """The results file and (tune) its trials file, each with the flag that named it, and
    (--resume) the keys the results file has finished."""

    paths: list[tuple[Path, str]]
    skip: set[tuple[str, str]]
    out: Path
    trials: Path | None


def _plan(
    settings: Settings, sources: dict[str, str], tune: TunePlan | None, out_flags: OutFlags
) -> tuple[RunPlan, str, _Files]:
    """The plan of this run (and its suite's name and output files); exits on bad input."""
    from attnbench.measure.hardware import detect, resolve_device
    from attnbench.run.plan import Limits, RunPlan

    try:
        dev, device_note = resolve_device(settings.device)
    except ValueError as exc:
        fail(str(exc))
    info = detect(dev)
    check_timer(settings.timer, info.kind, flag_for("timer", sources["timer"]))
    specs, suite_name = cases(settings, sources, info.kind)
    settings = suite_measurement(settings, sources, info.kind)
    if device_note and tune is None and settings.suite is None and suite_name == "cpu":
        note(device_note)  # "...on a small suite": only when that suite was chosen for the user
    backends, where = _where(settings, info, tune)
    _note_inline_timeouts(sources, where.mode)
    header = settings.model_dump(mode="json") | {"suite": suite_name}
    check_resume_shape(settings.out if settings.resume else None, header)  # before _skip trusts it
    name = suite_name + ("-tune" if tune else "")
    files = _files(settings, sources, info.name, name, tune, out_flags)
    if tune is not None:
        header["tune"] = tune.header()
    plan = RunPlan(
        run_id=files.out.stem,
        device=info,
        where=where,
        measure_cfg=settings.measure_config(),
        settings=header,
        limits=Limits(settings.case_timeout_s, settings.plan_timeout_s),
        skip=frozenset(files.skip),
        cases=tuple(specs),
        backends=tuple(backends),
        tune=tune,
    )
    return plan, suite_name, files


def _where(
    settings: Settings, info: DeviceInfo, tune: TunePlan | None
) -> tuple[list[Backend], Placement]:
    """The variants to run and where they run; exits on an impossible request."""
    from attnbench.run.plan import placement, visible_gpus
    from attnbench.run.policy import backends_for

    try:
        backends, notes = backends_for(settings.backends, info.kind, tune=tune is not None)
        where = placement(
            info, settings.gpus, settings.workers, settings.ray, visible_gpus(), tune is not None
        )
    except ValueError as exc:
        fail(str(exc))
    from attnbench.config import usable_cpus
    from attnbench.run.plan import cap_workers

    capped = cap_workers(settings.workers, usable_cpus())[1] if where.mode == "pool" else None
    for line in [*notes, *([capped] if capped and info.kind == "cpu" else [])]:
        note(line)
    if tune is not None and not backends:
        fail("none of the selected variants has knobs to tune")
    return backends, where


def _note_inline_timeouts(sources: dict[str, str], mode: str) -> None:
    """A timeout the user set is only enforced on a worker process: say so when cases run in
    this process (a hung case there cannot be killed)."""
    if mode != "inline":
        return
    for name, flag in (("case_timeout_s", "case-timeout"), ("plan_timeout_s", "plan-timeout")):
        source = sources.get(name, "default")
        if source != "default":
            given = f"--{flag}" if source == "cli" else flag_for(name, source)
            note(
                f"{given} is not enforced: cases run in this process (--workers 0), where a "
                "hung case cannot be killed; pass --workers 1 to run them in a worker that can"
            )


def _files(
    settings: Settings,
    sources: dict[str, str],
    device: str,
    name: str,
    tune: TunePlan | None,
    out_flags: OutFlags,
) -> _Files:
    """The results file (and tune's trials file), checked before any work."""
    if settings.resume and settings.out is None:
        fail("--resume needs --out naming the results file to finish (the default is a new file)")
    out_path = settings.out or default_out(device, name)
    out_flag = flag_for("out", sources["out"])
    guard_out(out_path, out_flag, resume=settings.resume, **out_flags.as_kwargs())
    check_output_file(out_path, out_flag)  # before its trials file's name is derived
    paths = [(out_path, out_flag)]
    trials = trials_path_for(out_path) if tune is not None else None
    if trials is not None:
        paths.append((trials, f"{out_flag} (its trials file)"))
        guard_out(trials, paths[1][1], resume=settings.resume, **out_flags.as_kwargs())
    return _Files(paths, _skip(paths, settings.resume), out_path, trials)


def _announce(plan: RunPlan, suite_name: str, files: _Files) -> None:
    command, budget = "run", ""
    if plan.tune is not None:
        b = plan.tune.budget_s
        command, budget = "tune", f" budget={'none' if b is None else f'{b:g} s'}"
    out = f"{files.out}" + (f" (+ {files.trials.name})" if files.trials else "")
    console.print(
        f"[bold]attnbench {command}[/] suite=[cyan]{escape(suite_name)}[/] "
        f"cases={len(plan.cases)} variants={len(plan.backends)} "
        f"device=[cyan]{escape(plan.device.name)}[/] ({plan.where.mode}){budget}"
        f" -> {escape(out)}",
        highlight=False,
    )


def _execute(plan: RunPlan, files: _Files, outcome: Outcome) -> None:
    """Run the plan, every row to the files as it comes; one line for each way it can stop."""
    from attnbench.run.raycluster import ClusterError
    from attnbench.run.session import run_session
    from attnbench.run.sweep import DeviceLost

    out, kept = files.out, outcome.rows
    with _Writers(files.paths) as writers, _live(plan.todo) as live:
        try:
            run_session(plan, _Recorder(outcome, writers, live, plan.tune is not None).sink())
        except KeyboardInterrupt:
            live.stop()
            note(f"interrupted: {len(kept)} rows kept in {out}; finish with --resume")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except RowWriteFailed as exc:
            live.stop()
            what = "a row" if exc.args[0] == out else f"a trial to {exc.args[0]}"
            fail(
                f"{files.paths[0][1]}={out}: writing {what} failed ({exc.describe()}); the "
                f"{len(kept)} rows written before are kept; free space or choose "
                "another --out, then --resume"
            )
        except ClusterError as exc:
            live.stop()
            fail(str(exc))
        except DeviceLost as exc:  # in-process tune on a GPU only (workers are replaced)
            live.stop()
            fail(
                f"the GPU is unusable after a trial; {len(kept)} rows kept: {exc}", EXIT_NOTHING_RAN
            )


class _Recorder:
    """The session's sink for the CLI: the header and rows to the results file (the header
    and trials to the trials file), the progress line, and the outcome's counts."""

    def __init__(self, outcome: Outcome, writers: _Writers, live: LiveProgress, tune: bool):
        self.outcome, self.writers, self.live, self.tune = outcome, writers, live, tune

    def sink(self) -> RunSink:
        from attnbench.run.plan import RunSink

        return RunSink(
            on_row=self.row,
            on_header=self.header,
            on_trial=self.trial,
            on_skip=self.skipped,
            on_status=self.live.set_status,
            on_activity=self.live.activity,
            on_footer=self.footer,
            on_note=self.live.print,
        )

    def footer(self, footer: Footer) -> None:
        self.writers.write(0, footer)

    def header(self, header: Header) -> None:
        self.writers.write(0, header)
        if self.tune:
            self.writers.write(1, header)
        print_ceilings(header.ceilings)

    def row(self, row: ResultRow) -> None:
        self.writers.write(0, row)
        self.outcome.rows.append(row)
        self.live.advance(f"{row.backend} {row.status}")
        if self.tune and row.status != "unsupported":
            self.live.print(_tuned_line(row))

    def trial(self, row: ResultRow) -> None:
        self.writers.write(1, row)
        self.outcome.trials += 1

    def skipped(self, case_id: str, backend: str) -> None:
        self.outcome.skipped.append(f"{case_id} {backend}")
        self.live.advance()


def _skip(paths: list[tuple[Path, str]], resume: bool) -> set[tuple[str, str]]:
    """Check every output file before any work; with --resume, the finished keys of the first."""
    from attnbench.results import ResultsFileError, finished_keys

    skip: set[tuple[str, str]] = set()
    for i, (path, flag) in enumerate(paths):
        check_output_file(path, flag)
        try:
            if resume and i == 0:
                skip = finished_keys(path)
            else:
                check_appendable(path)
        except ResultsFileError as exc:
            if resume:
                fail(f"--resume: {exc}")
            fail(f"{flag}: {exc}; choose another file")
    if resume:
        note(f"resuming {paths[0][0]}: {len(skip)} finished rows kept")
    return skip


class _Writers:
    """The results file (0) and, for tune, the trials file (1); a failed write raises
    RowWriteFailed naming the file."""

    def __init__(self, paths: list[tuple[Path, str]]) -> None:
        from attnbench.results import ResultWriter

        self.writers: list[ResultWriter] = []
        for path, flag in paths:
            try:
                self.writers.append(ResultWriter(path))
            except OSError as exc:
                self.close()
                fail(f"{flag}={path} cannot be written: {exc.strerror or exc}")

    def write(self, i: int, item: Any) -> None:
        w = self.writers[i]
        try:
            w.write(item)
        except OSError as exc:
            raise RowWriteFailed(w.path) from exc

    def close(self) -> None:
        for w in self.writers:
            w.close()

    def __enter__(self) -> _Writers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _live(total: int) -> LiveProgress:
    from attnbench.cli.progress import LiveProgress

    return LiveProgress(total)


def _tuned_line(row: ResultRow) -> str:
    knobs = row.details.get("knobs_label") or ""
    latency = "" if row.latency_us is None else f"{row.latency_us:.1f} µs "
    return f"  {row.case_id} {row.backend}: {row.status} {latency}{knobs}"


def check_timer(timer: str, device_kind: str, flag: str) -> None:
    """CUDA timers on a machine without a GPU would be a row claiming GPU timing: refuse."""
    if timer.startswith("cuda") and device_kind != "cuda":
        fail(
            f"{flag}={timer} needs a CUDA device and this run is on the {device_kind}; "
            "allowed here: auto, cpu"
        )


def check_appendable(path: Path) -> None:
    """A new run appends to --out: refuse a file that is there but holds no attnbench rows."""
    from attnbench.results import interrupted_first_write, read_results

    if path.is_file() and path.stat().st_size > 0 and not interrupted_first_write(path):
        read_results(path)


def print_ceilings(ceilings: dict[str, Any] | None) -> None:
    if not ceilings:
        return
    from attnbench.report.units import fmt_bandwidth as bw
    from attnbench.report.units import fmt_compute

    mm = ", ".join(f"{k} {fmt_compute(v)}" for k, v in ceilings.get("matmul_tflops", {}).items())
    read = ceilings.get("read_bandwidth_gbps")
    read_txt = f", read {bw(read)}" if read else ""
    console.print(f"ceilings: copy {bw(ceilings['copy_bandwidth_gbps'])}{read_txt}; matmul: {mm}")


def default_out(device_name: str, suite: str) -> Path:
    slug = "".join(c if c.isalnum() else "-" for c in device_name.lower()).strip("-") or "device"
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return runs_dir() / f"{stamp}_{slug}_{suite}.jsonl"
