"""Held-out error of the replay's decode cost models, per variant and KV dtype.

    python scripts/costmodel_fit_report.py [results files...] [--model M --tp N] [--worst K]

Fits the models exactly as `attnbench replay` does (`replay.pipeline.fit_for`: bounded by the
measured bandwidth ceiling, the GPU's SM count from the headers) and prints, per variant, the
decode rows, the held-out median / p90 / max |predicted / measured - 1| (`replay.heldout`;
each row predicted by a fit without it) and the worst rows. The issue's bar: median <= 5% and
p90 <= 10% for every variant the recommender may choose.
"""

from __future__ import annotations

import argparse

from attnbench.analysis.frame import resolve_paths
from attnbench.replay.deployment import Deployment
from attnbench.replay.heldout import decode_held_out
from attnbench.replay.pipeline import fit_for, load_rows
from attnbench.replay.shape import ShapeKey

DEFAULT_FILES = (
    "results/h200-replay-calibration.jsonl.gz",
    "results/archive/h200-brief70b.jsonl.gz",
)
VARIANTS = ("flash-attn:fa3", "flashinfer:fa2", "flashinfer:tc", "flashinfer:xqa", "sdpa:cudnn")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", default=list(DEFAULT_FILES))
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--kv-dtype", nargs="+", default=["bfloat16", "fp8_e4m3"])
    ap.add_argument("--worst", type=int, default=4)
    ap.add_argument("--all", action="store_true", help="every variant, not only the five")
    args = ap.parse_args()
    loaded = load_rows(resolve_paths(args.files))
    print(f"{'kv':5} {'variant':16} {'rows':>4} {'median':>7} {'p90':>7} {'max':>7}  streams  bar")
    for kv_dtype in args.kv_dtype:
        dep = Deployment(model=args.model, tp=args.tp, kv_dtype=kv_dtype)
        shard = dep.shard
        key = ShapeKey(
            shard.num_qo_heads,
            shard.num_kv_heads,
            shard.head_dim,
            dep.dtype,
            kv_dtype,
            dep.page_size,
        )
        models, _ = fit_for(loaded, key)
        for name, model in sorted(models.items()):
            if not args.all and name not in VARIANTS:
                continue
            h = decode_held_out(model, loaded.rows)
            if h is None:
                continue
            ok = "ok" if h.meets_bar else "MISS"
            print(
                f"{kv_dtype[:5]:5} {name:16} {len(h.rows):4d} {h.median:7.1%} {h.p90:7.1%} "
                f"{h.max:7.1%}  {h.streams:>7g}  {ok}"
            )
            for r in h.worst(args.worst):
                print(
                    f"{'':23}{r.lengths[:22]:22} n={r.batch_size:<4d} max={r.kv_max:<7d} "
                    f"measured {r.measured_us:8.1f} us  predicted {r.predicted_us:8.1f} us "
                    f"({r.rel_err:+.1%})"
                )


if __name__ == "__main__":
    main()
