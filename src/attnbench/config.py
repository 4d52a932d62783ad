"""Settings: one pydantic-settings class, read from (highest first) CLI flags, ATTNBENCH_*
environment variables, a `.env` file, and `attnbench.toml`, then defaults.

It keeps the brief's fields under the brief's names and defaults (batch_size=32, num_heads=32,
num_kv_heads=8, head_dim=128, context_lengths=[1024, 4096, 16384, 65536], fp8_mode, page_size=16,
device). Library code never reads Settings: the CLI turns them into frozen run configs.
`config_load` reads them from their sources, with one-line errors.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from attnbench.measure.config import DEFAULT_TIMER, TIMERS, MeasureConfig, TimerName
from attnbench.measure.limits import MAX_SEED
from attnbench.workload.spec import KINDS, Kind, KVLayout, normalize_dtype

CONFIG_FILE = "attnbench.toml"
MAX_CONTEXT = 1 << 22
LIMITS = {
    "batch_size": 1 << 16,
    "num_heads": 1024,
    "num_kv_heads": 1024,
    "head_dim": 1024,
    "tp": 1024,
    "append_len": 1 << 16,
    "prefill_tokens": 1 << 24,
    "min_runs": 1 << 20,
    "max_runs": 1 << 20,
    "page_size": 1 << 16,
}
"""Upper bounds that keep a typo from asking for petabytes."""
ENV_PREFIX = "ATTNBENCH_"
OTHER_ENV_VARS = (
    "ATTNBENCH_RESULTS",
    "ATTNBENCH_GIT_SHA",
    "ATTNBENCH_RECHECK_KNOWN_BUGS",
    "ATTNBENCH_PREBUILD",
    "ATTNBENCH_PROFILE",
    "ATTNBENCH_REPORT_WORKERS",
    "ATTNBENCH_FRAME_CACHE",
)
"""`ATTNBENCH_*` environment variables that are not settings: where `report`, `recommend`,
`compare` and `replay` look for results, the commit a copy without .git names in
provenance, the known library bugs to run anyway (`backends.known_bugs`), whether a GPU
run prebuilds its JIT modules (`run.prebuild`, ATTNBENCH_PREBUILD=0 turns it off), the
folder a run's processes write their profiles to (`run.profiling`), and how many processes
build the report's sections (`report.parallel.workers`), and whether the rows frame is kept
on disk between commands (`analysis.frame_cache`, ATTNBENCH_FRAME_CACHE=0 turns it off). Any other
`ATTNBENCH_*` name that is not a setting is an error (a typo would otherwise be ignored); names
without the prefix are other tools' and are left alone."""
_MEASURE = MeasureConfig()
"""The measurement defaults; the settings below take theirs from it."""


def _split(value: Any) -> Any:
    """Accept `a,b,c` (CLI, env) as well as lists (TOML) and JSON lists (env)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            import json

            try:
                return json.loads(text)
            except json.JSONDecodeError:
                raise ValueError(f"not a valid JSON list: {text!r}") from None
        return [v.strip() for v in text.split(",") if v.strip()]
    return value


def _comma_items(value: Any) -> Any:
    """`_split`, and each string of a list split at commas too (repeated flags, each of
    which may hold `a,b`)."""
    value = _split(value)
    if isinstance(value, list):
        return [p for v in value for p in (_split(v) if isinstance(v, str) else [v])]
    return value


def _unique(values: Any) -> Any:
    """A list without repeats, in first-seen order (`--kind decode --kind decode` runs each
    case once); anything else as it is, for the type check to judge."""
    return (
        [v for i, v in enumerate(values) if v not in values[:i]]
        if isinstance(values, list)
        else values
    )


def usable_cpus() -> int:
    """CPU cores this process may run on (`run.plan.usable_cpus`)."""
    from attnbench.run.plan import usable_cpus as cores

    return cores()


def _split_semicolon(value: Any) -> Any:
    """Length distributions contain commas (`1024,4096`); several are separated by `;`."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return _split(text)
        return [v.strip() for v in text.split(";") if v.strip()]
    if isinstance(value, list):  # repeated CLI flags, each of which may hold `a;b`
        parts = [p for v in value for p in (v.split(";") if isinstance(v, str) else [v])]
        # non-strings pass through for the type check to reject with a clear message
        return [
            p.strip() if isinstance(p, str) else p
            for p in parts
            if not isinstance(p, str) or p.strip()
        ]
    return value


class Settings(BaseSettings):
    """Every knob of `attnbench run`. Field docstrings are the help text of `attnbench config`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        env_file_encoding="utf-8",
        toml_file=CONFIG_FILE,
        dotenv_filtering="only_existing",  # unknown ATTNBENCH_* keys: `check_environment`
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=True,
    )

    # -- the brief's fields -------------------------------------------------------------------
    batch_size: int = 32
    """Concurrent requests per batch."""
    num_heads: int = 32
    """Query heads (FlashInfer: num_qo_heads) per GPU."""
    num_kv_heads: int = 8
    """KV heads per GPU (grouped-query attention when fewer than num_heads)."""
    head_dim: int = 128
    """Dimension of each head."""
    context_lengths: Annotated[list[int], NoDecode] = [1024, 4096, 16384, 65536]
    """KV lengths of the uniform batches (one case per length)."""
    fp8_mode: bool = True
    """Also run an fp8 e4m3 KV cache beside the 16-bit one (when kv_dtype is auto)."""
    page_size: int = 16
    """Tokens per KV-cache page."""
    device: str = "auto"
    """auto (first GPU, else CPU), cpu, cuda or cuda:N."""

    # -- workload -----------------------------------------------------------------------------
    model: str | None = None
    """Take heads and layers from a known model (see `attnbench models`), sharded by tp."""
    tp: int = 1
    """Tensor-parallel degree: each GPU runs num_heads / tp query heads."""
    kinds: Annotated[list[Kind], NoDecode] = ["decode"]
    """Workload kinds: decode, prefill, append."""
    lengths: Annotated[list[str] | None, NoDecode] = None
    """Length distributions (see `attnbench lengths`), `;`-separated; default:
    context_lengths plus the brief's mixed 256..64k batch."""
    dtype: str = "bfloat16"
    """Query/output dtype: float16 or bfloat16."""
    kv_dtype: str = "auto"
    """KV-cache dtype: auto (= dtype, plus fp8_e4m3 when fp8_mode), float16, bfloat16,
    fp8_e4m3, fp8_e5m2."""
    kv_layout: KVLayout = "NHD"
    """KV-cache layout: NHD or HND."""
    append_len: int = 16
    """Query tokens per request for kind=append."""
    prefill_tokens: int = 32768
    """For prefill, batch size is capped so batch x length stays within this many tokens."""
    seed: int = 0
    """Seed of every random input."""

    # -- what to run --------------------------------------------------------------------------
    suite: str | None = None
    """A suite name (see `attnbench suites`) or TOML path; overrides the workload fields."""
    backends: Annotated[list[str], NoDecode] = ["all"]
    """Backends or variants (`flashinfer`, `flashinfer:tc`, `sdpa:math`...), or all."""
    out: Path | None = None
    """Results file (JSONL); default: a new file in runs/ (or $ATTNBENCH_RESULTS) named after
    the time, the device and the suite."""
    resume: bool = False
    """Skip cases already finished in --out."""

    # -- where it runs ------------------------------------------------------------------------
    gpus: str | None = None
    """Worker processes on GPUs: all, N (the first N), or a list like 0,1 (0,0 puts two
    workers on GPU 0). Default: one worker on the --device GPU."""
    workers: int = 0
    """CPU worker processes (0: run in this process). GPU runs always use workers."""
    case_timeout_s: float = 600.0
    """Kill a (case, variant) whose run and measurement take longer than this in a worker
    (0: no limit)."""
    plan_timeout_s: float = 1800.0
    """Limit for a variant's plan, where libraries JIT-compile kernels on first use."""
    ray: str | None = None
    """Run cases as Ray tasks on this cluster address (`local` starts one here)."""

    # -- measurement --------------------------------------------------------------------------
    # (defaults declared once, in `MeasureConfig`)
    timer: TimerName = DEFAULT_TIMER
    """auto (CUDA graph where capturable, else CUDA events; perf_counter on CPU), cpu,
    cuda-event, cuda-graph."""
    cold_l2: bool = _MEASURE.cold_l2
    """Flush L2 before each timed call."""
    warmup_ms: float = _MEASURE.warmup_ms
    min_runs: int = _MEASURE.min_runs
    max_runs: int = _MEASURE.max_runs
    max_time_ms: float = _MEASURE.max_time_ms
    """Timed work per case before giving up on the noise target."""
    target_rel_ci: float = _MEASURE.target_rel_ci
    """Stop when the median's 95% CI half-width is within this fraction of it."""

    # -- validation ---------------------------------------------------------------------------
    @field_validator("context_lengths", "kinds", mode="before")
    @classmethod
    def _comma_lists(cls, v: Any) -> Any:
        return _unique(_comma_items(v))

    @field_validator("backends", mode="before")
    @classmethod
    def _backend_names(cls, v: Any) -> Any:
        """Names as `select_backends` matches them (lower case); `all` stands alone."""
        names = _comma_items(v)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return names
        names = _unique([n.strip().lower() for n in names])
        if not names:
            raise ValueError("is empty: name a backend or variant (e.g. sdpa:math), or all")
        if "all" in names and len(names) > 1:
            others = ", ".join(n for n in names if n != "all")
            raise ValueError(
                f"all (every variant that runs here) cannot be combined with {others}; "
                "give all alone, or name each variant to run"
            )
        return names

    @field_validator("lengths", mode="before")
    @classmethod
    def _length_list(cls, v: Any) -> Any:
        return _unique(_split_semicolon(v))

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        return normalize_dtype(v, allow_fp8=False)

    @field_validator("kv_dtype")
    @classmethod
    def _kv_dtype(cls, v: str) -> str:
        return "auto" if v.strip().lower() == "auto" else normalize_dtype(v, field="kv_dtype")

    @field_validator("kv_layout", mode="before")
    @classmethod
    def _layout(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        d = v.strip().lower()
        ok = d in ("auto", "cpu", "cuda") or (d.startswith("cuda:") and d[5:].isdigit())
        if not ok:
            raise ValueError("allowed: auto, cpu, cuda, cuda:N")
        return d

    @field_validator(
        "batch_size",
        "num_heads",
        "num_kv_heads",
        "head_dim",
        "tp",
        "append_len",
        "prefill_tokens",
        "min_runs",
        "max_runs",
    )
    @classmethod
    def _positive(cls, v: int, info: ValidationInfo) -> int:
        limit = LIMITS.get(info.field_name or "", 1 << 31)
        if not 0 < v <= limit:
            raise ValueError(f"must be a positive integer up to {limit}")
        return v

    @field_validator("seed")
    @classmethod
    def _seed(cls, v: int) -> int:
        if not 0 <= v <= MAX_SEED:
            raise ValueError(f"must be an integer from 0 to {MAX_SEED}")
        return v

    @field_validator("workers")
    @classmethod
    def _workers(cls, v: int) -> int:
        if v < 0:
            raise ValueError("allowed: 0 (run in this process) or more worker processes")
        return v  # more than the cores: capped where cases are placed (`run.plan.cap_workers`)

    @field_validator("case_timeout_s", "plan_timeout_s")
    @classmethod
    def _timeout(cls, v: float) -> float:
        if not (v >= 0 and math.isfinite(v)):
            raise ValueError("must be 0 (no limit) or a positive finite number of seconds")
        return v

    @field_validator("warmup_ms", "max_time_ms", "target_rel_ci")
    @classmethod
    def _positive_float(cls, v: float) -> float:
        if not (v > 0 and math.isfinite(v)):
            raise ValueError("must be a positive finite number")
        return v

    @field_validator("out", mode="before")
    @classmethod
    def _out_path(cls, v: Any) -> Any:
        if isinstance(v, str | Path) and not str(v).strip():
            raise ValueError(
                "is empty; give a file path, or leave it unset for a new file in runs/"
            )
        return v

    @field_validator("context_lengths")
    @classmethod
    def _lengths_positive(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("needs at least one length")
        if any(not 0 < n <= MAX_CONTEXT for n in v):
            raise ValueError(f"every length must be a positive integer up to {MAX_CONTEXT}")
        return v

    @field_validator("page_size")
    @classmethod
    def _power_of_two(cls, v: int) -> int:
        if v <= 0 or v & (v - 1):
            raise ValueError("must be a power of two (1, 2, 4, ..., 16, 32, 64...)")
        if v > LIMITS["page_size"]:
            raise ValueError(f"must be at most {LIMITS['page_size']} tokens per page")
        return v

    @field_validator("model")
    @classmethod
    def _model(cls, v: str | None) -> str | None:
        if v is None:
            return None
        from attnbench.workload.models import get_model

        model = get_model(v)
        if (why := model.unsupported_reason()) is not None:
            raise ValueError(why)  # logit soft-cap: not run yet
        return model.name

    @model_validator(mode="after")
    def _heads(self) -> Settings:
        if self.model is None and self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} is not divisible by num_kv_heads="
                f"{self.num_kv_heads}; allowed num_kv_heads: divisors of {self.num_heads}"
            )
        if self.model is not None:
            from attnbench.workload.models import get_model, layer_shapes

            layer_shapes(get_model(self.model), self.tp)  # MLA and layer kinds included
        if self.min_runs > self.max_runs:
            raise ValueError(f"min_runs={self.min_runs} exceeds max_runs={self.max_runs}")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            env_settings,
            dotenv_settings,
            TomlConfigSettingsSource(settings_cls),
        )

    # -- conversions --------------------------------------------------------------------------
    def measure_config(self) -> MeasureConfig:
        return MeasureConfig(
            timer=self.timer,
            cold_l2=self.cold_l2,
            warmup_ms=self.warmup_ms,
            min_runs=self.min_runs,
            max_runs=self.max_runs,
            max_time_ms=self.max_time_ms,
            target_rel_ci=self.target_rel_ci,
        )

    def kv_dtypes(self) -> list[str]:
        if self.kv_dtype != "auto":
            return [self.kv_dtype]
        return [self.dtype] + (["fp8_e4m3"] if self.fp8_mode else [])


__all__ = ["CONFIG_FILE", "ENV_PREFIX", "KINDS", "TIMERS", "Settings"]
