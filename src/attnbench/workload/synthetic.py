"""Synthetic traffic families: requests generated from published statistics instead of a trace
file, for the replay (`--trace synthetic:NAME`).

A family is a `[traffic.NAME]` table of a suite TOML (the built-in `agentic-128k` is in the
`replay-calibration-heldout` suite, with the statistics it follows and their sources), or of any
TOML file (`synthetic:FILE.toml`, `synthetic:FILE.toml#NAME`): sessions of multi-turn requests
of a few classes (agents, chats, long documents), each turn's prompt the previous prompt, its
output and new input, under one shared system prompt; `hash_ids` (one per 512-token block, as
the Mooncake traces) mark what a prefix cache can reuse. Parameters are checked by pydantic:
a bad one is one line naming `traffic.NAME.FIELD`.
"""

from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from attnbench.workload.cases import MAX_LEN
from attnbench.workload.traces import Request, TraceError

SYNTHETIC_PREFIX = "synthetic:"
MAX_SYNTHETIC_REQUESTS = 100_000
"""Sessions x their most turns at most: a replay simulates every request on the CPU."""
PREFIX_BLOCK_TOKENS = 512
"""Tokens per `hash_ids` block, as in the Mooncake traces (and the replay's prefix cache)."""


class SessionClass(BaseModel):
    """One kind of session of a synthetic family: how its first prompt, its turns and each
    turn's new input and output are drawn. Lengths in tokens; `[lo, hi]` pairs are inclusive,
    `[median, sigma]` pairs lognormal (sigma of the log)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    share: float = Field(gt=0.0)
    """Relative weight among the family's classes."""
    first_context: tuple[int, int]
    """The first prompt (shared system prompt included), log-uniform in [lo, hi]."""
    turns: tuple[int, int]
    """Requests of a session, uniform in [lo, hi]."""
    append: tuple[float, float] = (200.0, 1.0)
    """New input of each later turn (a tool result, a user message), lognormal."""
    output: tuple[float, float] = (250.0, 1.0)
    """Tokens each turn generates, lognormal."""
    gap_s: float = Field(default=2.0, ge=0.0)
    """Mean time between a turn's last output token and the next turn (exponential): the
    tool's or the user's time."""

    @field_validator("first_context", "turns")
    @classmethod
    def _range(cls, v: tuple[int, int]) -> tuple[int, int]:
        if not 0 < v[0] <= v[1]:
            raise ValueError(f"expected [lo, hi] with 0 < lo <= hi, got {list(v)}")
        return v

    @field_validator("append", "output")
    @classmethod
    def _lognormal(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not (v[0] >= 1.0 and 0.0 <= v[1] <= 4.0):
            raise ValueError(f"expected [median >= 1, 0 <= sigma <= 4], got {list(v)}")
        return v


class SyntheticTraffic(BaseModel):
    """A synthetic traffic family (`[traffic.NAME]` in a suite TOML): sessions of multi-turn
    requests whose prompts grow turn by turn (each turn's prompt is the previous prompt, its
    output and the new input), sharing a system prompt; `hash_ids` mark the shared prefix
    blocks, so the replay's prefix cache reuses them. A session ends at its last turn or when
    the next prompt would pass `max_context`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    description: str = ""
    sources: list[str] = Field(default_factory=list)
    """Where the statistics come from."""
    sessions: int = Field(gt=0, le=MAX_SYNTHETIC_REQUESTS)
    arrival_window_s: float = Field(default=30.0, gt=0.0)
    """Sessions start uniformly within this window."""
    shared_prefix: int = Field(default=2048, ge=0)
    """System prompt and tool definitions every session starts with (tokens)."""
    max_context: int = Field(default=131072, gt=0, le=MAX_LEN)
    decode_ms_per_token: float = Field(default=25.0, ge=0.0)
    """The generator's guess of the time per output token, to place each next turn after the
    previous one's output (the trace is open-loop: the replay does not wait for it)."""
    seed: int = Field(default=0, ge=0)
    classes: list[SessionClass] = Field(alias="class", min_length=1)

    @model_validator(mode="after")
    def _size(self) -> SyntheticTraffic:
        most = self.sessions * max(c.turns[1] for c in self.classes)
        if most > MAX_SYNTHETIC_REQUESTS:
            raise ValueError(
                f"sessions x turns up to {most} requests; at most {MAX_SYNTHETIC_REQUESTS} "
                "(a replay simulates every request)"
            )
        return self


def synthetic_family(name: str) -> tuple[str, SyntheticTraffic]:
    """`synthetic:NAME` (a `[traffic.NAME]` table of a built-in suite), `synthetic:FILE.toml`
    (its one traffic table) or `synthetic:FILE.toml#NAME`: (label, parameters). TraceError
    names the table and the field."""
    arg = name.strip()[len(SYNTHETIC_PREFIX) :]
    path_s, _, table = arg.partition("#")
    if path_s.endswith(".toml"):
        tables = {table or "": _traffic_tables(Path(path_s).expanduser())}
        found = tables[table or ""]
        if not table and len(found) == 1:
            table = next(iter(found))
        label = f"{Path(path_s).stem}#{table}"
    else:
        table, found, label = path_s, _builtin_traffic(), path_s
    if table not in found:
        have = ", ".join(sorted(found)) or "none"
        raise TraceError(f"trace={name!r}: no traffic table {table!r}; have: {have}")
    try:
        return label, SyntheticTraffic.model_validate(found[table])
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise TraceError(f"trace={name!r}: traffic.{table}.{loc}: {msg}") from None


def _traffic_tables(path: Path) -> dict[str, Any]:
    import tomllib

    if not path.is_file():
        raise TraceError(f"trace file {path}: no such TOML file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TraceError(f"trace file {path}: not a valid TOML file ({exc})") from None
    tables = data.get("traffic", {})
    if not isinstance(tables, dict) or not all(isinstance(t, dict) for t in tables.values()):
        raise TraceError(f"trace file {path}: [traffic.NAME] must be tables")
    return tables


@lru_cache(maxsize=1)
def _builtin_traffic() -> dict[str, Any]:
    out: dict[str, Any] = {}
    folder = resources.files("attnbench") / "suites"
    for p in sorted(folder.iterdir(), key=str):
        if str(p).endswith(".toml"):
            out |= _traffic_tables(Path(str(p)))
    return out


def synthetic_requests(spec: SyntheticTraffic, seed: int | None = None) -> tuple[Request, ...]:
    """The family's requests, sorted by arrival (seeded: `spec.seed`, or `seed` when given)."""
    rng = np.random.default_rng(spec.seed if seed is None else seed)
    weights = np.array([c.share for c in spec.classes])
    kinds = rng.choice(len(spec.classes), size=spec.sessions, p=weights / weights.sum())
    starts = rng.uniform(0.0, spec.arrival_window_s, size=spec.sessions)
    out: list[Request] = []
    next_id = [spec.shared_prefix // PREFIX_BLOCK_TOKENS]  # below: the shared prompt's blocks
    for k, t0 in zip(kinds.tolist(), starts.tolist(), strict=True):
        out.extend(_session(spec, spec.classes[k], float(t0), rng, next_id))
    return tuple(sorted(out, key=lambda r: r.arrival_s))


def _lognormal(rng: np.random.Generator, median_sigma: tuple[float, float]) -> int:
    median, sigma = median_sigma
    return max(1, round(float(rng.lognormal(math.log(median), sigma))))


def _session(
    spec: SyntheticTraffic,
    cls: SessionClass,
    t0: float,
    rng: np.random.Generator,
    next_id: list[int],
) -> list[Request]:
    """One session's turns: each prompt extends the previous one (prompt, output, new input);
    its complete 512-token blocks keep their ids, the rest get new ones."""
    lo, hi = cls.first_context
    prompt = min(spec.max_context, round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
    prompt = max(prompt, min(spec.shared_prefix + 1, spec.max_context))
    ids: list[int] = list(range(min(spec.shared_prefix, prompt) // PREFIX_BLOCK_TOKENS))
    turns = int(rng.integers(cls.turns[0], cls.turns[1] + 1))
    out: list[Request] = []
    t = t0
    for _ in range(turns):
        output = min(_lognormal(rng, cls.output), spec.max_context - prompt)
        new = -(-prompt // PREFIX_BLOCK_TOKENS) - len(ids)
        ids = ids + list(range(next_id[0], next_id[0] + new))
        next_id[0] += new
        out.append(Request(t, prompt, max(1, output), tuple(ids)))
        grown = prompt + output + _lognormal(rng, cls.append)
        if grown > spec.max_context:
            break
        ids = ids[: prompt // PREFIX_BLOCK_TOKENS]  # complete blocks stay cached
        t += output * spec.decode_ms_per_token / 1e3 + float(rng.exponential(cls.gap_s))
        prompt = grown
    return out
