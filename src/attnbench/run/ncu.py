"""Nsight Compute plumbing for `attnbench fidelity --ncu`: one ncu child per group of specs.

The child (any module with a `--child PAYLOAD` entry, see `run.fidelity`) profiles only what
lies between cudaProfilerStart and cudaProfilerStop; it opens one such window per spec and
launches a marker kernel (`torch.cuda._sleep`: ATen's `spin_kernel`, a 1x1 grid) first in each,
so the kernel sequence ncu reports splits per spec at the markers (the markers left out of every
sum). It prints one `ATTNBENCH-NCU {"i": ..., "status": ...}` line per spec, so a spec that
fails inside the child is named and the others keep their windows. Nothing here imports torch.

Replay cost: ncu replays each profiled kernel once per metric pass (kernel replay: the memory the
kernel may write is saved before the first pass and restored before each further one), so the
profiles below ask only for the metrics their question needs and as few calls as it allows.
Kept on purpose: `--cache-control all` (caches flushed before each pass, as the engine's cold-L2
timing flushes before each call: cheap next to a restore); `--replay-mode kernel` (application
replay would rerun the whole child, torch import and inputs included, once per pass).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

NCU_METRICS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__cycles_active.avg.pct_of_peak_sustained_elapsed",
    "launch__waves_per_multiprocessor",
    "launch__grid_size",
)
SM_ACTIVITY_METRICS = (
    "gpu__time_duration.sum",
    "sm__cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__grid_size",
    "launch__waves_per_multiprocessor",
)
NCU_CALLS = 3
NCU_OPTIONS = (
    "--clock-control",
    "none",
    "--cache-control",
    "all",
    "--replay-mode",
    "kernel",
    "--profile-from-start",
    "off",
    "--print-kernel-base",
    "function",
    "--csv",
)
CHILD_TAG = "ATTNBENCH-NCU "
MARKER_CYCLES = 1000
_MARKER = re.compile(r"(^|::)spin_kernel(\(|$)")
_PASSES = re.compile(r"==PROF== Profiling .* (\d+) pass(?:es)?\s*$")
NCU_START_S = 120.0
"""Per child: ncu, Python, torch and the kernel library starting (compiled kernels cached)."""
NCU_PER_SPEC_S = 60.0
"""Per spec: inputs, plan, warm-up and the profiled calls with their replays."""


@dataclass(frozen=True)
class NcuProfile:
    """What one group measures: `timing` compares ncu's per-call time with the engine median
    over NCU_CALLS calls and adds DRAM; `sm-activity` asks only its question (SM activity,
    occupancy, grid, waves, time), also over NCU_CALLS calls: with one call, ncu's time of
    XQA's 4-long batch was 874 us in one H200 run and 819 us in the next (-6.3%) while the
    engine's median moved 0.2%, more than the 3% agreement tolerance."""

    name: str
    metrics: tuple[str, ...]
    calls: int


TIMING = NcuProfile("timing", NCU_METRICS, NCU_CALLS)
SM_ACTIVITY = NcuProfile("sm-activity", SM_ACTIVITY_METRICS, NCU_CALLS)


def group_timeout_s(n_specs: int) -> float:
    return NCU_START_S + NCU_PER_SPEC_S * n_specs


def find_ncu() -> str | None:
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    return ncu if os.path.exists(ncu) else None


def ncu_command(ncu: str, profile: NcuProfile, child: Sequence[str]) -> list[str]:
    return [ncu, *NCU_OPTIONS, "--metrics", ",".join(profile.metrics), *child]


def profile_group(
    specs: Sequence[dict[str, Any]],
    profile: NcuProfile,
    child_module: str,
    timeout_s: float | None = None,
) -> list[dict[str, Any]]:
    """Profile `specs` ({"backend", "spec"} each) in one ncu child; one `ncu` record per spec,
    in order. A timeout or a crash of the child gives every spec the same failure record."""
    ncu = find_ncu()
    if ncu is None:
        return [{"status": "unsupported", "reason": "ncu not found"} for _ in specs]
    limit = group_timeout_s(len(specs)) if timeout_s is None else timeout_s
    payload = json.dumps({"calls": profile.calls, "specs": list(specs)})
    cmd = ncu_command(ncu, profile, [sys.executable, "-m", child_module, "--child", payload])
    t0 = time.monotonic()
    rc, stdout, stderr, timed_out = _run(cmd, limit)
    ran = {
        "profile": profile.name,
        "options": [*NCU_OPTIONS, "--metrics", ",".join(profile.metrics)],
        "calls": profile.calls,
        "group_size": len(specs),
        "group_wall_s": round(time.monotonic() - t0, 1),
        "group_timeout_s": limit,
    }
    if timed_out:
        why = f"the ncu child for {len(specs)} case(s) took over {limit:g} s"
        return [{"status": "timeout", "reason": why, **ran} for _ in specs]
    return [{**r, **ran} for r in group_records(stdout, stderr, rc, len(specs), profile.calls)]


def _run(cmd: list[str], limit: float) -> tuple[int, str, str, bool]:
    """(rc, stdout, stderr, timed out); the child's whole process group is killed on timeout."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return proc.returncode, out, err, True
    return proc.returncode, out, err, False


def group_records(
    stdout: str, stderr: str, rc: int, n_specs: int, calls: int
) -> list[dict[str, Any]]:
    """One `ncu` record per spec from a finished child's output: its kernels split at the
    markers, assigned in order to the specs the child reports as profiled."""
    tail = _tail(stdout, stderr)
    if rc != 0:
        why = f"the ncu child failed (rc {rc}): {tail}"
        return [{"status": "error", "reason": why} for _ in range(n_specs)]
    states = child_states(stdout, n_specs)
    windows = [bool(s.pop("window", False)) for s in states]
    segments = split_at_markers(parse_ncu_csv(stdout))
    if len(segments) != sum(windows):
        why = f"ncu's kernels split into {len(segments)} windows, not {sum(windows)}: {tail}"
        return [
            {"status": "error", "reason": why} if s.get("status") == "ok" else s for s in states
        ]
    out = list(states)
    passes = count_passes(stdout + "\n" + stderr)
    opened = [i for i, w in enumerate(windows) if w]
    for i, kernels in zip(opened, segments, strict=True):
        if states[i].get("status") != "ok":
            continue  # failed inside its window: its own reason stands
        out[i] = summarize(kernels, calls)
        if passes:
            out[i]["passes"] = passes
    return out


def child_states(stdout: str, n_specs: int) -> list[dict[str, Any]]:
    """Each spec's status line from the child (an error for a spec it never reported)."""
    states: list[dict[str, Any]] = [
        {"status": "error", "reason": "the ncu child never reached this case"}
        for _ in range(n_specs)
    ]
    for line in stdout.splitlines():
        if not line.startswith(CHILD_TAG):
            continue
        try:
            rec = json.loads(line[len(CHILD_TAG) :])
        except ValueError:
            continue
        i = rec.pop("i", None) if isinstance(rec, dict) else None
        if isinstance(i, int) and 0 <= i < n_specs:
            states[i] = rec
    return states


def count_passes(text: str) -> int | None:
    """The most replay passes ncu reported for one kernel (`... - 4 passes`), if it said."""
    found = [int(m.group(1)) for ln in text.splitlines() if (m := _PASSES.search(ln))]
    return max(found) if found else None


def is_marker(kernel: dict[str, Any]) -> bool:
    return bool(_MARKER.search(str(kernel.get("name", ""))))


def split_at_markers(kernels: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The kernels after each marker, up to the next (markers themselves left out); kernels
    before the first marker belong to no window and are dropped."""
    segments: list[list[dict[str, Any]]] = []
    for k in kernels:
        if is_marker(k):
            segments.append([])
        elif segments:
            segments[-1].append(k)
    return segments


def summarize(kernels: list[dict[str, Any]], calls: int) -> dict[str, Any]:
    """Per-call sums and time-weighted means of one spec's kernels (over `calls` calls)."""
    if not kernels:
        return {"status": "error", "reason": "ncu recorded no kernels in this case's window"}
    total: dict[str, float] = {}
    for k in kernels:
        for m, v in k["metrics"].items():
            total[m] = total.get(m, 0.0) + v
    weights = [k["metrics"].get("gpu__time_duration.sum", 0.0) for k in kernels]
    wsum = sum(weights) or 1.0

    def weighted(metric: str) -> float:
        pairs = zip(kernels, weights, strict=True)
        return float(sum(k["metrics"].get(metric, 0.0) * w for k, w in pairs) / wsum)

    def per_kernel(k: dict[str, Any]) -> dict[str, Any]:
        m = k["metrics"]
        return {
            "name": str(k["name"])[:80],
            "time_us": m.get("gpu__time_duration.sum", 0.0) / 1e3,
            "grid_size": m.get("launch__grid_size"),
            "waves_per_sm": m.get("launch__waves_per_multiprocessor"),
            "sm_active_pct": m.get("sm__cycles_active.avg.pct_of_peak_sustained_elapsed"),
            "achieved_occupancy_pct": m.get("sm__warps_active.avg.pct_of_peak_sustained_active"),
        }

    out: dict[str, Any] = {
        "status": "ok",
        "kernels_per_call": len(kernels) / calls,
        "kernel_names": sorted({str(k["name"])[:80] for k in kernels}),
        "gpu_time_us": total.get("gpu__time_duration.sum", 0.0) / calls / 1e3,
        "achieved_occupancy_pct": weighted("sm__warps_active.avg.pct_of_peak_sustained_active"),
        "sm_active_pct": weighted("sm__cycles_active.avg.pct_of_peak_sustained_elapsed"),
        "waves_per_sm": max(
            k["metrics"].get("launch__waves_per_multiprocessor", 0.0) for k in kernels
        ),
        "grid_size": max(k["metrics"].get("launch__grid_size", 0.0) for k in kernels),
        "first_call": [per_kernel(k) for k in kernels[: max(1, len(kernels) // calls)]],
    }
    if "dram__bytes_read.sum" in total:
        out["dram_read_bytes"] = total["dram__bytes_read.sum"] / calls
    if any("dram__throughput.avg.pct_of_peak_sustained_elapsed" in k["metrics"] for k in kernels):
        out["dram_throughput_pct"] = weighted("dram__throughput.avg.pct_of_peak_sustained_elapsed")
    return out


def _tail(stdout: str, stderr: str) -> str:
    """The last lines worth showing: ncu's own messages and the child's, never its CSV."""
    lines = [ln for ln in (stderr + "\n" + stdout).splitlines() if ln and not ln.startswith('"')]
    return " | ".join(lines[-4:])[-400:]


def parse_ncu_csv(text: str) -> list[dict[str, Any]]:
    """ncu --csv rows (one per kernel x metric) grouped into kernels in launch order, values in
    base units (ns for time, bytes for bytes, percent for %)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        return []
    kernels: dict[str, dict[str, Any]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        kid = row.get("ID")
        name = row.get("Metric Name")
        if kid is None or not name:
            continue
        k = kernels.setdefault(kid, {"name": row.get("Kernel Name", ""), "metrics": {}})
        k["metrics"][name] = _to_base(row.get("Metric Value", ""), row.get("Metric Unit", ""))
    return [kernels[kid] for kid in sorted(kernels, key=_id_order)]


def _id_order(kid: str) -> tuple[int, str]:
    return (int(kid), "") if kid.isdigit() else (sys.maxsize, kid)


_UNITS = {
    "nsecond": 1.0,
    "usecond": 1e3,
    "msecond": 1e6,
    "second": 1e9,
    "byte": 1.0,
    "Kbyte": 1e3,
    "Mbyte": 1e6,
    "Gbyte": 1e9,
    "%": 1.0,
    "": 1.0,
}


def _to_base(value: str, unit: str) -> float:
    try:
        v = float(value.replace(",", ""))
    except ValueError:
        return 0.0
    return v * _UNITS.get(unit, 1.0)
