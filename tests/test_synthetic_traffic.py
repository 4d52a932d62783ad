"""Synthetic traffic families (`synthetic:NAME`, `[traffic.NAME]` in a suite TOML) and the
`long:` lengths of the held-out calibration suite."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from attnbench.config import Settings
from attnbench.replay.traffic import MAX_AGENTS, load_requests
from attnbench.workload.lengths import parse_lengths
from attnbench.workload.suite import load_suite, suite_specs
from attnbench.workload.synthetic import (
    MAX_SYNTHETIC_REQUESTS,
    PREFIX_BLOCK_TOKENS,
    synthetic_family,
    synthetic_requests,
)
from attnbench.workload.traces import TraceError

FAMILY = "synthetic:agentic-128k"

TOML = """
[traffic.tiny]
sessions = 40
arrival_window_s = 5.0
shared_prefix = 1024
max_context = 8192
[[traffic.tiny.class]]
name = "agent"
share = 1.0
first_context = [1100, 2000]
turns = [3, 6]
append = [700.0, 0.5]
output = [100.0, 0.5]
"""


def test_the_builtin_family_has_long_contexts_a_large_batch_and_prefix_reuse() -> None:
    label, spec = synthetic_family(FAMILY)
    assert label == "agentic-128k"
    assert spec.sources  # the statistics name where they come from
    reqs = load_requests(FAMILY)
    assert reqs == load_requests(FAMILY)  # seeded
    lens = np.array([r.input_len + r.output_len for r in reqs])
    assert lens.max() <= spec.max_context == 131072
    assert (lens > 100_000).any()
    assert all(len(r.hash_ids) == -(-r.input_len // PREFIX_BLOCK_TOKENS) for r in reqs)
    seen: set[int] = set()
    reused = total = 0
    for r in reqs:  # leading blocks already seen: what a prefix cache can serve
        n = next((i for i, h in enumerate(r.hash_ids) if h not in seen), len(r.hash_ids))
        reused, total = reused + n, total + len(r.hash_ids)
        seen.update(r.hash_ids)
    assert reused / total > 0.5
    arrivals = [r.arrival_s for r in reqs]
    assert arrivals == sorted(arrivals)


def test_prompts_grow_turn_by_turn_and_keep_their_complete_blocks(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(TOML, encoding="utf-8")
    label, spec = synthetic_family(f"synthetic:{path}")
    assert label == "mine#tiny"
    reqs = synthetic_requests(spec)
    shared = spec.shared_prefix // PREFIX_BLOCK_TOKENS
    assert all(r.hash_ids[:shared] == tuple(range(shared)) for r in reqs)  # one system prompt
    by_block: dict[int, list[int]] = {}
    for r in reqs:
        by_block.setdefault(r.hash_ids[shared], []).append(r.input_len)
    growing = [lens for lens in by_block.values() if len(lens) > 1]  # one session each
    assert growing
    assert all(lens == sorted(lens) for lens in growing)
    assert max(r.input_len + r.output_len for r in reqs) <= spec.max_context
    assert synthetic_requests(spec, seed=1) != reqs


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("synthetic:no-such", "no traffic table 'no-such'"),
        ("synthetic:missing.toml", "no such TOML file"),
    ],
)
def test_unknown_families_name_what_exists(text: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        synthetic_family(text)


def test_bad_parameters_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(TOML.replace("turns = [3, 6]", "turns = [6, 3]"), encoding="utf-8")
    with pytest.raises(TraceError, match=r"traffic\.tiny\.class\.0\.turns"):
        synthetic_family(f"synthetic:{path}#tiny")
    path.write_text(TOML.replace("sessions = 40", "sessions = 90000"), encoding="utf-8")
    with pytest.raises(TraceError, match=f"at most {MAX_SYNTHETIC_REQUESTS}"):
        synthetic_family(f"synthetic:{path}")


def test_agents_are_capped_before_they_are_generated() -> None:
    with pytest.raises(ValueError, match=f"at most {MAX_AGENTS} agents"):
        load_requests("agents:100000000")


def test_long_lengths_put_a_few_long_requests_in_a_large_batch() -> None:
    (case,) = parse_lengths("long:3@32768-131072+lognormal:4096,1", 160, 0)
    assert len(case.kv_lens) == 160
    assert sorted(case.kv_lens)[-3:][0] == 32768
    assert max(case.kv_lens) == 131072
    assert case.label == "long(3@32768..131072)+lognormal(4096,1)"
    (one,) = parse_lengths("long:1@131071+lognormal:4096,1", 96, 0)
    assert max(one.kv_lens) == 131071
    with pytest.raises(ValueError, match="long:K@LEN"):
        parse_lengths("long:0@4096+mixed", 8, 0)


def test_the_heldout_calibration_suite_states_its_cases_and_holds_the_regime() -> None:
    suite = load_suite("replay-calibration-heldout")
    specs = suite_specs(suite, Settings())
    stated = re.search(r"(\d+) cases", suite.description)
    assert stated
    assert len(specs) == int(stated.group(1)) == len({s.case_id for s in specs})
    for s in specs:  # 96-256 requests, one to a few of 32k-128k (and the lognormal's tail)
        longs = [n for n in s.kv_lens if n >= 32768]
        assert 96 <= s.batch_size <= 256
        assert 1 <= len(longs) <= 8
        assert 49152 <= max(s.kv_lens) <= 131072
        assert 0.4e6 < s.total_kv < 2.6e6
    assert synthetic_family(FAMILY)[1].sessions > 256


def test_replay_runs_a_synthetic_family_from_a_file(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    import replay_rows as rr
    from attnbench.cli.app import app

    rows = rr.write(tmp_path / "rows.jsonl")
    family = tmp_path / "mine.toml"
    family.write_text(TOML, encoding="utf-8")
    out = tmp_path / "replay.json"
    res = CliRunner().invoke(
        app, ["replay", str(rows), "--trace", f"synthetic:{family}#tiny", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["trace"]["synthetic"] is True
    assert doc["trace"]["has_prefix_hashes"] is True
    assert doc["scheduler"]["prefix_cache"] is True
    assert doc["scheduler"]["max_batch"] == 256  # a family is not agents:N (all at once)
