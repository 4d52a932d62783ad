"""The worker pool never hangs and never loses a finished row, whatever happens to its workers:
killed at random moments (also halfway through writing a row), dying while starting, silent."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter

import pytest

import pool_workers
from attnbench.measure.config import MeasureConfig
from attnbench.results import ResultRow
from attnbench.run.plan import Limits
from attnbench.run.pool import PoolEvents, WorkerPool
from attnbench.run.worker import Job, WorkerSlot, WorkerTarget


def _pool(
    target: WorkerTarget,
    workers: int,
    rows: list[ResultRow],
    limits: Limits | None = None,
    ready: list[list[dict[str, object]]] | None = None,
) -> WorkerPool:
    slots = [WorkerSlot(i, None) for i in range(workers)]
    events = PoolEvents(on_row=rows.append, on_ready=(ready if ready is not None else []).append)
    return WorkerPool(slots, "r", MeasureConfig(timer="fake"), events, limits, target=target)


def _jobs(n: int, backends: tuple[str, ...]) -> list[Job]:
    return [Job(i, pool_workers.spec(i), backends) for i in range(n)]


def _run_bounded(pool: WorkerPool, jobs: list[Job], limit_s: float) -> None:
    """pool.run in a thread: a hang fails the test instead of hanging the suite."""
    failure: list[BaseException] = []

    def body() -> None:
        try:
            pool.run(jobs)
        except BaseException as exc:  # re-raised in the test's thread
            failure.append(exc)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(limit_s)
    if t.is_alive():
        for w in list(pool.workers.values()):
            w.proc.kill()
        pytest.fail(f"the pool did not finish within {limit_s:g} s")
    if failure:
        raise failure[0]


def _one_row_each(rows: list[ResultRow], jobs: list[Job]) -> None:
    keys = Counter((r.spec.kv_lens[0] - 1, r.backend) for r in rows)
    expected = {(j.job_id, b) for j in jobs for b in j.backends}
    assert set(keys) == expected
    assert all(n == 1 for n in keys.values()), [k for k, n in keys.items() if n > 1]


def _kill_at_random(pool: WorkerPool, kills: int, seed: int, stop: threading.Event) -> None:
    rng = random.Random(seed)
    done = 0
    while done < kills and not stop.is_set():
        time.sleep(rng.uniform(0.005, 0.15))
        try:
            ready = [w for w in list(pool.workers.values()) if w.ready and w.proc.is_alive()]
        except RuntimeError:  # the dict changed under us: try again
            continue
        if ready:
            pid = rng.choice(ready).proc.pid
            try:
                os.kill(pid, signal.SIGKILL)
                done += 1
            except ProcessLookupError:
                pass


def _chaos_trial(seed: int) -> WorkerPool:
    rows: list[ResultRow] = []
    pool = _pool(pool_workers.chatty, 2, rows)
    jobs = _jobs(6, ("a", "b", "c"))
    stop = threading.Event()
    killer = threading.Thread(target=_kill_at_random, args=(pool, 4, seed, stop), daemon=True)
    killer.start()
    try:
        _run_bounded(pool, jobs, limit_s=60)
    finally:
        stop.set()
        killer.join()
    _one_row_each(rows, jobs)
    for r in rows:
        assert r.status == "ok" or (r.status == "error" and "died twice" in r.reason), r.reason
    return pool


@pytest.mark.slow
def test_kill_at_random_few_trials() -> None:
    for seed in range(3):
        _chaos_trial(seed)


@pytest.mark.soak
def test_kill_at_random_many_trials() -> None:
    cut = 0
    for seed in range(200):
        cut += _chaos_trial(1000 + seed).cut_messages
    assert cut > 0, "no kill landed halfway through a message: the test proves too little"


def test_a_message_cut_by_death_is_end_of_file_not_a_hang() -> None:
    rows: list[ResultRow] = []
    pool = _pool(pool_workers.cuts_a_message, 1, rows)
    jobs = _jobs(1, ("a", "b"))
    _run_bounded(pool, jobs, limit_s=30)
    assert pool.cut_messages >= 2
    _one_row_each(rows, jobs)
    by_backend = {r.backend: r for r in rows}
    assert by_backend["a"].status == "error"
    assert "died twice" in by_backend["a"].reason
    assert by_backend["b"].status == "error"  # b never ran: the worker died in a each time


def test_workers_that_never_start_become_error_rows() -> None:
    rows: list[ResultRow] = []
    ready: list[list[dict[str, object]]] = []
    pool = _pool(pool_workers.never_ready, 2, rows, ready=ready)
    jobs = _jobs(2, ("a",))
    _run_bounded(pool, jobs, limit_s=30)
    _one_row_each(rows, jobs)
    assert all(r.status == "error" and "exited 3 times" in r.reason for r in rows)
    assert "exit code 3" in rows[0].reason
    assert ready == [[]]  # the header is still written (no ceilings)


def test_a_silent_worker_is_given_up_after_the_ready_timeout() -> None:
    rows: list[ResultRow] = []
    pool = _pool(pool_workers.silent, 1, rows, Limits(ready_timeout_s=0.5))
    jobs = _jobs(1, ("a",))
    _run_bounded(pool, jobs, limit_s=30)
    assert [r.status for r in rows] == ["error"]
    assert "did not start within 0.5 s" in rows[0].reason


@pytest.mark.slow
def test_a_worker_that_leaves_after_a_poisoned_row_hands_the_rest_to_a_fresh_one() -> None:
    """DeviceLost: the worker exits after its error row; each other variant of the case runs
    once, on fresh workers, and no row is lost or repeated."""
    rows: list[ResultRow] = []
    pool = _pool(pool_workers.leaves_after_each_row, 1, rows)
    jobs = _jobs(3, ("a", "b", "c"))
    _run_bounded(pool, jobs, limit_s=60)
    _one_row_each(rows, jobs)
    assert all(r.status == "ok" for r in rows)
