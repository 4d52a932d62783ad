"""Real request traces: loaders, and decode-length and prompt-length sampling.

Built-in traces (gzipped files in `attnbench/data/traces`, licenses in its README):

    azure-code     Azure LLM inference 2023, code completion (8,819 requests, CSV, CC-BY 4.0)
    azure-conv     Azure LLM inference 2023, conversation (19,366 requests, CSV, CC-BY 4.0)
    mooncake-conv  Mooncake (Kimi) FAST'25 conversation (12,031 requests, JSONL with prefix-block
                   hashes, Apache-2.0)

A path works too: a CSV with the Azure columns (TIMESTAMP, ContextTokens, GeneratedTokens) or a
JSONL file with the Mooncake keys (timestamp in ms, input_length, output_length, hash_ids), plain
or gzipped (a name ending in .gz). Files are parsed with `csv` and `json` only; a malformed file
raises one ValueError line naming the file, the line and the column.

Decode lengths (`trace:NAME[@N]`) are what a serving engine's running batch holds at one decode
step. In steady state a request stays in the batch for one step per output token, so a snapshot
of the batch holds requests in proportion to their output length: requests are drawn (seeded,
without replacement) with probability proportional to `output_len`, and each is caught at a
uniformly random output position p in [1, output_len], so its KV length is `input_len + p`.
Weighting by request instead (`weight="request"`) gives the per-request view; it under-represents
long generations, which dominate a real batch (Azure code: output p50 13, mean 28).
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import re
import zlib
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np

from attnbench.workload.cases import MAX_LEN, LengthCase

TRACES: dict[str, str] = {
    "azure-code": "AzureLLMInferenceTrace_code.csv.gz",
    "azure-conv": "AzureLLMInferenceTrace_conv.csv.gz",
    "mooncake-conv": "mooncake_conversation_trace.jsonl.gz",
}
"""Built-in trace files, stored gzipped (the upstream bytes, `gzip -9`)."""
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")

_INT = re.compile(r"^[0-9]+$")


@dataclass(frozen=True)
class Request:
    """One request of a trace."""

    arrival_s: float
    """Arrival time in seconds after the trace's first request."""
    input_len: int
    """Prompt (context) tokens."""
    output_len: int
    """Generated tokens."""
    hash_ids: tuple[int, ...] = ()
    """Prefix-block ids (one per 512-token block); empty when the trace has none."""


class TraceError(ValueError):
    """A trace that cannot be read: one line naming the file, the line and the column."""


# -- loading -----------------------------------------------------------------------------------
def load_trace(name: str) -> tuple[Request, ...]:
    """A built-in trace by name, or a trace file by path (cached per file version)."""
    key = name.strip()
    if key.lower() in TRACES:
        return _load_builtin(key.lower())
    path = Path(key).expanduser()
    if not path.is_file():
        raise TraceError(
            f"trace={name!r} is neither a built-in trace nor a file; built-in: {', '.join(TRACES)}"
        )
    stat = path.stat()
    return _load_path(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


def trace_label(name: str) -> str:
    """Short name for labels and case ids: the built-in name or the file's stem (`x.csv.gz`:
    `x`, as for `x.csv`)."""
    key = name.strip()
    return key.lower() if key.lower() in TRACES else Path(key.removesuffix(".gz")).stem


@lru_cache(maxsize=8)
def _load_builtin(name: str) -> tuple[Request, ...]:
    fname = TRACES[name]
    data = (resources.files("attnbench") / "data" / "traces" / fname).read_bytes()
    return parse_trace(data, fname)


@lru_cache(maxsize=8)
def _load_path(path: str, mtime_ns: int, size: int) -> tuple[Request, ...]:
    del mtime_ns, size  # cache key only
    return parse_trace(Path(path).read_bytes(), path)


def parse_trace(data: bytes, source: str) -> tuple[Request, ...]:
    """Parse trace bytes: JSONL when `source` ends in .jsonl/.json or the text starts with `{`,
    else an Azure-style CSV; a `source` ending in .gz is gunzipped first."""
    if source.lower().endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):
            raise TraceError(f"trace {source}: not a complete gzip file") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceError(f"trace {source}: not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise TraceError(f"trace {source}: file is empty")
    suffix = Path(source.lower().removesuffix(".gz")).suffix
    is_jsonl = suffix in (".jsonl", ".json") or (suffix != ".csv" and text.lstrip().startswith("{"))
    return parse_jsonl(text, source) if is_jsonl else parse_csv(text, source)


def parse_csv(text: str, source: str) -> tuple[Request, ...]:
    """Azure LLM inference CSV: TIMESTAMP, ContextTokens, GeneratedTokens (CRLF or LF)."""
    lines = text.splitlines()
    rows = csv.reader(lines)
    header = [h.strip() for h in next(rows, [])]
    col = {h.lower(): i for i, h in enumerate(header)}
    for name in AZURE_COLUMNS:
        if name.lower() not in col:
            raise TraceError(
                f"trace {source}, line 1: missing column {name!r}; header has: "
                + ", ".join(repr(h) for h in header)
            )
    it, ic, ig = (col[c.lower()] for c in AZURE_COLUMNS)
    out: list[Request] = []
    t0: datetime | None = None
    for lineno, row in enumerate(rows, 2):
        if not row or all(not f.strip() for f in row):
            continue
        if len(row) != len(header):
            raise TraceError(
                f"trace {source}, line {lineno}: {len(row)} fields, header has {len(header)}"
            )
        stamp = _timestamp(row[it], source, lineno, AZURE_COLUMNS[0])
        t0 = t0 or stamp
        out.append(
            Request(
                arrival_s=(stamp - t0).total_seconds(),
                input_len=_count(row[ic], source, lineno, AZURE_COLUMNS[1], minimum=1),
                output_len=_count(row[ig], source, lineno, AZURE_COLUMNS[2], minimum=0),
            )
        )
    if not out:
        raise TraceError(f"trace {source}: no requests after the header")
    return tuple(out)


def parse_jsonl(text: str, source: str) -> tuple[Request, ...]:
    """Mooncake JSONL: one object per line with timestamp (ms), input_length, output_length and
    optional hash_ids."""
    out: list[Request] = []
    t0: float | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(
                f"trace {source}, line {lineno}: invalid JSON at column {exc.colno}: {exc.msg}"
            ) from None
        if not isinstance(obj, dict):
            raise TraceError(f"trace {source}, line {lineno}: expected a JSON object")
        for key in MOONCAKE_KEYS:
            if key not in obj:
                raise TraceError(f"trace {source}, line {lineno}: missing key {key!r}")
        stamp = obj["timestamp"]
        if (
            isinstance(stamp, bool)
            or not isinstance(stamp, int | float)
            or not math.isfinite(stamp)
        ):
            raise TraceError(
                f"trace {source}, line {lineno}, column 'timestamp': {stamp!r} is not a number"
            )
        t0 = stamp if t0 is None else t0
        hashes = obj.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(_is_int(h) for h in hashes):
            raise TraceError(
                f"trace {source}, line {lineno}, column 'hash_ids': expected a list of integers"
            )
        out.append(
            Request(
                arrival_s=(stamp - t0) / 1e3,
                input_len=_json_count(obj, "input_length", source, lineno, minimum=1),
                output_len=_json_count(obj, "output_length", source, lineno, minimum=0),
                hash_ids=tuple(hashes),
            )
        )
    if not out:
        raise TraceError(f"trace {source}: no requests")
    return tuple(out)


def _timestamp(text: str, source: str, lineno: int, column: str) -> datetime:
    """`2023-11-16 18:17:03.9799600`: datetime takes 6 fractional digits, so the fraction is
    parsed separately (7 digits = 100 ns)."""
    whole, _, frac = text.strip().partition(".")
    try:
        stamp = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise TraceError(
            f"trace {source}, line {lineno}, column {column!r}: {text!r} is not a "
            "YYYY-MM-DD HH:MM:SS[.fraction] time"
        ) from None
    if frac:
        if not _INT.match(frac):
            raise TraceError(
                f"trace {source}, line {lineno}, column {column!r}: bad fraction in {text!r}"
            )
        stamp = stamp.replace(microsecond=int(frac[:6].ljust(6, "0")))
    return stamp


def _count(text: str, source: str, lineno: int, column: str, *, minimum: int) -> int:
    value = text.strip()
    if not _INT.match(value) or int(value) < minimum:
        raise TraceError(
            f"trace {source}, line {lineno}, column {column!r}: {text!r} is not an integer "
            f">= {minimum}"
        )
    return int(value)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _json_count(obj: dict[str, Any], key: str, source: str, lineno: int, *, minimum: int) -> int:
    v = obj[key]
    if not _is_int(v) or v < minimum:
        raise TraceError(
            f"trace {source}, line {lineno}, column {key!r}: {v!r} is not an integer >= {minimum}"
        )
    return int(v)


# -- sampling ----------------------------------------------------------------------------------
Weight = Literal["steps", "request"]


def sample_decode_lengths(
    name: str, batch_size: int, seed: int, limit: int | None = None, weight: Weight = "steps"
) -> list[LengthCase]:
    """One decode batch as a serving engine sees it mid-generation (see the module docstring).

    Args:
        name: built-in trace name or path.
        batch_size: requests in the batch.
        seed: seed of the request draw and of the output positions.
        limit: use only the first `limit` requests of the trace.
        weight: `steps` (probability proportional to output_len: a snapshot of a running batch)
            or `request` (every request equally likely).
    Returns:
        One `LengthCase` with `kv_lens[i] = input_len + p`, p uniform in [1, output_len].
    """
    reqs = first_requests(name, limit)
    rng = np.random.default_rng(seed)
    outs = np.array([max(1, r.output_len) for r in reqs], dtype=np.float64)
    probs = outs / outs.sum() if weight == "steps" else None
    idx = rng.choice(len(reqs), size=batch_size, replace=batch_size > len(reqs), p=probs)
    lens = []
    for i in idx.tolist():
        r = reqs[i]
        lens.append(min(MAX_LEN, r.input_len + int(rng.integers(1, max(1, r.output_len) + 1))))
    tag = "" if weight == "steps" else ",per-request"
    return [LengthCase(f"trace({trace_tag(name, limit)}{tag})", tuple(lens))]


def sample_prompt_lengths(
    name: str, batch_size: int, seed: int, limit: int | None = None
) -> list[LengthCase]:
    """Prompt lengths of `batch_size` requests drawn uniformly (seeded, without replacement when
    the trace is large enough): what a prefill batch of new arrivals holds."""
    reqs = first_requests(name, limit)
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(reqs), size=batch_size, replace=batch_size > len(reqs))
    lens = tuple(min(MAX_LEN, reqs[i].input_len) for i in idx.tolist())
    return [LengthCase(f"prompts({trace_tag(name, limit)})", lens)]


def first_requests(name: str, limit: int | None) -> tuple[Request, ...]:
    """The trace's requests, only the first `limit` of them when given (the `@N` suffix)."""
    reqs = load_trace(name)
    if limit is not None:
        if limit <= 0:
            raise TraceError(f"trace {name}@{limit}: the request limit must be positive")
        reqs = reqs[:limit]
    return reqs


def trace_tag(name: str, limit: int | None) -> str:
    """`azure-code` or `azure-code@1000`: the trace part of a length label."""
    return trace_label(name) + (f"@{limit}" if limit is not None else "")
