"""attnbench's engine-path rows beside NVIDIA AIConfigurator's published attention tables.

AIConfigurator (`aiconfigurator-core`) ships per-op tables its collectors measured inside each
engine; `data/anchors/aiconfigurator-<version>.csv.gz` holds the rows at the heads of
attnbench's committed engine cases (`scripts/aic_extract.py` makes it from the wheel and names
the wheel's sha256 in its header). A row of attnbench is set beside an AIConfigurator row when
both are on the same GPU, the same engine kernel, heads, head_dim, batch, uniform lengths
(decode: one query on KV = isl + step; prefill: causal, queries = keys = isl, no prefix) and
KV dtype. Page size is the last key: AIConfigurator's collectors run page 64, and a pair whose
page differs is kept apart (`same_page` False), never counted as matched.

How each side times its call differs, read from the collectors' source (`METHOD`): warm L2
against attnbench's recorded L2 policy, the new token's KV write inside AIConfigurator's timed
call, a mean of 6-20 back-to-back graph replays. A ratio beyond `TOLERANCE` is listed with
these differences; none of them is measured here, so no such ratio counts as explained.
"""

from __future__ import annotations

import gzip
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from attnbench.analysis.frame import records

ANCHOR_FILE = "aiconfigurator-0.12.0.csv.gz"
TOLERANCE = 0.10
"""A ratio outside 1 +- this is listed as a disagreement."""
SYSTEMS = {"H100": "h100_sxm", "H200": "h200_sxm"}
"""AIConfigurator's system name for a GPU name that contains the key."""
COUNTERPART = {"vllm:flash-attn": "vllm", "sglang:fa3": "sglang", "flashinfer:xqa": "trtllm"}
"""The attnbench variant that runs the kernel an AIConfigurator framework's rows timed:
vLLM 0.24 FLASH_ATTN (`vllm_flash_attn_fa3`), SGLang 0.5.14 `fa3`, TRT-LLM's XQA decode
(`torch_flow`; its prefill is TRT-LLM's own FMHA, which no attnbench variant runs)."""
NO_COUNTERPART = {
    "vllm:flashinfer": "AIConfigurator's vLLM rows ran FLASH_ATTN (vllm_flash_attn_fa3) only",
    "sglang:flashinfer": "AIConfigurator's SGLang rows ran fa3 (and triton for windows) only",
}
AIC_PAGE_SIZE = 64
"""Page (block) size of every AIConfigurator attention collector: vLLM `block_size = 64`,
SGLang `MockModelRunner(page_size=64)`, TRT-LLM `tokens_per_block = 64`
(ai-dynamo/aiconfigurator collector/{vllm,sglang,trtllm}/collect_attn.py)."""
METHOD = (
    "AIConfigurator times one CUDA graph of the engine's attention forward (the new token's "
    "KV write included; TRT-LLM's also applies RoPE), replayed 6 (vLLM, TRT-LLM) or 20 "
    "(SGLang) times back to back between two events after 3-10 warm-ups, and reports the "
    "mean; nothing flushes L2, so a KV cache smaller than L2 (50 MB on an H100, 60 MB on an "
    "H200) is read warm (collector/helper.py benchmark_with_power, collector/*/collect_attn.py)"
    ". vLLM's collector casts q to fp8 outside the timed call with an fp8 cache; SGLang's "
    "casts inside it."
)
L2_MB = {"h100_sxm": 50.0, "h200_sxm": 60.0}
"""L2 size per GPU (MB): a KV cache under it is read from L2 by back-to-back replays."""
SHORT_CALL_US = 25.0
"""Below this, the new token's KV write in AIConfigurator's timed call is a visible share."""
FRAMEWORK_NAMES = {"VLLM": "vllm", "SGLang": "sglang", "TRTLLM": "trtllm"}
KV_DTYPES = {"bfloat16": "bfloat16", "fp8_e4m3": "fp8"}
"""attnbench KV dtype -> AIConfigurator's `kv_cache_dtype` (its fp8 is e4m3)."""


@dataclass(frozen=True)
class AnchorSource:
    """Where the anchor rows come from: the `#` header of the extract."""

    wheel: str
    version: str
    sha256: str
    parquet: tuple[str, ...]

    def label(self) -> str:
        return f"AIConfigurator {self.version} ({self.wheel}, sha256 {self.sha256[:12]})"


@dataclass(frozen=True)
class AnchorKey:
    """What must be equal for two rows to time the same call."""

    system: str
    framework: str
    kind: str
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    batch_size: int
    qo_len: int
    kv_len: int
    kv_dtype: str


@dataclass(frozen=True)
class AnchorRow:
    key: AnchorKey
    version: str
    kernel_source: str
    latency_us: float


@dataclass(frozen=True)
class AnchorTable:
    source: AnchorSource
    rows: dict[AnchorKey, AnchorRow]


def anchor_path() -> Path:
    return Path(str(resources.files("attnbench"))) / "data" / "anchors" / ANCHOR_FILE


def _source(meta: dict[str, list[str]]) -> AnchorSource:
    def one(key: str) -> str:
        return meta.get(key, ["unknown"])[0]

    return AnchorSource(one("wheel"), one("version"), one("sha256"), tuple(meta.get("parquet", [])))


def _row(rec: dict[str, str]) -> AnchorRow | None:
    """One CSV record as an anchor row (decode or causal prefill at bf16 attention), or None."""
    if rec["attn_dtype"] != "bfloat16":
        return None  # fp8 context FMHA: no attnbench variant quantises q, k and v so
    decode = rec["op_name"] == "generation_attention"
    isl, step = int(rec["isl"]), int(rec["step"])
    key = AnchorKey(
        rec["system"],
        FRAMEWORK_NAMES.get(rec["framework"], rec["framework"].lower()),
        "decode" if decode else "prefill",
        int(rec["num_heads"]),
        int(rec["num_key_value_heads"]),
        int(rec["head_dim"]),
        int(rec["batch_size"]),
        1 if decode else isl,
        isl + step,
        rec["kv_cache_dtype"],
    )
    return AnchorRow(key, rec["version"], rec["kernel_source"], 1000.0 * float(rec["latency_ms"]))


def load_anchors(path: Path | None = None) -> AnchorTable:
    """Read the extract (`# key: value` header lines, then CSV with a column line)."""
    lines = gzip.decompress((path or anchor_path()).read_bytes()).decode().splitlines()
    meta: dict[str, list[str]] = {}
    body = [ln for ln in lines if not ln.startswith("#")]
    for ln in lines:
        if ln.startswith("# ") and ": " in ln:
            k, v = ln[2:].split(": ", 1)
            meta.setdefault(k, []).append(v)
    columns = body[0].split(",")
    rows: dict[AnchorKey, AnchorRow] = {}
    for ln in body[1:]:
        row = _row(dict(zip(columns, ln.split(","), strict=True)))
        if row is not None:
            rows[row.key] = row
    return AnchorTable(_source(meta), rows)


def system_of(gpu: str) -> str | None:
    """`NVIDIA H100 80GB HBM3` -> `h100_sxm`; None for a GPU AIConfigurator has no table of."""
    return next((s for name, s in SYSTEMS.items() if name in gpu.upper()), None)


@dataclass(frozen=True)
class Pair:
    """An attnbench row beside the AIConfigurator row of the same call."""

    key: AnchorKey
    variant: str
    page_size: int
    latency_us: float
    anchor: AnchorRow
    file: str
    commit: str
    l2_policy: str

    @property
    def ratio(self) -> float:
        """attnbench / AIConfigurator."""
        return self.latency_us / self.anchor.latency_us

    @property
    def same_page(self) -> bool:
        return self.page_size == AIC_PAGE_SIZE

    @property
    def beyond(self) -> bool:
        return abs(self.ratio - 1.0) > TOLERANCE


def _lengths(r: dict[str, Any]) -> tuple[int, int] | None:
    """(queries per request, KV length) of a uniform decode or causal no-prefix prefill."""
    spec = r["spec"]
    if not r["uniform"] or len(set(spec.qo_lens)) != 1:
        return None
    qo, kv = int(spec.qo_lens[0]), int(r["kv_max"])
    if r["kind"] == "decode" and qo == 1:
        return qo, kv
    if r["kind"] == "prefill" and qo == kv and spec.causal:
        return qo, kv
    return None


def row_key(r: dict[str, Any]) -> AnchorKey | None:
    """The anchor key of one flattened result row, or None where no AIConfigurator row can
    time the same call (another variant, GPU, dtype, or lengths that are not uniform)."""
    framework = COUNTERPART.get(str(r["backend"]))
    system = system_of(str(r.get("gpu", "")))
    kv_dtype = KV_DTYPES.get(str(r["kv_dtype"]))
    lengths = _lengths(r)
    if framework is None or system is None or kv_dtype is None or lengths is None:
        return None
    if r["dtype"] != "bfloat16":
        return None
    qo, kv = lengths
    return AnchorKey(
        system,
        framework,
        str(r["kind"]),
        int(r["num_qo_heads"]),
        int(r["num_kv_heads"]),
        int(r["head_dim"]),
        int(r["batch_size"]),
        qo,
        kv,
        kv_dtype,
    )


def timed(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that passed the gate and were timed."""
    if frame.empty:
        return frame
    return frame[(frame["status"] == "ok") & frame["latency_us"].notna()]


def pairs(frame: pd.DataFrame, table: AnchorTable) -> list[Pair]:
    """Every timed row of `frame` that has an AIConfigurator row of the same call."""
    out = []
    for r in records(timed(frame)):
        key = row_key(r)
        anchor = table.rows.get(key) if key is not None else None
        if key is None or anchor is None:
            continue
        out.append(
            Pair(
                key,
                str(r["backend"]),
                int(r["page_size"]),
                float(r["latency_us"]),
                anchor,
                str(r.get("file") or r.get("source", "")),
                str(r.get("commit", "")),
                str(r.get("l2_policy") or ""),
            )
        )
    return sorted(out, key=_order)


def _order(p: Pair) -> tuple[Any, ...]:
    k = p.key
    return (k.system, p.variant, k.kind, -p.same_page, p.file, k.num_qo_heads, k.kv_dtype,
            k.batch_size, k.kv_len)  # fmt: skip


@dataclass(frozen=True)
class Summary:
    """The ratios of one (GPU, variant, phase, page match, L2 state) group."""

    system: str
    variant: str
    kind: str
    same_page: bool
    l2_policy: str
    """attnbench's L2 state: `cold` (its default, flushed) or `warm` (`--warm-l2`, as
    AIConfigurator's back-to-back graph replays read it)."""
    ratios: tuple[float, ...]
    beyond: int

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)


def l2_state(p: Pair) -> str:
    """`warm` for rows timed with `--warm-l2`, else `cold` (attnbench's default)."""
    return "warm" if p.l2_policy.startswith("warm") else "cold"


def summaries(found: Iterable[Pair]) -> list[Summary]:
    """One summary per (GPU, variant, phase, page match, L2 state): a cold and a warm run of
    the same calls are two measurements, never pooled."""
    groups: dict[tuple[str, str, str, bool, str], list[Pair]] = {}
    for p in found:
        key = (p.key.system, p.variant, p.key.kind, p.same_page, l2_state(p))
        groups.setdefault(key, []).append(p)
    return [
        Summary(*k, tuple(p.ratio for p in ps), sum(p.beyond for p in ps))
        for k, ps in sorted(
            groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], -kv[0][3], kv[0][4])
        )
    ]


def explanation(p: Pair, found: Sequence[Pair]) -> str:
    """Why a pair is beyond the tolerance: a cause measured in these rows (the same call timed
    with a warm L2 lands within it), else `unexplained` with the known differences in method."""
    if l2_state(p) == "cold":
        warm = [
            q
            for q in found
            if l2_state(q) == "warm"
            and (q.key, q.variant, q.page_size) == (p.key, p.variant, p.page_size)
        ]
        if warm and not warm[0].beyond:
            return (
                f"explained: L2 state (measured: warm L2 {warm[0].ratio:.2f}x, within "
                f"{TOLERANCE:.0%})"
            )
    return f"unexplained; differs: {differences(p)}"


def kv_mb(k: AnchorKey) -> float:
    """The KV cache one call reads, in MB (K and V, 1 byte per value for fp8, else 2)."""
    per_value = 1 if k.kv_dtype == "fp8" else 2
    return k.batch_size * k.kv_len * k.num_kv_heads * k.head_dim * 2 * per_value / 1e6


def differences(p: Pair) -> str:
    """The known differences in method between the two sides of a pair (not measured causes)."""
    k = p.key
    out = []
    if p.l2_policy.startswith("cold") and kv_mb(k) < L2_MB.get(k.system, 0):
        out.append(f"KV {kv_mb(k):.0f} MB < L2: AIC warm, attnbench cold")
    if not p.same_page:
        out.append(f"page {p.page_size} vs {AIC_PAGE_SIZE}")
    if k.framework == "trtllm":
        out.append("AIC's TRT-LLM call adds QKV preprocessing (RoPE) and the KV write")
    elif k.kind == "decode" and p.anchor.latency_us < SHORT_CALL_US:
        out.append("AIC's call adds the KV write")
    if k.kv_dtype == "fp8" and k.framework == "sglang":
        out.append("AIC times SGLang's q cast")
    return "; ".join(out) or "none known"


def missing(frame: pd.DataFrame, found: list[Pair]) -> list[tuple[str, str, str]]:
    """(GPU system, variant, why) for each GPU of `frame` and variant with no matched pair."""
    systems = sorted(
        {s for g in frame.get("gpu", pd.Series(dtype=str)) if (s := system_of(str(g)))}
    )
    matched = {(p.key.system, p.variant) for p in found if p.same_page}
    out = []
    for system in systems:
        for variant in COUNTERPART:
            if (system, variant) not in matched:
                out.append((system, variant, "no committed row at AIConfigurator's page size"))
        out += [(system, v, why) for v, why in NO_COUNTERPART.items()]
    return out
