"""`ATTNBENCH_PROFILE=DIR`: each process of a run (the parent and every worker) writes its
cProfile statistics to `DIR/<role>-<pid>.prof` when it ends, to read with `python -m pstats`.
A developer's switch to find where a run's time goes off the GPU; off unless set."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PROFILE_ENV = "ATTNBENCH_PROFILE"


@contextmanager
def profiled(role: str) -> Iterator[None]:
    """Profile the block when `ATTNBENCH_PROFILE` names a folder; else nothing."""
    folder = os.environ.get(PROFILE_ENV, "").strip()
    if not folder:
        yield
        return
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    try:
        yield
    finally:
        prof.disable()
        Path(folder).mkdir(parents=True, exist_ok=True)
        prof.dump_stats(str(Path(folder) / f"{role}-{os.getpid()}.prof"))
