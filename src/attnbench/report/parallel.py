"""The report's sections built in parallel: one task per section (sections that share a
cached value in one task), run in forked worker processes that inherit the rows (nothing is
sent but a task's index and its built sections), or in this process when there is one core.
The page is the same either way (`tests/test_report_page.py`)."""

from __future__ import annotations

from attnbench.report.blocks import RegisteredSection, ReportData, Section, Text


def _build(reg: RegisteredSection, data: ReportData) -> Section | None:
    try:
        return reg.build(data)
    except Exception as exc:  # one broken section must not lose the report
        return Section(reg.name, [Text(f"This section failed: `{type(exc).__name__}: {exc}`")])


Task = list[tuple[RegisteredSection, ReportData]]
_TASKS: list[Task] = []
"""The tasks of the build in progress: forked workers inherit them and get an index."""


def _run_task(index: int) -> list[Section | None]:
    return [_build(reg, data) for reg, data in _TASKS[index]]


def workers() -> int:
    """Worker processes for the sections: the usable cores, at most 4
    (`ATTNBENCH_REPORT_WORKERS` overrides; 1 builds in this process)."""
    import os

    env = os.environ.get("ATTNBENCH_REPORT_WORKERS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, min(4, len(os.sched_getaffinity(0))))


def run_tasks(tasks: list[Task]) -> list[list[Section | None]]:
    """Each task's sections, built in forked worker processes (the rows are inherited, not
    sent), or here when one worker is all there is or fork is not available."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    n = min(workers(), len(tasks))
    if n <= 1 or "fork" not in mp.get_all_start_methods():
        return [[_build(reg, data) for reg, data in task] for task in tasks]
    from attnbench.report.plots import preload

    preload()  # imported once here, not once per worker
    _TASKS[:] = tasks
    # The longest first, so no worker is left with one long task at the end: the tasks of
    # several sections (a shared cache), then the global ones (documents: the replay), then
    # the rest in report order.
    start = sorted(range(len(tasks)), key=lambda i: (-len(tasks[i]), tasks[i][0][0].per_gpu, i))
    try:
        with ProcessPoolExecutor(n, mp_context=mp.get_context("fork")) as pool:
            done = dict(zip(start, pool.map(_run_task, start), strict=True))
    finally:
        _TASKS.clear()
    return [done[i] for i in range(len(tasks))]


def tasks_for(regs: list[RegisteredSection], data: ReportData) -> list[Task]:
    """One task per section, except sections that share a cached value: one task for them."""
    shared: dict[str, Task] = {}
    out: list[Task] = []
    for reg in regs:
        if reg.shares and reg.shares in shared:
            shared[reg.shares].append((reg, data))
            continue
        task = [(reg, data)]
        out.append(task)
        if reg.shares:
            shared[reg.shares] = task
    return out
