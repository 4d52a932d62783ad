"""Fault injection: every failure a backend can have becomes a row, and the sweep goes on."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnbench.cli.run import execute
from attnbench.results import read_results

pytestmark = pytest.mark.usefixtures("isolated")

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
        "timer": "fake",
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


def test_in_process_faults_become_rows(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    backends = ["reference", *FAULTS]
    execute(_cli(out, backends))
    _check(out, backends)


@pytest.mark.slow
def test_worker_pool_survives_hangs_and_crashes(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    backends = ["reference", "faulty:hang", "faulty:slowplan", "faulty:crash", "faulty:nan"]
    t0 = time.monotonic()
    execute(_cli(out, backends, workers=2, case_timeout_s=3.0, plan_timeout_s=4.0))
    _check(out, backends)
    assert time.monotonic() - t0 < 120
    rows = read_results(out).rows
    assert {r.details.get("worker") for r in rows if r.status == "ok"} <= {0, 1}


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
        "--timer",
        "fake",
        "--out",
        str(out),
        "-b",
        "reference",
        "-b",
        "faulty:hang",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
    kept = read_results(out).rows
    assert [r.backend for r in kept] == ["reference"]
    res = subprocess.run(
        [*args[:-4], "-b", "reference", "--resume"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stdout + res.stderr
    rows = read_results(out).rows
    assert sorted(r.spec.kv_lens[0] for r in rows) == [32, 48, 64]
