"""Fault injection: every failure a backend can have becomes a row, and the sweep goes on."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import typer

from attnbench.cli.common import EXIT_NOTHING_RAN
from attnbench.cli.run import execute
from attnbench.results import read_results

pytestmark = pytest.mark.usefixtures("isolated", "fake_timer")

FAULTS = [
    "faulty:nan",
    "faulty:wrong",
    "faulty:raise",
    "faulty:jit",
    "faulty:oom",
    "faulty:unavail",
]
EXPECTED = {
    "reference": ("ok", ""),
    "faulty:nan": ("mismatch", "NaN/Inf"),
    "faulty:wrong": ("mismatch", "exceeds budget"),
    "faulty:raise": ("error", "injected failure"),
    "faulty:jit": ("error", "Ninja build failed"),
    "faulty:oom": ("oom", "out of memory"),
    "faulty:unavail": ("unsupported", "not installed"),
    "faulty:hang": ("timeout", "run took over"),
    "faulty:crash": ("error", "died twice"),
    "faulty:slowplan": ("timeout", "plan (JIT compile) took over"),
}


def _cli(out: Path, backends: list[str], **extra: object) -> dict[str, object]:
    return {
        "device": "cpu",
        "backends": backends,
        "batch_size": 2,
        "lengths": ["32,48"],
        "kv_dtype": "bfloat16",
        "out": out,
        **extra,
    }


def _check(out: Path, backends: list[str], cases: int = 2) -> None:
    rows = read_results(out).rows
    assert len(rows) == cases * len(backends)
    for r in rows:
        status, text = EXPECTED[r.backend]
        assert r.status == status, (r.backend, r.status, r.reason)
        assert text in r.reason
    assert all(r.latency_us is not None for r in rows if r.status == "ok")


def _execute_nothing_ran(cli: dict[str, object]) -> None:
    """Only the fp64 oracle passes beside the faults: the run exits 3 (nothing ran)."""
    with pytest.raises(typer.Exit) as exited:
        execute(cli)
    assert exited.value.exit_code == EXIT_NOTHING_RAN


@pytest.mark.slow
def test_in_process_faults_become_rows(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    backends = ["reference", *FAULTS]
    _execute_nothing_ran(_cli(out, backends))
    _check(out, backends)


@pytest.mark.slow
def test_worker_pool_survives_hangs_and_crashes(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    backends = ["reference", "faulty:hang", "faulty:slowplan", "faulty:crash", "faulty:nan"]
    t0 = time.monotonic()
    _execute_nothing_ran(_cli(out, backends, workers=2, case_timeout_s=3.0, plan_timeout_s=4.0))
    _check(out, backends)
    assert time.monotonic() - t0 < 120
    rows = read_results(out).rows
    assert {r.details.get("worker") for r in rows if r.status == "ok"} <= {0, 1}


def _sigint_default() -> None:
    """Ctrl-C as a terminal gives it: a test run in the background (`pytest ... &`, as a CI
    script may start it) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt
    handler, so the run would sleep through the signal (session 23's CI run did)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_keeps_rows_and_resume_finishes(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    args = [
        sys.executable,
        "-m",
        "attnbench",
        "run",
        "--device",
        "cpu",
        "--batch-size",
        "2",
        "-l",
        "32,48,64",
        "--kv-dtype",
        "bf16",
        "--out",
        str(out),
        "-b",
        "reference",
        "-b",
        "faulty:hang",
    ]
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_sigint_default,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until the first row is on disk
        if out.exists() and len(out.read_text().splitlines()) >= 2:
            break
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert "interrupted" in output
    assert "--resume" in output
    cut = read_results(out)
    assert [r.backend for r in cut.rows] == ["reference"]
    (footer,) = cut.footers  # the cut run's own record of its time
    assert footer.interrupted
    assert 0 < footer.setup_s <= footer.wall_s
    res = subprocess.run(
        [*args[:-4], "-b", "reference", "--resume"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stdout + res.stderr
    done = read_results(out)
    assert sorted(r.spec.kv_lens[0] for r in done.rows) == [32, 48, 64]
    assert [f.interrupted for f in done.footers] == [True, False]


def test_a_poisoned_context_stops_the_case_in_a_worker_not_in_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After an error row, a worker (stop_when_poisoned) checks the CUDA context and stops the
    case when it is poisoned (DeviceLost), so the other variants are not run in it; in-process
    callers (replay-validate, fidelity) keep going and get a row per variant."""
    import attnbench.run.sweep as sweep
    from attnbench.backends import select_backends
    from attnbench.measure.config import MeasureConfig
    from attnbench.measure.hardware import detect
    from attnbench.results import ResultRow
    from attnbench.workload.spec import WorkloadSpec

    def poisoned(row: ResultRow) -> None:
        raise sweep.DeviceLost(f"{row.backend}: {row.reason}")

    monkeypatch.setattr(sweep, "check_device_alive", poisoned)
    spec = WorkloadSpec(
        kind="decode", num_qo_heads=2, num_kv_heads=1, head_dim=16, kv_lens=(32, 48),
        qo_lens=(1, 1), dtype="bfloat16",
    )  # fmt: skip
    backends = select_backends(["faulty:raise", "reference"])
    seen: list[ResultRow] = []
    ctx = sweep.SweepContext(
        run_id="t", info=detect("cpu"), measure_cfg=MeasureConfig(timer="fake"),
        on_row=seen.append, stop_when_poisoned=True,
    )  # fmt: skip
    with pytest.raises(sweep.DeviceLost):
        sweep.run_case(spec, backends, ctx)
    assert [(r.backend, r.status) for r in seen] == [("faulty:raise", "error")]
    rows = sweep.run_case(spec, backends, replace(ctx, stop_when_poisoned=False))
    assert [(r.backend, r.status) for r in rows] == [("faulty:raise", "error"), ("reference", "ok")]
