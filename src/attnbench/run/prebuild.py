"""The first-use compiles of a GPU run, done once, in parallel, before any job is timed.

FlashInfer JIT-compiles a kernel module the first time a wrapper's `plan` asks for it, and
FlexAttention's Inductor compiles a kernel per shape on its first call. Left to the jobs, those
compiles run one after another as cases reach them (on a fresh H200: 323 s of FlashInfer and
99 s of Flex in the default suite's 507 s). Here, before the first job:

1. every planned (case, variant) pair is mapped to the FlashInfer JIT modules its route needs
   (`module_needs`: pure, from `flashinfer_rules.route`, with the generator's arguments as
   FlashInfer 0.7.4's wrappers pass them), deduplicated;
2. one process turns them into JitSpecs (`flashinfer.jit.gen_batch_decode_module`,
   `gen_batch_prefill_module`, `flashinfer.jit.xqa.gen_xqa_module`) and builds them side by
   side, each as `JitSpec.build` does (its own ninja run in its own folder, so the run's own
   `build` finds it up to date), the cores shared by their source files;
3. a second process, at the same time, plans flex on every planned Flex shape, so Inductor's
   on-disk caches (FX graph, Triton kernels) hold what the worker then loads.

While the jobs run, FlashInfer logs every module it builds (`FLASHINFER_JIT_BUILD_LOG`, set
here unless the user set it); the ones that took a second or more were compiled at first use
after all, and the footer's report names them (`first_use`).

Nothing here can fail the run: a module whose spec cannot be made or built, a process that
crashes or passes `PREBUILD_LIMIT_S`, is logged with its reason and left to compile on first
use, as without a prebuild. `ATTNBENCH_PREBUILD=0` turns it off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.measure.hardware import DeviceInfo
    from attnbench.run.plan import RunPlan
    from attnbench.workload.spec import WorkloadSpec

PREBUILD_LIMIT_S = 420.0
"""The longest the run waits for the prebuild; what is not built by then compiles on first use."""
GENERATORS: dict[str, tuple[str, str]] = {
    "decode": ("flashinfer.jit", "gen_batch_decode_module"),
    "prefill": ("flashinfer.jit", "gen_batch_prefill_module"),
    "prefill-fa2": ("flashinfer.jit.attention.modules", "_gen_batch_prefill_primary_module"),
    "xqa": ("flashinfer.jit.xqa", "gen_xqa_module"),
}
"""Module kind (`ModuleNeed.generator_key`) -> (module, function) of FlashInfer 0.7.4 that
returns its JitSpec. For the fa2 backend, 0.7.4's `get_batch_prefill_module` loads the
equal-stride primary module (`..._kv_stride_equal`), not the public generator's runtime-stride
one: on a fresh H100 (session 15) the prebuild built the public one, which nothing loaded, and
flashinfer:tc's first plan then compiled the primary one (19-20 s, bf16 and fp8 KV)."""
EXPECTED_S: dict[str, float] = {"decode": 20.0, "prefill-fa2": 25.0, "prefill-fa3": 81.0}
"""Seconds one module took to build alone on the H200 (16 cores; session 10, issue 34); xqa
and any other kind: `DEFAULT_EXPECTED_S`."""
DEFAULT_EXPECTED_S = 20.0
PARALLEL_SPEEDUP = 1.45
"""Modules built one by one against one prebuild: 171 s against 117 s for seven (issue 34)."""
FLEX_SHAPE_S = 16.0
"""Seconds of Inductor compile per Flex shape on a fresh machine (99 s for the default suite's
six, issue 34: an estimate, for the progress line only)."""
INT32 = "int32"


@dataclass(frozen=True)
class ModuleNeed:
    """One FlashInfer JIT module: the generator's kind and its positional arguments (dtypes by
    name), as the wrapper's `plan` passes them."""

    kind: str
    args: tuple[Any, ...]
    label: str

    @property
    def expected_s(self) -> float:
        key = f"{self.kind}-{self.args[0]}" if self.kind == "prefill" else self.kind
        return EXPECTED_S.get(key, DEFAULT_EXPECTED_S)

    @property
    def generator_key(self) -> str:
        """Its `GENERATORS` entry: the kind, or `prefill-fa2` for FA2's own prefill module."""
        fa2 = self.kind == "prefill" and self.args[0] == "fa2"
        return "prefill-fa2" if fa2 else self.kind


def _flags(spec: WorkloadSpec) -> tuple[bool, bool]:
    return spec.window_left >= 0, spec.logits_soft_cap > 0


def _flag_text(spec: WorkloadSpec) -> str:
    """` window soft-cap`: what tells two modules of one dtype and head_dim apart (Gemma-2's
    sliding and full layers were two `decode q bfloat16 kv bfloat16 d256` lines)."""
    window, cap = _flags(spec)
    return " window" * window + " soft-cap" * cap


def _decode(spec: WorkloadSpec) -> ModuleNeed:
    """The CUDA-core decode module (decode.py `get_batch_decode_module`)."""
    q, kv, d = spec.dtype, spec.kv_dtype, spec.head_dim
    args = (q, kv, q, INT32, d, d, 0, *_flags(spec))
    return ModuleNeed("decode", args, f"decode q {q} kv {kv} d{d}{_flag_text(spec)}")


def _prefill(backend: str, spec: WorkloadSpec, fp8_query: bool) -> ModuleNeed:
    """The batch prefill module (`get_batch_prefill_module`): paged, ragged and the decode
    wrapper on tensor cores all plan through it."""
    q = spec.kv_dtype if fp8_query else spec.dtype
    kv, d = spec.kv_dtype, spec.head_dim
    args = (backend, q, kv, spec.dtype, INT32, d, d, 0, *_flags(spec), False)
    label = f"prefill {backend} q {q} kv {kv} d{d}{_flag_text(spec)}"
    return ModuleNeed("prefill", args, label)


def _xqa(spec: WorkloadSpec, q_len: int) -> ModuleNeed:
    """XQA's module (`xqa.get_xqa_module`): one per page size, group size and query rows."""
    q, kv, d, group = spec.dtype, spec.kv_dtype, spec.head_dim, spec.group_size
    args = (q, kv, spec.page_size, d, group, spec.window_left >= 0, q, q_len)
    window = " window" * (spec.window_left >= 0)
    label = f"xqa q {q} kv {kv} d{d} group {group} page {spec.page_size}{window}"
    return ModuleNeed("xqa", args, label)


def _auto_backend(spec: WorkloadSpec, device: DeviceInfo, custom_mask: bool) -> str:
    """What `determine_attention_backend` picks: fa3 on SM90 where it runs the case (16-bit
    query and KV, no custom mask), else fa2."""
    from attnbench.backends.flashinfer_rules import fa3_refusal

    fa3 = not custom_mask and not spec.is_fp8 and fa3_refusal(spec, device, "auto") is None
    return "fa3" if fa3 else "fa2"


def module_needs(variant: str, spec: WorkloadSpec, device: DeviceInfo) -> list[ModuleNeed] | str:
    """The JIT modules `variant` needs for `spec` (none for a refused case or a route without
    JIT modules: cuDNN, trtllm-gen's cubins), or why the prebuild cannot tell."""
    from attnbench.backends.base import Unsupported
    from attnbench.backends.flashinfer_rules import VARIANTS, route
    from attnbench.backends.variant import Variant

    if variant.split(":")[0] in ("vllm", "sglang"):
        return _engine_needs(variant, spec, device)
    parsed = Variant.maybe(variant)
    library, short = (parsed.library, parsed.kernel) if parsed else ("", variant)
    if library != "flashinfer":
        return []
    if short not in VARIANTS:
        return f"{variant}: no prebuild rule (its modules compile on first use)"
    r = route(short, spec, device)
    if isinstance(r, Unsupported) or r.backend in ("cudnn", "trtllm-gen"):
        return []
    if r.api == "xqa":
        return [_xqa(spec, r.q_len_per_req)]
    if r.api == "decode" and not r.use_tensor_cores:
        return [_decode(spec)]
    backend = r.backend
    if backend == "auto":
        backend = _auto_backend(spec, device, r.custom_mask)
    return [_prefill(backend, spec, r.fp8_query)]


def _engine_needs(variant: str, spec: WorkloadSpec, device: DeviceInfo) -> list[ModuleNeed] | str:
    """An engine variant's modules: those of the raw variant that is the engine's call for
    the case (`engines.paths.kernel_path`). In session 16 they compiled at first use: SGLang's
    ragged FA3 prefill module held a run on a fresh H100 past its 75 s limit."""
    from attnbench.engines.paths import kernel_path

    try:
        path = kernel_path(variant, spec)
    except KeyError:
        return f"{variant}: no prebuild rule (its modules compile on first use)"
    if isinstance(path, str) or path.variant == variant:  # refused, or the engine's own kernel
        return []
    return module_needs(path.variant, spec, device)


@dataclass
class Needs:
    """What a plan's pairs need: FlashInfer modules (deduplicated, in first-seen order), the
    Flex shapes (one spec per compiled shape) and the notes of pairs the prebuild cannot tell."""

    modules: list[ModuleNeed] = field(default_factory=list)
    flex: list[WorkloadSpec] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def flex_shape(spec: WorkloadSpec) -> tuple[object, ...]:
    """What `torch.compile(flex_attention, dynamic=False)` compiles one kernel for."""
    from attnbench.run.sweep import shape_family

    extra = (spec.window_left, spec.sinks, spec.logits_soft_cap, spec.tree)
    return (*shape_family(spec), sum(spec.qo_lens), spec.total_kv, *extra)


def collect_needs(pairs: Iterable[tuple[WorkloadSpec, str]], device: DeviceInfo) -> Needs:
    """Every module and Flex shape the (case, variant) `pairs` need, each once (the pairs are
    the ones that will plan: the variants' checks passed)."""
    out = Needs()
    seen: set[tuple[object, ...]] = set()
    for spec, variant in pairs:
        if variant.split(":")[0] == "flex":
            key = ("flex", *flex_shape(spec))
            if key not in seen:
                seen.add(key)
                out.flex.append(spec)
            continue
        needs = module_needs(variant, spec, device)
        if isinstance(needs, str):
            if needs not in out.notes:
                out.notes.append(needs)
            continue
        for need in needs:
            if (need.kind, *need.args) not in seen:
                seen.add((need.kind, *need.args))
                out.modules.append(need)
    return out


def expected_s(needs: Needs) -> float:
    """Seconds the prebuild should take: the longest module or the modules' total over the
    parallel speedup, against the Flex shapes one after another (they run side by side)."""
    times = [n.expected_s for n in needs.modules]
    flashinfer = max(max(times, default=0.0), sum(times) / PARALLEL_SPEEDUP)
    return max(flashinfer, FLEX_SHAPE_S * len(needs.flex))


# -- in the session's process ------------------------------------------------------------------


def plan_needs(plan: RunPlan) -> Needs:
    """What the plan's (case, variant) pairs not finished yet need."""
    pairs = [
        (spec, b.name)
        for spec in plan.cases
        for b in plan.backends
        if (spec.case_id, plan.row_name(b.name)) not in plan.skip and _accepts(b, spec, plan.device)
    ]
    return collect_needs(pairs, plan.device)


def _accepts(backend: Backend, spec: WorkloadSpec, device: DeviceInfo) -> bool:
    """The variant's own check (pure rules) passes: the pair will plan."""
    try:
        return backend.check(spec, device) is None
    except Exception:  # the sweep makes it an `error` row; nothing to build for it
        return False


def enabled(plan: RunPlan) -> bool:
    """A prebuild for runs on CUDA workers, unless ATTNBENCH_PREBUILD=0."""
    off = os.environ.get("ATTNBENCH_PREBUILD", "1").strip() in ("0", "no", "off", "false")
    return not off and plan.where.mode == "pool" and plan.device.kind == "cuda"


@dataclass
class _Proc:
    what: str
    popen: subprocess.Popen[bytes]
    out: Path
    log: Path


class Prebuild:
    """The prebuild's processes, started with `start` and waited for with `wait`."""

    def __init__(self, needs: Needs) -> None:
        self.needs = needs
        self.workdir = Path(tempfile.mkdtemp(prefix="attnbench-prebuild-"))
        self.procs: list[_Proc] = []
        self.t0 = time.monotonic()
        self.since = time.time()
        self.own_log = "FLASHINFER_JIT_BUILD_LOG" not in os.environ
        if self.own_log:  # the workers inherit it
            os.environ["FLASHINFER_JIT_BUILD_LOG"] = str(self.workdir / "jit-builds.jsonl")
        self.jit_log = Path(os.environ["FLASHINFER_JIT_BUILD_LOG"])
        if needs.modules:
            jobs = os.cpu_count() or 1
            payload = {"needs": [asdict(n) for n in needs.modules], "jobs": jobs}
            self._spawn("flashinfer", payload)
        if needs.flex:
            self._spawn("flex", {"specs": [s.model_dump(mode="json") for s in needs.flex]})

    def _spawn(self, what: str, payload: dict[str, Any]) -> None:
        src, out = self.workdir / f"{what}-in.json", self.workdir / f"{what}-out.json"
        log = self.workdir / f"{what}.log"
        src.write_text(json.dumps(payload))
        cmd = [sys.executable, "-m", "attnbench.run.prebuild_worker", what, str(src), str(out)]
        try:
            with log.open("wb") as f:
                popen = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        except OSError as exc:
            self.needs.notes.append(f"{what} prebuild not started: {exc}")
            return
        self.procs.append(_Proc(what, popen, out, log))

    def what(self) -> str:
        """`7 FlashInfer modules, Flex 4 shapes`."""
        n, k = len(self.needs.modules), len(self.needs.flex)
        parts = [f"{n} FlashInfer module{'s' * (n != 1)}"] * bool(n)
        parts += [f"Flex {k} shape{'s' * (k != 1)}"] * bool(k)
        return ", ".join(parts)

    def wait(
        self, on_status: Callable[[str], None], limit_s: float = PREBUILD_LIMIT_S
    ) -> dict[str, Any]:
        """Until every process ends or `limit_s` passes (the rest are stopped); the report."""
        from attnbench.run.progress import fmt_s

        expect = fmt_s(expected_s(self.needs))
        try:
            while any(p.popen.poll() is None for p in self.procs):
                spent = time.monotonic() - self.t0
                if spent > limit_s:
                    break
                on_status(f"compiling {self.what()}: {fmt_s(spent)} of ~{expect}")
                time.sleep(1.0)
        except BaseException:  # Ctrl-C: no prebuild process outlives the run
            self.stop()
            raise
        return self._report(time.monotonic() - self.t0)

    def stop(self) -> None:
        """Stop what still runs and remove the work folder (the report is read by then)."""
        import shutil

        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.kill()
                p.popen.wait()
        if self.own_log and os.environ.get("FLASHINFER_JIT_BUILD_LOG") == str(self.jit_log):
            del os.environ["FLASHINFER_JIT_BUILD_LOG"]
        shutil.rmtree(self.workdir, ignore_errors=True)

    def first_use(self) -> list[dict[str, Any]]:
        """The FlashInfer modules the jobs compiled themselves (FlashInfer's build log: builds
        of a second or more; an up-to-date module's ninja no-op takes milliseconds)."""
        return first_use_builds(self.jit_log, self.since)

    def _report(self, seconds: float) -> dict[str, Any]:
        report: dict[str, Any] = {"seconds": round(seconds, 1), "notes": list(self.needs.notes)}
        report["expected_s"] = round(expected_s(self.needs), 1)
        for p in self.procs:
            report[p.what] = _outcome(p)
        return report


FIRST_USE_MIN_S = 1.0
"""A logged FlashInfer build this long or longer compiled something (a no-op takes ms)."""


def first_use_builds(log: Path, since: float = 0.0) -> list[dict[str, Any]]:
    """`{"name", "seconds"}` of each build of `FIRST_USE_MIN_S` or more logged at or after
    `since` (epoch seconds) in FlashInfer's JIT build log (one JSON object a line)."""
    if not log.exists():
        return []
    out: list[dict[str, Any]] = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
            seconds, at = float(entry["seconds"]), float(entry.get("time", since))
        except (ValueError, KeyError, TypeError):
            continue
        if seconds >= FIRST_USE_MIN_S and at >= since:
            out.append({"name": str(entry.get("name", "?")), "seconds": round(seconds, 1)})
    return out


def first_use_line(builds: list[dict[str, Any]]) -> str | None:
    """`first use: 2 FlashInfer modules compiled by the jobs (1 min 24 s)`, or None."""
    from attnbench.run.progress import fmt_s

    if not builds:
        return None
    n, total = len(builds), sum(b["seconds"] for b in builds)
    return f"first use: {n} FlashInfer module{'s' * (n != 1)} compiled by the jobs ({fmt_s(total)})"


def _outcome(p: _Proc) -> dict[str, Any]:
    """What one process reported, or why it did not (stopped at the limit, crashed)."""
    if p.popen.poll() is None:
        p.popen.kill()
        p.popen.wait()
        return {"error": f"stopped at the prebuild limit ({PREBUILD_LIMIT_S:.0f} s)"}
    try:
        found: dict[str, Any] = json.loads(p.out.read_text())
        return found
    except (OSError, ValueError):
        tail = p.log.read_text(errors="replace").strip().splitlines()[-1:] if p.log.exists() else []
        return {"error": f"exit {p.popen.returncode}: {' '.join(tail)[-300:]}"}


def plan_lines(needs: Needs) -> list[str]:
    """What the prebuild compiles, one line each, with the seconds each should take."""
    from attnbench.run.progress import fmt_s

    lines = [f"  {n.label} (~{fmt_s(n.expected_s)})" for n in needs.modules]
    if needs.flex:
        lines.append(f"  Flex: {len(needs.flex)} shapes (~{fmt_s(FLEX_SHAPE_S)} each, one by one)")
    return [line[:80] for line in lines]


def summary(report: dict[str, Any]) -> list[str]:
    """The prebuild's outcome in lines of at most 80 columns: what was built in how long, and
    each thing left to compile on first use, with its reason."""
    from attnbench.run.progress import fmt_s

    lines = [f"prebuild: {fmt_s(report['seconds'])} (expected ~{fmt_s(report['expected_s'])})"]
    fi, flex = report.get("flashinfer"), report.get("flex")
    if fi is not None:
        built = len(fi.get("modules", []))
        lines.append(f"  FlashInfer: {built} module(s) in {fmt_s(fi.get('seconds', 0))}")
    if flex is not None:
        lines.append(f"  Flex: {flex.get('shapes', 0)} shape(s) in {fmt_s(flex.get('seconds', 0))}")
    left = [*report.get("notes", [])]
    for part in (fi or {}), (flex or {}):
        left += [
            *part.get("failed", []),
            *filter(None, [part.get("build_error"), part.get("error")]),
        ]
    lines += [f"  first use: {why}"[:80] for why in left]
    return lines
