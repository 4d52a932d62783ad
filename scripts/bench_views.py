"""Time the views a user waits for, on the committed results, against issue 34's goals:
`report` (<= 15 s) and `recommend` (<= 3 s) on two cores. Each command runs `--repeat`
times (default 3) in a fresh process; prints the wall and CPU seconds of each run, and the
median against the goal. A benchmark that prints figures, not a timed test: this machine's
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

VIEWS = [
    ("report", ["report", "--out", "{tmp}/report"], 15.0),
    ("recommend", ["recommend"], 3.0),
    ("recommend --model", ["recommend", "--model", "llama-3.1-8b", "--engine", "vllm"], 3.0),
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
        for name, args, goal_s in VIEWS:
            runs = [_time([a.format(tmp=tmp) for a in args]) for _ in range(repeat)]
            walls = [w for w, _ in runs]
            each = ", ".join(f"{w:.1f} s ({c:.1f} s CPU)" for w, c in runs)
            median = statistics.median(walls)
            verdict = "within" if median <= goal_s else "OVER"
            print(f"{name:18} median {median:5.1f} s, {verdict} the {goal_s:g} s goal: {each}")


if __name__ == "__main__":
    main()
