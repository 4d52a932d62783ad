"""What `recommend --model` may choose from: deployable options only, with their commands.

vLLM/SGLang: one option per engine attention backend (`engines.paths.SETTINGS`), KV dtype and
page size the engine runs, from the engine variants' rows, else from raw rows that are exactly
the engine's kernel path (`engine_rank.engine_rows`, which never maps a contiguous-cache or
tuned variant). The command carries every flag: model, tensor parallelism, backend, KV dtype,
block/page size. `--engine none`: the raw library variants that read the paged cache in place
(`engine_rank._paged_raw`: no contiguous copy, no gathering baseline), untuned, as library
calls. A `+tuned` variant has per-case knobs that neither engine exposes (no flag, no
environment variable), and a contiguous-cache variant is a baseline: both are listed by
`not_deployable`, never chosen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from attnbench.analysis.compare import Timing
from attnbench.analysis.frame import records, spec_key
from attnbench.backends.variant import Variant, is_tuned
from attnbench.deploy.stats import PairedEstimate
from attnbench.engines.paths import (
    default_setting,
    engine_page_size,
    release,
    release_command,
    setting,
)

RAW_DEFAULT = "flash-attn:fa3"
"""`--engine none`'s baseline: the kernel both engines' default backends run on Hopper."""
LIBRARY_CALLS: Mapping[str, tuple[str, ...]] = {
    "flashinfer:tc": (
        "flashinfer.BatchDecodeWithPagedKVCacheWrapper(",
        "    workspace, 'NHD', use_tensor_cores=True)",
    ),
    "flashinfer:fa2": (
        "flashinfer.BatchDecodeWithPagedKVCacheWrapper(",
        "    workspace, 'NHD', use_tensor_cores=False)",
    ),
    "flashinfer:xqa": ("flashinfer.decode.xqa_batch_decode_with_kv_cache(...)",),
    "flashinfer:auto": (
        "flashinfer.BatchPrefillWithPagedKVCacheWrapper(",
        "    workspace, 'NHD', backend='auto')",
    ),
    "flashinfer:fa3": (
        "flashinfer.BatchPrefillWithPagedKVCacheWrapper(",
        "    workspace, 'NHD', backend='fa3')",
    ),
    "flash-attn:fa3": (
        "flash_attn_interface.flash_attn_with_kvcache(",
        "    q, k_cache, v_cache, page_table=block_table, cache_seqlens=kv_lens)",
    ),
    "sdpa:cudnn": ("cudnn SDPA graph (attnbench sdpa:cudnn) on the paged cache",),
}


@dataclass(frozen=True, order=True)
class OptionKey:
    variant: str
    kv: str
    """`auto` (the model's 16-bit dtype) or the fp8 format."""
    page_size: int

    @property
    def text(self) -> str:
        kv = "16-bit KV" if self.kv == "auto" else f"{self.kv} KV"
        return f"{self.variant}, {kv}, page {self.page_size}"


@dataclass(frozen=True)
class CaseTime:
    timing: Timing
    batch: int


@dataclass(eq=False)
class Option:
    key: OptionKey
    command: list[str]
    """The launch command in flag units (never split inside one), or library call lines."""
    rows: dict[str, dict[str, CaseTime]] = field(default_factory=dict)
    """kind -> case key -> timing."""
    inferred_from: tuple[str, ...] = ()
    decode: PairedEstimate | None = None
    """Decode latency / the default's, traffic-weighted, paired."""
    prefill: PairedEstimate | None = None

    def cases(self, kind: str) -> dict[str, CaseTime]:
        return self.rows.get(kind, {})

    @property
    def name(self) -> str:
        if self.key.variant in (
            "vllm:flash-attn",
            "vllm:flashinfer",
            "sglang:fa3",
            "sglang:flashinfer",
        ):
            return setting(self.key.variant).name
        return self.key.variant


def case_key(rec: Mapping[str, Any]) -> str:
    """Cases pair across KV dtype and page size: the same requests, heads and dtype."""
    return spec_key(rec["spec"], ("kv_dtype", "page_size"))


def _kv(rec: Mapping[str, Any]) -> str:
    return str(rec["kv_dtype"]) if bool(rec["fp8"]) else "auto"


def engine_command(variant: str, kv: str, page_size: int, tp: int) -> list[str]:
    """The launch command the rows reproduce: the pinned commits' flags
    (`engines.paths.release_command` without its release line)."""
    s = setting(variant)
    return release_command(variant, kv, page_size, tp, release(s.engine, "pinned"))[1:]


def library_call(variant: str, kv: str, page_size: int) -> list[str]:
    lines = list(LIBRARY_CALLS.get(variant, (f"the attnbench variant {variant}",)))
    cache = "16-bit" if kv == "auto" else kv
    return [*lines, f"# paged KV cache, page_size={page_size}, {cache}"]


def _options_from(rows: pd.DataFrame, command: Any, origin: str | None) -> dict[OptionKey, Option]:
    out: dict[OptionKey, Option] = {}
    layered: dict[tuple[OptionKey, str, str], dict[str, tuple[Timing, int, int]]] = {}
    for rec in records(rows):
        if bool(rec.get("padded")):
            continue
        variant = str(rec["backend"])
        page = (
            engine_page_size(variant, rec["spec"])
            if ":" in variant and variant.split(":")[0] in ("vllm", "sglang")
            else int(rec["page_size"])
        )
        key = OptionKey(variant, _kv(rec), page)
        opt = out.get(key)
        if opt is None:
            opt = out[key] = Option(key, command(key))
        kind = "decode" if rec["kind"] == "decode" else str(rec["kind"])
        if origin and rec.get(origin):
            opt.inferred_from = tuple(sorted({*opt.inferred_from, str(rec[origin])}))
        layer = str(getattr(rec["spec"], "layer_type", "") or "")
        if layer:
            step = spec_key(rec["spec"], ("kv_dtype", "page_size", *LAYER_FIELDS))
            layered.setdefault((key, kind, step), {})[layer] = (
                Timing.of(rec),
                int(rec["spec"].num_layers or 1),
                int(rec["batch_size"]),
            )
            continue
        opt.rows.setdefault(kind, {})[case_key(rec)] = CaseTime(
            Timing.of(rec), int(rec["batch_size"])
        )
    _add_model_steps(out, layered)
    return out


LAYER_FIELDS = ("layer_type", "window_left", "num_layers")
"""Spec fields in which the layer kinds of one model step differ (`analysis.per_model`)."""


def _add_model_steps(
    out: dict[OptionKey, Option],
    layered: Mapping[tuple[OptionKey, str, str], Mapping[str, tuple[Timing, int, int]]],
) -> None:
    """A model whose layers differ (gpt-oss: sliding and full; Gemma-2: local and global) is
    decided per model step: one case per batch whose every layer kind was timed, its time the
    layer-count-weighted sum `model_step`. A batch missing a kind is left out (no partial
    step is ever compared with a whole one)."""
    kinds = {layer for parts in layered.values() for layer in parts}
    for (key, kind, step), parts in layered.items():
        if set(parts) != kinds:
            continue
        batch = next(iter(parts.values()))[2]
        out[key].rows.setdefault(kind, {})[step] = CaseTime(model_step(parts.values()), batch)


def model_step(parts: Iterable[tuple[Timing, int, int]]) -> Timing:
    """One model step from its layer kinds' (timing, layers, batch): the medians and the
    medians' CI bounds summed with the layer counts as weights (the bounds add linearly, a
    conservative interval); no samples, as the kinds were timed apart."""
    steps = list(parts)
    median = sum(t.median_us * n for t, n, _ in steps)
    bounds = [(t.ci_low_us, t.ci_high_us, n) for t, n, _ in steps]
    if any(lo is None or hi is None for lo, hi, _ in bounds):
        return Timing(median)
    low = sum(float(lo or 0.0) * n for lo, _, n in bounds)
    high = sum(float(hi or 0.0) * n for _, hi, n in bounds)
    return Timing(median, low, high)


def deploy_options(ok: pd.DataFrame, engine: str, tp: int) -> tuple[list[Option], Option | None]:
    """The options (every KV dtype) and the engine's default among them (None: no rows)."""
    if ok.empty:
        return [], None
    if engine == "none":
        from attnbench.analysis.engine_rank import _paged_raw

        raw = ok[[_paged_raw(r) for r in records(ok)]]
        raw = raw[~raw["backend"].astype(str).map(is_tuned).astype(bool)]
        opts = _options_from(raw, lambda k: library_call(k.variant, k.kv, k.page_size), None)
        want = OptionKey(RAW_DEFAULT, "auto", 16)
        base = RAW_DEFAULT
    else:
        from attnbench.analysis.engine_rank import engine_rows

        rows, _ = engine_rows(ok, engine)  # type: ignore[arg-type]
        if rows.empty:
            return [], None
        opts = _options_from(
            rows, lambda k: engine_command(k.variant, k.kv, k.page_size, tp), "inferred_from"
        )
        from attnbench.analysis.engine_rank import rows_family

        s = default_setting(engine, rows_family(rows))  # type: ignore[arg-type]
        want, base = OptionKey(s.variant, "auto", s.default_page_size), s.variant
    options = sorted(opts.values(), key=lambda o: o.key)
    default = opts.get(want) or _most_cases(
        [o for o in options if o.key.variant == base and o.key.kv == "auto"]
    )
    if default is None and engine == "none":  # FA3 refused the shape (Gemma-2's soft-cap)
        default = _most_cases([o for o in options if o.key.kv == "auto"])
    return options, default


def _most_cases(options: list[Option]) -> Option | None:
    if not options:
        return None
    return max(options, key=lambda o: (len(o.cases("decode")), -o.key.page_size))


def not_deployable(ok: pd.DataFrame, engine: str) -> list[str]:
    """One line per measured variant that is never chosen: `+tuned` (per-case knobs no engine
    flag or environment variable sets) and contiguous-cache baselines."""
    if ok.empty:
        return []
    out = []
    for name, sub in ok.groupby("backend"):
        name = str(name)
        variant = Variant.maybe(name)
        if variant is None:
            continue
        if variant.tuned:
            knobs = sorted({k for d in sub["details"] for k in _knobs(d)})
            who = "vLLM/SGLang" if engine == "none" else engine
            out.append(
                f"{name}: not deployable: needs {', '.join(knobs) or 'its tuned knobs'} per case "
                f"(no {who} flag or env var)"
            )
        elif variant.baseline:
            out.append(f"{name}: not deployable: reads a contiguous KV copy (baseline)")
    return out


def _knobs(details: Any) -> list[str]:
    d = details.as_dict() if hasattr(details, "as_dict") else dict(details or {})
    knobs = d.get("knobs") or {}
    return [str(k) for k in knobs] if isinstance(knobs, Mapping) else []
