"""Time the views a user waits for, on the committed results, against issues 34's and 49's
goals on two cores: `report` (<= 15 s), `recommend` (<= 3 s), `recommend --trace` with a
warm cache (<= 3 s; one untimed run fills the cache first) and `replay` with no arguments
(<= 60 s). Each command runs `--repeat` times (default 3) in a fresh process; prints the wall
and CPU seconds of each run, the median against the goal, and the load average before it (the
machine may be shared). A benchmark that prints figures, not a timed test: this machine's
speed varies run to run (the same report took 24-32 s of CPU in session 16).

    python scripts/bench_views.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

TRACE = ["recommend", "--model", "llama-3.1-8b", "--engine", "vllm", "--trace", "azure-conv"]
VIEWS = [  # (name, arguments, goal in seconds, an untimed run first: the cache warm)
    ("report", ["report", "--out", "{tmp}/report"], 15.0, False),
    ("recommend", ["recommend"], 3.0, False),
    ("recommend --model", ["recommend", "--model", "llama-3.1-8b", "--engine", "vllm"], 3.0, False),
    ("recommend --trace", TRACE, 3.0, True),
    ("replay", ["replay"], 60.0, False),
]


def _time(args: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + system, children) seconds of one `attnbench` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "attnbench", *args],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    repeat = parser.parse_args().repeat
    print(f"{len(os.sched_getaffinity(0))} cores; each view run {repeat} times")
    with tempfile.TemporaryDirectory() as tmp:
        for name, args, goal_s, warm in VIEWS:
            if warm:
                _time(args)
            load = os.getloadavg()[0]
            runs = [_time([a.format(tmp=tmp) for a in args]) for _ in range(repeat)]
            walls = [w for w, _ in runs]
            each = ", ".join(f"{w:.1f} s ({c:.1f} s CPU)" for w, c in runs)
            median = statistics.median(walls)
            verdict = "within" if median <= goal_s else "OVER"
            print(
                f"{name:18} median {median:5.1f} s, {verdict} the {goal_s:g} s goal: {each} "
                f"(load {load:.1f} before)"
            )


if __name__ == "__main__":
    main()
