"""What a worker is given: a `Job` (one case, the variants to run on it, and the job's kind).

A job's kind says what is done with its case and variants; each kind goes through the sweep's
`run_backend` (plan, accuracy gate, measurement, row), under the same watchdog
(`worker.run_job`):
- none: measure each variant (`sweep.run_case`): `run`, the replay's live steps and
  `replay-validate`;
- `TuneJob`: search each variant's knobs (`tune.tune_case`), rows `<variant>+tuned`;
- `KernelErrorJob`: each variant on a quantised-KV case, its gated output's error against the
  high-precision source beside the gate's (`kernel_error.error_case`): the fp8 study.

Plain values (no torch): the parent builds them and sends them down the worker's pipe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnbench.backends.variant import tuned_name


@dataclass(frozen=True)
class TuneJob:
    """A job of `tune`: search each variant's knobs instead of measuring its default."""

    grid_limit: int
    stage0_ms: float
    budget_s: float | None = None
    """This job's share of the run's time budget (None: no budget); set when handed out."""


@dataclass(frozen=True)
class KernelErrorJob:
    """A job of the fp8 study's kernel part (`run.kernel_error`): the case's KV cache is fp8,
    quantised from a 16-bit source with `scheme`'s scales (`tensor`: one per tensor, as
    `make_inputs` builds it; `token`: one per (token, KV head)); `knobs` apply to each variant
    that has them; `baseline` also runs each variant on the 16-bit source."""

    scheme: str = "tensor"
    knobs: tuple[tuple[str, object], ...] = ()
    baseline: bool = True


JobKind = TuneJob | KernelErrorJob | None


@dataclass(frozen=True)
class Job:
    job_id: int
    spec: dict[str, Any]
    backends: tuple[str, ...]
    attempt: int = 0
    case_id: str = ""
    kind: JobKind = None

    @property
    def tune(self) -> TuneJob | None:
        return self.kind if isinstance(self.kind, TuneJob) else None

    def row_name(self, backend: str) -> str:
        """The name this job's rows carry for `backend` (`<variant>+tuned` when tuning)."""
        return tuned_name(backend) if self.tune is not None else backend
