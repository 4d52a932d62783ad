"""The replay document: what `attnbench replay --out` writes, the CLI's tables print and the
report's "Serving replay" section renders, as one typed model.

    ReplayDocument
      schema, gpu, trace (TraceInfo), deployment (DeploymentInfo), scheduler (SchedulerConfig),
      gemm (GemmInfo), models / padded_models (CostModelInfo), sources, config (ReplayConfig),
      base_rate_req_s, rate_scales, itl_target_ms, candidates, runs (CandidateRun), crossing,
      main_candidate, main_scale, padded_vs_ragged, brief_claim, notes,
      live (LiveValidation, with --live), trust (ReplayTrust), provenance (commit, libraries,
      host, GPU)

The JSON keys are those of every document written since `attnbench.replay/1` (the committed
`results/h200-replay-*.json` load through this model); `provenance` and `trust` are new and
optional. The parts the study and the live check produce are in `replay.records`.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from attnbench.replay.costmodel import AttentionCostModel
from attnbench.replay.deployment import GIB, Deployment
from attnbench.replay.gemm import GemmRoofline
from attnbench.replay.records import (
    BriefClaim,
    CandidateInfo,
    CandidateRun,
    Crossing,
    DocModel,
    LiveValidation,
    PaddedComparison,
    Real,
    ReplayAnswer,
    ReplayTrust,
)
from attnbench.replay.simresult import SchedulerConfig
from attnbench.results import read_json

SCHEMA = "attnbench.replay/1"

DEPLOYMENT_FIELDS = tuple(f.name for f in fields(Deployment))


class ReplayConfig(BaseModel):
    """What to replay and how: the trace, the deployment (model, TP, dtypes, memory), the
    scheduler's limits and the study's options. In the document's `config` block the
    deployment's fields sit beside the others (as they always have)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trace: str
    limit: int | None = None
    seed: int = 0
    deployment: Deployment = Field(default_factory=Deployment)
    max_batch: int | None = None
    """None: 256 (vLLM's max_num_seqs), or N for the synthetic `agents:N` (all N concurrent)."""
    token_budget: int = 8192
    chunked_prefill: bool = True
    prefix_cache: bool | None = None
    """None: on when the trace has prefix-block hashes (Mooncake)."""
    spread_arrivals: bool = True
    backends: tuple[str, ...] = ()
    """Variants to replay (library names select all their variants); empty: every variant."""
    rate_scales: tuple[float, ...] = (1.0,)
    itl_target_ms: float | None = None
    bisect_steps: int = 4
    hybrid: tuple[str, str] | None = None
    """(prefill variant, decode variant); None: with `auto_hybrid`, `hybrid.recommend` on the
    rows where both parts are deployable (untuned, paged), else the least attention time."""
    hybrid_source: str = Field("--hybrid", exclude_if=lambda v: v == "--hybrid")
    """Who chose `hybrid` (the replay's notes say it). This and the next two are left out of
    the document at their defaults, as documents written before them have none."""
    auto_hybrid: bool = Field(True, exclude_if=lambda v: v)
    """False: a hybrid only when `hybrid` names one (`attnbench replay` passes the one
    `recommend --engine none` decides, or none)."""
    error_bands: bool = Field(True, exclude_if=lambda v: v)
    """Rank the candidates by their replayed metrics within their attention error (two more
    replays per candidate, `replay.trust`); `attnbench replay` ranks by the paired statistics
    of the rows instead (`recommend`'s) and turns this off."""
    padded: bool | None = None
    """None: on for the synthetic agents scenario."""
    gpu: str | None = None
    copy_gbps: float | None = None
    matmul_tflops: float | None = None
    allreduce_us: float = 0.0
    allreduce_gbps: float = 0.0

    @model_validator(mode="before")
    @classmethod
    def _nest_deployment(cls, data: Any) -> Any:
        """The flat `config` block of a document: the deployment's fields into `deployment`."""
        if isinstance(data, dict) and "deployment" not in data:
            dep = {k: data[k] for k in DEPLOYMENT_FIELDS if k in data}
            rest = {k: v for k, v in data.items() if k not in DEPLOYMENT_FIELDS}
            return rest | {"deployment": dep}
        return data

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in handler(self).items():
            if key == "deployment":
                out.update(value)
                if value.get("weight_dtype") == value.get("dtype"):
                    del out["weight_dtype"]  # the default: documents before it stay as they were
            else:
                out[key] = value
        return out


class TraceInfo(DocModel):
    name: str
    limit: int | None
    requests: int
    synthetic: bool
    """Generated traffic (the brief's `agents:N`, a `synthetic:` family), not a recorded trace."""
    rate_req_s: Real
    tied_arrivals: int
    spread_arrivals: bool
    has_prefix_hashes: bool
    input_tokens: int
    output_tokens: int
    max_input: int


class DeploymentInfo(DocModel):
    """The deployment with what follows from it: per-GPU heads, weights and the KV budget."""

    model: str
    tp: int
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    num_layers: int
    dtype: str
    kv_dtype: str
    page_size: int
    gpu_mem_gib: float
    mem_utilization: float
    reserve_gib: float
    weight_gib: float
    kv_cache_gib: float
    kv_bytes_per_token: int
    kv_pages: int
    kv_tokens: int

    @classmethod
    def of(cls, dep: Deployment) -> DeploymentInfo:
        from attnbench.replay.kinds import main_kind

        s = dep.kinds[main_kind(dep.kinds)]
        return cls(
            model=dep.model,
            tp=dep.tp,
            num_qo_heads=s.num_qo_heads,
            num_kv_heads=s.num_kv_heads,
            head_dim=s.head_dim,
            num_layers=dep.num_layers,
            dtype=dep.dtype,
            kv_dtype=dep.kv_dtype,
            page_size=dep.page_size,
            gpu_mem_gib=dep.gpu_mem_gib,
            mem_utilization=dep.mem_utilization,
            reserve_gib=dep.reserve_gib,
            weight_gib=round(dep.weight_bytes / GIB, 2),
            kv_cache_gib=round(dep.kv_cache_bytes / GIB, 2),
            kv_bytes_per_token=dep.kv_bytes_per_token,
            kv_pages=dep.kv_pages,
            kv_tokens=dep.kv_pages * dep.page_size,
        )


class GemmInfo(DocModel):
    """The non-attention roofline (`replay.gemm`) and where its ceilings came from."""

    copy_gbps: float
    matmul_tflops: float
    allreduce: str
    method: str
    ceilings_from: str

    @classmethod
    def of(cls, gemm: GemmRoofline, ceilings_from: str) -> GemmInfo:
        return cls.model_validate(gemm.describe() | {"ceilings_from": ceilings_from})


class FitInfo(DocModel):
    """One fitted cost term (`replay.fit.LinearFit`)."""

    features: list[str]
    coef: list[float]
    lo: list[Real]
    hi: list[Real]
    n_rows: int
    train_rel_rmse: Real
    cv_rel_rmse: Real
    """Root-mean-square relative error on held-out rows (NaN with fewer than 3 rows)."""
    cv_max_rel_err: Real
    dropped: list[str]


class CostModelInfo(DocModel):
    """One variant's attention cost model (`replay.costmodel.AttentionCostModel`)."""

    backend: str
    shape: str
    padded: bool
    source: str
    decode: FitInfo | None
    prefill: FitInfo | None
    plan_decode: FitInfo | None
    plan_prefill: FitInfo | None
    decode_bandwidth_gbps: Real
    """KV bytes per microsecond the decode fit implies (NaN: no KV-bytes term)."""
    prefill_tflops: Real
    notes: list[str]
    kernel_plan: dict[str, Any] | None = Field(None, exclude_if=lambda v: v is None)
    """The split-KV plan the decode features follow (`replay.kernelplan`); None in documents
    written before it was modelled."""
    ceiling_gbps: Real | None = Field(None, exclude_if=lambda v: v is None)
    """The bandwidth the decode fit was bounded by (absent: not bounded)."""

    @classmethod
    def table(cls, models: dict[str, AttentionCostModel]) -> list[CostModelInfo]:
        return [cls.model_validate(m.as_dict()) for _, m in sorted(models.items())]


class ReplayDocument(DocModel):
    """`attnbench replay --out`: the replay of one trace, every candidate at every rate scale."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    doc_schema: str = Field(SCHEMA, alias="schema")
    gpu: str
    """The GPU whose rows and ceilings the models come from."""
    trace: TraceInfo
    deployment: DeploymentInfo
    scheduler: SchedulerConfig
    gemm: GemmInfo
    models: list[CostModelInfo]
    padded_models: list[CostModelInfo]
    sources: list[str]
    config: ReplayConfig
    base_rate_req_s: Real
    rate_scales: list[float]
    itl_target_ms: float | None
    candidates: list[CandidateInfo]
    runs: list[CandidateRun]
    crossing: dict[str, Crossing]
    main_candidate: str
    """The candidate `--live` samples: the hybrid when there is one."""
    main_scale: float
    padded_vs_ragged: list[PaddedComparison]
    brief_claim: BriefClaim = Field(default_factory=BriefClaim)
    notes: list[str]
    live: LiveValidation | None = None
    trust: ReplayTrust | None = Field(None, exclude_if=lambda v: v is None)
    """Per candidate, how far to trust it, and rankings with ties inside the error
    (`replay.trust`); None in documents written before it was recorded."""
    answer: ReplayAnswer | None = Field(None, exclude_if=lambda v: v is None)
    """`recommend --engine none`'s answer on the replay's rows and traffic, with the paired
    rank of every deployable option (`attnbench replay`); None in documents before it."""
    provenance: dict[str, Any] | None = None
    """Where the replay ran (`results.provenance`: attnbench, commit, libraries, host, GPU);
    None in documents written before it was recorded."""

    def runs_at(self, scale: float | None = None) -> list[CandidateRun]:
        """The runs at `scale` (default: the main scale)."""
        at = self.main_scale if scale is None else scale
        return [r for r in self.runs if r.rate_scale == at]

    def to_json(self) -> str:
        """Strict JSON (NaN and infinities as null), keys as every replay document has them."""
        exclude = {"live"} if self.live is None else None
        return self.model_dump_json(by_alias=True, indent=1, exclude=exclude) + "\n"


class ReplayDocumentError(ValueError):
    """A file that claims to be a replay document but does not read as one (one line)."""


def is_replay_document(data: object) -> bool:
    return isinstance(data, dict) and data.get("schema") == SCHEMA


def parse_document(data: object, where: str) -> ReplayDocument:
    """`data` (parsed JSON) as a ReplayDocument; ReplayDocumentError names the first bad field."""
    try:
        return ReplayDocument.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ReplayDocumentError(
            f"{where}: not a valid replay document: field {loc}: {first['msg']}"
        ) from None


def load_document(path: Path) -> ReplayDocument:
    """Read a replay document; ReplayDocumentError (one line) when it is not one."""
    try:
        data = read_json(path)
    except (OSError, ValueError) as exc:
        raise ReplayDocumentError(f"{path}: not a JSON document ({type(exc).__name__})") from None
    if not is_replay_document(data):
        raise ReplayDocumentError(f"{path}: not a replay document (schema is not {SCHEMA})")
    return parse_document(data, str(path))
