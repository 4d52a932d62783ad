r"""CPU check of attnbench's `vllm:triton-attn` call into vLLM 0.34.0's `unified_attention`,
run under Triton's interpreter (TRITON_INTERPRET=1).

Why: the GPU is scarce, and most of what can go wrong in this backend is the call, not the
kernel: the paged cache layout (`vllm_cache`), the page table, the k/v descales, the window
tuple, the sinks, the soft-cap, the fp8 query (`vllm_query`) and the split-KV ("3D") scratch and
launch. All of that can be checked on a CPU, with the engine's own kernel file interpreted by
Triton. What this does not check: that the kernel compiles for a GPU, its timing, or CUDA
graphs (scripts/h200/engine_triton_probe.py runs the kernel on the GPU).

Per case: build the workload as the project does (WorkloadSpec -> make_inputs on CPU), plan it
with attnbench's own VllmTritonAttn.plan (the real call), run it into a NaN-poisoned output (as
run.gate does), and judge it with the project's gate: reference_attention (fp64, with the
quantised query where the backend quantises it) + check_accuracy (the case's budget). It also
records which launch the kernel really took (2D or 3D: the grid of kernel_unified_attention and
whether reduce_segments ran) and compares it with the plan's `resolved` label
(attnbench.engines.paths.vllm_triton_launch); a mismatch is a FAIL. One line per case; the exit
status is 0 only when no case fails or errors.

Negative controls: `--mutate NAME` (see MUTATIONS) spoils the call before it runs; the cases it
touches must FAIL.

Run it from a fresh clone, in a separate venv (never the project's .venv: triton is not one of the
project's dependencies), from the repository root:

    python3.11 -m venv /tmp/tritoncpu
    /tmp/tritoncpu/bin/pip install torch==2.13.0 triton==3.7.1 \
        numpy pandas scipy pydantic pydantic-settings typer rich   # the project's runtime deps
    PY=/tmp/tritoncpu/bin/python bash scripts/h200/pack_engine_triton.sh   # .device-triton/
    PYTHONPATH=src /tmp/tritoncpu/bin/python scripts/cpu/triton_interpret.py \
        [--list | --mutate NAME | case ...]

The pack defaults to <root>/.device-triton ($ATTNBENCH_ENGINE_TRITON overrides it). Nothing in
the tree is modified; the patches are in-process only: CUDA_VISIBLE_DEVICES="" (so
vllm.triton_utils keeps the real triton on a machine with no active Triton driver),
torch.cuda.get_device_capability -> (9, 0) (engine_triton_load.stub_vllm reads it: Hopper), and
two fixes to Triton 3.7.1's interpreter (the bugs are still there in 3.9.0) below.
NO_BF16_DOT_PATCH=1 / NO_RTNE_PATCH=1 drop them, to see the interpreter's own errors.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (by anything)
# vllm/triton_utils/importing.py disables Triton (-> placeholder module) unless exactly one
# active GPU driver is found, or CUDA_VISIBLE_DEVICES is set and empty ("distributed env").
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ.setdefault("ATTNBENCH_ENGINE_TRITON", str(ROOT / ".device-triton"))
sys.path.insert(0, str(ROOT / "tests"))  # backend_cases.device (a fake H200 DeviceInfo)

import torch  # noqa: E402


def _sm90(*args: Any, **kwargs: Any) -> tuple[int, int]:
    return (9, 0)


torch.cuda.get_device_capability = _sm90  # stub_vllm reads it

import numpy as np  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter as _interp  # noqa: E402


def _patch_interpreter_bf16_dot() -> None:
    """Triton 3.7.1's interpreter stores bf16 as raw uint16 bits and its create_dot matmuls
    those bits as integers (only fp8 operands are converted first), so any tl.dot on bf16
    operands returns garbage (~1e8-1e10). Convert bf16 operands to fp32 first (exact: bf16
    products are exact in fp32, as on tensor cores with an fp32 accumulator). This is a fix to
    the interpreter, not to vLLM or attnbench."""
    orig = _interp.InterpreterBuilder.create_dot

    def f32(h: Any) -> Any:
        if h.dtype.scalar == tl.bfloat16:
            data = _interp._convert_float(h.data, tl.bfloat16, tl.float32, None)
            return _interp.TensorHandle(data.view(np.float32), tl.float32)
        return h

    def create_dot(
        self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any
    ) -> Any:
        return orig(self, f32(a), f32(b), d, input_precision, max_num_imprecise_acc)

    _interp.InterpreterBuilder.create_dot = create_dot


_TORCH_FLOATS = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "fp64": torch.float64,
    "fp8e4nv": torch.float8_e4m3fn,
    "fp8e5": torch.float8_e5m2,
}
_BITS = {8: torch.uint8, 16: torch.int16, 32: torch.int32, 64: torch.int64}


def _patch_interpreter_float_casts() -> None:
    """Triton 3.7.1's interpreter converts fp32 -> bf16 (tl.store into a bf16 output, P.to(bf16)
    before the P @ V dot, ...) with `_convert_float(..., rounding_mode=None)`, which truncates
    (round toward zero) instead of rounding to nearest even as the GPU's cvt.rn.bf16.f32 does;
    the truncation's bias roughly triples the output's error against the fp64 reference (rel-L2
    ~3x the bf16 rounding instead of ~1x), which eats most of attnbench's 4x budget. Do every
    float <-> float conversion the interpreter routes through _convert_float with torch (round
    to nearest even, exact upcasts incl. fp8 e4m3fn), except an explicit RTZ request."""
    orig = _interp._convert_float

    def convert(values: Any, input_dtype: Any, output_dtype: Any, rounding_mode: Any) -> Any:
        src = _TORCH_FLOATS.get(input_dtype.name)
        dst = _TORCH_FLOATS.get(output_dtype.name)
        if src is None or dst is None or rounding_mode == _interp._ir.ROUNDING_MODE.RTZ:
            return orig(values, input_dtype, output_dtype, rounding_mode)
        raw = torch.from_numpy(np.ascontiguousarray(values).reshape(-1).copy())
        vals = raw.view(_BITS[input_dtype.primitive_bitwidth]).view(src)
        out = vals.to(dst).view(_BITS[output_dtype.primitive_bitwidth]).numpy()
        unsigned = getattr(np, f"uint{output_dtype.primitive_bitwidth}")
        return out.view(unsigned).reshape(np.shape(values))

    _interp._convert_float = convert


if os.environ.get("NO_BF16_DOT_PATCH") != "1":
    _patch_interpreter_bf16_dot()
if os.environ.get("NO_RTNE_PATCH") != "1":
    _patch_interpreter_float_casts()

from attnbench.backends.base import PlannedRun  # noqa: E402
from attnbench.backends.engine_triton_load import pack_dir, vllm_unified_attention  # noqa: E402
from attnbench.backends.reference import reference_attention  # noqa: E402
from attnbench.backends.vllm_triton import VllmTritonAttn, refusal  # noqa: E402
from attnbench.engines.paths import vllm_triton_threshold  # noqa: E402
from attnbench.measure.accuracy import Accuracy, check_accuracy  # noqa: E402
from attnbench.workload.inputs import make_inputs  # noqa: E402
from attnbench.workload.spec import WorkloadSpec  # noqa: E402
from backend_cases import device  # noqa: E402

H200 = device(90)


def spec(**kw: Any) -> WorkloadSpec:
    """Three ragged requests, 8 q heads on 2 KV heads of 64, page 16, bf16 (decode unless
    `kind` says otherwise; prefill queries span the whole context)."""
    base: dict[str, Any] = {
        "kind": "decode",
        "num_qo_heads": 8,
        "num_kv_heads": 2,
        "head_dim": 64,
        "page_size": 16,
        "dtype": "bfloat16",
        "kv_lens": (37, 80, 16),
    }
    base |= kw
    if "qo_lens" not in kw:
        lens = base["kv_lens"]
        base["qo_lens"] = (1,) * len(lens) if base["kind"] == "decode" else lens
    return WorkloadSpec(**base)


def oss(**kw: Any) -> WorkloadSpec:
    """gpt-oss shard: 8 q heads on 1 KV head of 64, a window (here 24 < context) and sinks."""
    return spec(**({"num_qo_heads": 8, "num_kv_heads": 1, "window_left": 23, "sinks": True} | kw))


def gemma(**kw: Any) -> WorkloadSpec:
    """Gemma-2 style: soft-cap 50, query_pre_attn_scalar, a window smaller than the context."""
    base: dict[str, Any] = {
        "num_qo_heads": 8,
        "num_kv_heads": 4,
        "window_left": 31,
        "logits_soft_cap": 50.0,
        "query_pre_attn_scalar": 256.0,
    }
    return spec(**(base | kw))


MANY = tuple(16 + (7 * i) % 40 for i in range(17))  # 17 short decode requests

CASES: dict[str, WorkloadSpec] = {
    # plain causal GQA 4
    "decode-3d": spec(),
    "decode-2d": spec(num_qo_heads=16, num_kv_heads=8, kv_lens=MANY),  # 17 > threshold 16
    "prefill-2d": spec(kind="prefill", kv_lens=(20, 45, 33)),
    "append-2d": spec(kind="append", kv_lens=(40, 70, 25), qo_lens=(5, 12, 3)),
    # qo <= 8 (MAX_3D_QUERY_LEN): vLLM 0.34 runs these split-KV too
    "append-short-q": spec(kind="append", kv_lens=(40, 70, 25), qo_lens=(3, 4, 2)),
    # 24 query tokens > 16 scratch rows (8 KV heads): 2D although 3 requests <= 16
    "append-q8-rows-2d": spec(
        kind="append", num_qo_heads=16, num_kv_heads=8, kv_lens=(30, 41, 20), qo_lens=(8, 8, 8)
    ),
    "decode-gqa8-hd96": spec(num_qo_heads=16, num_kv_heads=2, head_dim=96, kv_lens=(50, 17, 64)),
    "shared-prefix-3d": spec(
        kind="shared_prefix", kv_lens=(40, 37, 60), qo_lens=(1, 1, 1), shared_prefix_len=20
    ),
    # gpt-oss: window + sinks
    "oss-w128-long-3d": oss(window_left=127, kv_lens=(600, 300, 90)),  # 3 tiles per segment
    "oss-full-long-3d": oss(window_left=-1, kv_lens=(600, 300, 90)),
    "oss-window-sinks-3d": oss(kv_lens=(37, 80, 16)),
    "oss-full-sinks-3d": oss(window_left=-1),
    "oss-window-sinks-2d": oss(num_qo_heads=32, num_kv_heads=16, kv_lens=MANY[:9]),  # 9 > 8
    "oss-window-sinks-prefill": oss(kind="prefill", kv_lens=(40, 60, 18)),
    # Gemma-2: soft-cap 50 + window
    "gemma-softcap-3d": gemma(kv_lens=(70, 45, 80)),
    "gemma-softcap-2d": gemma(num_qo_heads=16, num_kv_heads=8, kv_lens=MANY),
    "gemma-softcap-prefill": gemma(kind="prefill", kv_lens=(50, 70)),
    "gemma-softcap-hd256-3d": gemma(head_dim=256, kv_lens=(70, 45)),
    # fp16 queries
    "decode-fp16-3d": spec(dtype="float16", kv_dtype="float16"),
    # fp8 e4m3 per-tensor KV cache (and, as vLLM does then, an fp8 query)
    "fp8-decode-3d": spec(kv_dtype="fp8_e4m3"),
    "fp8-decode-2d": spec(num_qo_heads=16, num_kv_heads=8, kv_lens=MANY, kv_dtype="fp8_e4m3"),
    "fp8-prefill-2d": spec(kind="prefill", kv_lens=(20, 45, 33), kv_dtype="fp8_e4m3"),
    "fp8-gemma-3d": gemma(kv_dtype="fp8_e4m3"),
}

Mutation = Callable[[dict[str, Any]], None]

MUTATIONS: dict[str, Mutation] = {
    # negative controls: deliberately wrong calls the check must catch
    "no-softcap": lambda kw: kw.update(softcap=0.0),
    "no-sinks": lambda kw: kw.update(sinks=None),
    "window-off-by-one": lambda kw: kw.update(window_size=(kw["window_size"][0] + 1, 0)),
    "k-is-v": lambda kw: kw.update(k=kw["v"]),
    "no-fp8-descale": lambda kw: kw.update(
        k_descale=torch.ones_like(kw["k_descale"]), v_descale=torch.ones_like(kw["v_descale"])
    ),
    "seqused-minus-1": lambda kw: kw.update(seqused_k=kw["seqused_k"] - 1),
    "block-table-rolled": lambda kw: kw.update(block_table=kw["block_table"].roll(1, dims=1)),
}


@dataclass(frozen=True)
class Launch:
    """One kernel launch through `fn[grid](...)`."""

    kernel: str
    grid: tuple[int, ...]


class Spy:
    """Wraps a JITFunction so `fn[grid](...)` records the grid it was given."""

    def __init__(self, fn: Any, log: list[Launch], name: str) -> None:
        self.fn, self.log, self.name = fn, log, name

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        launcher = self.fn[grid]

        def call(*args: Any, **kwargs: Any) -> Any:
            self.log.append(Launch(self.name, tuple(grid)))
            return launcher(*args, **kwargs)

        return call


def install_spies() -> list[Launch]:
    """Load vLLM's kernel module from the pack and spy on its two kernels."""
    vllm_unified_attention(pack_dir())
    mod: Any = sys.modules["vllm.v1.attention.ops.triton_unified_attention"]  # set up just above
    log: list[Launch] = []
    mod.kernel_unified_attention = Spy(mod.kernel_unified_attention, log, "kernel")
    mod.reduce_segments = Spy(mod.reduce_segments, log, "reduce")
    return log


def call_kwargs(planned: PlannedRun) -> dict[str, Any]:
    """The kwargs dict VllmTritonAttn.plan's run() closure passes to unified_attention."""
    for cell in getattr(planned.run, "__closure__", None) or ():
        kw = cell.cell_contents
        if isinstance(kw, dict) and "block_table" in kw:
            return kw
    raise LookupError("unified_attention kwargs not found in the run closure")


@dataclass(frozen=True)
class Result:
    """One case's verdict: the gate's accuracy and the launch the kernel took."""

    name: str
    acc: Accuracy
    launch: str
    resolved: str
    grid: tuple[int, ...]
    threshold: int
    secs: float

    @property
    def passed(self) -> bool:
        return self.acc.passed and self.launch == self.resolved

    def line(self) -> str:
        a = self.acc
        status = "PASS" if self.passed else "FAIL"
        mismatch = self.launch != self.resolved
        said = f" LAUNCH MISMATCH: plan says {self.resolved}" if mismatch else ""
        nonfinite = "" if self.passed else f" nonfinite={a.nonfinite}"
        return (
            f"{status:5} {self.name:26} max_abs={a.max_abs_err:.3e} rel_l2={a.rel_l2_err:.3e}"
            f" budget={a.budget:.3e}{nonfinite} launch={self.launch}{said} grid={self.grid}"
            f" thr={self.threshold} {self.secs:.1f}s"
        )


def run_case(name: str, s: WorkloadSpec, log: list[Launch], mutate: str) -> Result | str:
    """Plan, run and judge one case; a string is attnbench's refusal (a failure here)."""
    why = refusal(s, H200)
    if why is not None:
        return why
    inputs = make_inputs(s, "cpu")
    planned = VllmTritonAttn().plan(s, inputs)
    if mutate:
        MUTATIONS[mutate](call_kwargs(planned))
    assert planned.out is not None
    planned.out.fill_(float("nan"))
    log.clear()
    t0 = time.perf_counter()
    out = planned.run()
    secs = time.perf_counter() - t0
    ref = reference_attention(inputs, q=planned.q_effective)
    acc = check_accuracy(planned.unpack(out), ref, planned.precision or s.dtype)
    took = "3d" if any(e.kernel == "reduce" for e in log) else "2d"
    grid = next(e.grid for e in log if e.kernel == "kernel")
    threshold = vllm_triton_threshold(s.num_kv_heads)
    return Result(name, acc, took, planned.resolved, grid, threshold, secs)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="vllm:triton-attn under TRITON_INTERPRET=1 on CPU")
    p.add_argument("cases", nargs="*", metavar="case", help="case names (default: all)")
    p.add_argument("--list", action="store_true", help="print the case names and exit")
    p.add_argument("--mutate", default="", choices=sorted(MUTATIONS), help="a negative control")
    args = p.parse_args(argv)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)} (see --list)")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.list:
        print("\n".join(CASES))
        return 0
    print(
        f"torch {torch.__version__}  triton {triton.__version__}  TRITON_INTERPRET=1  "
        f"pack {pack_dir()}  mutate={args.mutate or '-'}",
        flush=True,
    )
    log = install_spies()
    bad = 0
    for name in args.cases or list(CASES):
        try:
            r = run_case(name, CASES[name], log, args.mutate)
        except Exception as exc:  # report and go on
            traceback.print_exc()
            bad += 1
            print(f"ERROR {name:26} {type(exc).__name__}: {exc}", flush=True)
            continue
        if isinstance(r, str):  # every case is one attnbench should run
            bad += 1
            print(f"FAIL  {name:26} refused: {r}", flush=True)
            continue
        bad += not r.passed
        print(r.line(), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
