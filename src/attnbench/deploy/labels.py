"""The label a `recommend --measure` row carries, so the rows alone give the traffic's design.

Decode: `deploy TRACE bucket=B weight=W costs=GPU`: the replayed step's CUDA-graph bucket, that
bucket's share of the trace's decode steps, and the GPU whose fitted step costs made the replay
(spaces as `_`). Prefill: `deploy-prefill TRACE draw=I`: the I-th prompt drawn from the trace.
Older rows have no `costs=`: their replay's GPU is unknown (`DecodeLabel.costs_gpu` is None).
"""

from __future__ import annotations

from dataclasses import dataclass

DECODE = "deploy "
PREFILL = "deploy-prefill "


@dataclass(frozen=True)
class DecodeLabel:
    trace: str
    bucket: int
    weight: float
    costs_gpu: str | None = None


def gpu_tag(gpu: str) -> str:
    return gpu.strip().replace(" ", "_")


def decode_label(trace: str, bucket: int, weight: float, costs_gpu: str) -> str:
    return f"{DECODE}{trace} bucket={bucket} weight={weight:.4f} costs={gpu_tag(costs_gpu)}"


def prefill_label(trace: str, draw: int) -> str:
    return f"{PREFILL}{trace} draw={draw}"


def parse_decode(label: str) -> DecodeLabel | None:
    """The decode label's parts, else None (any other label)."""
    if not label.startswith(DECODE):
        return None
    trace, sep, rest = label[len(DECODE) :].rpartition(" bucket=")
    if not sep:
        return None
    fields = dict(kv.split("=", 1) for kv in f"bucket={rest}".split() if "=" in kv)
    try:
        bucket, weight = int(fields["bucket"]), float(fields["weight"])
    except (KeyError, ValueError):
        return None
    costs = fields.get("costs")
    return DecodeLabel(trace, bucket, weight, costs.replace("_", " ") if costs else None)


def parse_prefill(label: str) -> tuple[str, int] | None:
    """(trace, draw) of a prefill label, else None."""
    if not label.startswith(PREFILL):
        return None
    trace, sep, draw = label[len(PREFILL) :].rpartition(" draw=")
    try:
        return (trace, int(draw)) if sep else None
    except ValueError:
        return None
