"""The ranges the README's "What the H200 measured" quotes, computed from the committed files
(every ok row, the unfavourable ones included), so each figure there can be re-derived:

    python scripts/readme_figures.py [results folder]

- paging: paged FA3 (`flash-attn:fa3`) / contiguous FA3 (`flash-attn:fa3-contiguous`) latency per
  case, per file and over all;
- FA3 vs FlashInfer: paged FA3 / the fastest FlashInfer variant on the same case, per kind, how
  often FA3 is faster, and which FlashInfer variant wins where FlashInfer does.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pandas as pd

from attnbench.results import read_results

ENGINE_PREFIXES = ("vllm:", "sglang:")
SUITES = (
    "brief", "paged64", "ragged", "traces", "brief70b-paged", "fp8", "gqa", "trees",
    "shared-prefix",
)  # fmt: skip
"""The files of the paged-FA3 comparison (not the replay calibration, the tuning files, the
pre-paging 70B file or the model studies, which the README quotes on their own)."""


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
        for (f, case), row in g[g["partial"]].iterrows():
            print(
                f"    fewer FlashInfer variants than elsewhere in {f}: {case} ({row['ratio']:.2f}x)"
            )


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "results")
    df = load(folder)
    df = df[~df["backend"].str.startswith(ENGINE_PREFIXES)]
    paging(df[df["ok"]])
    fa3_vs_flashinfer(df)


if __name__ == "__main__":
    main()
