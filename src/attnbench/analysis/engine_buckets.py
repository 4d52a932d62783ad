"""CUDA-graph capture buckets of `recommend --engine` (`analysis.engine_rank`): the engine's
captured batch sizes, the bucket a running batch pads to, and each bucket's weight from a
histogram of running batches (a replay's decode steps, `deploy.traffic`), or uniform."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from attnbench.engines.paths import Engine, sglang_capture_sizes, vllm_capture_sizes


def capture_sizes(engine: Engine) -> list[int]:
    return vllm_capture_sizes() if engine == "vllm" else sglang_capture_sizes()


def bucket_of(batch: int, sizes: Sequence[int]) -> int:
    """The captured size a running batch pads to (the largest one beyond the last)."""
    return next((s for s in sizes if s >= batch), sizes[-1])


def bucket_weights(sizes: Sequence[int], running: Mapping[int, float] | None) -> dict[int, float]:
    """Weight per capture bucket: the running-batch histogram padded to buckets, normalised;
    uniform over the buckets when `running` is None or empty."""
    if not running:
        return {s: 1.0 / len(sizes) for s in sizes}
    out = dict.fromkeys(sizes, 0.0)
    for b, n in running.items():
        if b >= 1 and n > 0:
            out[bucket_of(b, sizes)] += float(n)
    total = sum(out.values())
    if total <= 0:
        raise ValueError("running-batch histogram: no positive count at batch >= 1")
    return {s: w / total for s, w in out.items()}


def weighting_note(sizes: Sequence[int], weights: Mapping[int, float], source: str | None) -> str:
    """What weighted the buckets (`source`: a histogram's origin; None: uniform), in one line."""
    if source is None:
        return (
            f"no running-batch histogram given: the {len(sizes)} capture buckets "
            f"({sizes[0]}..{sizes[-1]}) are weighted uniformly"
        )
    top = [b for b in sorted(weights, key=lambda b: (-weights[b], b))[:3] if weights[b] > 0]
    held = sum(w > 0 for w in weights.values())
    return (
        f"the {len(sizes)} capture buckets are weighted by {source}: {held} of them hold weight, "
        "the most " + ", ".join(f"{b} ({100 * weights[b]:.0f}%)" for b in top)
    )
