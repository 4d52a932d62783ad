"""The GPU run's prebuild (`run.prebuild`): which FlashInfer modules and Flex shapes a planned
suite needs, each once; the JitSpecs made through a fake `flashinfer.jit` (no FlashInfer on
CPU); a failure kept to its module; decode cases first; the footer with wall and setup time."""

from __future__ import annotations

import json
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from attnbench.backends import select_backends
from attnbench.config import Settings
from attnbench.measure.hardware import DeviceInfo
from attnbench.results import Footer, Header, ResultWriter, read_results
from attnbench.run import prebuild, prebuild_worker
from attnbench.run.plan import Placement, RunPlan
from attnbench.run.sweep import order_cases
from attnbench.workload.suite import load_suite, suite_specs

H200 = DeviceInfo("cuda", 0, "NVIDIA H200", (9, 0), 132, 50 << 20, 141 << 30)
CPU = DeviceInfo("cpu", 0, "cpu", None, 0, 0, 0)

DEFAULT_MODULES = {
    "decode q bfloat16 kv bfloat16 d128",
    "decode q bfloat16 kv fp8_e4m3 d128",
    "prefill fa2 q bfloat16 kv bfloat16 d128",
    "prefill fa2 q bfloat16 kv fp8_e4m3 d128",
    "prefill fa3 q bfloat16 kv bfloat16 d128",
    "prefill fa3 q fp8_e4m3 kv fp8_e4m3 d128",
    "xqa q bfloat16 kv bfloat16 d128 group 4 page 16",
    "xqa q bfloat16 kv fp8_e4m3 d128 group 4 page 16",
}
"""The default suite on SM90: CUDA-core decode (fa2, auto), the fa2 prefill module (tc's
decode, fa2/ragged-fa2 prefill, auto's fp8 prefill), the SM90 prefill (fa3, ragged-fa3, auto's
bf16 prefill; fa3's fp8 query), XQA: for bf16 and e4m3 KV."""


def _plan(device: DeviceInfo = H200, skip: frozenset[tuple[str, str]] = frozenset()) -> RunPlan:
    specs = tuple(suite_specs(load_suite("default"), Settings()))
    where = Placement("pool", gpus=(0,)) if device.kind == "cuda" else Placement("inline")
    backends = tuple(select_backends(None))
    return RunPlan("t", device, where, cases=specs, backends=backends, skip=skip)


def test_default_suite_needs_each_module_once() -> None:
    needs = prebuild.plan_needs(_plan())
    labels = [n.label for n in needs.modules]
    assert set(labels) == DEFAULT_MODULES
    assert len(labels) == len(set(labels))
    # one Flex shape per case flex accepts, but flex packs the batch into one sequence: the two
    # prefill cases (8 x 4k and 2 x 16k tokens) are one shape, one compiled kernel
    (flex,) = select_backends(["flex"])
    accepted = [s for s in _plan().cases if flex.check(s, H200) is None]
    assert len(needs.flex) == len(accepted) - 1
    assert sum(s.kind == "prefill" for s in needs.flex) == 1
    # the engine paths through FlashInfer need their raw paths' modules: nothing left unsaid
    assert not any("no prebuild rule" in n for n in needs.notes)
    assert not any("mla" in n for n in needs.notes)  # refused pairs need nothing


def test_engine_variants_need_the_modules_of_their_kernel_path() -> None:
    """vllm:flashinfer and sglang:flashinfer build what the raw variant that is the engine's
    call needs (`engines.paths.kernel_path`): SGLang's bf16 prefill is the ragged FA3 module,
    vLLM's decode is tc's; SGLang's fp8 prefill is refused, so it needs nothing."""
    cases = _plan().cases
    prefill = next(s for s in cases if s.kind == "prefill" and not s.is_fp8)
    decode = next(s for s in cases if s.kind == "decode" and not s.is_fp8)
    ragged = prebuild.module_needs("flashinfer:ragged-fa3", prefill, H200)
    assert prebuild.module_needs("sglang:flashinfer", prefill, H200) == ragged
    assert [n.label for n in ragged] == ["prefill fa3 q bfloat16 kv bfloat16 d128"]
    tc = prebuild.module_needs("flashinfer:tc", decode, H200)
    assert prebuild.module_needs("vllm:flashinfer", decode, H200) == tc
    assert prebuild.module_needs("vllm:flash-attn", decode, H200) == []
    fp8 = prefill.model_copy(update={"kv_dtype": "fp8_e4m3"})
    assert prebuild.module_needs("sglang:flashinfer", fp8, H200) == []


def test_module_labels_tell_window_and_soft_cap_apart() -> None:
    """Gemma-2's sliding and full layers need two modules each; the progress lines name them
    apart (session 16 printed `decode q bfloat16 kv bfloat16 d256` twice)."""
    specs = tuple(suite_specs(load_suite("headdim-models"), Settings()))
    plan = RunPlan(
        "t", H200, Placement("pool", gpus=(0,)), cases=specs, backends=tuple(select_backends(None))
    )
    labels = [n.label for n in prebuild.plan_needs(plan).modules]
    assert len(labels) == len(set(labels))
    assert "decode q bfloat16 kv bfloat16 d256 window soft-cap" in labels
    assert "decode q bfloat16 kv bfloat16 d256 soft-cap" in labels


def test_finished_pairs_need_nothing() -> None:
    plan = _plan()
    done = frozenset((s.case_id, b.name) for s in plan.cases for b in plan.backends)
    needs = prebuild.plan_needs(_plan(skip=done))
    assert (needs.modules, needs.flex) == ([], [])


def test_module_args_follow_the_wrappers() -> None:
    spec = next(s for s in _plan().cases if s.kind == "decode" and s.is_fp8)
    (decode,) = prebuild.module_needs("flashinfer:fa2", spec, H200)
    assert decode.kind == "decode"
    assert decode.args == ("bfloat16", "fp8_e4m3", "bfloat16", "int32", 128, 128, 0, False, False)
    (fa3,) = prebuild.module_needs("flashinfer:fa3", spec, H200)
    assert fa3.args[:4] == ("fa3", "fp8_e4m3", "fp8_e4m3", "bfloat16")  # fp8 query, bf16 out
    (xqa,) = prebuild.module_needs("flashinfer:xqa", spec, H200)
    assert xqa.args == ("bfloat16", "fp8_e4m3", 16, 128, 4, False, "bfloat16", 1)
    assert prebuild.module_needs("flashinfer:cudnn", spec, H200) == []  # refused: fp8 KV
    assert prebuild.module_needs("sdpa:math", spec, H200) == []


def test_expected_time_is_the_critical_path_or_the_parallel_total() -> None:
    needs = prebuild.plan_needs(_plan())
    total = sum(n.expected_s for n in needs.modules)
    assert prebuild.expected_s(needs) == max(
        total / prebuild.PARALLEL_SPEEDUP, prebuild.FLEX_SHAPE_S * len(needs.flex)
    )
    assert all(len(line) <= 80 for line in prebuild.plan_lines(needs))


@pytest.fixture
def fake_flashinfer(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`flashinfer.jit` with recording generators: the fp8 XQA one raises, every decode spec
    has one name (so two decode needs make one spec); `build_jit_specs` records its specs."""
    seen: dict[str, Any] = {"calls": [], "built": []}

    def gen(kind: str) -> Any:
        def make(*args: Any) -> Any:
            seen["calls"].append((kind, args))
            if kind == "xqa" and torch.float8_e4m3fn in args:
                raise RuntimeError("no such xqa configuration")
            name = "decode" if kind == "decode" else f"{kind}_{len(seen['calls'])}"
            return _FakeSpec(name, seen)

        return make

    fi = types.ModuleType("flashinfer")
    jit = types.ModuleType("flashinfer.jit")
    jit.gen_batch_decode_module = gen("decode")  # type: ignore[attr-defined]
    jit.gen_batch_prefill_module = gen("prefill")  # type: ignore[attr-defined]
    xqa = types.ModuleType("flashinfer.jit.xqa")
    xqa.gen_xqa_module = gen("xqa")  # type: ignore[attr-defined]
    attention = types.ModuleType("flashinfer.jit.attention")
    modules = types.ModuleType("flashinfer.jit.attention.modules")
    modules._gen_batch_prefill_primary_module = gen("prefill-fa2")  # type: ignore[attr-defined]
    cpp = types.ModuleType("flashinfer.jit.cpp_ext")

    def run_ninja(workdir: Path, ninja: Path, verbose: bool, max_jobs: int) -> None:
        if "broken" in str(workdir):
            raise RuntimeError("Ninja build failed. Ninja output: subcommand failed.")
        seen["built"].append((workdir, ninja, max_jobs))

    cpp.run_ninja = run_ninja  # type: ignore[attr-defined]
    mods = [("", fi), (".jit", jit), (".jit.xqa", xqa), (".jit.cpp_ext", cpp)]
    mods += [(".jit.attention", attention), (".jit.attention.modules", modules)]
    for name, mod in mods:
        monkeypatch.setitem(sys.modules, "flashinfer" + name, mod)
    monkeypatch.delenv("FLASHINFER_JIT_PREBUILD_MAX_JOBS", raising=False)
    monkeypatch.delenv("MAX_JOBS", raising=False)
    return seen


class _FakeSpec:
    """What the worker uses of a JitSpec: its name, sources, folders and lock."""

    def __init__(self, name: str, seen: dict[str, Any]) -> None:
        self.name, self.seen = name, seen
        self.sources = [Path(f"{name}_{i}.cu") for i in range(2 if "prefill" in name else 1)]
        self.build_dir = Path(tempfile.gettempdir()) / "attnbench-fake-jit" / name
        self.ninja_path = self.build_dir / "build.ninja"
        self.lock_path = self.build_dir.parent / f"{name}.lock"

    def write_ninja(self) -> None:
        self.build_dir.mkdir(parents=True, exist_ok=True)
        self.seen.setdefault("written", []).append(self.name)


def test_specs_through_flashinfer_generators(fake_flashinfer: dict[str, Any]) -> None:
    needs = prebuild.plan_needs(_plan()).modules
    decode2 = prebuild.ModuleNeed("decode", needs[0].args, "same module again")
    specs, failed = prebuild_worker.collect_specs([*needs, decode2])
    calls = fake_flashinfer["calls"]
    assert len(calls) == len(needs) + 1
    # dtypes reach FlashInfer as torch dtypes, the index dtype as int32
    kind, args = calls[0]
    assert (kind, args[:4]) == (
        "decode",
        (torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32),
    )
    # FA2's prefill through 0.7.4's equal-stride primary module (the one its plan loads),
    # fa3's through the public generator
    prefill = [(k, a[0]) for k, a in calls if k.startswith("prefill")]
    assert {b for _, b in prefill} == {"fa2", "fa3"}
    assert all(k == ("prefill-fa2" if b == "fa2" else "prefill") for k, b in prefill)
    # the two decode modules share a name in the fake: one spec each name; the fp8 XQA failed
    names = [s.name for s in specs]
    assert len(names) == len(set(names)) == len(needs) - 2
    assert failed == [
        "xqa q bfloat16 kv fp8_e4m3 d128 group 4 page 16: RuntimeError: no such xqa configuration"
    ]


def test_each_module_is_built_in_its_own_folder(fake_flashinfer: dict[str, Any]) -> None:
    """A ninja run per module, in the module's build folder (where the run's own
    `JitSpec.build` looks for the ninja log), two compile jobs a core shared by work."""
    needs = prebuild.plan_needs(_plan()).modules
    report = prebuild_worker.build_flashinfer(needs, 16)
    built = fake_flashinfer["built"]
    assert sorted(report["modules"]) == sorted(d.name for d, _, _ in built)
    assert all(ninja == d / "build.ninja" for d, ninja, _ in built)
    assert sorted(fake_flashinfer["written"]) == sorted(report["modules"])
    assert len(report["failed"]) == 1  # the fp8 XQA spec that could not be made
    share = prebuild_worker.share_jobs
    assert share([(2, 20.0), (1, 20.0), (1, 20.0)], 16) == [2, 1, 1]  # never more than files
    assert share([(30, 20.0), (10, 20.0)], 16) == [24, 8]  # two jobs a core, by work
    assert share([(1, 1.0)] * 3, 1) == [1, 1, 1]  # at least one each
    # the default suite's modules (files, seconds alone): FA3's sm90 prefill, FA2's prefill,
    # decode, XQA, for bf16 and fp8 KV: FA3's eleven files compile at once
    default = [(11, 81.0), (11, 25.0), (3, 20.0), (2, 20.0)] * 2
    assert share(default, 16) == [11, 3, 1, 1] * 2


def test_a_module_that_fails_leaves_the_others_built(
    fake_flashinfer: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    needs = prebuild.plan_needs(_plan()).modules
    specs, _ = prebuild_worker.collect_specs(needs)
    specs[0].build_dir = specs[0].build_dir.with_name("broken")
    pairs = list(zip(specs, needs, strict=False))
    monkeypatch.setattr(prebuild_worker, "_collect", lambda _: (pairs, []))
    report = prebuild_worker.build_flashinfer(needs, 16)  # never raises
    assert report["modules"] == [s.name for s in specs[1:]]
    (why,) = report["failed"]
    assert why.startswith(f"{specs[0].name}: RuntimeError: Ninja build failed.")


def test_first_use_builds_are_read_from_flashinfer_log(tmp_path: Path) -> None:
    log = tmp_path / "jit.jsonl"
    lines = [
        {"toolchain": "nvcc", "name": "old", "seconds": 40.0, "time": 90.0},
        {"toolchain": "nvcc", "name": "noop", "seconds": 0.02, "time": 110.0},
        {"toolchain": "nvcc", "name": "batch_prefill_x", "seconds": 61.26, "time": 120.0},
    ]
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    builds = prebuild.first_use_builds(log, since=100.0)
    assert builds == [{"name": "batch_prefill_x", "seconds": 61.3}]
    assert prebuild.first_use_line(builds) == (
        "first use: 1 FlashInfer module compiled by the jobs (1 min 01 s)"
    )
    assert prebuild.first_use_line([]) is None
    assert prebuild.first_use_builds(tmp_path / "absent.jsonl") == []


def test_a_prebuild_without_flashinfer_never_fails_the_run() -> None:
    """The real processes, on a machine without FlashInfer or CUDA: every module is left to
    first use with its reason, the Flex process's error is reported, nothing raises."""
    needs = prebuild.plan_needs(_plan())
    needs.flex = needs.flex[:1]
    statuses: list[str] = []
    pre = prebuild.Prebuild(needs)
    report = pre.wait(statuses.append, limit_s=120)
    pre.stop()
    assert not pre.workdir.exists()
    fi = report["flashinfer"]
    assert fi["modules"] == []
    assert len(fi["failed"]) == len(needs.modules)
    assert all("ModuleNotFoundError" in f for f in fi["failed"])
    assert "error" in report["flex"] or report["flex"]["failed"]
    lines = prebuild.summary(report)
    assert lines[0].startswith("prebuild: ")
    assert all(len(line) <= 80 for line in lines)
    assert any(line.startswith("  first use: decode q bfloat16") for line in lines)
    assert all(len(s) <= 80 for s in statuses)


def test_prebuild_only_for_cuda_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert prebuild.enabled(_plan())
    assert not prebuild.enabled(_plan(CPU))
    monkeypatch.setenv("ATTNBENCH_PREBUILD", "0")
    assert not prebuild.enabled(_plan())


def test_decode_cases_come_first() -> None:
    cases = order_cases(_plan().cases)
    kinds = [c.kind for c in cases]
    assert kinds == sorted(kinds, key=lambda k: k != "decode")
    assert kinds[0] == "decode"
    assert kinds[-1] == "prefill"


def test_footer_is_read_and_old_files_still_load(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    with ResultWriter(path) as w:
        w.write(Header(run_id="r", provenance={}))
    assert read_results(path).footers == []  # a file from before footers
    with ResultWriter(path) as w:
        w.write(Footer(run_id="r", wall_s=12.5, setup_s=3.0, prebuild={"seconds": 2.0}))
    (footer,) = read_results(path).footers
    assert (footer.wall_s, footer.setup_s, footer.prebuild) == (12.5, 3.0, {"seconds": 2.0})


@pytest.mark.usefixtures("isolated", "fake_timer")
@pytest.mark.slow
def test_a_run_ends_with_its_footer(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from attnbench.cli import app

    out = tmp_path / "r.jsonl"
    args = ["run", "--device", "cpu", "-b", "reference", "--batch-size", "1", "-l", "64"]
    res = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    (footer,) = read_results(out).footers
    assert 0 < footer.setup_s <= footer.wall_s
    assert footer.prebuild is None


def _ninja_module(folder: Path) -> Path:
    """A one-step module in `folder`, written as FlashInfer writes its build.ninja (absolute
    paths, a depfile): `out.o` made from `in.c`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "in.c").write_text("int f(void) { return 1; }\n")
    rule = "  command = cp $in $out && printf '%s: %s\\n' $out $in > $out.d"
    text = "\n".join(
        [
            "ninja_required_version = 1.3",
            "rule cc",
            rule,
            "  depfile = $out.d",
            "  deps = gcc",
            f"build {folder}/out.o: cc {folder}/in.c",
            "",
        ]
    )
    (folder / "build.ninja").write_text(text)
    return folder / "build.ninja"


def _has_work(folder: Path) -> bool:
    """Whether the module's own ninja run (as `JitSpec.build` starts it) would build."""
    import subprocess

    cmd = ["ninja", "-n", "-C", str(folder), "-f", str(folder / "build.ninja")]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return "no work to do" not in out


def test_a_module_built_in_its_own_folder_is_up_to_date_at_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real ninja: `build_one` (FlashInfer's `run_ninja` in the module's folder) leaves the
    module's own ninja run nothing to do; built from the JIT folder through `subninja`, as
    `build_jit_specs` does, the module's ninja log is elsewhere and all of it builds again."""
    import shutil
    import subprocess

    if shutil.which("ninja") is None:
        pytest.skip("ninja is not installed (pip install ninja)")

    def run_ninja(workdir: Path, ninja: Path, verbose: bool, max_jobs: int) -> None:
        cmd = ["ninja", "-C", str(workdir), "-f", str(ninja), "-j", str(max_jobs)]
        subprocess.run(cmd, check=True, capture_output=True)

    cpp = types.ModuleType("flashinfer.jit.cpp_ext")
    cpp.run_ninja = run_ninja  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    monkeypatch.setitem(sys.modules, "flashinfer.jit", types.ModuleType("flashinfer.jit"))
    monkeypatch.setitem(sys.modules, "flashinfer.jit.cpp_ext", cpp)
    own = tmp_path / "jit" / "own"
    spec = types.SimpleNamespace(
        name="own",
        build_dir=own,
        ninja_path=own / "build.ninja",
        lock_path=tmp_path / "own.lock",
        write_ninja=lambda: _ninja_module(own),
    )
    assert prebuild_worker.build_one(spec, 2) is None
    assert (own / "out.o").exists()
    assert not _has_work(own)

    shared = tmp_path / "jit" / "shared"
    ninja = _ninja_module(shared)
    top = tmp_path / "jit" / "all.ninja"
    top.write_text(f"ninja_required_version = 1.3\nsubninja {ninja}\n")
    run_ninja(top.parent, top, False, 2)
    assert (shared / "out.o").exists()
    assert _has_work(shared)
