"""Property-based tests: no input makes attnbench fail with anything but its own clear errors."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from attnbench.backends.reference import reference_attention
from attnbench.config import Settings
from attnbench.config_load import ConfigError, load_settings
from attnbench.results import ResultsFileError, read_results
from attnbench.workload.inputs import make_inputs
from attnbench.workload.lengths import parse_lengths
from attnbench.workload.spec import WorkloadSpec
from attnbench.workload.suite import SuiteError, load_suite, suite_specs

pytestmark = pytest.mark.usefixtures("isolated")

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.lists(st.integers(-5, 70000), max_size=4),
    st.lists(st.text(max_size=6), max_size=3),
)
FIELDS = list(Settings.model_fields)
FIXTURE_OK = [HealthCheck.function_scoped_fixture]


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.dictionaries(st.sampled_from(FIELDS), junk, max_size=4))
@pytest.mark.slow
def test_any_cli_values_load_or_fail_with_one_line(cli: dict[str, Any]) -> None:
    try:
        load_settings(cli)
    except ConfigError as exc:
        message = str(exc)
    else:
        return
    assert message
    assert "\n" not in message


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sampled_from(FIELDS), st.text(max_size=20))
def test_any_env_value_loads_or_fails_cleanly(field: str, value: str) -> None:
    if "\x00" in value:
        return
    os.environ[f"ATTNBENCH_{field.upper()}"] = value
    message = ""
    try:
        load_settings()
    except ConfigError as exc:
        message = str(exc)
    finally:
        del os.environ[f"ATTNBENCH_{field.upper()}"]
    assert "\n" not in message


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30), st.integers(-3, 64), st.integers(0, 2**32))
def test_any_length_string_parses_or_raises_value_error(text: str, batch: int, seed: int) -> None:
    try:
        cases = parse_lengths(text, batch, seed)
    except ValueError as exc:
        cases, message = [], str(exc)
        assert message
    for c in cases:
        assert c.kv_lens
        assert all(n >= 1 for n in c.kv_lens)


spec_dicts = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["decode", "prefill", "append", "tree", "shared_prefix", "x"]),
        "num_qo_heads": st.integers(-1, 8),
        "num_kv_heads": st.integers(-1, 8),
        "head_dim": st.sampled_from([0, 8, 16]),
        "kv_lens": st.lists(st.integers(-1, 40), max_size=3).map(tuple),
        "qo_lens": st.lists(st.integers(-1, 40), max_size=3).map(tuple),
        "page_size": st.sampled_from([0, 1, 3, 4, 16]),
        "kv_layout": st.sampled_from(["NHD", "HND", "XYZ"]),
        "kv_dtype": st.sampled_from(["bfloat16", "float16", "fp8_e4m3", "fp8_e5m2", "int8"]),
        "shared_prefix_len": st.integers(0, 50),
    }
)


@settings(max_examples=300, deadline=None)
@given(spec_dicts)
def test_any_spec_validates_or_is_rejected_and_valid_ones_run(data: dict[str, Any]) -> None:
    try:
        spec = WorkloadSpec.model_validate(data)
    except ValidationError:
        return
    inputs = make_inputs(spec)
    out = reference_attention(inputs)
    assert out.shape == (spec.total_q, spec.num_qo_heads, spec.head_dim)
    assert bool(out.isfinite().all())


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_results_file_reads_or_fails_cleanly(tmp_path: Path, blob: bytes) -> None:
    p = tmp_path / "r.jsonl"
    p.write_bytes(blob)
    message = str(p)
    try:
        read_results(p)
    except ResultsFileError as exc:
        message = str(exc)
    assert str(p) in message


row_junk = st.dictionaries(
    st.sampled_from(
        ["type", "schema_version", "run_id", "case_id", "backend", "status", "spec", "latency_us"]
    ),
    junk,
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(row_junk)
def test_any_json_row_after_a_header_reads_or_fails_cleanly(
    tmp_path: Path, row: dict[str, Any]
) -> None:
    p = tmp_path / "r.jsonl"
    header = {"type": "header", "schema_version": 1, "run_id": "r", "provenance": {}}
    p.write_text(json.dumps(header) + "\n" + json.dumps(row) + "\n")
    with contextlib.suppress(ResultsFileError):
        read_results(p)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.dictionaries(st.sampled_from([*FIELDS, "label", "bogus"]), junk, min_size=1, max_size=3))
def test_any_suite_group_expands_or_fails_with_suite_error(
    tmp_path: Path, group: dict[str, Any]
) -> None:
    import tomllib

    lines = ["[[group]]"]
    for k, v in group.items():
        if v is None or (isinstance(v, float) and v != v):
            continue
        lines.append(f"{k} = {json.dumps(v)}")
    text = "\n".join(lines) + "\n"
    p = tmp_path / "s.toml"
    p.write_text(text)
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        with pytest.raises(SuiteError):
            load_suite(str(p))
        return
    base = Settings(batch_size=2, context_lengths=[16], lengths=["16"])
    message = ""
    try:
        suite_specs(load_suite(str(p)), base)
    except SuiteError as exc:
        message = str(exc)
    assert "\n" not in message
