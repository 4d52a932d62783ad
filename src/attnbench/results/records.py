"""Typed parts of a result row: latency statistics, the accuracy gate, how the time was
measured (SM clocks included), bytes moved, and the backend's free-form details.

Each record is written exactly as it was read or built: a declared field that was never set is
left out of the JSON (a failure row's accuracy has no `cosine`; a row from before clocks were
logged has no `clocks`), and keys this version does not declare are kept (`extra="allow"`), so
old and new files are interchangeable and nothing a newer attnbench wrote is lost.
"""

from __future__ import annotations

from collections.abc import KeysView
from typing import Any

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer


class Record(BaseModel):
    """Base of the row's records: unknown keys kept, unset fields not written."""

    model_config = ConfigDict(extra="allow")

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            unset = set(type(self).model_fields) - self.model_fields_set
            for key in unset & data.keys():
                del data[key]
        return data


class LatencyStats(Record):
    """`measure.stats.Stats.as_dict()`: the median and its spread over the timed samples."""

    n: int
    median_us: float
    mean_us: float
    std_us: float
    min_us: float
    max_us: float
    p10_us: float
    p90_us: float
    q1_us: float
    q3_us: float
    iqr_us: float
    ci_low_us: float
    """Lower end of the 95% confidence interval of the median."""
    ci_high_us: float
    num_outliers: int
    rel_ci: float | None = None
    """Half-width of the CI over the median; None where it was infinite (a zero median)."""


class AccuracyRecord(Record):
    """`measure.accuracy.Accuracy.as_dict()`: the output against the fp64 reference. The
    errors are None where the output held NaN or Inf (JSON has no spelling for them)."""

    max_abs_err: float | None = None
    rel_l2_err: float | None = None
    """||out - ref|| / ||ref|| over the whole output."""
    cosine: float | None = None
    budget: float | None = None
    nonfinite: int = 0
    passed: bool | None = None
    precision: str = ""
    """The lowest precision on the kernel's output path, which sets the budget."""
    format_rel_l2_err: float | None = None
    """The reference rounded to `precision` against itself: the budget is a factor of it."""
    timed_rel_l2_err: float | None = None
    """The error of the output the timed calls left, checked again after timing."""


class ClockSummary(Record):
    """`measure.clocks.ClockLog.summary()`: the SM clock around the timed batches."""

    source: str = "none"
    """`nvml`, or `none` (then `note` says why)."""
    note: str | None = None
    sm_mhz_min: int | None = None
    sm_mhz_median: int | None = None
    sm_mhz_max: int | None = None
    max_sm_mhz: int | None = None
    throttled_samples: int | None = None
    samples: int | None = None
    slowdowns: list[str] = []


class MeasurementRecord(Record):
    """`measure.engine.Measurement.as_dict()`: how the latency was measured."""

    timer: str = ""
    l2_policy: str = ""
    warmup_runs: int | None = None
    repeats: int | None = None
    converged: bool | None = None
    notes: list[str] = []
    clocks: ClockSummary | None = None


class BytesMoved(Record):
    """`measure.metrics.Bytes.as_dict()`: the minimum bytes the kernel moves, by tensor."""

    q: int = 0
    kv: int = 0
    o: int = 0
    page_table: int = 0
    total: int = 0


class Details(Record):
    """What the backend and the sweep add to a row. The keys readers rely on are typed; any
    other key a backend writes (knobs, `memory`, `tune`...) is kept as it came. Reads like a
    dict too (`get`, `[]`, `in`, `keys`, `dict(details)`, `{**details}`), so code written for
    the dict keeps working."""

    kv_cache: str | None = None
    """How the KV cache was read: `paged`, `contiguous`, `packed`, `prefix:...`."""
    contiguous: bool | None = None
    """Legacy (rows before `kv_cache`): the kernel read a contiguous copy."""
    library: str | None = None
    api: str | None = None
    kernel: str | None = None
    worker: int | None = None
    """Worker process that ran the case (GPU runs)."""
    gpu: int | str | None = None
    """GPU index the worker ran on."""
    extra_bytes: int | None = None
    """Bytes the kernel moves beyond the spec's minimum (padding, a copy...)."""
    workspace_bytes: int | None = None
    plan_mode: str | None = None
    """`cuda-graph` or `eager`: how the library planned the call (`PlannedRun.plan_mode`)."""
    knobs_label: str | None = None
    knobs_ignored: str | None = None
    traceback: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The details as written to the file."""
        data: dict[str, Any] = self.model_dump()
        return data

    def get(self, key: str, default: Any = None) -> Any:
        return self.as_dict().get(key, default)

    def keys(self) -> KeysView[str]:
        return self.as_dict().keys()

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(self, key, value)

    def __contains__(self, key: object) -> bool:
        return key in self.as_dict()

    def __len__(self) -> int:
        return len(self.as_dict())
