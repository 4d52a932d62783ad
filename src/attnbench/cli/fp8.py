"""`attnbench fp8`: the FP8 KV-cache numerics study, and the capacity scenario (--capacity)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from attnbench.cli.app import app
from attnbench.cli.common import (
    EXIT_BAD_INPUT,
    check_output_file,
    console,
    fail,
    note,
    print_fitted,
)
from attnbench.cli.paths import runs_dir
from attnbench.measure.limits import MAX_SEED

Opt = typer.Option
BRIEF_LENGTHS = ("1024", "4096", "16384", "65536", "mixed")


@app.command()
def fp8(
    device: Annotated[str, Opt(help="auto, cpu, cuda, cuda:N.")] = "auto",
    full: Annotated[
        bool, Opt("--full", help="The full study (contexts to 64k; ~1 min on an H200).")
    ] = False,
    out: Annotated[
        Path | None,
        Opt(
            help="Study JSON (default runs/<time>_<device>_fp8-<size>.json); "
            "`attnbench show FILE` prints a saved one again."
        ),
    ] = None,
    seed: Annotated[int, Opt(min=0, max=MAX_SEED, help="Seed of the random data and needles.")] = 0,
    kernel: Annotated[
        bool,
        Opt("--kernel/--no-kernel", help="Also run FlashInfer's and FA3's fp8 decode (CUDA)."),
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
    heads: Annotated[
        str | None,
        Opt(help="Study the head shape of one GPU of MODEL:TP (e.g. llama-3.1-70b:8: 8/1 heads)."),
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
    from attnbench.measure.hardware import resolve_device

    try:
        dev, why = resolve_device(device)
    except ValueError as exc:
        fail(str(exc))
    if why:
        note(why.split(":")[0] + ": running the fp8 study on the CPU")
    size = "full" if full else "small"
    path = out or _default_out(dev, size)
    check_output_file(path, "--out" if out else "the default output (set --out)")
    cfg = StudyConfig.full(dev, seed) if full else StudyConfig.small(dev, seed)
    cfg = cfg.with_overrides(
        kernel=kernel,
        needle_lengths=_needle_lengths(needle_lengths),
        needle_trials=trials,
        rel_l2_bound=rel_l2_bound,
        recall_bound=recall_bound,
        **_study_heads(heads),
    )
    console.print(f"[bold]attnbench fp8[/] ({size}) device=[cyan]{dev}[/] seed={seed}")
    saved: list[str] = []

    def checkpoint(partial: dict[str, Any]) -> None:
        try:
            write_study(partial, path)
        except OSError as exc:
            fail(f"--out={path}: writing the study failed: {exc.strerror or exc}")
        parts = [k.removesuffix("_s") for k in partial["timings"]]
        if not partial["complete"] and partial["kernel"]:
            parts[-1] = f"{len(partial['kernel'])} kernel records"
        saved.append(", ".join(parts))

    try:
        doc = run_study(cfg, checkpoint)
    except KeyboardInterrupt:
        kept = f"the parts finished ({saved[-1]}) are in {path}" if saved else "no part finished"
        note(f"interrupted: {kept}")
        raise typer.Exit(130) from None
    _print_study(doc)
    try:
        write_study(doc, path)
    except OSError as exc:
        fail(f"--out={path}: writing the study failed: {exc.strerror or exc}")
    t = doc["timings"]
    console.print(
        f"errors {t['errors_s']:.1f}s, needle {t['needle_s']:.1f}s, kernel {t['kernel_s']:.1f}s"
        f" -> {escape(str(path))}",
        highlight=False,
    )


def _needle_lengths(text: str | None) -> tuple[int, ...] | None:
    """--needle-lengths as integers of at least 2, or None (the size's own lengths)."""
    if not text:
        return None
    try:
        lengths = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        fail(f"--needle-lengths={text!r}: expected comma-separated integers")
    if not lengths or min(lengths) < 2:
        fail(f"--needle-lengths={text!r}: every length must be at least 2")
    return lengths


def _print_study(doc: dict[str, Any]) -> None:
    from attnbench.fp8study.tables import errors_table, kernel_table, needle_table, summary_table

    console.print(errors_table(doc))
    console.print(needle_table(doc))
    if doc["kernel"]:
        console.print(kernel_table(doc))
    if doc["kernel_skipped"]:  # all of it, or one library (FlashInfer or FA3) missing here
        note(f"kernel error skipped: {doc['kernel_skipped']}")
    console.print(summary_table(doc))


def _default_out(device: str, size: str) -> Path:
    slug = "".join(c if c.isalnum() else "-" for c in device.lower()).strip("-") or "device"
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return runs_dir() / f"{stamp}_{slug}_fp8-{size}.json"


def _capacity(
    model: str,
    tp: int,
    page_size: int,
    hbm_gib: float | None,
    utilization: float,
    reserve_gib: float,
    seed: int,
) -> None:
    from attnbench.fp8study.tables import capacity_rich_table
    from attnbench.workload.capacity import GPU_MEMORY_GIB, CapacityScenario, capacity_table
    from attnbench.workload.lengths import parse_lengths

    _check_capacity_args(page_size, hbm_gib, utilization, reserve_gib)
    lengths: dict[str, list[int]] = {}
    for text in BRIEF_LENGTHS:
        case = parse_lengths(text, 32, seed)[0]
        lengths[text if text != "mixed" else case.label] = list(case.kv_lens)
    gpus = {"custom": hbm_gib} if hbm_gib is not None else dict(GPU_MEMORY_GIB)
    try:
        scenario = CapacityScenario(
            model=model,
            tp=tp,
            page_size=page_size,
            kv_dtypes=("bfloat16", "fp8_e4m3"),
            fp8_schemes=("tensor", "token"),
            utilization=utilization,
            reserve_gib=reserve_gib,
        )
        rows = capacity_table(lengths, gpus, scenario)
    except ValueError as exc:
        fail(str(exc))
    weights = rows[0].weight_bytes / (1 << 30) if rows else 0.0
    _check_room(rows, gpus, utilization, reserve_gib, weights)
    title = (
        f"KV capacity per GPU: {model} TP{tp}, page {page_size}, weights {weights:.1f} GiB "
        f"(bf16), budget = {utilization:g} x memory - weights - {reserve_gib:g} GiB"
    )
    print_fitted(capacity_rich_table(rows, title), keys=3)
    console.print(
        "fp8 halves bytes per token at most (50% with per-tensor scales; per-token scales "
        "add 4 B per token and head for K and V); `batch @L` = requests of length L that fit."
    )


def _check_capacity_args(
    page_size: int, hbm_gib: float | None, utilization: float, reserve_gib: float
) -> None:
    if page_size < 1:
        fail(f"--page-size={page_size}: must be a positive number of tokens")
    if hbm_gib is not None and not 0 < hbm_gib < 1 << 20:
        fail(f"--hbm-gib={hbm_gib:g}: must be a positive number of GiB (device memory)")
    if not 0 < utilization <= 1:
        fail(f"--utilization={utilization:g}: must be a fraction in (0, 1], e.g. 0.9")
    if not 0 <= reserve_gib < 1 << 20:
        fail(f"--reserve-gib={reserve_gib:g}: must be 0 or a positive number of GiB")


def _check_room(
    rows: list[Any], gpus: dict[str, float], utilization: float, reserve: float, weights: float
) -> None:
    """A GPU whose budget leaves no room for any KV cache is said so, not printed as zeros;
    when no GPU has room, that is an error naming the flags to change."""
    full = [g for g in gpus if all(r.budget_bytes <= 0 for r in rows if r.gpu == g)]
    for g in full:
        why = (
            f"{utilization:g} x {gpus[g]:g} GiB leaves nothing for the KV cache after "
            f"{weights:.1f} GiB of weights and {reserve:g} GiB reserved"
        )
        if len(full) == len(gpus):
            flag, advice = _blamed(gpus, utilization, reserve)
            fail(f"{flag}: {g}: {why}; {advice}", EXIT_BAD_INPUT)
        note(f"{g}: {why}")


def _study_heads(heads: str | None) -> dict[str, int]:
    """`--heads MODEL:TP` as the study's head counts and head_dim (one GPU's shard)."""
    if heads is None:
        return {}
    from attnbench.workload.models import get_model

    name, _, tp = heads.partition(":")
    try:
        shard = get_model(name).shard(int(tp or "1"))
    except (KeyError, ValueError) as exc:
        fail(f"--heads={heads}: {str(exc).strip(chr(39))} (MODEL:TP, e.g. llama-3.1-70b:8)")
    return {
        "num_qo_heads": shard.num_qo_heads,
        "num_kv_heads": shard.num_kv_heads,
        "head_dim": shard.head_dim,
    }


def _blamed(gpus: dict[str, float], utilization: float, reserve: float) -> tuple[str, str]:
    """The flag that leaves no room, and what to do: the reserve when it alone takes the
    biggest GPU's budget, else the memory (--hbm-gib given) or the weights' share (--tp)."""
    if reserve >= utilization * max(gpus.values()):
        return f"--reserve-gib={reserve:g}", "lower --reserve-gib"
    if "custom" in gpus:
        return "--hbm-gib", "raise --hbm-gib or --tp, or lower --reserve-gib"
    return "--tp", "raise --tp (fewer weights per GPU), or lower --reserve-gib"
