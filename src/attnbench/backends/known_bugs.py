"""Known library bugs as refusals decided in `check()`, so no kernel is built or crashed.

A `KnownBug` names the library version it was seen on, what the kernel did (a wrong answer, an
illegal memory access that loses the CUDA context) and where that is shown:

- `evidence`: the committed result row that showed it (file, case, variant, status). With it,
  every case the bug applies to is refused on that version, the reason citing the row.
- no evidence yet (the first run on a device): a bug that only gives wrong answers refuses
  nothing, so the run records them as `mismatch` rows; a bug that crashes refuses every case
  but its `witness` (one case, e.g. the shape the bug was reported on), so the run records the
  crash once, as an `error` row, instead of losing a worker on each case. Once that row is
  committed, `evidence` names it.

A bug is lifted when the installed version differs from `seen_on` (a new release is checked
again, not assumed broken), and on demand: `ATTNBENCH_RECHECK_KNOWN_BUGS=<key>[,<key>...]` (or
`all`) runs the cases anyway, to re-check a bug on the same version.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

from attnbench.backends.base import Unsupported
from attnbench.workload.spec import WorkloadSpec

RECHECK_ENV = "ATTNBENCH_RECHECK_KNOWN_BUGS"


@dataclass(frozen=True)
class Evidence:
    """The committed row that showed a bug: `path` (relative to the repository root), its
    `case_id`, the `backend` variant and its `status` (`mismatch`, `error`)."""

    path: str
    case_id: str
    backend: str
    status: str

    def cite(self) -> str:
        return f"{self.path}: {self.backend} on {self.case_id} ({self.status})"


@dataclass(frozen=True)
class KnownBug:
    key: str
    """Short name, for the override (`ATTNBENCH_RECHECK_KNOWN_BUGS=<key>`)."""
    distribution: str
    """The library's installed distribution name (`flashinfer-python`)."""
    seen_on: str
    """The version the bug was seen on: refused there only."""
    what: str
    """What the kernel does, for the reason: `gives a wrong answer (...)`."""
    source: str
    """Where else it is reported (an upstream issue, a direct reproduction)."""
    crashes: bool
    """True when the failure loses the CUDA context (an illegal memory access)."""
    witness: Callable[[WorkloadSpec], bool]
    """The case that still runs while there is no evidence, so the first run records the bug."""
    witness_backend: str
    """The variant whose row on the witness case is the evidence (`flashinfer:tc`)."""
    witness_text: str
    evidence: Evidence | None = None


@functools.cache
def installed_version(distribution: str) -> str | None:
    """The installed version of `distribution` (from its metadata: nothing is imported)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def rechecked() -> set[str]:
    """Bug keys the user asked to run anyway ($ATTNBENCH_RECHECK_KNOWN_BUGS; `all`: every one)."""
    raw = os.environ.get(RECHECK_ENV, "")
    return {k.strip() for k in raw.split(",") if k.strip()}


def refusal(bug: KnownBug, who: str, spec: WorkloadSpec) -> Unsupported | None:
    """Why `who` refuses `spec` for `bug` (which applies to it), or None: another version is
    installed, the user asked to re-check it, or it waits for its evidence (module docstring)."""
    version = installed_version(bug.distribution)
    if version != bug.seen_on:
        return None
    lifts = rechecked()
    if bug.key in lifts or "all" in lifts:
        return None
    head = f"{who}: known bug of {bug.distribution} {version}: {bug.what}"
    rerun = f"{RECHECK_ENV}={bug.key} runs it anyway"
    if bug.evidence is not None:
        return Unsupported(
            f"{head}; measured: {bug.evidence.cite()}; lifted on another {bug.distribution} "
            f"version, or {rerun}"
        )
    if not bug.crashes or bug.witness(spec):
        return None
    return Unsupported(
        f"{head} ({bug.source}); the witness case ({bug.witness_text}) records it, the other "
        f"cases are refused so the CUDA context is lost once; {rerun}"
    )
