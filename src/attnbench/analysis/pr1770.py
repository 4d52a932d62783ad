"""attnbench's rows of suite `mla-pr1770` beside the MLA decode figures flash-attention PR #1770
published for FA3 and FlashMLA (`data/anchors/fa-pr1770-mla-decode.csv`; its `#` header says
where each figure comes from and how the script drew and timed it).

The PR's `hopper/benchmark_mla_decode.py` times one MLA decode batch per nominal length s:
128 requests, 128 query heads on one 576-wide latent (v 512), bf16, page 64, each request
max(N(s, s/2), 1) tokens. The suite draws its lengths the same way, seeded (`normal:s,s/2`),
so a case's mean and total differ a little from the PR's unseeded draw; the view shows both.
A row is set beside the published figure of the same kernel (`COUNTERPART`); the other MLA
variants are listed with theirs alone, and a refusal keeps its reason.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from attnbench.analysis.frame import records

PUBLISHED_FILE = "fa-pr1770-mla-decode.csv"
SUITE = "mla-pr1770"
COUNTERPART = {"flashmla:dense": "FlashMLA", "flash-attn:mla": "FA3"}
"""attnbench variant -> the PR's name for the kernel it runs."""
VARIANTS = ("flashmla:dense", "flash-attn:mla", "flashinfer:mla-fa3", "flashinfer:mla-fa2")
"""The view's order: the two counterparts, then FlashInfer's MLA kernels."""
SHAPE: dict[str, Any] = {
    "kind": "decode",
    "num_qo_heads": 128,
    "num_kv_heads": 1,
    "head_dim": 576,
    "batch_size": 128,
    "page_size": 64,
    "dtype": "bfloat16",
    "kv_dtype": "bfloat16",
}
"""The PR's case as attnbench's row columns."""


@dataclass(frozen=True)
class Published:
    """One published figure: a kernel's time on the batch drawn at nominal length `seqlen`."""

    seqlen: int
    mean_seqlen: int
    total_seqlens: int
    max_seqlen: int
    backend: str
    latency_us: float


@dataclass(frozen=True)
class PublishedSet:
    notes: dict[str, str]
    """The file's `# key: text` header (source, script, shape, lengths, timing, gpu)."""
    rows: tuple[Published, ...]

    def seqlens(self) -> list[int]:
        return sorted({p.seqlen for p in self.rows})

    def draw(self, seqlen: int) -> Published | None:
        """A published row at nominal length `seqlen` (its mean, total and max lengths)."""
        return next((p for p in self.rows if p.seqlen == seqlen), None)

    def of(self, seqlen: int, backend: str) -> Published | None:
        return next((p for p in self.rows if (p.seqlen, p.backend) == (seqlen, backend)), None)


def published_path() -> Path:
    return Path(str(resources.files("attnbench"))) / "data" / "anchors" / PUBLISHED_FILE


def load_published(path: Path | None = None) -> PublishedSet:
    """Read the published figures (`# key: text` lines, then CSV with a column line)."""
    lines = (path or published_path()).read_text().splitlines()
    notes = dict(ln[2:].split(": ", 1) for ln in lines if ln.startswith("# ") and ": " in ln)
    body = csv.DictReader(ln for ln in lines if not ln.startswith("#"))
    rows = tuple(
        Published(
            int(r["seqlen"]),
            int(r["mean_seqlen"]),
            int(r["total_seqlens"]),
            int(r["max_seqlen"]),
            r["backend"],
            float(r["latency_us"]),
        )
        for r in body
    )
    return PublishedSet(notes, rows)


def lengths_label(seqlen: int) -> str:
    """The suite's lengths label of nominal length `seqlen` (`normal:s,s/2`)."""
    return f"normal({seqlen:g},{seqlen / 2:g})"


@dataclass(frozen=True)
class Beside:
    """One attnbench row of a PR #1770 case, with the published figure of its kernel."""

    gpu: str
    seqlen: int
    variant: str
    status: str
    latency_us: float | None
    reason: str
    kv_mean: float
    total_kv: int
    file: str
    commit: str
    published: Published | None

    @property
    def ratio(self) -> float | None:
        """attnbench / published, where both are times."""
        if self.latency_us is None or self.published is None:
            return None
        return self.latency_us / self.published.latency_us


def _case_rows(frame: pd.DataFrame, labels: dict[str, int]) -> list[dict[str, Any]]:
    """Rows of the PR's shape at one of its lengths, of the view's variants."""
    if frame.empty or any(c not in frame.columns for c in (*SHAPE, "lengths", "backend")):
        return []
    mask = frame["lengths"].isin(list(labels)) & frame["backend"].isin(list(VARIANTS))
    for column, value in SHAPE.items():
        mask &= frame[column] == value
    return records(frame[mask])


def _latency(r: dict[str, Any]) -> float | None:
    value = r.get("latency_us")
    if r["status"] != "ok" or value is None or value != value:  # NaN
        return None
    return float(value)


def rank(b: Beside) -> int:
    """Which of several rows of one (GPU, length, variant) the view keeps: a timed row, else a
    refusal by the library's own rules, else one saying the library was missing (the MLA pack
    of `scripts/h200/mla_flashmla.sh` has no FA3; the normal pack's run says why FA3 refuses)."""
    if b.latency_us is not None:
        return 2
    from attnbench.backends.base import says_missing_library

    return 0 if says_missing_library(b.reason) else 1


def beside(frame: pd.DataFrame, published: PublishedSet) -> list[Beside]:
    """Every row of `frame` on a PR #1770 case, one per GPU, length and variant (the last of
    the highest `rank`), in the view's order: GPU, length, `VARIANTS`."""
    labels = {lengths_label(s): s for s in published.seqlens()}
    latest: dict[tuple[str, int, str], Beside] = {}
    for r in _case_rows(frame, labels):
        seqlen, variant = labels[str(r["lengths"])], str(r["backend"])
        counterpart = COUNTERPART.get(variant)
        key = (str(r["gpu"]), seqlen, variant)
        found = Beside(
            str(r["gpu"]),
            seqlen,
            variant,
            str(r["status"]),
            _latency(r),
            str(r.get("reason") or ""),
            float(r["kv_mean"]),
            int(r["total_kv"]),
            str(r.get("source") or ""),
            str(r.get("git_sha") or ""),
            published.of(seqlen, counterpart) if counterpart else None,
        )
        if key not in latest or rank(found) >= rank(latest[key]):
            latest[key] = found
    return [latest[k] for k in sorted(latest, key=lambda k: (k[0], k[1], VARIANTS.index(k[2])))]
