"""The typed parts of a replay document that the study and the live check produce: serving
metrics per candidate run, the p99-ITL crossing, padded vs ragged, live validation.

Field names are the document's JSON keys (so every document written since the first replay
still loads). Measured quantities are `Real`: a float whose JSON null (how strict JSON writes
NaN and infinities, and how older documents wrote "no value") reads back as NaN, so readers
test `math.isfinite` and never meet None.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)


def _null_is_nan(value: object) -> object:
    return math.nan if value is None else value


Real = Annotated[float, BeforeValidator(_null_is_nan)]
"""A measured number; NaN where it has no value (written as JSON null)."""


class DocModel(BaseModel):
    """A part of the replay document: keys exactly as written, unknown keys refused."""

    model_config = ConfigDict(extra="forbid")


class LatencyMs(DocModel):
    """Percentiles and mean of a latency, milliseconds."""

    p50: Real
    p90: Real
    p99: Real
    mean: Real


class StepMs(DocModel):
    """Percentiles and mean of the pure-decode step time, milliseconds."""

    p50: Real
    p99: Real
    mean: Real


class TimeSplit(DocModel):
    """Share of the busy time per component of a step."""

    attention_decode: float
    attention_prefill: float
    plan: float
    gemm: float

    @property
    def attention(self) -> float:
        return self.attention_decode + self.attention_prefill


class Extrapolation(DocModel):
    """How far the replayed steps lie beyond the rows the cost model was fitted on."""

    far_steps_frac: float
    """Share of steps beyond 1.5x the fitted range (`stepcost.FAR_EXTRAPOLATION`)."""
    far_time_frac: float
    max_factor: float


class ServingMetrics(DocModel):
    """Metrics of one replay (`summary.summarize`): times in ms, throughput in tokens/s."""

    requests: int
    finished: int
    rejected: int
    steps: int
    makespan_s: float
    itl_ms: LatencyMs
    """Token-weighted inter-token latency."""
    ttft_ms: LatencyMs
    decode_step_ms: StepMs
    """Duration of steps that ran no prefill (the brief's "decode latency per token")."""
    throughput_tok_s: Real
    total_tok_s: Real
    output_tokens: int
    input_tokens: int
    prefix_cached_frac: float
    mean_decode_batch: float
    max_decode_batch: int
    peak_kv_frac: float
    time_frac: TimeSplit
    extrapolated: Extrapolation


CandidateKind = Literal["single", "padded", "hybrid"]


class RunLabel(DocModel):
    candidate: str
    kind: CandidateKind
    rate_scale: float
    rate_req_s: Real


class CandidateRun(ServingMetrics, RunLabel):
    """One candidate replayed at one arrival-rate scale (the label's keys come first)."""


class CandidateInfo(DocModel):
    """How a candidate's steps are costed."""

    name: str
    kind: CandidateKind
    decode_backend: str
    decode_source: str
    prefill_backend: str
    padded_decode: bool


class Crossed(DocModel):
    """p99 ITL crosses the target between the bracket's scales (bisected)."""

    status: Literal["crossed"] = "crossed"
    scale: float
    bracket: tuple[float, float]
    rate_req_s: Real


class NeverCrossed(DocModel):
    """p99 ITL stays under the target up to the largest scale replayed."""

    status: Literal["below"] = "below"
    max_scale: float
    scale: None = None


class AlreadyAbove(DocModel):
    """p99 ITL is over the target already at the smallest scale replayed."""

    status: Literal["above"] = "above"
    min_scale: float
    scale: None = None


Crossing = Annotated[Crossed | NeverCrossed | AlreadyAbove, Field(discriminator="status")]


class PaddedComparison(DocModel):
    """One variant at the main scale: ragged vs padded decode, and padded / ragged."""

    backend: str
    ragged_itl_ms_p50: Real
    padded_itl_ms_p50: Real
    ratio_itl_ms_p50: Real
    ragged_itl_ms_p99: Real
    padded_itl_ms_p99: Real
    ratio_itl_ms_p99: Real
    ragged_decode_step_ms_p50: Real
    padded_decode_step_ms_p50: Real
    ratio_decode_step_ms_p50: Real
    ragged_throughput_tok_s: Real
    padded_throughput_tok_s: Real


class BriefClaim(DocModel):
    """The brief's claim about padded decode that the agents replay tests."""

    itl_before_ms: float = 14.2
    itl_after_ms: float = 138.6
    factor: float = 138.6 / 14.2


class LiveSample(DocModel):
    """One sampled step of one variant measured on the GPU, against the model (one layer)."""

    backend: str
    part: Literal["decode", "prefill"]
    step: int
    case_id: str
    requests: int
    kv_total: int
    kv_max: int
    q_total: int
    status: str
    reason: str
    measured_us: Real
    predicted_us: float
    rel_err: Real
    """predicted / measured - 1; NaN when the step was not measured."""
    measured_plan_us: Real
    predicted_plan_us: float


class LiveError(DocModel):
    """The model's error over one (variant, part)'s sampled steps (fractions)."""

    measured: int
    samples: int
    rel_rmse: Real
    median_abs_err: Real
    max_abs_err: Real
    mean_err: Real


class LiveValidation(DocModel):
    """`--live`: replayed steps measured on the GPU vs the cost model."""

    rows_file: str
    device: str
    samples: list[LiveSample]
    summary: dict[str, LiveError]
    """Keyed `"<variant> <part>"`."""
    worst_rel_rmse: Real
    sampled_from: str = ""
    """The candidate whose replayed steps were sampled."""


class TraceHeldOut(DocModel):
    """A variant's error on one trace's held-out steps (fitted without that trace)."""

    steps: int
    median_abs_err: Real
    p90_abs_err: Real
    meets_target: bool


class ValidatedError(DocModel):
    """A variant's decode model against live GPU steps (`attnbench replay-validate`): drawn
    from several traces (`live`), or each trace's steps judged by models fitted without that
    trace (`leave-one-trace-out`, `replay.loto`)."""

    source: str
    """The validation document."""
    steps: int
    """Drawn steps the GPU measured."""
    median_abs_err: Real
    p90_abs_err: Real
    outside_share: Real
    """Share of the drawn steps beyond the calibration rows' range."""
    meets_target: bool
    """Held out: on every trace."""
    method: str = "live"
    worst_trace: str = ""
    worst_p90_abs_err: Real = math.nan
    """Held out: the largest p90 |error| of any one trace."""
    per_trace: dict[str, TraceHeldOut] = Field(default_factory=dict)

    @model_serializer(mode="wrap")
    def _live_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A live validation writes the keys it always wrote (documents round-trip)."""
        data: dict[str, Any] = handler(self)
        if not self.heldout:
            for key in _HELDOUT_KEYS:
                data.pop(key, None)
        return data

    @property
    def heldout(self) -> bool:
        return self.method == "leave-one-trace-out"

    @property
    def bound(self) -> float:
        """The error a ranking allows: held out, the worst trace's p90 (at least the pooled
        p90); else the p90 over the drawn steps."""
        if self.heldout and math.isfinite(self.worst_p90_abs_err):
            return max(self.worst_p90_abs_err, self.p90_abs_err)
        return self.p90_abs_err


_HELDOUT_KEYS = ("method", "worst_trace", "worst_p90_abs_err", "per_trace")

ErrorSource = Literal["held-out traces p90", "validated p90", "held-out fit", "unknown"]


class CandidateTrust(DocModel):
    """How far to trust one candidate's replay: the error its attention cost carries, and the
    share of its replayed steps beyond the rows the models were fitted on."""

    candidate: str
    decode_backend: str
    prefill_backend: str
    validated: ValidatedError | None
    """None: not validated on live steps (no validation file, or none for this variant)."""
    decode_err: Real
    """Relative error assumed for the decode attention: the validated p90 absolute error, else
    the decode fit's held-out relative RMSE (NaN: unknown)."""
    decode_err_from: ErrorSource
    prefill_err: Real
    """The prefill fit's held-out relative RMSE (live validation times decode steps only)."""
    outside_share: float
    """Share of the replayed steps at the main scale beyond the calibration range."""


class RankEntry(DocModel):
    """One candidate's metric at the main scale, with the range its attention error spans."""

    candidate: str
    value_ms: Real
    low_ms: Real
    """The metric with attention costs lowered by their error (NaN: error unknown)."""
    high_ms: Real
    group: int
    """1 = fastest; candidates sharing a group are not distinguishable."""


class Ranking(DocModel):
    """Candidates ordered by one metric; ties where the difference is inside the error."""

    metric: str
    """`itl_ms.p50`, `ttft_ms.p50`, ... (a field of `ServingMetrics`)."""
    rate_scale: float
    entries: list[RankEntry]


class ReplayTrust(DocModel):
    """How far to trust the replay, per candidate, and its rankings."""

    validation: str | None
    """The validation documents used, `; `-joined (per variant the newest found; None: none
    found or given)."""
    candidates: list[CandidateTrust]
    rankings: list[Ranking]
    notes: list[str] = Field(default_factory=list)


class PairedRank(DocModel):
    """One deployable option of `recommend --engine none` against its default, paired on the
    cases both ran (`deploy.stats`): latency ratios with their 95% CI (NaN: no such cases)."""

    option: str
    """`variant, 16-bit KV, page 16`."""
    variant: str
    rank: int | None
    """1 = the fastest decode and every option whose CI overlaps it; None: no decode cases."""
    decode_ratio: Real
    decode_ci_low: Real
    decode_ci_high: Real
    decode_cases: int
    prefill_ratio: Real
    prefill_ci_low: Real
    prefill_ci_high: Real
    prefill_cases: int


class ReplayAnswer(DocModel):
    """What `recommend --model M --tp T --engine none --trace X` answers on the replay's rows:
    the default, the choice, the options tied with it, the hybrid (prefill, decode) when the
    fastest prefill is another variant, and every option's paired rank."""

    command: str
    weighting: str
    default: str
    choice: str | None
    tied: list[str]
    hybrid: tuple[str, str] | None
    prefill: str | None
    """The fastest prefill call (None: no option has prefill cases)."""
    ranks: list[PairedRank]
    not_deployable: list[str] = Field(default_factory=list)
