"""Which cases a `run` or `tune` runs: a suite's (flags given on the command line win over its
values, its measurement settings apply where nothing else set them) or the settings' own grid."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from attnbench.cli.common import fail

if TYPE_CHECKING:
    from attnbench.config import Settings
    from attnbench.workload.spec import WorkloadSpec
    from attnbench.workload.suite import Suite

WORKLOAD_FIELDS = (
    "batch_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "context_lengths",
    "fp8_mode",
    "page_size",
    "model",
    "tp",
    "kinds",
    "lengths",
    "dtype",
    "kv_dtype",
    "kv_layout",
    "append_len",
    "prefill_tokens",
)


def cases(
    settings: Settings, sources: dict[str, str], device_kind: str
) -> tuple[list[WorkloadSpec], str]:
    """The cases: a suite's (flags given on the command line win over its values), else the
    settings' own grid."""
    from attnbench.workload.suite import SuiteError, load_suite, settings_specs, suite_specs

    custom = any(sources.get(f, "default") != "default" for f in WORKLOAD_FIELDS)
    name = settings.suite
    if name is None and not custom:
        name = "default" if device_kind == "cuda" else "cpu"
    try:
        if name is not None:
            suite = load_suite(name)
            flags = {k for k, source in sources.items() if source == "cli"}
            return suite_specs(flags_win(suite, flags), settings), suite.name
        return settings_specs(settings), "custom"
    except (SuiteError, ValueError) as exc:
        fail(str(exc))


MEASURE_FIELDS = ("warmup_ms", "min_runs", "max_runs", "max_time_ms", "target_rel_ci", "cold_l2")
"""Settings of the measurement itself (one per run, not per case): a suite's [defaults] value
applies where no flag, environment variable or settings file gave one."""


def suite_measurement(settings: Settings, sources: dict[str, str], device_kind: str) -> Settings:
    """`settings` with the run's suite's [defaults] measurement settings (`MEASURE_FIELDS`)
    where they are still the defaults; validated as settings (a bad value exits naming it)."""
    from attnbench.workload.suite import SuiteError, load_suite

    custom = any(sources.get(f, "default") != "default" for f in WORKLOAD_FIELDS)
    name = settings.suite or (None if custom else "default" if device_kind == "cuda" else "cpu")
    if name is None:
        return settings
    try:
        defaults = load_suite(name).defaults
    except (SuiteError, ValueError) as exc:
        fail(str(exc))
    given = {k: defaults[k] for k in MEASURE_FIELDS if k in defaults}
    picked = {k: v for k, v in given.items() if sources.get(k, "default") == "default"}
    if not picked:
        return settings
    try:
        return type(settings).model_validate(settings.model_dump() | picked)
    except ValueError as exc:
        fail(f"suite {name} [defaults]: {' '.join(str(exc).split())[:200]}")


def flags_win(suite: Suite, flags: set[str]) -> Suite:
    """`suite` without the values of the settings in `flags` (those given on the command
    line), so the flags' values, which are the base settings, apply to every group."""
    return dataclasses.replace(
        suite,
        defaults={k: v for k, v in suite.defaults.items() if k not in flags},
        groups=[{k: v for k, v in g.items() if k not in flags} for g in suite.groups],
    )
