"""The ranges the README's "What the H200 measured" quotes, computed from the committed files
(every ok row, the unfavourable ones included), so each figure there can be re-derived:

    python scripts/readme_figures.py [results folder]

- paging: paged FA3 (`flash-attn:fa3`) / contiguous FA3 (`flash-attn:fa3-contiguous`) latency per
  case, per file and over all;
- FA3 vs FlashInfer: paged FA3 / the fastest FlashInfer variant on the same case, per kind, how
  often FA3 is faster, and which FlashInfer variant wins where FlashInfer does;
- fp8 study kernel error: from `FP8_STUDIES` (the newest first; an older file adds only the
  (shape, format, scheme, variant) records the newer lacks), the KV quantisation error per
  format, FlashInfer's kernel error per variant, FA3's q-quant / kernel / total error, and each
  file's commit and whether its run finished.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pandas as pd

from attnbench.fp8study import load_study
from attnbench.results import read_results

ENGINE_PREFIXES = ("vllm:", "sglang:")
SUITES = (
    "brief", "paged64", "ragged", "traces", "brief70b-paged", "fp8", "gqa", "trees",
    "shared-prefix",
)  # fmt: skip
"""The files of the paged-FA3 comparison (not the replay calibration, the tuning files, the
pre-paging 70B file, the model studies, which the README quotes on their own, or the default
suite's wall-time runs, whose cases are the brief's)."""
FP8_STUDIES = ("h200-fp8-study.json.gz",)
"""The H200 fp8 studies, newest first (session 11's run at 30dc4b4 is complete: FlashInfer and
FA3 in one file; the two partial runs before it are in git history)."""
FA3_VARIANT = "flash-attn:fa3"


def load(folder: Path) -> pd.DataFrame:
    frames = []
    for path in [p for name in SUITES for p in sorted(folder.glob(f"h200-{name}.jsonl*"))]:
        rows = read_results(path).rows
        frames.append(
            pd.DataFrame(
                {
                    "file": path.name.split(".")[0],
                    "case": [r.case_id for r in rows],
                    "kind": [r.spec.kind for r in rows],
                    "backend": [r.backend for r in rows],
                    "ok": [r.status == "ok" and bool(r.latency_us) for r in rows],
                    "latency_us": [r.latency_us for r in rows],
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def paging(df: pd.DataFrame) -> None:
    wide = df.pivot_table(index=["file", "case"], columns="backend", values="latency_us")
    if "flash-attn:fa3-contiguous" not in wide:
        return
    r = (wide["flash-attn:fa3"] / wide["flash-attn:fa3-contiguous"]).dropna()
    print(f"paging cost (paged / contiguous FA3): {r.min():.2f}-{r.max():.2f}x over {r.size} pairs")
    for f, g in r.groupby(level="file"):
        print(f"  {f}: {g.min():.2f}-{g.max():.2f} ({g.size})")


def fa3_vs_flashinfer(every: pd.DataFrame) -> None:
    """`every`: rows of any status (a refusal still counts as the variant measured)."""
    df = every[every["ok"]]
    raw = every[
        every["backend"].str.startswith("flashinfer:") & ~every["backend"].str.contains(r"\+")
    ]
    fi = raw[raw["ok"]]
    best = fi.loc[fi.groupby(["file", "case"])["latency_us"].idxmin()].set_index(["file", "case"])
    fa3 = df[df["backend"] == "flash-attn:fa3"].set_index(["file", "case"])
    both = fa3.join(best.add_suffix("_fi"), how="inner")
    both["ratio"] = both["latency_us"] / both["latency_us_fi"]
    # FlashInfer variants measured per case, against the most any case of that file has
    variants = raw.groupby(["file", "case"])["backend"].nunique()
    most = variants.groupby(level="file").transform("max")
    both["partial"] = (variants < most).reindex(both.index)
    print("paged FA3 / fastest FlashInfer variant on the same case:")
    for kind, g in both.groupby("kind"):
        fastest = Counter(g["backend_fi"])
        print(
            f"  {kind}: {g['ratio'].min():.2f}-{g['ratio'].max():.2f}x, FA3 faster in "
            f"{int((g['ratio'] < 1).sum())} of {len(g)}; the fastest FlashInfer variant "
            f"{dict(fastest.most_common())}"
        )
        for end, idx in (("lowest", g["ratio"].idxmin()), ("highest", g["ratio"].idxmax())):
            row = g.loc[idx]
            print(
                f"    {end}: {idx[1]} in {idx[0]}, FA3 {row['latency_us']:.1f} us vs "
                f"{row['backend_fi']} {row['latency_us_fi']:.1f} us ({row['ratio']:.2f}x)"
            )
        for (f, case), row in g[g["partial"]].iterrows():
            print(
                f"    fewer FlashInfer variants than elsewhere in {f}: {case} ({row['ratio']:.2f}x)"
            )


def fp8_kernel_records(folder: Path) -> list[dict[str, Any]]:
    """Every kernel record of `FP8_STUDIES` present in `folder`, each (shape, format, scheme,
    variant) once, from the newest file that has it."""
    kept: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for name in FP8_STUDIES:
        path = folder / name
        if not path.is_file():
            print(f"  {name}: not in {folder}")
            continue
        doc = load_study(path)
        records = doc["kernel"]
        new = {
            key: r
            for r in records
            if (key := (r["shape"], r["format"], r.get("scheme", "tensor"), r["variant"]))
            not in kept
        }
        kept.update(new)
        print(
            f"  {name}: git_sha {doc['provenance'].get('git_sha')}, complete "
            f"{doc.get('complete')}, {len(records)} kernel records ({len(new)} used)"
        )
    return list(kept.values())


def _pct_range(values: list[float]) -> str:
    if not values:
        return "- (0)"
    return f"{100 * min(values):.2f}-{100 * max(values):.2f}% ({len(values)})"


def _rel(records: list[dict[str, Any]], metric: str) -> list[float]:
    values = [(r.get(metric) or {}).get("rel_l2_err") for r in records]
    return [v for v in values if v is not None]


def _by_scheme(records: list[dict[str, Any]], metric: str) -> str:
    """`tensor 0.27-0.32% (6), token 0.28-0.35% (6)`: the range of each scaling scheme."""
    schemes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        schemes[r.get("scheme", "tensor")].append(r)
    return ", ".join(f"{k} {_pct_range(_rel(rs, metric))}" for k, rs in schemes.items())


def fp8_kernel_errors(folder: Path) -> None:
    """Ranges (min-max over the committed records, with their count) of the fp8 study's kernel
    part: rel L2 error against fp64 attention."""
    print("fp8 study kernel error (rel L2 vs fp64 attention; min-max (records)):")
    records = fp8_kernel_records(folder)
    if not records:
        return
    by_format: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_format[r["format"]].append(r)
    for fmt, recs in by_format.items():
        # quant is one value per (shape, format, scheme), repeated in each variant's record
        shared = list({(r["shape"], r.get("scheme", "tensor")): r for r in recs}.values())
        print(
            f"  KV quant {fmt}: {_pct_range(_rel(shared, 'quant'))}; {_by_scheme(shared, 'quant')}"
        )
    ok = [r for r in records if r["status"] == "ok"]
    variants = dict.fromkeys(r["variant"] for r in records)
    for variant in [v for v in variants if v != FA3_VARIANT]:
        recs = [r for r in ok if r["variant"] == variant]
        print(
            f"  {variant} kernel: {_pct_range(_rel(recs, 'kernel'))} "
            f"({_by_scheme(recs, 'kernel')}); bf16 kernel {_pct_range(_rel(recs, 'bf16_kernel'))}"
        )
    fa3 = [r for r in ok if r["variant"] == FA3_VARIANT]
    if fa3:
        print(
            f"  {FA3_VARIANT} ({', '.join(sorted({r['format'] for r in fa3}))}): q quant "
            f"{_pct_range(_rel(fa3, 'q_quant'))}, kernel {_pct_range(_rel(fa3, 'kernel'))}, "
            f"total {_pct_range(_rel(fa3, 'total'))}; bf16 kernel "
            f"{_pct_range(_rel(fa3, 'bf16_kernel'))}"
        )
    not_ok = Counter(
        (r["variant"], r["format"], r["status"], r.get("reason", ""))
        for r in records
        if r["status"] != "ok"
    )
    for (variant, fmt, status, reason), n in not_ok.items():
        print(f"  {variant} {fmt}: {status} in {n} records ({reason})")


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "results")
    df = load(folder)
    df = df[~df["backend"].str.startswith(ENGINE_PREFIXES)]
    paging(df[df["ok"]])
    fa3_vs_flashinfer(df)
    fp8_kernel_errors(folder)


if __name__ == "__main__":
    main()
