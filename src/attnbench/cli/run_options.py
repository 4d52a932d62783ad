"""The options `run` and `tune` share, defined once: `RunOptions` holds them, and
`with_run_options` gives a command every one of them as a flag (before its own) and calls it
with the `RunOptions` object. A flag left out is None, so the setting's other sources (a
suite's values, the environment, `.env`, attnbench.toml, the default) decide.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any, Concatenate, ParamSpec

import typer

from attnbench.cli.outpath import OutFlags

Opt = typer.Option
P = ParamSpec("P")

FLAGS_WIN = (
    "A flag given on the command line wins over the suite's [defaults] and [[group]] values."
)

# name -> type with its typer.Option; the order is the order of `--help`.
_OPTIONS: dict[str, Any] = {
    "suite": Annotated[
        str | None, Opt(help="Built-in suite name (see `attnbench suites`) or TOML path.")
    ],
    "backend": Annotated[
        list[str] | None,
        Opt("--backend", "-b", help="Backend or variant (flashinfer, flashinfer:tc); repeatable."),
    ],
    "model": Annotated[str | None, Opt(help="Model shape, e.g. llama-3.1-70b.")],
    "tp": Annotated[int | None, Opt(help="Tensor-parallel degree (heads per GPU = heads / tp).")],
    "kind": Annotated[
        list[str] | None, Opt("--kind", "-k", help="decode, prefill, append; repeatable.")
    ],
    "lengths": Annotated[
        list[str] | None,
        Opt("--lengths", "-l", help="Length distribution (`;` separates several); repeatable."),
    ],
    "batch_size": Annotated[int | None, Opt(help="Requests per batch.")],
    "num_heads": Annotated[
        int | None, Opt("--num-heads", "--num-qo-heads", help="Query heads (before tp).")
    ],
    "num_kv_heads": Annotated[int | None, Opt(help="KV heads (before tp).")],
    "head_dim": Annotated[int | None, Opt(help="Dimension of each head.")],
    "page_size": Annotated[int | None, Opt(help="Tokens per KV-cache page (a power of two).")],
    "dtype": Annotated[str | None, Opt(help="Query/output dtype: float16 or bfloat16.")],
    "kv_dtype": Annotated[
        str | None, Opt(help="KV dtype: auto, float16, bfloat16, fp8_e4m3, fp8_e5m2.")
    ],
    "kv_layout": Annotated[str | None, Opt(help="KV-cache layout: NHD or HND.")],
    "fp8_mode": Annotated[
        bool | None,
        Opt("--fp8-mode/--no-fp8-mode", help="With kv-dtype auto: also an fp8 e4m3 KV cache."),
    ],
    "device": Annotated[str | None, Opt(help="auto, cpu, cuda, cuda:N.")],
    "seed": Annotated[int | None, Opt(help="Seed of every random input.")],
    "out": Annotated[
        Path | None,
        Opt(help="Results file (JSONL); default: a new runs/TIME_DEVICE_SUITE.jsonl."),
    ],
    "resume": Annotated[
        bool | None,
        Opt("--resume/--no-resume", help="Skip (case, variant) pairs finished in --out."),
    ],
    "append": Annotated[
        bool | None,
        Opt("--append", help="Add a new run to an existing --out (refused without it)."),
    ],
    "into_results": Annotated[
        bool | None,
        Opt("--into-results", help="Allow an --out inside the committed results/ folder."),
    ],
    "timer": Annotated[str | None, Opt(help="auto, cpu, cuda-event, cuda-graph.")],
    "cold_l2": Annotated[
        bool | None, Opt("--cold-l2/--warm-l2", help="Flush L2 before each timed call.")
    ],
    "max_time_ms": Annotated[
        float | None, Opt(help="Timed work per case (tune: per final measurement).")
    ],
    "gpus": Annotated[str | None, Opt(help="Workers on GPUs: all, N, or a list like 0,1.")],
    "workers": Annotated[
        int | None, Opt(help="CPU worker processes (0: in this process; capped at the cores).")
    ],
    "case_timeout_s": Annotated[
        float | None,
        Opt("--case-timeout", help="Seconds before a hung run is killed (0: no limit)."),
    ],
    "plan_timeout_s": Annotated[
        float | None,
        Opt("--plan-timeout", help="Seconds before a plan (JIT compile) is killed (0: no limit)."),
    ],
    "ray": Annotated[str | None, Opt(help="Ray cluster address, or `local` (run only).")],
    "config": Annotated[Path | None, Opt(help="Settings TOML (default ./attnbench.toml).")],
}

_SETTING = {"backend": "backends", "kind": "kinds"}
"""Flags whose setting has another name."""
_NOT_SETTINGS = ("config", "append", "into_results")
"""Flags that are no setting: only an explicit flag may allow them (no environment variable)."""


@dataclass(frozen=True)
class RunOptions:
    """Every flag `run` and `tune` share (None: not given)."""

    suite: str | None = None
    backend: list[str] | None = None
    model: str | None = None
    tp: int | None = None
    kind: list[str] | None = None
    lengths: list[str] | None = None
    batch_size: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    page_size: int | None = None
    dtype: str | None = None
    kv_dtype: str | None = None
    kv_layout: str | None = None
    fp8_mode: bool | None = None
    device: str | None = None
    seed: int | None = None
    out: Path | None = None
    resume: bool | None = None
    append: bool | None = None
    into_results: bool | None = None
    timer: str | None = None
    cold_l2: bool | None = None
    max_time_ms: float | None = None
    gpus: str | None = None
    workers: int | None = None
    case_timeout_s: float | None = None
    plan_timeout_s: float | None = None
    ray: str | None = None
    config: Path | None = None

    def overrides(self) -> dict[str, Any]:
        """The flags as settings overrides (setting name -> value; None: not given)."""
        return {
            _SETTING.get(f.name, f.name): getattr(self, f.name)
            for f in fields(self)
            if f.name not in _NOT_SETTINGS
        }

    def out_flags(self) -> OutFlags:
        """What `--out` may be: an existing file (--append), a committed one (--into-results)."""
        return OutFlags(append=bool(self.append), into_results=bool(self.into_results))


def with_run_options(
    func: Callable[Concatenate[RunOptions, P], None],
) -> Callable[P, None]:
    """A command taking every shared flag, then `func`'s own; `func` gets a `RunOptions`."""
    own = list(inspect.signature(func, eval_str=True).parameters.values())[1:]
    shared = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ann)
        for name, ann in _OPTIONS.items()
    ]
    params = shared + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]

    @functools.wraps(func)
    def command(*args: P.args, **kwargs: P.kwargs) -> None:
        given: dict[str, Any] = {name: kwargs.pop(name) for name in _OPTIONS if name in kwargs}
        func(RunOptions(**given), *args, **kwargs)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


SHAPE_FIELDS = (
    "suite",
    "model",
    "tp",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "page_size",
    "kv_layout",
    "dtype",
)
"""What `--resume` must keep: the suite and the attention shape. The grid's axes (lengths,
kinds, batch size, KV dtypes) may grow: `-l 16` resumed with `-l 16,32` adds the 32 cases."""


def check_resume_shape(path: Path | None, current: dict[str, Any]) -> None:
    """`--resume` finishes the run that wrote `path` (None: no resume): refuse, before any
    work, settings whose SHAPE_FIELDS differ from those in the file's first header, which
    would mix two shapes in one file without a word."""
    from attnbench.cli.common import fail
    from attnbench.results import ResultsFileError, read_results

    if path is None or not path.is_file():
        return  # the resume check of the file itself says what is wrong
    try:
        headers = read_results(path).headers
    except ResultsFileError:
        return
    before = headers[0].settings if headers else {}
    for name in SHAPE_FIELDS:
        if name in before and name in current and before[name] != current[name]:
            fail(
                f"--resume: {path} was written with {name}={before[name]!r} and this run has "
                f"{name}={current[name]!r}; resuming would mix two shapes in one file: run "
                "with the file's settings, or write a new file (another --out)"
            )


assert set(_OPTIONS) == {f.name for f in fields(RunOptions)}, "one definition per option"
