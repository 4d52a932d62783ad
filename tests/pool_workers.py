"""Worker entry points for the worker-pool tests: they speak the pool's protocol without torch
or kernels, so a pool of them starts in a fraction of a second. Spawned children import this
module by name (pytest puts tests/ on sys.path, and spawn passes sys.path on)."""

from __future__ import annotations

import os
import random
import struct
import time
from multiprocessing.connection import Connection

from attnbench.measure.config import MeasureConfig
from attnbench.run.worker import (
    Job,
    JobDone,
    Planned,
    Ready,
    RowDone,
    Started,
    Trial,
    WorkerSlot,
)


def spec(job_id: int) -> dict[str, object]:
    """A tiny decode case whose one context length names the job."""
    return {
        "kind": "decode",
        "num_qo_heads": 2,
        "num_kv_heads": 1,
        "head_dim": 8,
        "kv_lens": [job_id + 1],
        "qo_lens": [1],
    }


def row(run_id: str, job: Job, backend: str, payload: int) -> dict[str, object]:
    return {
        "type": "result",
        "run_id": run_id,
        "case_id": f"case{job.job_id}",
        "backend": backend,
        "status": "ok",
        "spec": job.spec,
        "details": {"payload": "x" * payload},
    }


def chatty(slot: WorkerSlot, run_id: str, cfg: MeasureConfig, conn: Connection) -> None:
    """Answers every variant with a row of a random size up to 1 MiB (several pipe buffers,
    so a kill often lands halfway through a message)."""
    rng = random.Random(os.getpid())
    conn.send(Ready({"name": "fake"}, {"copy_bandwidth_gbps": 1.0}))
    while (job := conn.recv()) is not None:
        for backend in job.backends:
            conn.send(Started(job.job_id, backend))
            time.sleep(rng.uniform(0, 0.004))
            conn.send(Planned(job.job_id, backend))
            conn.send(RowDone(job.job_id, row(run_id, job, backend, rng.randrange(1 << 20))))
        conn.send(JobDone(job.job_id))


def cuts_a_message(slot: WorkerSlot, run_id: str, cfg: MeasureConfig, conn: Connection) -> None:
    """Starts a variant, writes the first bytes of a 1 MB message and dies: what a worker
    killed mid-write leaves in its pipe."""
    conn.send(Ready({"name": "fake"}, {"copy_bandwidth_gbps": 1.0}))
    job = conn.recv()
    conn.send(Started(job.job_id, job.backends[0]))
    os.write(conn.fileno(), struct.pack("!i", 1_000_000) + b"\x80\x05partial")
    os._exit(9)


def never_ready(slot: WorkerSlot, run_id: str, cfg: MeasureConfig, conn: Connection) -> None:
    """Dies while starting (a broken driver, a library that crashes on import)."""
    os._exit(3)


def silent(slot: WorkerSlot, run_id: str, cfg: MeasureConfig, conn: Connection) -> None:
    """Never says it is ready."""
    time.sleep(3600)


def dies_mid_tune(slot: WorkerSlot, run_id: str, cfg: MeasureConfig, conn: Connection) -> None:
    """Tunes: variant `a` sends one trial and then the process dies (every time); any other
    variant is tuned at once, its plan a 3 s first-use compile."""
    conn.send(Ready({"name": "fake"}, {"copy_bandwidth_gbps": 1.0}))
    while (job := conn.recv()) is not None:
        assert job.tune is not None
        for backend in job.backends:
            conn.send(Started(job.job_id, backend, first_use=True))
            conn.send(Planned(job.job_id, backend, plan_s=3.0))
            conn.send(Trial(job.job_id, row(run_id, job, backend, 10)))
            if backend == "a":
                os._exit(9)
            tuned = row(run_id, job, backend + "+tuned", 10)
            tuned["details"] = {"budget_s": job.tune.budget_s}
            conn.send(RowDone(job.job_id, tuned))
        conn.send(JobDone(job.job_id))


def leaves_after_each_row(
    slot: WorkerSlot, run_id: str, cfg: MeasureConfig, conn: Connection
) -> None:
    """Answers one variant and exits without JobDone: what a worker does when a variant's error
    poisoned its CUDA context (`sweep.DeviceLost`). The job's other variants must go to a fresh
    worker."""
    conn.send(Ready({"name": "fake"}, {"copy_bandwidth_gbps": 1.0}))
    job = conn.recv()
    if job is None:
        return
    backend = job.backends[0]
    conn.send(Started(job.job_id, backend))
    conn.send(Planned(job.job_id, backend))
    conn.send(RowDone(job.job_id, row(run_id, job, backend, 10)))
