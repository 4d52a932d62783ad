"""The `attnbench replay-validate` document, read back: typed, and found beside the rows.

    ValidationDocument
      schema, method (live, or leave-one-trace-out with its rule and per_trace errors),
      provenance (gpu on a GPU), traces, sources, target (median, p90, steps),
      models (the cost models validated, as `AttentionCostModel.as_dict`), summary (per variant:
      steps, measured, median / p90 / max absolute error, mean error, share outside the
      calibration range, meets target), steps (every drawn step of every variant)

`replay.validate` writes it; the replay (`replay.trust`) states per variant how far to trust it
and the report draws predicted vs measured per step from it. A file whose `schema` is the
validation's but does not read as one is one line naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from attnbench.replay.records import Real
from attnbench.replay.validate import MIN_STEPS, SCHEMA, TARGET_MEDIAN, TARGET_P90
from attnbench.results import is_document_path, read_json

VALIDATION_GLOB = "*validation*.json*"
"""Names `find_validation` looks for beside the rows (and in their `replay/` folder)."""


class ValidationDocumentError(ValueError):
    """A file that claims to be a validation document but does not read as one (one line)."""


class _Part(BaseModel):
    """Keys as `replay.validate` writes them; keys added later are ignored, not refused."""

    model_config = ConfigDict(extra="ignore")


class ValidationTarget(_Part):
    median_abs_err: float = TARGET_MEDIAN
    p90_abs_err: float = TARGET_P90
    steps: int = MIN_STEPS


class VariantError(_Part):
    """One variant's error over the drawn steps (fractions)."""

    steps: int
    measured: int
    median_abs_err: Real
    p90_abs_err: Real
    max_abs_err: Real
    mean_err: Real
    outside_share: Real
    """Share of the drawn steps beyond the calibration rows' range."""
    meets_target: bool
    """Held out (`method` leave-one-trace-out): every trace meets it."""
    worst_trace: str = ""
    """Held out: the trace with the largest p90 |error| ("" for a live validation)."""
    worst_median_abs_err: Real = math.nan
    worst_p90_abs_err: Real = math.nan
    traces_meeting: int = 0
    traces: int = 0

    @property
    def bound(self) -> float:
        """The error a ranking allows this variant: held out, the worst trace's p90 (at least
        the pooled p90); else the p90 over the drawn steps."""
        if math.isfinite(self.worst_p90_abs_err):
            return max(self.worst_p90_abs_err, self.p90_abs_err)
        return self.p90_abs_err


class ValidatedStep(_Part):
    """One drawn step of one variant: the model's prediction and the GPU's measurement (us)."""

    trace: str
    step: int
    backend: str
    requests: int
    kv_total: int
    kv_max: int
    predicted_us: float
    measured_us: Real
    rel_err: Real
    outside: bool
    kv_lens: list[int] = Field(default_factory=list)
    """The batch's KV lengths (documents written before they were kept have none)."""


class ValidationDocument(_Part):
    doc_schema: str = Field(alias="schema")
    provenance: dict[str, Any] = Field(default_factory=dict)
    traces: list[str] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list)
    target: ValidationTarget = Field(default_factory=ValidationTarget)
    models: list[dict[str, Any]] = Field(default_factory=list)
    summary: dict[str, VariantError]
    steps: list[ValidatedStep]
    method: str = "live"
    """`live` (steps drawn from several traces, models fitted on the rows) or
    `leave-one-trace-out` (`replay.loto`: each trace's steps judged by models fitted without
    it)."""
    rule: str = ""
    live_rows: list[str] = Field(default_factory=list)
    """Held out: the results files of the timed held-out steps."""
    """Held out: the rule that keeps the steps held out (`loto.FORM_RULE`)."""
    per_trace: dict[str, dict[str, VariantError]] = Field(default_factory=dict)
    """Held out: per trace, per variant, its steps' error."""
    misses: list[str] = Field(default_factory=list)
    """Held out: where each (variant, trace) that misses the target misses it."""
    rescored_from: dict[str, Any] | None = None
    """`replay-validate --rescore`: the document whose measured steps were re-predicted (its
    path and provenance); None for a document measured as it stands."""

    @property
    def heldout(self) -> bool:
        return self.method == "leave-one-trace-out"

    @property
    def gpu(self) -> str | None:
        """The GPU the steps were timed on (None when the provenance does not name one); for a
        rescored document, the GPU of the document it re-predicts."""
        source = (self.rescored_from or {}).get("provenance") or self.provenance
        gpu = source.get("gpu") if isinstance(source, dict) else None
        return str(gpu) if gpu else None

    def shape_of(self, backend: str) -> str | None:
        """The shape (`ShapeKey.describe`) of `backend`'s validated model, if it is listed."""
        for m in self.models:
            if m.get("backend") == backend:
                return str(m.get("shape")) if m.get("shape") else None
        return None


def is_validation_document(data: object) -> bool:
    return isinstance(data, dict) and data.get("schema") == SCHEMA


def parse_validation(data: object, where: str) -> ValidationDocument:
    """`data` (parsed JSON) as a ValidationDocument; ValidationDocumentError names the field."""
    try:
        return ValidationDocument.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ValidationDocumentError(
            f"{where}: not a valid replay-validation document: field {loc}: {first['msg']}"
        ) from None


def load_validation(path: Path) -> ValidationDocument:
    """Read a validation document; ValidationDocumentError (one line) when it is not one."""
    try:
        data = read_json(path)
    except (OSError, ValueError) as exc:
        raise ValidationDocumentError(
            f"{path}: not a JSON document ({type(exc).__name__})"
        ) from None
    if not is_validation_document(data):
        raise ValidationDocumentError(
            f"{path}: not a replay-validation document (schema is not {SCHEMA}; "
            "`attnbench replay-validate` writes one)"
        )
    return parse_validation(data, str(path))


def _claims_validation(path: Path) -> bool:
    try:
        return is_validation_document(read_json(path))
    except (OSError, ValueError):
        return False


def find_validation(paths: Iterable[Path]) -> list[Path]:
    """Validation documents among `paths`, else beside them: in each file's folder and its
    `replay/` subfolder (where `replay-validate` writes by default). Sorted, no duplicates."""
    given = list(paths)
    named = [p for p in given if is_document_path(p) and _claims_validation(p)]
    if named:
        return sorted(set(named))
    found: set[Path] = set()
    for folder in {p.parent for p in given}:
        for where in (folder, folder / "replay"):
            if where.is_dir():
                found |= {
                    q
                    for q in where.glob(VALIDATION_GLOB)
                    if q.is_file() and is_document_path(q) and _claims_validation(q)
                }
    return sorted(found)
