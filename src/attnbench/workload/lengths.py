"""Context-length distributions: how long each request's KV cache is in a batch.

A distribution is written as a short string (CLI flag, env var, suite file):

    1024,4096            fixed: one uniform batch per value (every request that long)
    list:256,1024,65536  one batch with exactly these per-request lengths
    uniform:256-8192     one batch, lengths uniform in [256, 8192]
    lognormal:2048,1.0   one batch, lognormal with median 2048 and sigma 1.0 (clipped to 16..131072)
    normal:4096,2048     one batch, normal with mean 4096 and sd 2048, at least 1 token, truncated
                         (flash-attention PR #1770's variable lengths)
    mixed                the brief's agent batch: log-uniform over 256..65536, both ends present
    mixed:256-65536      the same with explicit bounds
    trace:NAME[@N]       sampled from a real request trace (see `workload.traces`)
    prompts:NAME[@N]     prompt lengths of requests drawn from a trace (for prefill)
    skew:TOTAL[,LEVEL..] same total KV tokens, rising skew (see `workload.ragged`)
    padded:DIST          every batch of DIST padded to its longest request
    long:K@L[-H]+DIST    DIST's batch with K requests of L tokens (or log-uniform L..H) in it
    prefix:P+DIST        a P-token shared prefix plus per-request suffixes drawn from DIST
    trace-prefix:NAME[,K]  the K longest prefixes shared by batch_size requests of a trace

Each string expands to one or more `LengthCase`s, each a tuple of per-request lengths.
Sampling is seeded: the same string, batch size and seed give the same lengths everywhere.
"""

from __future__ import annotations

import math

import numpy as np

from attnbench.workload.cases import MAX_BATCH, MAX_LEN, MIN_LEN, LengthCase

DISTRIBUTIONS = (
    "fixed (e.g. 1024,4096)",
    "list:",
    "uniform:",
    "lognormal:",
    "normal:",
    "mixed",
    "trace:",
    "prompts:",
    "skew:",
    "padded:",
    "long:",
    "prefix:",
    "trace-prefix:",
)


def parse_lengths(text: str, batch_size: int, seed: int) -> list[LengthCase]:
    """Expand a distribution string into concrete batches (see the module docstring).

    Raises ValueError naming the problem and the allowed forms, and for a string that
    expands to no batch at all.
    """
    cases = _parse(text, batch_size, seed)
    if not cases:
        raise ValueError(f"lengths={text.strip()!r} expands to no batch (nothing to run)")
    return cases


def _parse(text: str, batch_size: int, seed: int) -> list[LengthCase]:
    if not 0 < batch_size <= MAX_BATCH:
        raise ValueError(f"batch_size={batch_size} must be in 1..{MAX_BATCH}")
    text = text.strip()
    kind, _, arg = text.partition(":")
    kind = kind.strip().lower()
    rng = np.random.default_rng(seed)
    if kind == "list":
        lens = _ints(arg, "list")
        return [LengthCase(f"list{len(lens)}", tuple(lens))]
    if kind == "uniform":
        lo, hi = _range(arg, "uniform")
        drawn = rng.integers(lo, hi + 1, size=batch_size)
        return [LengthCase(f"uniform({lo}..{hi})", _checked(drawn))]
    if kind in ("lognormal", "normal"):
        return [_bell(kind, arg, text, batch_size, rng)]
    if kind in ("mixed", "agent"):
        lo, hi = _range(arg, "mixed") if arg else (256, 65536)
        return [LengthCase(f"mixed({lo}..{hi})", mixed_batch(batch_size, lo, hi, rng))]
    if kind == "trace":
        from attnbench.workload.traces import sample_decode_lengths

        name, _, n = arg.partition("@")
        if not name:
            raise ValueError(f"lengths={text!r}: trace needs a name, e.g. trace:azure-code")
        return sample_decode_lengths(name, batch_size, seed, limit=_limit(n, text))
    if kind in ("prompts", "skew", "padded", "long", "prefix", "trace-prefix"):
        return _composite(kind, arg, text, batch_size, seed)
    if kind in ("fixed", "") or text[:1].isdigit():
        values = _ints(arg if kind == "fixed" else text, "fixed")
        return [LengthCase(f"ctx{v}", (v,) * batch_size) for v in values]
    raise ValueError(
        f"lengths={text!r} is not a known distribution; allowed: {', '.join(DISTRIBUTIONS)}"
    )


def _composite(kind: str, arg: str, text: str, batch_size: int, seed: int) -> list[LengthCase]:
    """The distributions of `workload.traces`, `.prefixes` and `.ragged`, and the wrappers."""
    from attnbench.workload import prefixes, ragged, traces

    if kind == "skew":
        return ragged.parse_skew(arg, batch_size, seed)
    if kind == "long":
        count, lo, hi, rest = ragged.parse_long(arg, batch_size)
        return ragged.with_long(parse_lengths(rest, batch_size, seed), count, lo, hi, seed)
    if kind == "padded":
        if not arg.strip():
            raise ValueError(f"lengths={text!r}: padded needs a distribution, e.g. padded:mixed")
        return [ragged.padded(c) for c in parse_lengths(arg, batch_size, seed)]
    if kind == "prefix":
        p_text, sep, rest = arg.partition("+")
        if p_text.strip().isdigit() and int(p_text) == 0:
            raise ValueError(
                f"lengths={text!r}: prefix P=0 shares no tokens: P must be at least 1 (without "
                f"a shared prefix, give the suffix alone: {rest.strip() or 'uniform:1-256'})"
            )
        if not sep or not p_text.strip().isdigit() or int(p_text) <= 0 or not rest.strip():
            raise ValueError(
                f"lengths={text!r}: prefix needs P+DIST (P shared tokens, then a suffix "
                "distribution), e.g. prefix:16384+uniform:1-256"
            )
        p = int(p_text)
        cases = parse_lengths(rest, batch_size, seed)
        longest = p + max(n for c in cases for n in c.kv_lens)
        if longest > MAX_LEN:
            raise ValueError(
                f"lengths={text!r}: prefix plus suffix reaches {longest} tokens; "
                f"allowed: {MIN_LEN}..{MAX_LEN}"
            )
        return [
            LengthCase(f"prefix{p}+{c.label}", tuple(p + n for n in c.kv_lens), shared_prefix_len=p)
            for c in cases
        ]
    name, _, rest = arg.partition("@") if kind == "prompts" else arg.partition(",")
    if not name.strip():
        raise ValueError(f"lengths={text!r}: {kind} needs a trace name, e.g. {kind}:mooncake-conv")
    if kind == "prompts":
        return traces.sample_prompt_lengths(name, batch_size, seed, limit=_limit(rest, text))
    name, _, n = name.partition("@")
    if rest.strip() and not (rest.strip().isdigit() and int(rest) > 0):
        raise ValueError(
            f"lengths={text!r}: trace-prefix takes NAME[@N][,K], K the number of prefixes "
            "(a positive integer), e.g. trace-prefix:mooncake-conv,2"
        )
    k = int(rest) if rest.strip() else 1
    return prefixes.sample_prefix_cases(name, batch_size, seed, k, limit=_limit(n, text))


def _limit(n: str, text: str) -> int | None:
    """The `@N` request limit of a trace distribution."""
    if not n.strip():
        return None
    if not n.strip().isdigit() or int(n) <= 0:
        raise ValueError(f"lengths={text!r}: @N must be a positive integer, got {n!r}")
    return int(n)


def mixed_batch(batch_size: int, lo: int, hi: int, rng: np.random.Generator) -> tuple[int, ...]:
    """The brief's heterogeneous agent batch: log-uniform lengths over [lo, hi].

    The shortest and longest request are always present (a batch with one 64k analysis and one
    256-token validation call is the point of the scenario), the rest are log-uniform between.
    """
    if batch_size == 1:
        return (hi,)
    inner = np.exp(rng.uniform(math.log(lo), math.log(hi), size=batch_size - 2))
    lens = [lo, hi, *np.rint(inner).astype(int).tolist()]
    perm = rng.permutation(batch_size)
    return tuple(int(lens[i]) for i in perm)


def _ints(arg: str, form: str) -> list[int]:
    try:
        values = [int(v) for v in arg.replace(" ", "").split(",") if v]
    except ValueError:
        example = "list:256,1024,65536" if form == "list" else "1024,4096"
        raise ValueError(
            f"lengths: {form} takes comma-separated integers (e.g. {example}), got {arg!r}"
        ) from None
    if not values:
        raise ValueError(f"lengths: {form} needs at least one length")
    for v in values:
        if not MIN_LEN <= v <= MAX_LEN:
            raise ValueError(f"lengths: {v} is out of range; allowed: {MIN_LEN}..{MAX_LEN}")
    return values


def _range(arg: str, form: str) -> tuple[int, int]:
    """`LO-HI`, two integers and nothing else (`uniform:1,2-5` and `uniform:1-2-3` are
    refused, not read as 1-5 and 1-2)."""
    lo_s, sep, hi_s = arg.partition("-")
    if not sep or not lo_s.strip().isdigit() or not hi_s.strip().isdigit():
        raise ValueError(
            f"lengths: {form} takes LO-HI, two integers (e.g. {form}:256-8192), got {arg!r}"
        )
    lo, hi = _ints(lo_s, form)[0], _ints(hi_s, form)[0]
    if lo > hi:
        raise ValueError(f"lengths: {form} range {lo}-{hi} has LO > HI")
    return lo, hi


def _bell(kind: str, arg: str, text: str, batch_size: int, rng: np.random.Generator) -> LengthCase:
    """`lognormal:MEDIAN,SIGMA` (clipped to 16..131072), or `normal:MEAN,SD` drawn as
    flash-attention PR #1770's `benchmark_mla_decode.py` draws its variable lengths:
    max(N(mean, sd), 1), truncated to an integer (the script assigns the float to an int32
    tensor)."""
    names = ("median", "sigma") if kind == "lognormal" else ("mean", "sd")
    parts = [p for p in arg.split(",") if p.strip()]
    if len(parts) != 2:
        example = "lognormal:2048,1" if kind == "lognormal" else "normal:4096,2048"
        need = ",".join(n.upper() for n in names)
        raise ValueError(f"lengths={text!r}: {kind} needs {need}, e.g. {example}")
    a, b = (_positive_float(p, n, kind) for p, n in zip(parts, names, strict=True))
    if kind == "lognormal":
        raw = rng.lognormal(math.log(a), b, size=batch_size)
        lens = np.clip(np.rint(raw), 16, 131072).astype(np.int64)
    else:
        lens = np.floor(np.maximum(rng.normal(a, b, size=batch_size), 1.0)).astype(np.int64)
    return LengthCase(f"{kind}({a:g},{b:g})", _checked(lens))


def _positive_float(text: str, name: str, kind: str = "lognormal") -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"lengths: {kind} {name} must be a number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"lengths: {kind} {name} must be positive, got {text!r}")
    return value


def _checked(lens: np.ndarray) -> tuple[int, ...]:
    return tuple(int(max(MIN_LEN, min(MAX_LEN, v))) for v in lens.tolist())
