"""Stored result rows as a pandas DataFrame, plus the grouping helpers that `report`, `compare`
and `recommend` share. Reads files only: nothing here imports torch or touches a GPU.

One DataFrame row per result row; the spec is flattened into columns (`kind`, `batch_size`,
`kv_max`, `kv_cv`, `dtype`, `kv_dtype`, ...) read from the row's typed `WorkloadSpec`, the timing
and accuracy fields are copied, and `samples_us` / `spec` (the `WorkloadSpec`) / `details` stay as
object columns for the statistics. Files are read by `results.read_for_analysis` (the one
loader, which refuses rows the test-only fake timer timed).
"""

from __future__ import annotations

import functools
import glob
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnbench.results import (
    DOCUMENT_SUFFIXES,
    Header,
    ResultRow,
    is_document_path,
    is_results_path,
    is_trials_name,
    plan_mode,
    read_for_analysis,
)
from attnbench.workload.spec import WorkloadSpec

RESULTS_ENV = "ATTNBENCH_RESULTS"
DEFAULT_DIR = Path("results")
EXTRA_SUFFIXES = DOCUMENT_SUFFIXES
"""Other JSON documents next to results (fp8 numerics, replay; `.json` or `.json.gz`): handed
to report hooks."""

SIXTEEN_BIT = ("float16", "bfloat16")


class NoResultsError(ValueError):
    """No results files where they were looked for; the message says where and what to do."""


@dataclass
class Loaded:
    """Everything read from a set of files."""

    frame: pd.DataFrame
    headers: list[tuple[Path, Header]] = field(default_factory=list)
    extras: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)


def _expand(entry: str | Path) -> list[Path]:
    p = Path(entry)
    if p.is_dir():
        found = sorted(q for q in p.iterdir() if _known_file(q) and q.is_file())
        _no_plain_and_gzipped_twin(found)
        return found
    if any(ch in str(entry) for ch in "*?["):
        return [Path(q) for q in sorted(glob.glob(str(entry)))]
    return [p]


def _no_plain_and_gzipped_twin(paths: list[Path]) -> None:
    """A folder holding both `x.jsonl` and `x.jsonl.gz` would be read twice (every row counted
    twice): refuse it with one line naming both."""
    names = {q.name for q in paths}
    twins = [q for q in paths if q.name + ".gz" in names]
    if twins:
        q = twins[0]
        raise NoResultsError(
            f"{q} and {q.name}.gz are both in {q.parent}: the same rows would be read twice; "
            "keep one of them"
        )


def _known_file(path: Path) -> bool:
    """A results file a folder expands to; tuning trials (`*.trials.jsonl[.gz]`) are not rows,
    and the report finds them beside their tuned file."""
    if is_trials_name(path.name):
        return False
    return is_results_path(path) or is_document_path(path)


def resolve_paths(paths: Sequence[str | Path] | None = None) -> list[Path]:
    """The files to read: the given paths (directories expand to their .jsonl/.json files),
    else `$ATTNBENCH_RESULTS` (a file, directory or glob; several joined by the path
    separator), else the committed `results/` of the current directory, else the results
    shipped inside the package (`attnbench/data/results/`, when a release embeds them), else
    the committed `results/` of the checkout this package runs from (`checkout_results`), so
    a command run from another folder reads the committed measurements too.

    Raises NoResultsError when nothing is found, FileNotFoundError for a named file that is
    not there.
    """
    if paths:
        out: list[Path] = []
        for entry in paths:
            found = _expand(entry)
            if not found and Path(entry).is_dir():
                raise NoResultsError(
                    f"{entry}: a folder with no results files (.jsonl, .jsonl.gz, .json)"
                )
            if not found or not all(f.exists() for f in found):
                raise FileNotFoundError(f"{entry}: no such file or directory")
            out += found
        return out
    env = os.environ.get(RESULTS_ENV, "").strip()
    where = f"${RESULTS_ENV}={env}" if env else f"{DEFAULT_DIR}/ (in {Path.cwd()})"
    entries = env.split(os.pathsep) if env else [str(DEFAULT_DIR)]
    found = [f for e in entries if e for f in _expand(e) if f.is_file()]
    if not env and not any(is_results_path(f) for f in found):
        found = _committed_files()
    if not any(is_results_path(f) for f in found):
        raise NoResultsError(
            f"no results files found in {where}; pass RESULTS files, set {RESULTS_ENV}, "
            "or create some with `attnbench run`"
        )
    return found


def checkout_results() -> Path | None:
    """The committed `results/` of the source checkout this package is imported from
    (`<root>/src/attnbench`, with `<root>/pyproject.toml`); None for an installed wheel."""
    root = Path(str(resources.files("attnbench"))).resolve().parent.parent
    folder = root / DEFAULT_DIR
    return folder if (root / "pyproject.toml").is_file() and folder.is_dir() else None


def _committed_files() -> list[Path]:
    """The results shipped in the package (`attnbench/data/results/`), else the checkout's."""
    shipped = Path(str(resources.files("attnbench"))) / "data" / "results"
    for folder in (shipped, checkout_results()):
        if folder is not None and folder.is_dir():
            found = [f for f in _expand(folder) if f.is_file()]
            if any(is_results_path(f) for f in found):
                return found
    return []


def load(paths: Iterable[Path]) -> Loaded:
    """Read results files (.jsonl, .jsonl.gz) into one frame; `.json` documents are kept as
    extras. The frame of the same files (path, size, time) read by the same code comes from
    the disk cache (`frame_cache`).

    Raises ResultsFileError (from `read_for_analysis`) for a file that is not a results file
    or holds rows timed by the test-only fake timer.
    """
    from attnbench.analysis.frame_cache import cached

    listed = list(paths)
    return cached(listed, lambda: _read(listed))


def _read(paths: list[Path]) -> Loaded:
    records: list[dict[str, Any]] = []
    loaded = Loaded(frame=pd.DataFrame())
    for path in paths:
        loaded.paths.append(path)
        if not is_results_path(path) and is_document_path(path):
            loaded.extras.append(path)
            continue
        rf = read_for_analysis(path)
        loaded.warnings += rf.warnings
        for h in rf.headers:
            loaded.headers.append((path, h))
        for row in rf.rows:
            records.append(flatten(row, rf.header_of(row), path, len(records)))
    loaded.frame = pd.DataFrame.from_records(records) if records else empty_frame()
    return loaded


def gpu_name(header: Header | None) -> str:
    return "unknown" if header is None else header.gpu


def flatten(row: ResultRow, header: Header | None, path: Path, order: int) -> dict[str, Any]:
    """One result row as a flat record (spec fields, timing, accuracy, provenance)."""
    return {
        "order": order,
        "source": path.name,
        "gpu": gpu_name(header),
        "git_sha": str(header.provenance.get("git_sha") or "") if header is not None else "",
        "run_id": row.run_id,
        "case_id": row.case_id,
        "backend": row.backend,
        "library": row.library,
        "resolved": row.resolved,
        "status": row.status,
        "reason": row.reason,
        **_spec_columns(row.spec),
        **_measured_columns(row),
        "spec": row.spec,
        "details": row.details,
    }


def _spec_columns(spec: WorkloadSpec) -> dict[str, Any]:
    """The case's columns: kind, shape, lengths and their spread, dtypes, layout, tree."""
    kv = np.asarray(spec.kv_lens, dtype=np.int64)
    kv_mean = float(kv.mean())
    return {
        "kind": spec.kind,
        "model": spec.model or "",
        "tp": spec.tp,
        "num_layers": spec.num_layers,
        "num_qo_heads": spec.num_qo_heads,
        "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "batch_size": spec.batch_size,
        "total_kv": spec.total_kv,
        "total_q": spec.total_q,
        "kv_max": max(spec.kv_lens),
        "kv_min": min(spec.kv_lens),
        "kv_mean": kv_mean,
        "kv_cv": float(kv.std() / kv_mean),
        "skew": max(spec.kv_lens) / kv_mean,
        "uniform": min(spec.kv_lens) == max(spec.kv_lens),
        "qo_max": max(spec.qo_lens),
        "dtype": spec.dtype,
        "kv_dtype": spec.kv_dtype,
        "fp8": spec.is_fp8,
        "page_size": spec.page_size,
        "kv_layout": spec.kv_layout,
        "lengths": spec.lengths,
        "label": spec.label,
        "padded": is_padded(spec.label, spec.lengths),
        "unpadded_lengths": unpadded(spec.lengths),
        "tree": spec.tree.name if spec.tree else "",
        "tree_nodes": spec.tree.num_nodes if spec.tree else 0,
        "shared_prefix_len": spec.shared_prefix_len,
    }


def _measured_columns(row: ResultRow) -> dict[str, Any]:
    """The measurement's columns: latency and its spread, bytes, FLOPs, fractions of the
    ceilings, accuracy, timer and plan mode, samples."""
    lat, acc, meas = row.latency, row.accuracy, row.measurement
    nbytes = row.bytes.total if row.bytes is not None else None
    return {
        "latency_us": row.latency_us,
        "ci_low_us": lat.ci_low_us if lat else None,
        "ci_high_us": lat.ci_high_us if lat else None,
        "rel_ci": lat.rel_ci if lat else None,
        "min_us": lat.min_us if lat else None,
        "max_us": lat.max_us if lat else None,
        "plan_us": row.plan_us,
        "per_token_ms": row.per_token_ms,
        "bytes_total": nbytes,
        "flops": row.flops,
        "intensity": (row.flops / nbytes) if row.flops and nbytes else None,
        "bandwidth_gbps": row.bandwidth_gbps,
        "tflops": row.tflops,
        "bandwidth_frac_measured": row.bandwidth_frac_measured,
        "tflops_frac_measured": row.tflops_frac_measured,
        "bandwidth_frac_spec": row.bandwidth_frac_spec,
        "tflops_frac_spec": row.tflops_frac_spec,
        "tflops_ceiling": row.tflops_ceiling or "",
        "rel_l2_err": acc.rel_l2_err if acc else None,
        "budget": acc.budget if acc else None,
        "acc_passed": acc.passed if acc else None,
        "timed_rel_l2_err": acc.timed_rel_l2_err if acc else None,
        "precision": acc.precision if acc else "",
        "timer": meas.timer if meas else "",
        "l2_policy": meas.l2_policy if meas else "",
        "plan_mode": plan_mode(row),
        "samples_us": row.samples_us,
    }


def empty_frame() -> pd.DataFrame:
    cols = ["case_id", "backend", "status", "kind", "gpu", "latency_us", "spec", "samples_us"]
    return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})


PADDED_PREFIX = "padded("


def is_padded(label: str, lengths: str = "") -> bool:
    """A row run on the padded twin of a ragged batch: lengths `padded(X)` (the `padded:`
    distribution of `workload.ragged`) or a suite label saying `padded`."""
    return lengths.startswith(PADDED_PREFIX) or "padded" in label.lower()


def unpadded(lengths: str) -> str:
    """`padded(X)` -> `X`; any other lengths label unchanged."""
    if lengths.startswith(PADDED_PREFIX) and lengths.endswith(")"):
        return lengths[len(PADDED_PREFIX) : -1]
    return lengths


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """`frame.to_dict("records")` at a fraction of the cost: the frame converted once to
    Python objects (`to_numpy(dtype=object)`: ints, floats, bools and strings as Python
    values, as `to_dict` boxes them) instead of one element lookup per cell. The frame's 22
    string columns (pandas' `str` dtype) made `to_dict` take 3.5 s of the report's sections."""
    columns = [str(c) for c in frame.columns]
    values = frame.to_numpy(dtype=object).tolist()  # one conversion per block, not per cell
    return [dict(zip(columns, row, strict=True)) for row in values]


def latest(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (gpu, case, backend): the last one read (a resumed run supersedes)."""
    if frame.empty:
        return frame
    return frame.sort_values("order").drop_duplicates(["gpu", "case_id", "backend"], keep="last")


def ok_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that passed the accuracy gate and were timed with attnbench's default cold L2.
    Rows timed with `--warm-l2` (a study of the timing method: `attnbench anchors` sets them
    beside AIConfigurator's warm back-to-back replays) are not evidence of a kernel's time
    here: no view compares them with cold rows."""
    if frame.empty:
        return frame
    ok = latest(frame)
    keep = (ok["status"] == "ok") & ok["latency_us"].notna()
    if "l2_policy" in ok:
        keep &= ~ok["l2_policy"].astype(str).str.startswith("warm")
    return ok[keep]


def spec_key(spec: WorkloadSpec, drop: Iterable[str] = ()) -> str:
    """A stable key for "the same case except `drop`" (e.g. kv_dtype for fp8 pairs)."""
    return _spec_key(spec, frozenset(drop))


@functools.lru_cache(maxsize=1 << 16)
def _spec_key(spec: WorkloadSpec, dropped: frozenset[str]) -> str:
    """`spec_key`, once per (spec, drop): specs are frozen, and the report keys every row's
    spec a few times over (a tenth of its analysis time went to the JSON)."""
    fields = spec.model_dump(mode="json")
    return json.dumps({k: v for k, v in fields.items() if k not in dropped}, sort_keys=True)


def add_key(frame: pd.DataFrame, name: str, drop: Iterable[str]) -> pd.DataFrame:
    """A copy of `frame` with column `name` = gpu + spec_key(spec, drop)."""
    out = frame.copy()
    dropped = tuple(drop)
    out[name] = [
        f"{g}|{spec_key(s, dropped)}" for g, s in zip(out["gpu"], out["spec"], strict=True)
    ]
    return out


def shape_label(r: pd.Series | dict[str, Any]) -> str:
    """`llama-3.1-70b/tp8` or `h32/8 d128`: the head shape of a row."""
    if r["model"]:
        return str(r["model"]) + (f"/tp{r['tp']}" if int(r["tp"]) > 1 else "")
    return f"h{r['num_qo_heads']}/{r['num_kv_heads']} d{r['head_dim']}"


DTYPE_SHORT = {"float16": "fp16", "bfloat16": "bf16", "fp8_e4m3": "e4m3", "fp8_e5m2": "e5m2"}


def dtype_label(r: pd.Series | dict[str, Any]) -> str:
    d, kv = str(r["dtype"]), str(r["kv_dtype"])
    return f"{DTYPE_SHORT.get(d, d)}/{DTYPE_SHORT.get(kv, kv)}"


def human_tokens(n: float) -> str:
    """1024 -> 1k, 65536 -> 64k, 1500 -> 1.5k."""
    if n >= 1024 and n % 1024 == 0:
        return f"{int(n) // 1024}k"
    if n >= 1000:
        return f"{n / 1024:.1f}k"
    return f"{n:.0f}"


def fmt_us(us: float | None) -> str:
    if us is None or (isinstance(us, float) and math.isnan(us)):
        return "-"
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.1f} µs"


def provenance_label(headers: Sequence[tuple[Path, Header]], gpu: str | None = None) -> str:
    """One line for figure footers: GPU, library versions, commit and date of the latest run (by
    its recorded time, not file order), and how many other library sets the inputs hold."""
    chosen = [h for _, h in headers if gpu is None or gpu_name(h) == gpu] or [h for _, h in headers]
    if not chosen:
        return "no provenance"
    h = max(chosen, key=lambda c: str(c.provenance.get("time", "")))
    prov = h.provenance
    others = {
        json.dumps(c.provenance.get("libraries") or {}, sort_keys=True)
        for c in chosen
        if (c.provenance.get("libraries") or {}) != (prov.get("libraries") or {})
    }
    parts = [gpu or gpu_name(h)]
    if prov.get("torch"):
        parts.append(f"torch {prov['torch']}")
    if prov.get("cuda"):
        parts.append(f"CUDA {prov['cuda']}")
    libs = prov.get("libraries") or {}
    parts += [f"{k} {v}" for k, v in libs.items() if k != "torch"]
    if prov.get("git_sha"):
        parts.append(f"attnbench {prov.get('attnbench', '')}@{prov['git_sha']}".strip())
    parts.append(str(prov.get("time", ""))[:10] or "undated")
    if others:
        parts.append(f"latest run; {len(others)} other library set(s) in the inputs")
    return " · ".join(p for p in parts if p)


def ceilings_for(headers: Sequence[tuple[Path, Header]], gpu: str) -> dict[str, Any]:
    """The measured ceilings of the latest run on `gpu` ({} when none were recorded)."""
    for _, h in reversed(list(headers)):
        if gpu_name(h) == gpu and h.ceilings:
            return dict(h.ceilings)
    return {}


def gpu_order(frame: pd.DataFrame) -> list[str]:
    """The GPUs of the rows, the one with the most rows first (the report leads with it and
    its decision), then by name."""
    counts = frame["gpu"].astype(str).value_counts()
    return sorted(counts.index, key=lambda g: (-int(counts[g]), str(g)))
