"""Small cases of every workload kind and a fake device, shared by the backend tests."""

from __future__ import annotations

from typing import Any

from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.spec import TreeSpec, WorkloadSpec

TREE = TreeSpec(name="tree-5", parents=(-1, 0, 0, 1, 1))
KINDS = ["decode", "append", "prefill", "tree", "shared_prefix"]


def device(sm: int = 90, kind: str = "cuda") -> DeviceInfo:
    """A DeviceInfo with an H200's facts and the given compute capability."""
    cc = (sm // 10, sm % 10) if kind == "cuda" else None
    return DeviceInfo(kind, 0, "NVIDIA H200", cc, 132, 50 << 20, 141 << 30)


def make_spec(kind: str = "decode", **overrides: Any) -> WorkloadSpec:
    """Three ragged requests of `kind`, 8/2 heads, d32, page 8, bf16."""
    shapes: dict[str, dict[str, Any]] = {
        "decode": {"kv_lens": (40, 9, 73), "qo_lens": (1, 1, 1)},
        "append": {"kv_lens": (40, 12, 73), "qo_lens": (4, 3, 5)},
        "prefill": {"kv_lens": (21, 9, 40), "qo_lens": (21, 9, 40)},
        "tree": {"kv_lens": (40, 12, 73), "qo_lens": (5, 5, 5), "tree": TREE},
        "shared_prefix": {"kv_lens": (40, 37, 60), "qo_lens": (1, 1, 1), "shared_prefix_len": 20},
    }
    fields: dict[str, Any] = {
        "kind": kind,
        "num_qo_heads": 8,
        "num_kv_heads": 2,
        "head_dim": 32,
        "page_size": 8,
        "dtype": "bfloat16",
        "kv_dtype": "bfloat16",
        **shapes[kind],
    }
    fields.update(overrides)
    return WorkloadSpec(**fields)
