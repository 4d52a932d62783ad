from __future__ import annotations

import gzip
import hashlib
import itertools
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from attnbench.workload.lengths import parse_lengths
from attnbench.workload.prefixes import prefix_groups, sample_prefix_cases
from attnbench.workload.traces import (
    TRACES,
    Request,
    TraceError,
    load_trace,
    parse_trace,
    sample_decode_lengths,
    sample_prompt_lengths,
    trace_label,
)

# From /work/shared/data/traces/README.md (nearest-rank percentiles).
EXPECTED = {
    # name: (rows, input p50, input max, output p50, output max, blob sha)
    "azure-code": (8819, 1469, 7437, 13, 1899, "62bd8109d0f2b1bc48206d397ecca48d8de03aab"),
    "azure-conv": (19366, 1020, 14050, 129, 1000, "5b9219f2caf93bbbf95ec29894e206115658e235"),
    "mooncake-conv": (12031, 6909, 126195, 350, 2000, "5a371794b81d7fc7487ec8a02a2c631bcc7fbdf8"),
}
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def _p50(values: list[int]) -> int:
    return int(np.percentile(values, 50, method="inverted_cdf"))


@pytest.mark.parametrize("name", list(EXPECTED))
def test_builtin_traces_match_the_readme(name: str) -> None:
    rows, in_p50, in_max, out_p50, out_max, _ = EXPECTED[name]
    reqs = load_trace(name)
    assert len(reqs) == rows
    inputs = [r.input_len for r in reqs]
    outputs = [r.output_len for r in reqs]
    assert (_p50(inputs), max(inputs)) == (in_p50, in_max)
    assert (_p50(outputs), max(outputs)) == (out_p50, out_max)
    assert reqs[0].arrival_s == 0.0
    assert all(b.arrival_s >= a.arrival_s for a, b in itertools.pairwise(reqs))


@pytest.mark.parametrize("name", list(EXPECTED))
def test_packaged_files_are_byte_for_byte_upstream(name: str) -> None:
    """Stored gzipped (`gzip -9 -n`): the decompressed bytes are the upstream blob."""
    assert TRACES[name].endswith(".gz")
    data = gzip.decompress(
        (resources.files("attnbench") / "data" / "traces" / TRACES[name]).read_bytes()
    )
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert blob == EXPECTED[name][5]


def test_arrival_spans_and_mooncake_blocks() -> None:
    code = load_trace("azure-code")
    assert code[-1].arrival_s == pytest.approx(3435.95, abs=0.01)  # README: 3,435.9 s
    moon = load_trace("mooncake-conv")
    assert moon[-1].arrival_s == pytest.approx(3536.999)
    assert all(len(r.hash_ids) == math.ceil(r.input_len / 512) for r in moon)
    assert sum(r.input_len for r in moon) / len(moon) == pytest.approx(12035, abs=1)
    assert all(r.hash_ids[0] == 0 for r in moon)


def test_seven_digit_fractions_and_crlf_or_lf_parse_alike() -> None:
    rows = ["2023-11-16 18:17:03.9799600,10,5", "2023-11-16 18:17:04.0319601,20,1"]
    crlf = "\r\n".join([HEADER, *rows]).encode()
    lf = ("\n".join([HEADER, *rows]) + "\n").encode()
    a, b = parse_trace(crlf, "x.csv"), parse_trace(lf, "x.csv")
    assert a == b
    assert a[1].arrival_s == pytest.approx(0.052, abs=1e-6)
    assert a[1] == Request(a[1].arrival_s, 20, 1)


def _gz(data: bytes) -> bytes:
    """gzip with a fixed header time: test ids stay the same in every xdist worker."""
    return gzip.compress(data, mtime=0)


@pytest.mark.parametrize(
    ("data", "source", "needle"),
    [
        (b"", "e.csv", "file is empty"),
        (b"  \r\n", "e.csv", "file is empty"),
        (HEADER.encode() + b"\r\n", "h.csv", "no requests"),
        (b"TIMESTAMP,ContextTokens\r\n2023-11-16 18:17:03.1,5", "m.csv", "'GeneratedTokens'"),
        (f"{HEADER}\r\n2023-11-16 18:17:03.1,5x,3".encode(), "n.csv", "line 2, column 'Context"),
        (f"{HEADER}\r\n2023-11-16 18:17:03.1,5,-3".encode(), "n.csv", "'GeneratedTokens'"),
        (f"{HEADER}\r\n2023-11-16 18:17:03.1,1.5,3".encode(), "n.csv", "'1.5'"),
        (f"{HEADER}\r\n2023-11-16 18:17:03.1,0,3".encode(), "n.csv", ">= 1"),
        (f"{HEADER}\r\n2023-11-16 18:17:03.1,5,3\r\nnot a time,5,3".encode(), "t.csv", "line 3"),
        (f"{HEADER}\r\n2023-11-16 18:17:03.1,5".encode(), "f.csv", "2 fields"),
        (b'{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 3', "j.jsonl",
         "line 2: invalid JSON"),
        (b'{"timestamp": 0, "input_length": 5}\n', "k.jsonl", "missing key 'output_length'"),
        (b'{"timestamp": 0, "input_length": "5", "output_length": 1}', "k.jsonl", "'input_length'"),
        (b'{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": 3}', "k.jsonl",
         "'hash_ids'"),
        (b"[1, 2]\n", "k.jsonl", "expected a JSON object"),
        (b'{"timestamp": NaN, "input_length": 5, "output_length": 1}', "k.jsonl", "'timestamp'"),
        (b"TIMESTAMP,ContextTokens,GeneratedTokens", "p.csv.gz", "not a complete gzip file"),
        (_gz(HEADER.encode() + b"\r\n1,2,3")[:-9], "c.csv.gz", "not a complete gzip"),
        (_gz(b'{"timestamp": 0, "input_length": 5}'), "z.jsonl.gz", "'output_length'"),
    ],
)  # fmt: skip
def test_bad_traces_give_one_line_errors_naming_file_and_line(
    data: bytes, source: str, needle: str
) -> None:
    with pytest.raises(TraceError) as info:
        parse_trace(data, source)
    message = str(info.value)
    assert "\n" not in message
    assert source in message
    assert needle in message


def test_trace_paths_load_by_format(tmp_path: Path) -> None:
    csv_path = tmp_path / "mine.csv"
    csv_path.write_bytes(f"{HEADER}\r\n2023-11-16 18:17:03.1,100,10".encode())
    jsonl_path = tmp_path / "mine.jsonl"
    jsonl_path.write_text('{"timestamp": 0, "input_length": 7, "output_length": 2}\n')
    assert load_trace(str(csv_path))[0].input_len == 100
    assert load_trace(str(jsonl_path))[0].input_len == 7
    (case,) = parse_lengths(f"trace:{csv_path}", 4, 0)
    assert case.label == "trace(mine)"
    assert all(101 <= n <= 110 for n in case.kv_lens)
    with pytest.raises(TraceError, match="neither a built-in trace nor a file"):
        load_trace(str(tmp_path / "nope.csv"))


@pytest.mark.parametrize("name", ["mine.csv", "mine.jsonl"])
def test_gzipped_trace_paths_load_like_plain_ones(tmp_path: Path, name: str) -> None:
    plain = tmp_path / name
    if name.endswith(".csv"):
        plain.write_bytes(
            f"{HEADER}\r\n2023-11-16 18:17:03.1,100,10\r\n2023-11-16 18:17:04,9,2".encode()
        )
    else:
        plain.write_text(
            '{"timestamp": 0, "input_length": 7, "output_length": 2, "hash_ids": [0]}\n'
        )
    packed = tmp_path / (name + ".gz")
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert load_trace(str(packed)) == load_trace(str(plain))
    assert len(load_trace(str(packed))) == (2 if name.endswith(".csv") else 1)
    assert trace_label(str(packed)) == trace_label(str(plain)) == "mine"


def test_decode_sampling_is_seeded_and_within_each_output() -> None:
    a = sample_decode_lengths("azure-conv", 64, seed=3)
    assert a == sample_decode_lengths("azure-conv", 64, seed=3)
    assert a != sample_decode_lengths("azure-conv", 64, seed=4)
    assert a[0].label == "trace(azure-conv)"
    assert len(a[0].kv_lens) == 64


def test_decode_sampling_weights_requests_by_output_length(tmp_path: Path) -> None:
    path = tmp_path / "two.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 1000, "output_length": 1}\n'
        '{"timestamp": 1, "input_length": 5000, "output_length": 99}\n'
    )
    (steps,) = sample_decode_lengths(str(path), 2000, seed=0)
    (per_req,) = sample_decode_lengths(str(path), 2000, seed=0, weight="request")
    long_share = np.mean([n > 5000 for n in steps.kv_lens])
    assert 0.97 < long_share <= 1.0  # 99 of 100 decode steps belong to the long request
    assert 0.4 < np.mean([n > 5000 for n in per_req.kv_lens]) < 0.6
    assert set(steps.kv_lens) <= {1001} | set(range(5001, 5100))


def test_limit_uses_only_the_first_requests() -> None:
    first = load_trace("azure-code")[:3]
    (case,) = parse_lengths("trace:azure-code@3", 16, 0)
    assert case.label == "trace(azure-code@3)"
    for n in case.kv_lens:
        assert any(r.input_len < n <= r.input_len + r.output_len for r in first)
    with pytest.raises(ValueError, match="@N must be a positive integer"):
        parse_lengths("trace:azure-code@0", 4, 0)


def test_prompt_lengths_come_from_the_trace() -> None:
    (case,) = sample_prompt_lengths("mooncake-conv", 32, seed=1)
    inputs = {r.input_len for r in load_trace("mooncake-conv")}
    assert case.label == "prompts(mooncake-conv)"
    assert len(case.kv_lens) == 32
    assert set(case.kv_lens) <= inputs
    assert parse_lengths("prompts:mooncake-conv", 32, 1) == [case]


def _req(input_len: int, hashes: list[int]) -> Request:
    return Request(0.0, input_len, 10, tuple(hashes))


def test_prefix_groups_find_the_longest_prefix_shared_by_enough_requests() -> None:
    reqs = [
        _req(1536, [0, 1, 2]),
        _req(2000, [0, 1, 2, 3]),
        _req(1500, [0, 1, 4]),
        _req(900, [0, 5]),
    ]
    (g2,) = prefix_groups(reqs, 2)
    assert (g2.prefix_len, g2.requests, g2.suffix_lens) == (1536, (0, 1), (0, 464))
    (g3,) = prefix_groups(reqs, 3)
    assert (g3.prefix_len, g3.requests) == (1024, (0, 1, 2))
    (g4,) = prefix_groups(reqs, 4)
    assert (g4.prefix_len, g4.num_requests) == (512, 4)
    assert prefix_groups(reqs, 5) == []


def test_prefix_groups_keep_only_whole_blocks_every_member_holds() -> None:
    reqs = [_req(1200, [0, 1, 2]), _req(1400, [0, 1, 2])]  # the third block is partial
    (g,) = prefix_groups(reqs, 2)
    assert g.prefix_len == 1024
    assert g.suffix_lens == (176, 376)


def test_mooncake_prefix_cases_share_their_blocks() -> None:
    reqs = load_trace("mooncake-conv")
    groups = prefix_groups(reqs, 8)
    assert groups[0].prefix_len >= 65536
    assert groups[0].num_requests >= 8
    cases = sample_prefix_cases("mooncake-conv", 8, seed=0, num_cases=2)
    assert len(cases) == 2
    for case, group in zip(cases, groups, strict=False):
        p = case.shared_prefix_len
        assert p == group.prefix_len
        assert p % 512 == 0
        assert len(case.kv_lens) == 8
        assert min(case.kv_lens) > p
        blocks = {reqs[i].hash_ids[: p // 512] for i in group.requests}
        assert len(blocks) == 1
    assert parse_lengths("trace-prefix:mooncake-conv,2", 8, 0) == cases
    with pytest.raises(TraceError, match="no hash_ids"):
        sample_prefix_cases("azure-code", 8, seed=0)
