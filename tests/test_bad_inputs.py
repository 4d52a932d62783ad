"""Bad and unusual inputs across every command: each must end with its documented exit code and
one line naming the flag, setting or file, never a traceback.

Each entry: (argv, environment, files to create in the working folder, exit code, a substring
that one line of the output must contain). `{rows}` in argv is a small results file of replay
rows; every command runs in an empty temporary folder with no ATTNBENCH_* variables set. The
table stays fast: commands that would do real work are left out or kept tiny.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import replay_rows as rr
from attnbench.cli import app
from attnbench.cli.export import EXPORT_COLUMNS
from attnbench.config import usable_cpus
from attnbench.results import SCHEMA_VERSION

pytestmark = pytest.mark.usefixtures("isolated", "fake_timer")

runner = CliRunner()
Files = dict[str, str | bytes]

HEADER = (
    f'{{"type": "header", "schema_version": {SCHEMA_VERSION}, "run_id": "r", "provenance": {{}}}}\n'
)
SPEC = (
    '{"kind": "decode", "num_qo_heads": 4, "num_kv_heads": 2, "head_dim": 16, '
    '"kv_lens": [64], "qo_lens": [1]}'
)
LLAMA_8B = '"num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128'
ROW = (
    '{"type": "result", "run_id": "r", "case_id": "c", "backend": "b", "status": "ok", '
    f'"spec": {SPEC}}}\n'
)
ROW_NEGATIVE = ROW.replace('"status": "ok", ', '"status": "ok", "latency_us": -5.0, ')
ROW_PREFILL = (
    ROW.replace('"kind": "decode"', '"kind": "prefill"')
    .replace('"num_qo_heads": 4, "num_kv_heads": 2, "head_dim": 16', LLAMA_8B)
    .replace('"qo_lens": [1]', '"qo_lens": [64]')
    .replace('"status": "ok", ', '"status": "ok", "latency_us": 50.0, ')
)
RESUMED = (
    f'{{"type": "header", "schema_version": {SCHEMA_VERSION}, "run_id": "r", "provenance": {{}}, '
    '"settings": {"suite": "custom", "num_heads": 64, "batch_size": 32}}\n'
)
TOO_MANY_WORKERS = str(usable_cpus() + 1)
README_EXAMPLE = [
    "--model",
    "llama-3.1-70b",
    "--tp",
    "8",
    "--kv-dtype",
    "fp8_e4m3",
    "--max-time-ms",
    "1",
]
HUGE = ["--device", "cpu", "-l", "4194304", "--batch-size", "16", "--kv-dtype", "bf16"]
TINY = ["--device", "cpu", "-b", "reference", "-l", "16", "--batch-size", "1"]
TINY += ["--kv-dtype", "bf16", "--max-time-ms", "1"]
ALLOWED_TIMERS = "allowed: 'auto', 'cpu', 'cuda-event' or 'cuda-graph'"
"""The fake timer is for tests only: the CLI and the settings never name it."""
BAD_UTF8 = b"\x00\x01\xff\xfe binary"
COMMITTED = Path(__file__).resolve().parents[1] / "results"
"""The checkout's committed results/: commands refuse to write there."""
GROUP = '[[group]]\nkinds = ["decode"]\nlengths = ["16"]\n'


def case(
    argv: list[str],
    code: int,
    message: str,
    *,
    env: dict[str, str] | None = None,
    files: Files | None = None,
    id: str,
) -> Any:
    return pytest.param(argv, env or {}, files or {}, code, message, id=id)


RUN = [
    # -- flags --------------------------------------------------------------------------------
    case(["run", "--batch-size", "0"], 2, "batch_size=0", id="run-batch-0"),
    case(["run", "--batch-size", "-1"], 2, "batch_size=-1", id="run-batch-negative"),
    case(["run", "--batch-size", "99999999"], 2, "up to 65536", id="run-batch-huge"),
    case(["run", "--batch-size", "abc"], 2, "'--batch-size'", id="run-batch-text"),
    case(["run", "--num-heads", "0"], 2, "num_heads=0", id="run-heads-0"),
    case(["run", "--num-kv-heads", "0"], 2, "num_kv_heads=0", id="run-kv-heads-0"),
    case(["run", "--num-heads", "32", "--num-kv-heads", "5"], 2, "not divisible", id="run-gqa"),
    case(["run", "--head-dim", "0"], 2, "head_dim=0", id="run-head-dim-0"),
    case(["run", "--head-dim", "5000"], 2, "head_dim=5000", id="run-head-dim-huge"),
    case(["run", "--page-size", "0"], 2, "power of two", id="run-page-0"),
    case(["run", "--page-size", "3"], 2, "power of two", id="run-page-3"),
    case(["run", "--page-size", "131072"], 2, "page_size=131072", id="run-page-huge"),
    case(["run", "--dtype", "fp64"], 2, "dtype='fp64'", id="run-dtype"),
    case(["run", "--dtype", "fp8"], 2, "allowed: float16, bfloat16", id="run-dtype-fp8"),
    case(["run", "--kv-dtype", "int8"], 2, "kv_dtype='int8'", id="run-kv-dtype"),
    case(["run", "--kv-layout", "XYZ"], 2, "kv_layout='XYZ'", id="run-layout"),
    case(["run", "--device", "gpu"], 2, "allowed: auto, cpu, cuda, cuda:N", id="run-device"),
    case(["run", "--device", "cuda:x"], 2, "device='cuda:x'", id="run-device-index"),
    case(["run", "--seed", "-5"], 2, "seed=-5", id="run-seed-negative"),
    case(["run", "--seed", "99999999999"], 2, "seed=99999999999", id="run-seed-huge"),
    case(["run", "--seed", "x"], 2, "'--seed'", id="run-seed-text"),
    case(["run", "--timer", "bogus"], 2, "timer='bogus'", id="run-timer"),
    case(["run", "--timer", "fake"], 2, ALLOWED_TIMERS, id="run-timer-fake"),
    case(["run"], 2, ALLOWED_TIMERS, env={"ATTNBENCH_TIMER": "fake"}, id="var-timer-fake"),
    case(["run", *TINY, "--timer", "cuda-graph"], 2, "--timer=cuda-graph", id="run-graph-cpu"),
    case(["run", *TINY, "--timer", "cuda-event"], 2, "needs a CUDA device", id="run-event-cpu"),
    case(["run", "--max-time-ms", "0"], 2, "max_time_ms=0", id="run-max-time-0"),
    case(["run", "--max-time-ms", "-1"], 2, "max_time_ms=-1", id="run-max-time-neg"),
    case(["run", "--max-time-ms", "nan"], 2, "max_time_ms=nan", id="run-max-time-nan"),
    case(["run", "--case-timeout", "-1"], 2, "case_timeout_s=-1", id="run-case-timeout"),
    case(["run", "--workers", "-1"], 2, "workers=-1", id="run-workers"),
    case(
        ["run", *TINY, "--workers", TOO_MANY_WORKERS],
        0,
        f"workers={TOO_MANY_WORKERS}: capped at {usable_cpus()}, the CPU cores this process",
        id="run-workers-over-cores",
    ),
    case(["run", "--max-time-ms", "inf"], 2, "max_time_ms=inf", id="run-max-time-inf"),
    case(
        ["run"],
        2,
        "max_time_ms='1e400' (from environment ATTNBENCH_MAX_TIME_MS): must be a positive finite",
        env={"ATTNBENCH_MAX_TIME_MS": "1e400"},
        id="var-max-time-overflow",
    ),
    case(["run", "--case-timeout", "inf"], 2, "case_timeout_s=inf", id="run-case-timeout-inf"),
    case(
        ["run", "--model", "llama-3.1-8b", "--num-heads", "16"],
        2,
        "--num-heads=16 conflicts with model='llama-3.1-8b', whose num_heads is 32",
        id="run-model-and-heads",
    ),
    case(
        ["run", "--model", "llama-3.1-8b"],
        2,
        "head_dim=64 (from environment ATTNBENCH_HEAD_DIM) conflicts with model=",
        env={"ATTNBENCH_HEAD_DIM": "64"},
        id="var-model-and-head-dim",
    ),
    case(
        ["run", *TINY, "--kind", "decode", "--kind", "decode"], 0, "rows: ok 1 in", id="kind-twice"
    ),
    case(["run", *TINY, "-l", "16", "-l", "16"], 0, "rows: ok 1 in", id="lengths-twice"),
    case(
        ["run", "-b", "all", "-b", "flex", "--device", "cpu"],
        2,
        "all (every variant that runs here) cannot be combined with flex",
        id="run-backend-all-and-more",
    ),
    case(
        ["run", *TINY],
        2,
        "out='' (from environment ATTNBENCH_OUT): is empty",
        env={"ATTNBENCH_OUT": ""},
        id="var-out-empty",
    ),
    case(
        ["config"],
        2,
        "ATTNBENCH_GIT_SHA='abc\\ndef' is not a commit name",
        env={"ATTNBENCH_GIT_SHA": "abc\ndef"},
        id="var-git-sha-newline",
    ),
    case(
        ["run", *TINY, "--out", "g.jsonl"],
        2,
        "ATTNBENCH_GIT_SHA='abc\\ndef' is not a commit name",  # refused before any header
        env={"ATTNBENCH_GIT_SHA": "abc\ndef"},
        id="run-git-sha-newline",
    ),
    case(  # what `run --help` shows as the default: every variant that runs here, each
        # refused at fp8 KV on a CPU (nothing compiles)
        ["run", *TINY[:2], "-b", "all", *TINY[4:8], "--kv-dtype", "fp8_e4m3", "--out", "a.jsonl"],
        3,
        "sdpa:math: sdpa has no fp8 KV path",
        id="run-backend-all",
    ),
    case(
        ["--version"],
        2,
        "is not a commit name",
        env={"ATTNBENCH_GIT_SHA": "1a2b c3d"},
        id="version-git-sha-space",
    ),
    case(["run", "--tp", "0"], 2, "tp=0", id="run-tp-0"),
    case(["run", "--model", "llama-3.1-70b", "--tp", "3"], 2, "tp=3", id="run-tp-3"),
    case(["run", "--model", "nope"], 2, "model='nope'", id="run-model"),
    case(["run", "--kind", "sideways"], 2, "kinds", id="run-kind"),
    case(["run", "-l", "gamma:1", "--device", "cpu"], 2, "not a known distribution", id="len-g"),
    case(["run", "-l", "0", "--device", "cpu"], 2, "0", id="len-zero"),
    case(["run", "-l", "-5", "--device", "cpu"], 2, "-5", id="len-negative"),
    case(["run", "-l", "uniform:10-5", "--device", "cpu"], 2, "uniform", id="len-uniform-rev"),
    case(["run", "-l", "uniform:a-b", "--device", "cpu"], 2, "uniform", id="len-uniform-text"),
    case(["run", "-l", "lognormal:x", "--device", "cpu"], 2, "lognormal", id="len-lognormal"),
    case(["run", "-l", "trace:nope", "--device", "cpu"], 2, "nope", id="len-trace"),
    case(["run", "-l", "prompts:nope", "--device", "cpu"], 2, "nope", id="len-prompts"),
    case(["run", "-l", "skew:0", "--device", "cpu"], 2, "skew", id="len-skew"),
    case(["run", "-l", "padded:", "--device", "cpu"], 2, "padded", id="len-padded"),
    case(["run", "-l", "prefix:abc", "--device", "cpu"], 2, "prefix", id="len-prefix"),
    case(["run", "-l", "list:", "--device", "cpu"], 2, "list", id="len-list"),
    case(["run", "-l", "99999999", "--device", "cpu"], 2, "99999999", id="len-huge"),
    case(["run", "-l", "trace-prefix:nope,2", "--device", "cpu"], 2, "nope", id="len-tprefix"),
    case(["run", "-b", "nope", "--device", "cpu"], 2, "backend='nope'", id="run-backend"),
    case(["run", "-b", "flashinfer:nope", "--device", "cpu"], 2, "flashinfer:nope", id="run-var"),
    case(["run", "--gpus", "0", "--device", "cpu"], 2, "gpus", id="run-gpus-on-cpu"),
    case(["run", "--no-such-flag"], 2, "--no-such-flag", id="run-unknown-flag"),
    case(["run", "extra"], 2, "extra", id="run-extra-argument"),
    # -- suites -------------------------------------------------------------------------------
    case(["run", "--suite", "nosuch", "--device", "cpu"], 2, "suite='nosuch'", id="suite-name"),
    case(
        ["run", "--suite", "s.toml", "--device", "cpu"],
        2,
        "invalid TOML",
        files={"s.toml": "name = \n"},
        id="suite-bad-toml",
    ),
    case(
        ["run", "--suite", "s.toml", "--device", "cpu"],
        2,
        "s.toml: not a UTF-8 text file",
        files={"s.toml": BAD_UTF8},
        id="suite-binary",
    ),
    case(
        ["run", "--suite", "s.toml", "--device", "cpu"],
        2,
        "unknown key 'bogus'",
        files={"s.toml": 'name = "s"\nbogus = 1\n' + GROUP},
        id="suite-unknown-key",
    ),
    case(
        ["run", "--suite", "s.toml", "--device", "cpu"],
        2,
        "needs at least one [[group]] table",
        files={"s.toml": 'name = "s"\n'},
        id="suite-no-group-brackets-kept",
    ),
    case(
        ["run", "--suite", "s.toml", "--device", "cpu"],
        2,
        "nonsense",
        files={"s.toml": 'name = "s"\n[[group]]\nnonsense = 1\n'},
        id="suite-group-unknown-field",
    ),
    case(
        ["run", "--suite", "s.toml", "--device", "cpu"],
        2,
        "batch_size",
        files={"s.toml": 'name = "s"\n[defaults]\nbatch_size = -1\n' + GROUP},
        id="suite-bad-default",
    ),
    case(
        ["run", "--suite", "s.toml", "--device", "cpu"],
        2,
        "gamma",
        files={"s.toml": 'name = "s"\n[[group]]\nlengths = ["gamma:1"]\n'},
        id="suite-bad-lengths",
    ),
    case(
        ["run", "--suite", "s.toml", "--device", "cpu"],
        2,
        "s.toml",
        files={"s.toml": 'name = "s"\ndefaults = 3\n' + GROUP},
        id="suite-defaults-not-table",
    ),
    case(
        ["run", "--suite", "s.toml", "--device", "cpu"],
        2,
        "s.toml",
        files={"s.toml": 'name = "s"\ngroup = 3\n'},
        id="suite-group-not-table",
    ),
    case(
        ["run", "--suite", "s.toml", "--device", "cpu"],
        2,
        "suite s.toml: name = 42 must be a string",
        files={"s.toml": "name = 42\n" + GROUP},
        id="suite-name-not-text",
    ),
    case(
        ["run", "--suite", "s.toml", "--device", "cpu"],
        2,
        "group 1: lengths = [] is empty",
        files={"s.toml": 'name = "s"\n[[group]]\nlengths = []\n'},
        id="suite-group-empty-list",
    ),
    # -- attnbench.toml, --config -------------------------------------------------------------
    case(["run", "--config", "missing.toml"], 2, "missing.toml: not found", id="config-missing"),
    case(["run", "--config", "."], 2, "not found", id="config-dir"),
    case(["run"], 2, "invalid TOML", files={"attnbench.toml": "x = = 1"}, id="toml-bad"),
    case(["run"], 2, "unknown field 'nope'", files={"attnbench.toml": "nope = 1"}, id="toml-key"),
    case(["run"], 2, "not a UTF-8 text file", files={"attnbench.toml": BAD_UTF8}, id="toml-binary"),
    case(
        ["run"],
        2,
        "page_size='x' (from attnbench.toml)",
        files={"attnbench.toml": 'page_size = "x"'},
        id="toml-bad-value",
    ),
    case(["run"], 2, "power of two", files={"attnbench.toml": "page_size = 3"}, id="toml-page-3"),
    case(
        ["config"],
        2,
        "context_lengths",
        files={"attnbench.toml": "context_lengths = [0]"},
        id="toml-lengths-0",
    ),
    # -- .env ---------------------------------------------------------------------------------
    case(["config"], 2, ".env: not a UTF-8 text file", files={".env": BAD_UTF8}, id="env-binary"),
    case(["config"], 2, ".env: binary file", files={".env": "A=1\n\x00\n"}, id="env-nul"),
    case(
        ["config"],
        2,
        ".env:2: cannot parse 'foo bar baz'",
        files={".env": "A=1\nfoo bar baz\n=3\n"},
        id="env-malformed",
    ),
    case(
        ["config"],
        2,
        ".env:1: ATTNBENCH_NOPE is not an attnbench setting",
        files={".env": "ATTNBENCH_NOPE=1\n"},
        id="env-unknown-key",
    ),
    case(
        ["config"],
        2,
        "did you mean ATTNBENCH_PAGE_SIZE?",
        files={".env": "ATTNBENCH_PAGESIZE=32\n"},
        id="env-typo",
    ),
    case(
        ["config"],
        2,
        ".env:1: ATTNBENCH_PAGE_SIZE has no value",
        files={".env": "ATTNBENCH_PAGE_SIZE\n"},
        id="env-no-value",
    ),
    case(
        ["config"],
        2,
        "batch_size='abc' (from .env ATTNBENCH_BATCH_SIZE)",
        files={".env": "HF_TOKEN=x\nATTNBENCH_BATCH_SIZE=abc\n"},
        id="env-bad-value",
    ),
    case(
        ["run"],
        2,
        "seed='-1' (from .env ATTNBENCH_SEED)",
        files={".env": "ATTNBENCH_SEED=-1\n"},
        id="env-seed",
    ),
    # -- environment variables ----------------------------------------------------------------
    case(
        ["config"],
        2,
        "environment variable ATTNBENCH_NOPE is not an attnbench setting",
        env={"ATTNBENCH_NOPE": "1"},
        id="var-unknown",
    ),
    case(
        ["run"],
        2,
        "did you mean ATTNBENCH_BATCH_SIZE?",
        env={"ATTNBENCH_BATCHSIZE": "1"},
        id="var-typo",
    ),
    case(["run"], 2, "batch_size='abc'", env={"ATTNBENCH_BATCH_SIZE": "abc"}, id="var-batch"),
    case(
        ["run"],
        2,
        "not a valid JSON list",
        env={"ATTNBENCH_CONTEXT_LENGTHS": "[1,2"},
        id="var-json",
    ),
    case(["run"], 2, "context_lengths", env={"ATTNBENCH_CONTEXT_LENGTHS": "0"}, id="var-len-0"),
    case(["run"], 2, "device='tpu'", env={"ATTNBENCH_DEVICE": "tpu"}, id="var-device"),
    case(["run"], 2, "kinds", env={"ATTNBENCH_KINDS": "x"}, id="var-kinds"),
    case(["run"], 2, "fp8_mode='maybe'", env={"ATTNBENCH_FP8_MODE": "maybe"}, id="var-bool"),
    case(["run"], 2, "resume='maybe'", env={"ATTNBENCH_RESUME": "maybe"}, id="var-resume"),
    case(
        ["run"],
        2,
        "seed='-1' (from environment ATTNBENCH_SEED)",
        env={"ATTNBENCH_SEED": "-1"},
        id="var-seed",
    ),
    case(
        ["run"],
        2,
        "min_runs=5 exceeds max_runs=2",
        env={"ATTNBENCH_MIN_RUNS": "5", "ATTNBENCH_MAX_RUNS": "2"},
        id="var-runs",
    ),
    case(["run"], 2, "target_rel_ci='0'", env={"ATTNBENCH_TARGET_REL_CI": "0"}, id="var-ci"),
    case(["run"], 2, "warmup_ms='-1'", env={"ATTNBENCH_WARMUP_MS": "-1"}, id="var-warmup"),
    case(["run"], 2, "prefill_tokens='0'", env={"ATTNBENCH_PREFILL_TOKENS": "0"}, id="var-pf"),
    case(["run"], 2, "append_len='0'", env={"ATTNBENCH_APPEND_LEN": "0"}, id="var-append"),
    case(
        ["run", *TINY],
        2,
        "out (from environment ATTNBENCH_OUT)=sub is a directory",
        env={"ATTNBENCH_OUT": "sub"},
        files={"sub/keep": ""},
        id="var-out-dir",
    ),
    # -- output paths -------------------------------------------------------------------------
    case(["run", *TINY, "--out", "/dev/full"], 2, "not a regular file", id="run-out-dev-full"),
    case(["run", *TINY, "--out", "."], 2, "--out=. is a directory", id="run-out-dir"),
    case(
        ["run", *TINY, "--out", "f/x.jsonl"],
        2,
        "f is a file, not a folder",
        files={"f": "x"},
        id="run-out-under-file",
    ),
    case(
        ["run", *TINY, "--out", "/proc/nope/x.jsonl"],
        2,
        "--out=/proc/nope/x.jsonl",
        id="run-out-unwritable",
    ),
    case(
        ["run", *TINY, "--out", "f.json", "--append"],
        2,
        "not an attnbench row",
        files={"f.json": '{"a": 1}\n'},
        id="run-out-foreign",
    ),
    case(
        ["run", *TINY, "--out", "f.jsonl", "--append"],
        2,
        "not a UTF-8 text file",
        files={"f.jsonl": BAD_UTF8},
        id="run-out-binary",
    ),
    case(["run", *TINY, "--resume"], 2, "--resume needs --out", id="resume-without-out"),
    # -- issue 49: the committed evidence is read-only; one writer per file; .gz is gzip
    case(
        ["run", *TINY, "--out", str(COMMITTED / "h200-brief.jsonl.gz")],
        2,
        "is inside the committed results folder",
        id="run-out-committed-file",
    ),
    case(
        ["run", *TINY, "--out", str(COMMITTED / "new.jsonl"), "--append"],
        2,
        "or pass --into-results to add a file there on purpose",
        id="run-out-committed-new",
    ),
    case(
        ["run", *TINY, "--out", "f.jsonl"],
        2,
        "--out=f.jsonl exists: pass --resume to finish its run, --append to add a new run",
        files={"f.jsonl": HEADER + ROW},
        id="run-out-exists",
    ),
    case(
        ["tune", "--device", "cpu", "-b", "flex", "--out", "f.jsonl"],
        2,
        "--out (its trials file)=f.trials.jsonl exists",
        files={"f.trials.jsonl": HEADER + ROW},
        id="tune-trials-exist",
    ),
    case(["run", "--page-size", "1048576"], 2, "at most 65536 tokens per page", id="run-page-2-20"),
    case(
        ["run", "-b", "", "--device", "cpu"], 2, "is empty: name a backend", id="run-backend-empty"
    ),
    case(
        ["run", "--model", "qwen2.5-7b", "--tp", "8"],
        2,
        "allowed: 1, 2, 4 (as `attnbench models` lists)",
        id="run-tp-qwen-8",
    ),
    case(
        ["run", "--model", "qwen2.5-7b", "--tp", "7"],
        2,
        "tp=7 must be a multiple of qwen2.5-7b's 4 KV heads; allowed: 1, 2, 4 (as",
        id="run-tp-qwen-7",
    ),
    case(
        ["run", *TINY, "--case-timeout", "0.001"],
        0,
        "--case-timeout is not enforced: cases run in this process (--workers 0)",
        id="run-case-timeout-inline",
    ),
    case(
        ["show", "d.jsonl.gz"],
        2,
        "d.jsonl.gz: damaged gzip stream: the member at byte",
        files={"d.jsonl.gz": gzip.compress(HEADER.encode()) + ROW.encode()},
        id="show-gzip-appended-plain",
    ),
    case(
        ["run", *TINY, "--resume", "--out", "f.json"],
        2,
        "--resume",
        files={"f.json": '{"a": 1}\n'},
        id="resume-foreign",
    ),
    case(
        ["run", *TINY, "--resume", "--out", "f.jsonl"],
        2,
        "schema_version=99",
        files={"f.jsonl": '{"type": "header", "schema_version": 99}\n'},
        id="resume-schema",
    ),
    case(
        ["run", *TINY, "--resume", "--out", "f.jsonl"],
        2,
        "no header row",
        files={"f.jsonl": "\n\n"},
        id="resume-blank",
    ),
    case(
        ["run", *TINY, "--resume", "--out", "f.jsonl"],
        2,
        "--resume: f.jsonl: no header row",
        files={"f.jsonl": '{"type": "resu'},
        id="resume-torn-only-line",
    ),
    case(
        ["run", *TINY, "--resume", "--out", "f.jsonl"],
        2,
        "--resume: f.jsonl was written with num_heads=64 and this run has num_heads=32",
        files={"f.jsonl": RESUMED},
        id="resume-other-shape",
    ),
    # -- nothing could run (tiny: every variant is refused before any input is built) ---------
    case(
        ["run", *TINY[:2], "-b", "sdpa:flash", "-l", "16", "--batch-size", "1", "--out", "u.jsonl"],
        3,
        "nothing could run",
        id="run-all-unsupported",
    ),
    case(  # README's example at a CPU's size: no CPU kernel reads fp8 KV (and on a CPU the
        # timed reference is opt-in), so nothing runs
        ["run", *README_EXAMPLE, "--device", "cpu", "-l", "16", "--batch-size", "1"],
        3,
        "nothing could run: none of 3 (case, variant) pairs was measured",
        id="run-only-the-oracle",
    ),
    case(  # every variant refused by the memory guard: the summary gives the figures
        ["run", *HUGE, "-b", "reference"],
        3,
        "nothing ran: every variant was refused",
        id="run-memory-refused",
    ),
]

ANALYZE = [
    case(["report", "nope.jsonl"], 2, "nope.jsonl: no such file", id="report-missing"),
    case(["report", "e.jsonl"], 2, "no header row", files={"e.jsonl": ""}, id="report-empty"),
    case(
        ["report", "h.jsonl"],
        2,
        "no result rows",
        files={"h.jsonl": HEADER},
        id="report-header-only",
    ),
    case(
        ["report", "f.jsonl"],
        2,
        "f.jsonl:1: not an attnbench row",
        files={"f.jsonl": '{"a": 1}\n'},
        id="report-foreign",
    ),
    case(
        ["report", "f.jsonl"],
        2,
        "f.jsonl:1: not an attnbench row",
        files={"f.jsonl": "[1, 2]\n"},
        id="report-json-list",
    ),
    case(
        ["report", "t.jsonl"],
        2,
        "t.jsonl:2: not JSON",
        files={"t.jsonl": HEADER + '{"type": "res\n' + ROW},
        id="report-torn-middle",
    ),
    case(
        ["report", "v.jsonl"],
        2,
        "schema_version=7",
        files={"v.jsonl": '{"type": "header", "schema_version": 7}\n'},
        id="report-schema",
    ),
    case(
        ["report", "b.jsonl"],
        2,
        "not a UTF-8 text file",
        files={"b.jsonl": BAD_UTF8},
        id="report-binary",
    ),
    case(
        ["report", "r.jsonl"],
        2,
        "result row before any header",
        files={"r.jsonl": ROW},
        id="report-row-first",
    ),
    case(
        ["report", "m.jsonl"],
        2,
        "field status",
        files={"m.jsonl": HEADER + ROW.replace('"status": "ok", ', "")},
        id="report-row-missing-field",
    ),
    case(
        ["report", "m.jsonl"],
        2,
        "field status",
        files={"m.jsonl": HEADER + ROW.replace('"ok"', '"great"')},
        id="report-row-bad-status",
    ),
    case(
        ["report", "x.json"],
        2,
        "x.json: neither an fp8 study nor a replay document",
        files={"x.json": '{"a": 1}\n'},
        id="report-foreign-json",
    ),
    case(
        ["report", "x.json"],
        2,
        "x.json: not a JSON document",
        files={"x.json": BAD_UTF8},
        id="report-binary-json",
    ),
    case(
        ["report", "x.json"],
        2,
        "nothing to report",
        files={"x.json": "[1, 2"},
        id="report-broken-json",
    ),
    case(
        ["report", "t.jsonl"],
        2,
        "t.jsonl: no header row",
        files={"t.jsonl": '{"type": "header", "sche'},
        id="report-interrupted-first-write",
    ),
    case(
        ["recommend", "f.jsonl"],
        2,
        "f.jsonl:1: not an attnbench row",
        files={"f.jsonl": '{"a": 1}\n'},
        id="recommend-foreign",
    ),
    case(
        ["compare", "b.jsonl", "{rows}"],
        2,
        "b.jsonl: not a UTF-8 text file",
        files={"b.jsonl": BAD_UTF8},
        id="compare-binary",
    ),
    case(
        ["report"],
        2,
        "no results files found in $ATTNBENCH_RESULTS=empty",
        env={"ATTNBENCH_RESULTS": "empty"},
        files={"empty/notes.txt": "x"},
        id="report-nothing-here",
    ),
    case(  # from another folder (this test's empty one): the checkout's committed results/
        ["recommend"],
        0,
        "Deployments measured on NVIDIA H100 80GB HBM3, NVIDIA H200: one line per model",
        id="recommend-from-another-folder",
    ),
    case(
        ["recommend", "{rows}", "--model", "llama-3.1-70b", "--tp", "8", "--engine", "vllm"],
        2,
        "no answer for llama-3.1-70b tp8 with vLLM from these rows: no vllm rows at",
        id="recommend-engine-without-rows",
    ),
    case(
        ["recommend", "{rows}", "--model", "llama-3.1-8b", "--gpu", "B200"],
        2,
        "--gpu='B200': no rows of such a GPU; the results hold rows of:",
        id="recommend-gpu-without-rows",
    ),
    case(
        [
            "recommend",
            "--model",
            "llama-3.1-8b",
            "--trace",
            "azure-conv",
            "--measure",
            "--dry-run",
            "--out",
            "d.jsonl",
            "--cover",
            "2",
        ],
        2,
        "--cover=2: must be a share of the decode steps in [0, 1], e.g. 0.9",
        id="recommend-cover-above-one",
    ),
    case(
        ["recommend", "p.jsonl", "--model", "llama-3.1-8b", "--engine", "none"],
        2,
        "no answer for llama-3.1-8b tp1 with library calls from these rows",
        files={"p.jsonl": HEADER + ROW_PREFILL},
        id="recommend-model-without-decode",
    ),
    case(
        ["recommend", "p.jsonl"],
        2,
        "no decode row of a model preset's shape passed the accuracy gate: nothing to answer",
        files={"p.jsonl": HEADER + ROW_PREFILL},
        id="recommend-index-without-decode",
    ),
    case(
        ["report"],
        2,
        "no results files found",
        env={"ATTNBENCH_RESULTS": "/nonexistent"},
        id="report-env-missing",
    ),
    case(
        ["report", "d"],
        2,
        "d: a folder with no results files",
        files={"d/readme.txt": "x"},
        id="report-dir-empty",
    ),
    case(
        ["report", "{rows}", "--out", "f"],
        2,
        "--out=f is an existing file",
        files={"f": "x"},
        id="report-out-file",
    ),
    case(["report", "{rows}", "--out", "/dev/full"], 2, "existing file", id="report-out-dev"),
    case(
        ["report", "{rows}", "--out", "f/sub"],
        2,
        "f is a file, not a folder",
        files={"f": "x"},
        id="report-out-under-file",
    ),
    case(["recommend", "nope.jsonl"], 2, "nope.jsonl", id="recommend-missing"),
    case(
        ["recommend", "h.jsonl"],
        2,
        "passed the accuracy gate: nothing to answer",
        files={"h.jsonl": HEADER},
        id="recommend-header-only",
    ),
    case(["recommend", "{rows}", "--json", "/dev/full"], 2, "--json=/dev/full", id="rec-dev-full"),
    case(["recommend", "{rows}", "--json", "."], 2, "--json=. is a directory", id="rec-json-dir"),
    case(
        ["recommend", "{rows}", "--json", "/proc/nope/x.json"],
        2,
        "--json=/proc/nope/x.json",
        id="rec-json-unwritable",
    ),
    case(["compare", "a.jsonl", "b.jsonl"], 2, "a.jsonl: no such file", id="compare-missing"),
    case(
        ["compare", "h.jsonl", "h.jsonl"],
        2,
        "no result rows to compare",
        files={"h.jsonl": HEADER},
        id="compare-empty",
    ),
    case(
        ["compare", "{rows}", "{rows}", "--threshold", "abc"],
        2,
        "--threshold='abc'",
        id="compare-thr",
    ),
    case(["compare", "{rows}", "{rows}", "--threshold", "-5%"], 2, "-5%", id="compare-neg"),
    case(
        ["compare", "{rows}", "{rows}", "--threshold", "1001%"],
        2,
        "--threshold='1001%' must be from 0% to 1000%",
        id="compare-threshold-over",
    ),
    case(["compare", "{rows}", "{rows}", "--threshold", "1000%"], 0, "1000%", id="compare-1000"),
    case(
        ["show", "d"],
        2,
        "d: is a folder; `attnbench show` reads results files",
        files={"d/x.jsonl": HEADER + ROW},
        id="show-folder",
    ),
    case(["show", "nope.jsonl"], 2, "nope.jsonl: no such file", id="show-missing"),
    case(
        ["show", "n.jsonl"],
        0,
        "1 ok rows have a latency_us that is not a positive finite number",
        files={"n.jsonl": HEADER + ROW_NEGATIVE},
        id="show-negative-latency",
    ),
    case(
        ["export", "d", "--csv", "o.csv"],
        2,
        "d: is a folder; `attnbench export` reads results files",
        files={"d/x.jsonl": HEADER + ROW},
        id="export-folder",
    ),
    case(
        ["export", "{rows}", "--csv", "notes.txt"],
        2,
        "--csv=notes.txt exists and is not a CSV that `attnbench export` wrote",
        files={"notes.txt": "my notes\n"},
        id="export-over-other-file",
    ),
    case(
        ["export", "{rows}", "--csv", "old.csv"],
        0,
        "rows -> old.csv",
        files={"old.csv": ",".join(EXPORT_COLUMNS) + "\n"},
        id="export-over-earlier-export",
    ),
    case(
        ["export", "r.jsonl", "--csv", "r.jsonl"],
        2,
        "--csv=r.jsonl is one of the results files being exported",
        files={"r.jsonl": HEADER + ROW},
        id="export-over-its-input",
    ),
    case(
        ["compare", "{rows}", "{rows}", "--noise-floor", "x"],
        2,
        "--noise-floor='x'",
        id="compare-floor",
    ),
    case(["compare", "{rows}"], 2, "Missing argument", id="compare-one-file"),
    case(
        ["compare", "{rows}", "o.jsonl"],
        2,
        "share no (case, backend) pair",
        files={"o.jsonl": HEADER + ROW},
        id="compare-disjoint",
    ),
    case(
        ["compare", str(COMMITTED / "h200-gqa.jsonl.gz"), str(COMMITTED / "h200-gqa.jsonl.gz")],
        0,
        "(not listed: ",
        id="compare-same-file-counts-what-it-hides",
    ),
    case(
        ["export", "{rows}", "{rows}", "--csv", "o.csv"],
        0,
        "is given twice (as ",
        id="export-same-file-twice",
    ),
    case(
        ["export", "s.json.gz", "--csv", "o.csv"],
        2,
        "s.json.gz: a JSON document (an fp8 study, replay or fidelity record), not a results",
        files={"s.json.gz": gzip.compress(b'{"type": "fp8-study"}')},
        id="export-fp8-study",
    ),
    case(
        ["recommend", "--model", "llama-3.1-8b", "--trace", "z.jsonl"],
        2,
        "trace z.jsonl: request 1 (arriving at 0 s) has output length 0",
        files={"z.jsonl": '{"timestamp": 0, "input_length": 1, "output_length": 0}\n'},
        id="recommend-trace-no-output",
    ),
    case(
        ["replay", "{rows}", "--trace", "z.jsonl"],
        2,
        "trace z.jsonl: request 1 (arriving at 0 s) has output length 0",
        files={"z.jsonl": '{"timestamp": 0, "input_length": 1, "output_length": 0}\n'},
        id="replay-trace-no-output",
    ),
    case(
        ["replay-validate", "{rows}", "--device", "cpu"],
        3,
        "--rescore FILE scores a validation measured before, without a GPU",
        id="replay-validate-cpu-names-its-own-flags",
    ),
]

FP8 = [
    case(["fp8", "--capacity", "--hbm-gib", "-1"], 2, "--hbm-gib=-1", id="cap-hbm-negative"),
    case(["fp8", "--capacity", "--hbm-gib", "0"], 2, "--hbm-gib=0", id="cap-hbm-0"),
    case(["fp8", "--capacity", "--hbm-gib", "nan"], 2, "--hbm-gib=nan", id="cap-hbm-nan"),
    case(["fp8", "--capacity", "--hbm-gib", "10"], 2, "leaves nothing", id="cap-hbm-small"),
    case(["fp8", "--capacity", "--utilization", "0"], 2, "--utilization=0", id="cap-util-0"),
    case(["fp8", "--capacity", "--utilization", "1.5"], 2, "--utilization=1.5", id="cap-util"),
    case(["fp8", "--capacity", "--reserve-gib", "-1"], 2, "--reserve-gib=-1", id="cap-reserve"),
    case(["fp8", "--capacity", "--tp", "3"], 2, "tp=3", id="cap-tp"),
    case(["fp8", "--capacity", "--model", "nope"], 2, "model='nope'", id="cap-model"),
    case(["fp8", "--capacity", "--page-size", "0"], 2, "--page-size=0", id="cap-page"),
    case(
        ["fp8", "--capacity", "--model", "llama-3.1-70b", "--tp", "3"],
        2,
        "allowed: 1, 2, 4, 8, 16 (as `attnbench models` lists)",
        id="cap-tp-3-lists-the-models-degrees",
    ),
    case(
        ["fp8", "--capacity", "--reserve-gib", "100000"],
        2,
        "--reserve-gib=100000: h100-80gb:",
        id="cap-reserve-huge-blames-the-reserve",
    ),
    case(["lengths", "prefix:0+uniform:1-2"], 2, "prefix P=0 shares no tokens", id="len-prefix-0"),
    case(["fp8", "--seed", "-1"], 2, "'--seed'", id="fp8-seed"),
    case(["fp8", "--device", "cpu", "--out", "."], 2, "--out=. is a directory", id="fp8-out-dir"),
    case(["fp8", "--device", "cpu", "--out", "/dev/full"], 2, "regular file", id="fp8-dev-full"),
    case(["fp8", "--device", "tpu"], 2, "device='tpu'", id="fp8-device"),
    case(["fp8", "--device", "cuda:9"], 2, "cuda:9", id="fp8-no-gpu"),
    case(["fp8", "--device", "cpu", "--needle-lengths", "a,b"], 2, "comma-separated", id="fp8-nl"),
    case(["fp8", "--device", "cpu", "--needle-lengths", "1"], 2, "at least 2", id="fp8-nl-1"),
    case(["fp8", "--trials", "0"], 2, "'--trials'", id="fp8-trials"),
]

REPLAY_ARGS = ["replay", "{rows}", "--trace", "azure-code", "--limit", "5"]
REPLAY = [
    case([*REPLAY_ARGS, "--gpu-mem-gib", "-1"], 2, "--gpu-mem-gib=-1", id="replay-mem-neg"),
    case([*REPLAY_ARGS, "--gpu-mem-gib", "10"], 2, "raise --gpu-mem-gib", id="replay-mem-small"),
    case([*REPLAY_ARGS, "--gpu-mem-gib", "inf"], 2, "--gpu-mem-gib=inf", id="replay-mem-inf"),
    case([*REPLAY_ARGS, "--mem-utilization", "0"], 2, "--mem-utilization=0", id="replay-util"),
    case([*REPLAY_ARGS, "--rate-scale", "0"], 2, "positive finite", id="replay-rate-0"),
    case([*REPLAY_ARGS, "--rate-scale", "nan"], 2, "positive finite", id="replay-rate-nan"),
    case([*REPLAY_ARGS, "--rate-scale", "1,x"], 2, "comma-separated", id="replay-rate-text"),
    case([*REPLAY_ARGS, "--rate-scale", ","], 2, "--rate-scale", id="replay-rate-empty"),
    case([*REPLAY_ARGS, "--hybrid", "x"], 2, "PREFILL,DECODE", id="replay-hybrid"),
    case([*REPLAY_ARGS, "--hybrid", "a,b"], 2, "no cost model", id="replay-hybrid-unknown"),
    case(["replay", "{rows}", "--trace", "no-such"], 2, "no-such", id="replay-trace"),
    case(["replay", "{rows}", "--trace", "agents:0"], 2, "agents:0", id="replay-agents-0"),
    case(["replay", "{rows}", "--trace", "agents:x"], 2, "agents:N", id="replay-agents-x"),
    case(
        ["replay", "{rows}", "--trace", "t.csv"],
        2,
        "missing column 'TIMESTAMP'",
        files={"t.csv": "a,b\n1,2\n"},
        id="replay-trace-columns",
    ),
    case(
        ["replay", "{rows}", "--trace", "t.csv"],
        2,
        "t.csv",
        files={"t.csv": BAD_UTF8},
        id="replay-trace-binary",
    ),
    case(
        ["replay", "{rows}", "--trace", "t.csv"],
        2,
        "t.csv",
        files={"t.csv": ""},
        id="replay-trace-empty",
    ),
    case(
        ["replay", "{rows}", "--trace", "t.jsonl"],
        2,
        "t.jsonl",
        files={"t.jsonl": '{"timestamp": "x"}\n'},
        id="replay-trace-jsonl",
    ),
    case(
        ["replay", "{rows}", "--trace", "root:x:0"],
        2,
        "root:x:0",
        id="replay-trace-no-emoji",
    ),
    case([*REPLAY_ARGS, "--live", "2"], 3, "--live needs a CUDA GPU", id="replay-live-cpu"),
    case([*REPLAY_ARGS, "--live", "2", "--device", "foo"], 2, "device='foo'", id="replay-dev"),
    case([*REPLAY_ARGS, "--out", "."], 2, "--out=. is a directory", id="replay-out-dir"),
    case([*REPLAY_ARGS, "--out", "/dev/full"], 2, "not a regular file", id="replay-dev-full"),
    case([*REPLAY_ARGS, "--seed", "-1"], 2, "'--seed'", id="replay-seed"),
    case([*REPLAY_ARGS, "--limit", "-1"], 2, "'--limit'", id="replay-limit"),
    case([*REPLAY_ARGS, "--max-batch", "0"], 2, "'--max-batch'", id="replay-max-batch"),
    case([*REPLAY_ARGS, "--token-budget", "0"], 2, "'--token-budget'", id="replay-budget"),
    case([*REPLAY_ARGS, "--tp", "0"], 2, "'--tp'", id="replay-tp-0"),
    case([*REPLAY_ARGS, "--tp", "3"], 2, "tp=3", id="replay-tp-3"),
    case([*REPLAY_ARGS, "--model", "nope"], 2, "model='nope'", id="replay-model"),
    case([*REPLAY_ARGS, "--page-size", "3"], 2, "page_size=3", id="replay-page"),
    case([*REPLAY_ARGS, "--page-size", "0"], 2, "--page-size=0", id="replay-page-0"),
    case([*REPLAY_ARGS, "--itl-target-ms", "0"], 2, "--itl-target-ms=0", id="replay-itl"),
    case([*REPLAY_ARGS, "--allreduce-us", "-1"], 2, "--allreduce-us=-1", id="replay-ar"),
    case([*REPLAY_ARGS, "--copy-gbps", "-1"], 2, "--copy-gbps=-1", id="replay-copy"),
    case([*REPLAY_ARGS, "--matmul-tflops", "0"], 2, "--matmul-tflops=0", id="replay-mm"),
    case(["replay", "nope.jsonl"], 2, "nope.jsonl: no such file", id="replay-missing"),
    case(
        ["replay", "f.jsonl"],
        2,
        "f.jsonl:1: not an attnbench row",
        files={"f.jsonl": '{"a": 1}\n'},
        id="replay-foreign",
    ),
    case([*REPLAY_ARGS, "--backend", "nope"], 2, "no cost model", id="replay-backend"),
    case([*REPLAY_ARGS, "--gpu", "nope"], 2, "gpu='nope'", id="replay-gpu"),
    case([*REPLAY_ARGS, "--dtype", "fp64"], 2, "dtype='fp64'", id="replay-dtype"),
    case([*REPLAY_ARGS, "--kv-dtype", "x"], 2, "kv_dtype='x'", id="replay-kv-dtype"),
    case(
        ["replay", "h.jsonl"],
        2,
        "no result rows",
        files={"h.jsonl": HEADER},
        id="replay-header-only",
    ),
    # -- replay-heldout (issues 33, 34): a request count that would not finish, documents that
    # must not land in the committed results/, and the held-out validation's own inputs
    case(
        ["replay", "{rows}", "--trace", "agents:100000000"],
        2,
        "at most 10000 agents",
        id="replay-agents-huge",
    ),
    case(
        ["replay-validate", "{rows}", "--rescore", "v.json"],
        0,
        "validation -> runs/replay/validation-rescored.json",
        files={
            "v.json": '{"schema": "attnbench.replay-validation/1", "traces": ["azure-code"], '
            '"summary": {}, "steps": [{"trace": "azure-code", "step": 1, "backend": '
            '"flash-attn:fa3", "requests": 1, "kv_total": 64, "kv_max": 64, "predicted_us": 5.0, '
            '"measured_us": 6.0, "rel_err": -0.17, "outside": false, "kv_lens": [64]}]}'
        },
        id="replay-rescore-runs",
    ),
    case(
        ["replay", "{rows}", "--trace", "synthetic:nope"],
        2,
        "no traffic table 'nope'",
        id="replay-synthetic-unknown",
    ),
    case(
        ["replay", "{rows}", "--trace", "synthetic:t.toml"],
        2,
        "traffic.x.sessions",
        files={"t.toml": "[traffic.x]\nsessions = 0\n"},
        id="replay-synthetic-bad",
    ),
    case(
        ["replay-validate", "{rows}", "--heldout", "{rows}"],
        2,
        "leaving one out needs two or more",
        id="replay-heldout-no-steps",
    ),
    case(["lengths", "long:0@4096+mixed"], 2, "long:K@LEN+DIST", id="lengths-long-zero"),
    # -- `-b all` (what `run --help` shows as the default) means every variant everywhere
    case([*REPLAY_ARGS, "-b", "all"], 0, "flashinfer:fa2: not validated", id="replay-backend-all"),
    case(
        [*REPLAY_ARGS, "-b", "all", "-b", "flex"],
        2,
        "--backend: all (every variant) cannot be combined with flex",
        id="replay-backend-all-and-more",
    ),
    case(
        ["replay-validate", "{rows}", "--rescore", "v.json", "-b", "all"],
        0,
        "validation -> runs/replay/validation-rescored.json",
        files={
            "v.json": '{"schema": "attnbench.replay-validation/1", "traces": ["azure-code"], '
            '"summary": {}, "steps": [{"trace": "azure-code", "step": 1, "backend": '
            '"flash-attn:fa3", "requests": 1, "kv_total": 64, "kv_max": 64, "predicted_us": 5.0, '
            '"measured_us": 6.0, "rel_err": -0.17, "outside": false, "kv_lens": [64]}]}'
        },
        id="replay-validate-backend-all",
    ),
    case(
        ["fidelity", "-b", "all"],
        3,
        "fidelity needs a CUDA GPU",  # `all` passed; the device is what stops it here
        id="fidelity-backend-all",
    ),
    case(
        ["fidelity", "-b", "all", "-b", "sdpa:cudnn"],
        2,
        "--backend: all (every variant) cannot be combined with sdpa:cudnn",
        id="fidelity-backend-all-and-more",
    ),
]

OTHER = [
    case(["lengths", "gamma:1"], 2, "not a known distribution", id="lengths-unknown"),
    case(["lengths", "1024", "-n", "0"], 2, "--batch-size=0", id="lengths-batch"),
    case(["lengths", "1024", "--seed", "-1"], 2, "'--seed'", id="lengths-seed"),
    case(["lengths", "trace:nope"], 2, "nope", id="lengths-trace"),
    case(["lengths", ""], 2, "length", id="lengths-empty"),
    case(["lengths", "uniform:1-99999999"], 2, "99999999", id="lengths-huge"),
    case(["lengths", "prefix:4194000+1000"], 2, "reaches 4195000 tokens", id="lengths-prefix-huge"),
    case(["lengths"], 2, "Missing argument", id="lengths-missing"),
    case(["lengths", "uniform:1,2-5"], 2, "uniform takes LO-HI, two integers", id="len-uni-list"),
    case(["lengths", "uniform:1-2-3"], 2, "uniform takes LO-HI, two integers", id="len-uni-3"),
    case(["lengths", "mixed:1-2-3"], 2, "mixed takes LO-HI", id="lengths-mixed-3"),
    case(
        ["lengths", "trace-prefix:mooncake-conv,0"],
        2,
        "K the number of prefixes (a positive integer)",
        id="lengths-tprefix-0",
    ),
    case(["lengths", "1024,abc"], 2, "fixed takes comma-separated integers", id="len-fixed-text"),
    case(["tune", "--budget-s", "0"], 2, "--budget-s=0", id="tune-budget"),
    case(["tune", "--grid-limit", "0"], 2, "--grid-limit=0", id="tune-grid"),
    case(["tune", "--device", "cpu", "--timer", "cuda-graph"], 2, "--timer", id="tune-timer"),
    case(["tune", "--device", "cpu", "--out", "."], 2, "--out=. is a directory", id="tune-out"),
    case(
        ["tune", "--device", "cpu", "-b", "reference"],
        2,
        "none of the selected variants has knobs",
        id="tune-no-knobs",
    ),
    case(["tune", "--seed", "-2"], 2, "seed=-2", id="tune-seed"),
    case(["hw", "--device", "tpu"], 2, "device='tpu'", id="hw-device"),
    case(["hw", "--device", "cpu", "--out", "."], 2, "--out=. is a directory", id="hw-out-dir"),
    case(["hw", "--device", "cpu", "--out", "/dev/full"], 2, "regular file", id="hw-dev-full"),
    case(["config", "--config", "nope.toml"], 2, "nope.toml: not found", id="config-cmd-missing"),
    case(["backends", "--device", "tpu"], 2, "device='tpu'", id="backends-device"),
    case(["nosuchcommand"], 2, "nosuchcommand", id="unknown-command"),
]

TABLE = RUN + ANALYZE + FP8 + REPLAY + OTHER


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rr.write(tmp_path_factory.mktemp("rows") / "rows.jsonl")


def _create(files: Files) -> None:
    for name, content in files.items():
        path = Path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def test_the_table_is_large_and_ids_are_unique() -> None:
    ids = [p.id for p in TABLE]
    assert len(TABLE) >= 150
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(("argv", "env", "files", "code", "message"), TABLE)
def test_bad_input(
    argv: list[str],
    env: dict[str, str],
    files: Files,
    code: int,
    message: str,
    rows_file: Path,
) -> None:
    _create(files)
    args = [a.replace("{rows}", str(rows_file)) for a in argv]
    res = runner.invoke(app, args, env=env)
    output = res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), output
    assert "Traceback" not in output
    assert res.exit_code == code, output
    plain = re.sub(r"[│╭╮╰╯─]", " ", output)
    lines = [ln for ln in plain.splitlines() if message in ln]
    assert lines, f"no line contains {message!r}:\n{output}"
    errors = [ln for ln in output.splitlines() if ln.startswith("error:")]
    assert len(errors) <= 1, output  # one error line, not a stream of them


# -- what the run's summary and messages say about these inputs ----------------------------------


def test_an_ok_row_with_a_nan_latency_is_invalid_data_not_a_gate_failure() -> None:
    from tests.fixtures_results import row, spec

    from attnbench.report.summary import render_summary, summarize_rows

    s = spec("decode", [1024] * 8, dtype="bfloat16", kv_dtype="bfloat16")
    nan = row(s, "flash-attn:fa3").model_copy(update={"latency_us": float("nan")})
    negative = row(s, "flashinfer:tc").model_copy(update={"latency_us": -5.0})
    summary = summarize_rows([nan, negative])
    assert summary.cases == []
    assert [(f.backend, f.status) for f in summary.failures] == [
        ("flash-attn:fa3", "invalid"),
        ("flashinfer:tc", "invalid"),
    ]
    text = " ".join(" ".join(render_summary(summary, width=80)).split())
    assert "no variant passed; failed: invalid 2" in text
    assert "latency_us=nan is not a positive finite number: invalid data" in text
    assert "of read ceiling" not in text  # no -5.0 µs winner


def test_a_case_whose_variants_were_all_refused_says_why_with_the_memory_figures() -> None:
    res = runner.invoke(app, ["run", *HUGE, "-b", "reference", "-b", "sdpa:math"])
    assert res.exit_code == 3, res.output
    text = " ".join(res.output.split())
    assert "decode ctx4194304 bs16 bf16/bf16: nothing ran: every variant was refused:" in text
    assert "no variant passed the accuracy gate" not in text
    for variant in ("reference", "sdpa:math"):
        assert re.search(rf"{variant}: needs ~[\d.]+ GiB \(KV cache 256\.0", text), text
    assert re.search(r"of host memory; [\d.]+ GiB free", text), text


def test_an_unknown_backend_lists_what_a_user_can_select() -> None:
    res = runner.invoke(app, ["run", "-b", "nope", "--device", "cpu"])
    assert res.exit_code == 2
    assert "allowed: all, flash-attn" in res.output
    assert "faulty" not in res.output  # the fault-injection variants are internal


def test_backend_names_are_read_as_the_registry_spells_them() -> None:
    from attnbench.config_load import load_settings

    settings, _ = load_settings({"backends": ["ALL"]})
    assert settings.backends == ["all"]
    settings, _ = load_settings({"backends": ["FLEX", "flex,sdpa:Math", " flex"]})
    assert settings.backends == ["flex", "sdpa:math"]
    settings, _ = load_settings({"kinds": ["decode", "prefill,decode"], "lengths": ["16;16"]})
    assert settings.kinds == ["decode", "prefill"]
    assert settings.lengths == ["16"]


def test_rows_without_decode_never_print_none_as_a_kernel_name(tmp_path: Path) -> None:
    from tests.fixtures_results import row, spec, write_results

    s = spec("prefill", [1024], qo_lens=[1024], lengths="ctx1024")
    path = write_results(tmp_path / "p.jsonl", [row(s, "flashinfer:tc"), row(s, "sdpa:cudnn")])
    res = runner.invoke(app, ["report", str(path), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "decode none (no row passed the accuracy gate)" in text
    assert "no decode row passed the accuracy gate, so no decode backend is chosen" in text
    assert "None" not in text  # no `None` kernel, no "backend for None"
    res = runner.invoke(app, ["recommend", str(path), "--model", "llama-3.1-8b"])
    assert res.exit_code == 2, res.output
    assert "None" not in res.output


# -- issue 49: what the table cannot run in-process -----------------------------------------------


def test_an_ascii_terminal_gets_ascii_spellings_not_a_traceback() -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = os.environ | {"PYTHONIOENCODING": "ascii", "PYTHONPATH": str(root / "src")}
    args = [sys.executable, "-m", "attnbench", "show", str(COMMITTED / "h200-gqa-flex.jsonl")]
    res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert "median us" in res.stdout


def test_an_unreachable_ray_cluster_is_one_line_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ray = pytest.importorskip("ray")

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("Failed to connect to Ray cluster at 10.255.255.1:6379")

    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setattr("attnbench.run.raycluster.check_address", lambda address: None)
    out = tmp_path / "r.jsonl"
    res = runner.invoke(app, ["run", *TINY, "--ray", "10.255.255.1:6379", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert "--ray=10.255.255.1:6379: cannot connect: Failed to connect" in res.output
    assert not out.exists()
