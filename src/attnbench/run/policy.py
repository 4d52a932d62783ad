"""What `--backend all` runs on a device: a policy of the run, which the CLI only applies."""

from __future__ import annotations

from collections.abc import Sequence

from attnbench.backends.base import Backend
from attnbench.backends.variant import Variant

# Slow CPU-style paths that `all` leaves out on a GPU (ask for them by name): the fp64 oracle
# runs on every case anyway, and SDPA's math kernel materialises the whole score matrix (it ran
# out of memory on 16k+ prefill on the H200 and took 10-100x the fused kernels' time).
GPU_OPT_IN = frozenset({"reference", "sdpa:math"})
# On a CPU, `all` leaves out the timed `reference` for the same reason: the fp64 oracle gates
# every case anyway, and timing it again as a variant was a third of the CPU default run.
CPU_OPT_IN = frozenset({"reference"})
# The engine variants (vllm:*, sglang:*) run the same kernels as the raw library variants with
# the engines' arguments: `all` leaves them out so a default run does not time each kernel twice.
ENGINE_OPT_IN = frozenset({"vllm", "sglang"})


def runnable_here(backends: Sequence[Backend], device_kind: str) -> tuple[list[Backend], list[str]]:
    """The backends `all` means on `device_kind` ("cpu" or "cuda"), and a note on each group
    left out (GPU-only backends and `CPU_OPT_IN` on a CPU; `GPU_OPT_IN` on a GPU)."""
    kept = [b for b in backends if device_kind in b.devices]
    notes = []
    dropped = sorted({Variant.parse(b.name).library for b in backends if b not in kept})
    if dropped:
        notes.append(f"skipping GPU-only backends on {device_kind}: {', '.join(dropped)}")
    if device_kind == "cuda":
        kept = [
            b
            for b in kept
            if b.name not in GPU_OPT_IN and Variant.parse(b.name).engine not in ENGINE_OPT_IN
        ]
        left_out = sorted(GPU_OPT_IN) + sorted(ENGINE_OPT_IN)
        notes.append(f"on a GPU, `all` leaves out {', '.join(left_out)}: name them to run them")
    else:
        kept = [b for b in kept if b.name not in CPU_OPT_IN]
        opt_in = ", ".join(sorted(CPU_OPT_IN))
        notes.append(f"on a CPU, `all` leaves out {opt_in}: name it to time it")
    return kept, notes


def backends_for(
    requested: list[str], device_kind: str, *, tune: bool = False
) -> tuple[list[Backend], list[str]]:
    """The one decision of which variants a run (or a tune) uses: `requested` names selected,
    `all` narrowed to what runs on `device_kind` (`runnable_here`: on a GPU the fp64 oracle
    runs on every case as the accuracy gate, so `reference` as a timed variant is opt-in), and
    for tune only the variants with knobs. Returns them and a note on each group left out;
    raises ValueError for an unknown name."""
    from attnbench.backends import select_backends

    chosen = select_backends(requested)
    notes: list[str] = []
    if requested == ["all"]:
        chosen, notes = runnable_here(chosen, device_kind)
    if tune:
        without = [b.name for b in chosen if not b.knobs]
        if without:
            notes.append(f"no knobs to tune: {', '.join(without)}")
        chosen = [b for b in chosen if b.knobs]
    return chosen, notes
