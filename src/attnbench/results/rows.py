"""The two kinds of line in a results file: the run's `Header` and one `ResultRow` per
(case, backend variant).

A row's parts are typed: the spec is the `WorkloadSpec` that ran, the latency, accuracy,
measurement and bytes are records (`results.records`), and `details` keeps the backend's
free-form keys beside the typed ones. The constructor still takes plain dicts for every part
(as `model_dump` writes them and as the sweep builds them) and validates them into the records;
assigning a dict to a part later (`row.details = {...}`) or `model_copy(update=...)` validates
it the same way. The JSON a row writes has the same keys it was read or built with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from attnbench.backends.variant import Variant
from attnbench.results.records import (
    AccuracyRecord,
    BytesMoved,
    Details,
    LatencyStats,
    MeasurementRecord,
)
from attnbench.workload.spec import WorkloadSpec

SCHEMA_VERSION = 1
MAX_SAMPLES = 256
Status = Literal["ok", "unsupported", "error", "mismatch", "oom", "timeout"]
STATUSES: tuple[str, ...] = ("ok", "unsupported", "error", "mismatch", "oom", "timeout")
FINAL_STATUSES = frozenset({"ok", "unsupported", "mismatch"})
"""Statuses `--resume` does not retry (errors, OOMs and timeouts are retried)."""


class Header(BaseModel):
    """First line of a run (a resumed run appends another): provenance, settings, device and
    the ceilings measured in the run."""

    model_config = ConfigDict(extra="allow")

    type: Literal["header"] = "header"
    schema_version: int = SCHEMA_VERSION
    run_id: str
    provenance: dict[str, Any]
    settings: dict[str, Any] = {}
    device: dict[str, Any] = {}
    ceilings: dict[str, Any] | None = None
    spec_sheet: dict[str, Any] | None = None

    @property
    def gpu(self) -> str:
        """The device's name (from `device`, else the provenance), or `unknown`."""
        name = self.device.get("name") or self.provenance.get("gpu") or "unknown"
        return str(name)


class Footer(BaseModel):
    """Last line of a run (a resumed run appends its own): how long it took and how much of
    that was setup. A run cut short by Ctrl-C (or `timeout -s INT`) writes one too, marked
    `interrupted`; files written before footers existed, and runs killed outright, have none."""

    model_config = ConfigDict(extra="allow")

    type: Literal["footer"] = "footer"
    run_id: str
    wall_s: float
    """From the session's start (workers started, ceilings measured) to its last row."""
    setup_s: float
    """From the session's start until the first job was handed out: worker start, ceilings
    and the prebuild (the compiles a job would otherwise pay on first use)."""
    prebuild: dict[str, Any] | None = None
    """`run.prebuild`'s report: seconds, expected seconds, what each process built and what
    was left to compile on first use, with why; None where no prebuild ran (CPU runs,
    ATTNBENCH_PREBUILD=0)."""
    interrupted: bool = False
    """The run was cut short (Ctrl-C): `wall_s` is up to the interrupt, its rows are partial."""


class ResultRow(BaseModel):
    """One (case, backend variant) outcome. Timing fields are None unless status is `ok`."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    type: Literal["result"] = "result"
    run_id: str
    case_id: str
    backend: str
    """Requested variant, e.g. `flashinfer:tc`."""
    resolved: str = ""
    """What actually ran (FlashInfer's resolved_backend, the SDPA kernel, ...)."""
    status: Status
    reason: str = ""
    spec: WorkloadSpec
    latency_us: float | None = None
    """Median kernel time of one call (one layer)."""
    latency: LatencyStats | None = None
    """Full statistics: median, p10/p90, IQR, 95% CI of the median, outliers."""
    samples_us: list[float] | None = None
    """The timing samples (at most MAX_SAMPLES, evenly thinned), for `compare`'s tests."""
    plan_us: float | None = None
    per_token_ms: float | None = None
    """Model-level decode step on one GPU: plan + num_layers x run, in ms."""
    bytes: BytesMoved | None = None
    flops: int | None = None
    bandwidth_gbps: float | None = None
    tflops: float | None = None
    bandwidth_frac_measured: float | None = None
    """Achieved bandwidth over the copy bandwidth measured in the run (read + write)."""
    bandwidth_frac_read: float | None = None
    """Achieved bandwidth over the streaming-read bandwidth measured in the run."""
    bandwidth_frac_spec: float | None = None
    tflops_frac_measured: float | None = None
    """Achieved FLOP/s over the matmul ceiling measured in the run, of `tflops_ceiling`."""
    tflops_frac_spec: float | None = None
    tflops_ceiling: str | None = None
    """The matmul ceiling both FLOP/s fractions are taken against: `bfloat16`, or `fp8_e4m3` for
    a kernel that multiplies in fp8 (`measure.metrics.mma_dtype`). Rows written before it was
    recorded get it, and their fractions, on reading (`results.legacy.matmul_fractions`)."""
    peak_memory_bytes: int | None = None
    kv_cache_bytes: int | None = None
    accuracy: AccuracyRecord | None = None
    measurement: MeasurementRecord | None = None
    details: Details = Field(default_factory=Details)
    timestamp: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.case_id, self.backend)

    @property
    def library(self) -> str:
        """`flashinfer` of `flashinfer:tc`."""
        variant = Variant.maybe(self.backend)
        return variant.library if variant is not None else self.backend.split(":")[0]

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with `update` validated like an assignment (a dict becomes its record)."""
        out = super().model_copy(deep=deep)
        for name, value in (update or {}).items():
            setattr(out, name, value)
        return out


def thin_samples(samples_us: list[float], limit: int = MAX_SAMPLES) -> list[float]:
    """At most `limit` samples, evenly spaced in measurement order, rounded to 1 ns."""
    step = max(1, -(-len(samples_us) // limit))
    return [round(x, 3) for x in samples_us[::step]]
