"""`attnbench fp8`: the FP8 KV-cache numerics study, and the capacity scenario (--capacity)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from attnbench.cli import app
from attnbench.cli.common import console, fail, note

Opt = typer.Option
BRIEF_LENGTHS = ("1024", "4096", "16384", "65536", "mixed")


@app.command()
def fp8(
    device: Annotated[str, Opt(help="auto, cpu, cuda, cuda:N.")] = "auto",
    full: Annotated[
        bool, Opt("--full", help="The full study (contexts to 64k; ~1 min on an H200).")
    ] = False,
    out: Annotated[
        Path | None, Opt(help="Study JSON (default results/<time>_<device>_fp8-<size>.json).")
    ] = None,
    seed: Annotated[int, Opt()] = 0,
    kernel: Annotated[
        bool, Opt("--kernel/--no-kernel", help="Also run FlashInfer's fp8 decode (CUDA).")
    ] = True,
    needle_lengths: Annotated[
        str | None, Opt(help="Needle context lengths, e.g. 1024,65536 (overrides the size).")
    ] = None,
    trials: Annotated[int | None, Opt(min=1, help="Needle haystacks per length.")] = None,
    rel_l2_bound: Annotated[
        float | None, Opt(help="Summary: largest acceptable relative L2 error (default 0.05).")
    ] = None,
    recall_bound: Annotated[
        float | None, Opt(help="Summary: smallest acceptable needle recall (default 0.99).")
    ] = None,
    capacity: Annotated[
        bool, Opt("--capacity", help="Print KV capacity for the brief's scenario and exit.")
    ] = False,
    model: Annotated[str, Opt(help="--capacity: model shape.")] = "llama-3.1-70b",
    tp: Annotated[int, Opt(help="--capacity: tensor-parallel degree.")] = 8,
    page_size: Annotated[int, Opt(help="--capacity: tokens per page.")] = 16,
    hbm_gib: Annotated[
        float | None, Opt(help="--capacity: device memory in GiB (default: H100-80GB, H200).")
    ] = None,
    utilization: Annotated[float, Opt(help="--capacity: usable fraction of memory.")] = 0.9,
    reserve_gib: Annotated[
        float, Opt(help="--capacity: activations/workspace kept out of the KV budget.")
    ] = 4.0,
) -> None:
    """FP8 KV numerics: quantisation error per scheme and format, needle recall, kernel error."""
    if capacity:
        _capacity(model, tp, page_size, hbm_gib, utilization, reserve_gib, seed)
        return
    from attnbench.fp8study import StudyConfig, run_study, write_study
    from attnbench.fp8study.tables import errors_table, kernel_table, needle_table, summary_table
    from attnbench.hardware import resolve_device

    try:
        dev, why = resolve_device(device)
    except ValueError as exc:
        fail(str(exc))
    if why:
        note(why.split(":")[0] + ": running the fp8 study on the CPU")
    cfg = StudyConfig.full(dev, seed) if full else StudyConfig.small(dev, seed)
    lengths: tuple[int, ...] | None = None
    if needle_lengths:
        try:
            lengths = tuple(int(v) for v in needle_lengths.split(",") if v.strip())
        except ValueError:
            fail(f"--needle-lengths={needle_lengths!r}: expected comma-separated integers")
        if not lengths or min(lengths) < 2:
            fail(f"--needle-lengths={needle_lengths!r}: every length must be at least 2")
    cfg = cfg.with_overrides(
        kernel=kernel,
        needle_lengths=lengths,
        needle_trials=trials,
        rel_l2_bound=rel_l2_bound,
        recall_bound=recall_bound,
    )
    size = "full" if full else "small"
    console.print(f"[bold]attnbench fp8[/] ({size}) device=[cyan]{dev}[/] seed={seed}")
    doc = run_study(cfg)
    console.print(errors_table(doc))
    console.print(needle_table(doc))
    if doc["kernel"]:
        console.print(kernel_table(doc))
    else:
        note(f"kernel error skipped: {doc['kernel_skipped']}")
    console.print(summary_table(doc))
    path = out or _default_out(dev, size)
    write_study(doc, path)
    t = doc["timings"]
    console.print(
        f"errors {t['errors_s']:.1f}s, needle {t['needle_s']:.1f}s, kernel {t['kernel_s']:.1f}s"
        f" -> {path}"
    )


def _default_out(device: str, size: str) -> Path:
    slug = "".join(c if c.isalnum() else "-" for c in device.lower()).strip("-") or "device"
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{stamp}_{slug}_fp8-{size}.json"


def _capacity(
    model: str,
    tp: int,
    page_size: int,
    hbm_gib: float | None,
    utilization: float,
    reserve_gib: float,
    seed: int,
) -> None:
    from attnbench.capacity import GPU_MEMORY_GIB, capacity_table
    from attnbench.fp8study.tables import capacity_rich_table
    from attnbench.workload.lengths import parse_lengths

    lengths: dict[str, list[int]] = {}
    for text in BRIEF_LENGTHS:
        case = parse_lengths(text, 32, seed)[0]
        lengths[text if text != "mixed" else case.label] = list(case.kv_lens)
    gpus = {"custom": hbm_gib} if hbm_gib else dict(GPU_MEMORY_GIB)
    try:
        rows = capacity_table(
            model=model,
            tp=tp,
            gpus=gpus,
            lengths=lengths,
            page_size=page_size,
            kv_dtypes=("bfloat16", "fp8_e4m3"),
            fp8_schemes=("tensor", "token"),
            utilization=utilization,
            reserve_gib=reserve_gib,
        )
    except ValueError as exc:
        fail(str(exc))
    weights = rows[0].weight_bytes / (1 << 30) if rows else 0.0
    title = (
        f"KV capacity per GPU: {model} TP{tp}, page {page_size}, weights {weights:.1f} GiB "
        f"(bf16), budget = {utilization:g} x memory - weights - {reserve_gib:g} GiB"
    )
    console.print(capacity_rich_table(rows, title))
    console.print(
        "fp8 halves bytes per token at most (50% with per-tensor scales; per-token scales "
        "add 4 B per token and head for K and V); `batch @L` = requests of length L that fit."
    )
