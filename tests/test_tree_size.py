"""The tracked tree stays small: every tracked file travels with each call to the GPU machine,
beside a 44 MB pack (`.device`, recompressed by scripts/h200/repack_xz9.sh; pack.sh writes
51.8 MB), under a 64 MiB limit. Committed results and traces are stored gzipped
(`.jsonl.gz`, `.json.gz`, `.csv.gz`): every reader takes them like the plain files."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT_BYTES = 14_900_000
"""The tracked tree's budget: 14.9 MB. At 14.6 MB beside the 51.8 MB pack and the 0.5 MB
engine Triton pack (`.device-triton`) it left 0.2 MB under 64 MiB (67.1 MB) for what a call
carries besides; session 23 recompressed the pack at `xz -9e` (scripts/h200/repack_xz9.sh:
44.3 MB, the same tar), which leaves 7.4 MB at this budget for a carried JIT cache
(`jit_cache.sh`; session 10's was 4.8 MB) and the H200's clean headline files. A pack rebuilt
by pack.sh is 51.8 MB again: repack it. (xz instead of gzip would take the committed rows from
8.0 to about 5.4 MB: 33-34% smaller on three files measured.) The budget was 8 MB until the
head_dim, held-out replay and fidelity suites landed at 8.4 MB, 10 MB until session 17's H100
default runs, then 10.5 MB until session 18's H100 deployment evidence (2,368 rows, 1.4 MB,
with its traffic and two fp8 studies), then 12.8 MB until session 19's H100 rows of the
outside anchors and the MLA, gpt-oss and Gemma-2 deployments (0.45 MB), then 13.4 MB until
session 21's engine Triton answers (0.35 MB), then 14.0 MB until session 22's clean H100
headline suites and fp8 study (0.75 MB), then 14.6 MB until session 23's repack; superseded
files are kept in `results/archive/`. The MLA pack (`.device-mla`, FlashMLA without FA3) is
29.8 MB repacked."""
BIG_BYTES = 150_000
"""A plain file over this is worth compressing."""
PACKED = (".gz", ".png", ".jpg", ".jpeg", ".zip", ".tgz", ".whl")
"""Names of files that compress no further."""


def tracked_sizes(root: Path) -> dict[str, int] | None:
    """Size in bytes of every tracked file present in the working tree (`git ls-files`), or
    None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    sizes = {}
    for name in out.decode("utf-8", "surrogateescape").split("\0"):
        path = root / name
        if name and path.is_file() and not path.is_symlink():
            sizes[name] = path.stat().st_size
    return sizes


def advice(sizes: dict[str, int], limit: int = LIMIT_BYTES) -> str:
    """What to say when the tree is over `limit`: the total and what to compress, largest first."""
    total = sum(sizes.values())
    big = sorted(
        ((n, s) for n, s in sizes.items() if s > BIG_BYTES and not n.lower().endswith(PACKED)),
        key=lambda item: -item[1],
    )
    lines = [
        f"the tracked tree is {total / 1e6:.2f} MB, over its {limit / 1e6:.1f} MB budget "
        "(it travels with every GPU call under a 64 MiB limit)."
    ]
    if big:
        lines.append(
            "Compress these (readers take .jsonl.gz/.json.gz/.csv.gz like the plain file; "
            "keep resume targets of unfinished runs plain):"
        )
        lines += [f"  {s / 1e3:8.0f} kB  {n}" for n, s in big[:15]]
        lines.append("with: gzip -9 -n FILE && git rm --cached FILE && git add FILE.gz")
    else:
        largest = sorted(sizes.items(), key=lambda item: -item[1])[:10]
        lines.append("nothing plain is over 150 kB; the largest files:")
        lines += [f"  {s / 1e3:8.0f} kB  {n}" for n, s in largest]
    return os.linesep.join(lines)


def test_the_tracked_tree_stays_under_its_budget() -> None:
    sizes = tracked_sizes(ROOT)
    if sizes is None:
        pytest.skip("not a git checkout (git ls-files failed)")
    assert sizes, "git ls-files listed no file"
    assert sum(sizes.values()) <= LIMIT_BYTES, advice(sizes)


def test_the_advice_names_what_to_compress_largest_first() -> None:
    sizes = {
        "results/a.jsonl": 3_000_000,
        "results/b.jsonl.gz": 4_000_000,
        "results/c.json": 2_000_000,
        "src/x.py": 10_000,
        "docs/shot.png": 500_000,
    }
    text = advice(sizes, limit=1_000_000)
    assert "9.51 MB, over its 1.0 MB budget" in text
    assert text.index("results/a.jsonl") < text.index("results/c.json")
    assert "b.jsonl.gz" not in text  # already compressed
    assert "src/x.py" not in text
    assert "shot.png" not in text
    assert "gzip -9 -n FILE" in text
    only_gz = advice({"results/b.jsonl.gz": 9_000_000}, limit=1_000_000)
    assert "nothing plain is over 150 kB" in only_gz
    assert "results/b.jsonl.gz" in only_gz


def test_sizes_are_none_outside_a_git_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert tracked_sizes(outside) is None
