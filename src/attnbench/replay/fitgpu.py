"""The GPU whose rows fit a validation's cost models: the GPU whose steps it judges.

`replay-validate` compares the step times the cost models predict with steps timed on one GPU.
Models fitted on another GPU's rows would read that GPU's bandwidth gap as model error (an
H100's steps judged by H200-fitted models: FA3 25% off, though the model is right), so the
models are fitted on the timing GPU's own rows, or the validation refuses with one line naming
both GPUs and the command that measures this one's. Without the timing GPU's name (a document
that does not record it), the rows of one GPU are used, the one with the most rows at the
shape, and a note says which. Reads results files only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from attnbench.replay.deployment import Deployment
from attnbench.replay.pipeline import (
    CALIBRATED,
    LoadedRows,
    ReplayError,
    calibration_command,
    rows_by_gpu,
    shape_key,
)


def fit_command(dep: Deployment) -> str:
    """The `attnbench run` that measures the rows the cost models of `dep` are fitted on:
    the `replay-calibration` suite at the calibrated deployment, else `calibration_command`."""
    shape = (dep.model, dep.tp, dep.dtype, dep.kv_dtype, dep.page_size)
    calibrated = (
        CALIBRATED.model,
        CALIBRATED.tp,
        CALIBRATED.dtype,
        CALIBRATED.kv_dtype,
        CALIBRATED.page_size,
    )
    return (
        "`attnbench run --suite replay-calibration`"
        if shape == calibrated
        else (calibration_command(dep))
    )


def rows_at_shape(by_gpu: Mapping[str, LoadedRows], dep: Deployment) -> dict[str, int]:
    """Per GPU, its ok rows at `dep`'s attention shape (any page size), most first."""
    key = shape_key(dep)
    counts = {
        g: sum(r.status == "ok" and key.matches(r.spec, any_page=True) for r in x.rows)
        for g, x in by_gpu.items()
    }
    return dict(sorted(((g, n) for g, n in counts.items() if n), key=lambda t: (-t[1], t[0])))


def fitting_gpu(
    paths: Sequence[Path], timed_gpu: str | None, dep: Deployment, what: str = "the steps"
) -> tuple[str, list[str]]:
    """The GPU whose rows fit the models that judge `what` timed on `timed_gpu`, and notes:
    `timed_gpu` itself where `paths` hold its rows at `dep`'s shape, else ReplayError naming
    both GPUs and the command that fits this one; `timed_gpu` None: the GPU with the most
    rows at the shape (a note says the steps' GPU is unknown)."""
    counts = rows_at_shape(rows_by_gpu(paths), dep)
    at = f"{shape_key(dep).describe()} ({dep.model} at tp {dep.tp})"
    if timed_gpu is None:
        if not counts:
            raise ReplayError(f"no ok rows at {at} in the results; run {fit_command(dep)}")
        gpu = next(iter(counts))
        return gpu, [f"{what} name no GPU: the cost models are fitted on {gpu}'s rows only"]
    if timed_gpu in counts:
        return timed_gpu, []
    others = ", ".join(f"{g} ({n:,} rows)" for g, n in counts.items())
    have = f"rows of {others} only" if others else "no rows of any GPU"
    raise ReplayError(
        f"{what} are timed on {timed_gpu}, but the results hold {have} at {at}: cost models "
        f"fitted on another GPU would judge its bandwidth, not the model; run "
        f"{fit_command(dep)} on {timed_gpu} and pass its results"
    )
