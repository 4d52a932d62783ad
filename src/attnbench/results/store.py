"""Result rows and their JSONL store.

A results file is JSON Lines: a `header` row (schema version, provenance, settings, device and
the ceilings measured in the run), then one `result` row per (case, backend variant). Rows are
appended, flushed and fsync'ed one at a time, so a crash or Ctrl-C leaves every finished row
readable; a resumed run appends a new header and the rows it adds. Files are parsed as JSON,
never evaluated.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

SCHEMA_VERSION = 1
MAX_SAMPLES = 256
Status = Literal["ok", "unsupported", "error", "mismatch", "oom", "timeout"]
STATUSES: tuple[str, ...] = ("ok", "unsupported", "error", "mismatch", "oom", "timeout")
FINAL_STATUSES = frozenset({"ok", "unsupported", "mismatch"})
"""Statuses `--resume` does not retry (errors, OOMs and timeouts are retried)."""

LIBRARIES = (
    "torch",
    "triton",
    "flashinfer-python",
    "fa3-fwd",
    "tokenspeed-fa3",
    "flash-attn",
    "flash-attn-3",
    "nvidia-cudnn-frontend",
    "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13",
)


class ResultsFileError(ValueError):
    """A results file that cannot be read: names the file, the line and what is wrong."""


class Header(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["header"] = "header"
    schema_version: int = SCHEMA_VERSION
    run_id: str
    provenance: dict[str, Any]
    settings: dict[str, Any] = {}
    device: dict[str, Any] = {}
    ceilings: dict[str, Any] | None = None
    spec_sheet: dict[str, Any] | None = None


class ResultRow(BaseModel):
    """One (case, backend variant) outcome. Timing fields are None unless status is `ok`."""

    model_config = ConfigDict(extra="allow")

    type: Literal["result"] = "result"
    run_id: str
    case_id: str
    backend: str
    """Requested variant, e.g. `flashinfer:tc`."""
    resolved: str = ""
    """What actually ran (FlashInfer's resolved_backend, the SDPA kernel, ...)."""
    status: Status
    reason: str = ""
    spec: dict[str, Any]
    latency_us: float | None = None
    """Median kernel time of one call (one layer)."""
    latency: dict[str, Any] | None = None
    """Full statistics: median, p10/p90, IQR, 95% CI of the median, outliers."""
    samples_us: list[float] | None = None
    """The timing samples (at most MAX_SAMPLES, evenly thinned), for `compare`'s tests."""
    plan_us: float | None = None
    per_token_ms: float | None = None
    """Model-level decode step on one GPU: plan + num_layers x run, in ms."""
    bytes: dict[str, int] | None = None
    flops: int | None = None
    bandwidth_gbps: float | None = None
    tflops: float | None = None
    bandwidth_frac_measured: float | None = None
    """Achieved bandwidth over the copy bandwidth measured in the run (read + write)."""
    bandwidth_frac_read: float | None = None
    """Achieved bandwidth over the streaming-read bandwidth measured in the run."""
    bandwidth_frac_spec: float | None = None
    tflops_frac_measured: float | None = None
    tflops_frac_spec: float | None = None
    peak_memory_bytes: int | None = None
    kv_cache_bytes: int | None = None
    accuracy: dict[str, Any] | None = None
    measurement: dict[str, Any] | None = None
    details: dict[str, Any] = {}
    timestamp: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.case_id, self.backend)


def thin_samples(samples_us: list[float], limit: int = MAX_SAMPLES) -> list[float]:
    """At most `limit` samples, evenly spaced in measurement order, rounded to 1 ns."""
    step = max(1, -(-len(samples_us) // limit))
    return [round(x, 3) for x in samples_us[::step]]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def git_sha() -> str:
    """The source's git commit (`-dirty` with local edits). A copy without `.git` (a remote GPU
    machine gets the working tree only) can name it in `ATTNBENCH_GIT_SHA`."""
    if os.environ.get("ATTNBENCH_GIT_SHA"):
        return os.environ["ATTNBENCH_GIT_SHA"]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        sha = out.stdout.strip()
        if out.returncode or not sha:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def library_versions() -> dict[str, str]:
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def provenance() -> dict[str, Any]:
    """Where and with what a run happened (no heavy imports beyond torch)."""
    import torch

    from attnbench import __version__

    prov: dict[str, Any] = {
        "attnbench": __version__,
        "git_sha": git_sha(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "time": now_iso(),
        "libraries": library_versions(),
    }
    if torch.cuda.is_available():
        prov["gpu"] = torch.cuda.get_device_name(0)
        prov["cudnn"] = torch.backends.cudnn.version()
        prov["driver"] = _driver_version()
    return prov


def _driver_version() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else ""
    except (OSError, subprocess.SubprocessError, IndexError):
        return ""


class ResultWriter:
    """Append-only JSONL writer: each row is flushed and fsync'ed before `write` returns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        drop_torn_tail(path)
        self._f = path.open("a", encoding="utf-8")

    def write(self, row: BaseModel | dict[str, Any]) -> None:
        data = row.model_dump(mode="json") if isinstance(row, BaseModel) else row
        self._f.write(json.dumps(_finite(data), allow_nan=False, default=str) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def interrupted_first_write(path: Path) -> bool:
    """True for a file that holds only the start of a header row: a run killed while writing
    its first line. Such a file has no finished row; appending starts it afresh."""
    if not path.is_file():
        return False
    data = path.read_bytes()
    if b"\n" in data or not data.startswith(b'{"type": "header"'):
        return False
    try:
        json.loads(data)
    except ValueError:
        return True
    return False


def drop_torn_tail(path: Path) -> None:
    """End a results file with a newline before rows are appended: a last line an interrupted
    write left incomplete (`read_results` skips it with a warning) is cut, a complete one gets
    its newline. Otherwise the next row would glue onto it and make the file unreadable.
    Files that are not results files are left alone."""
    if not path.is_file() or path.read_bytes()[-1:] in (b"", b"\n"):
        return
    if interrupted_first_write(path):
        path.write_bytes(b"")
        return
    try:
        torn = any("torn last line" in w for w in read_results(path).warnings)
    except ResultsFileError:
        return
    with path.open("rb+") as f:
        if torn:
            f.truncate(path.read_bytes().rfind(b"\n") + 1)
        else:  # a complete last row whose newline was not written
            f.seek(0, os.SEEK_END)
            f.write(b"\n")


def _finite(value: Any) -> Any:
    """NaN and infinities become None: JSON has no spelling for them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


@dataclass
class ResultFile:
    path: Path
    headers: list[Header] = field(default_factory=list)
    rows: list[ResultRow] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def header(self) -> Header | None:
        return self.headers[-1] if self.headers else None


def read_results(path: Path | str) -> ResultFile:
    """Parse a results file; a torn last line is skipped with a warning, anything else that is
    not a header or result row of this schema version raises ResultsFileError."""
    path = Path(path)
    if not path.is_file():
        raise ResultsFileError(f"{path}: no such results file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ResultsFileError(f"{path}: not a UTF-8 text file") from None
    lines = text.splitlines()
    out = ResultFile(path)
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            if lineno == len(lines) and not text.endswith("\n"):
                out.warnings.append(f"{path}:{lineno}: torn last line skipped (interrupted write)")
                continue
            raise ResultsFileError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
        out_kind = data.get("type") if isinstance(data, dict) else None
        try:
            if out_kind == "header":
                version = data.get("schema_version")
                if version != SCHEMA_VERSION:
                    raise ResultsFileError(
                        f"{path}:{lineno}: schema_version={version!r}; this attnbench reads "
                        f"schema_version={SCHEMA_VERSION}"
                    )
                out.headers.append(Header.model_validate(data))
            elif out_kind == "result":
                if not out.headers:
                    raise ResultsFileError(f"{path}:{lineno}: result row before any header")
                out.rows.append(ResultRow.model_validate(data))
            else:
                raise ResultsFileError(
                    f"{path}:{lineno}: not an attnbench row (type must be 'header' or 'result')"
                )
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise ResultsFileError(f"{path}:{lineno}: field {loc}: {first['msg']}") from None
    if not out.headers:
        raise ResultsFileError(f"{path}: no header row: not an attnbench results file")
    return out


def iter_rows(paths: Iterable[Path | str]) -> Iterator[tuple[ResultFile, ResultRow]]:
    for p in paths:
        f = read_results(p)
        for row in f.rows:
            yield f, row


def finished_keys(path: Path) -> set[tuple[str, str]]:
    """(case_id, backend) pairs already in `path` with a final status, for `--resume`.

    A case refused for want of free memory (`unsupported` with `details.memory`) is not final:
    memory may have been freed since, so a resumed run tries it again."""
    if not path.exists() or interrupted_first_write(path):
        return set()
    rows = read_results(path).rows
    return {r.key for r in rows if r.status in FINAL_STATUSES and "memory" not in r.details}
