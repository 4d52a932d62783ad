"""FA3's decision for a decode call, as a row's details record it (no torch here: the replay
reads it back on machines without FA3, `replay.fa3plan.recorded_decision`).

    fa3_num_splits  the static split count FA3 chose (the leading size of the split buffers
                    the forward returns; 1 when it returned none)
    fa3_pack_gqa    True / False: the pack-GQA choice, found by recomputing the scheduler
                    metadata with each forced and comparing it with FA3's own; "either" when
                    both give the same metadata; the knob's value when it was set
    fa3_splits      splits per request in FA3's launch order (`encode_counts`: `16,12,1x200`)
    fa3_order       the request index of each launch position (comma-separated)
    fa3_metadata    the metadata's layout as read: `b_rounded x vectors + semaphore`

The metadata tensor `get_scheduler_metadata` returns (hopper/flash_api.cpp,
mha_fwd_get_scheduler_metadata) holds, per batch rounded up to 4, the dynamic splits, the query
blocks, and with sorting the request of each virtual batch (then, for causal calls, the heads
kept in L2), followed by the tile semaphore on sm90.
"""

from __future__ import annotations

from collections.abc import Sequence

METADATA_IN_PLAN = "per-step, in plan"
"""`details.scheduler_metadata` of a row whose FA3 scheduler metadata was built in plan."""
DETAIL_KEYS = ("fa3_num_splits", "fa3_pack_gqa", "fa3_splits", "fa3_order", "fa3_metadata")


def encode_counts(values: Sequence[int]) -> str:
    """`16,12,1x200`: a run of one value as `vxN` (the splits of a large batch are mostly 1)."""
    out: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        out.append(str(values[i]) if j - i == 1 else f"{values[i]}x{j - i}")
        i = j
    return ",".join(out)


def decode_counts(text: str) -> tuple[int, ...]:
    """The inverse of `encode_counts` (ValueError for text it did not write)."""
    out: list[int] = []
    for part in text.split(","):
        value, _, count = part.partition("x")
        out.extend([int(value)] * (int(count) if count else 1))
    return tuple(out)


def parse_metadata(values: Sequence[int], batch_size: int) -> tuple[list[int], list[int], str]:
    """(splits per launch position, request per launch position, layout) from the metadata
    tensor's values; ValueError when they do not have the layout described above."""
    b_rounded = -(-batch_size // 4) * 4
    if batch_size <= 0 or len(values) < 2 * b_rounded:
        raise ValueError(f"{len(values)} metadata values for a batch of {batch_size}")
    vectors, extra = divmod(len(values), b_rounded)
    if extra > 1:
        raise ValueError(f"{len(values)} metadata values: not {b_rounded} x vectors + semaphore")
    splits = [int(v) for v in values[:batch_size]]
    if vectors >= 3:
        order = [int(v) for v in values[2 * b_rounded : 2 * b_rounded + batch_size]]
    else:
        order = list(range(batch_size))
    if sorted(order) != list(range(batch_size)) or min(splits) < 1:
        raise ValueError("the metadata's order is not a permutation of the batch")
    return splits, order, f"{b_rounded} x {vectors}" + (" + semaphore" if extra else "")


def decision_details(
    values: Sequence[int], batch_size: int, num_splits: int | None, pack_gqa: bool | str
) -> dict[str, str | int | bool]:
    """The `fa3_*` details of one decode call (module docstring); only `fa3_metadata` (saying
    why) when the metadata does not read."""
    try:
        splits, order, layout = parse_metadata(values, batch_size)
    except ValueError as exc:
        return {"fa3_metadata": f"unread: {exc}"}
    out: dict[str, str | int | bool] = {
        "fa3_pack_gqa": pack_gqa,
        "fa3_splits": encode_counts(splits),
        "fa3_order": ",".join(str(i) for i in order),
        "fa3_metadata": layout,
    }
    if num_splits is not None:
        out["fa3_num_splits"] = num_splits
    return out
