"""The README's three opening commands are exactly what CI runs, and no measured figure in the
README or DESIGN.md is typed by hand: outside the block `attnbench findings` generates, a
number with a unit of time, bandwidth, rate or a percentage or `x` ratio is a measured figure,
unless it is one of the few design constants `NOT_MEASURED` names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnbench.report.findings import BEGIN, END

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "DESIGN.md")

NUMBER = r"\d[\d,]*(?:\.\d+)?"
MEASURED = re.compile(
    rf"(?<![\w.])~?{NUMBER}(?:\s?[-–]\s?{NUMBER})?"
    r"(?:\s?(?:µs|us|ms|s|min|minutes|GB/s|TB/s|TFLOP/s|req/s|tok/s|MHz|GHz|%)|x)(?![\w/])"
    rf"|(?<![\w.]){NUMBER} of {NUMBER}(?![\w.])"
)
"""`4,690 GB/s`, `53-98%`, `1.64x`, `507 s`, `58 of 137`: what a measured figure looks like."""

NOT_MEASURED = {
    "error budget is 4x": "the accuracy gate's budget (`measure.accuracy`)",
    "within 1%": "the timing loop's target for the median's confidence interval",
    "the 95% confidence interval": "the confidence level of the timing loop's interval",
    "(default 600 s)": "`--case-timeout`'s default",
    "(1800 s)": "`--plan-timeout`'s default",
    "a 60 s case timeout": "a setting that was tried, not a measurement",
    "flush >= 2x L2": "the L2 flush's size rule",
    "a ~50 us GPU spin": "the warm-L2 spin's length (`measure.l2`)",
    "within 3% for kernels over 50 us": "fidelity's tolerance and bound (`analysis.fidelity`)",
    "each bucket of >= 5% of the": "`--measure`'s bucket share (`deploy.decide.MEASURE_SHARE`)",
    "until 90% of the steps": "the example value of `--cover 0.9`",
    "95% CI": "the confidence level of the paired bootstrap (`deploy.stats`)",
}
"""Design constants that look like measurements, each with what it is."""


def _prose(text: str) -> str:
    """`text` without its generated block, fenced and indented code blocks, and code spans."""
    while BEGIN in text:
        start = text.index(BEGIN)
        end = text.index(END, start) + len(END)
        text = text[:start] + text[end:]
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    text = re.sub(r"^ {4}.*$", "", text, flags=re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def hand_typed(text: str) -> list[str]:
    """Each measured-looking figure in `text`'s prose that no NOT_MEASURED phrase covers."""
    prose = " ".join(_prose(text).split())
    allowed = [
        (m.start(), m.end())
        for phrase in NOT_MEASURED
        for m in re.finditer(re.escape(phrase), prose)
    ]
    return [
        prose[max(0, m.start() - 40) : m.end() + 10]
        for m in MEASURED.finditer(prose)
        if not any(a <= m.start() and m.end() <= b for a, b in allowed)
    ]


def test_ci_runs_the_readme_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(block) == 3
    assert block[2].endswith("python -m pytest -q -m 'slow or soak'")
    ci = [
        ln.removesuffix(" || exit 1")  # a failing chain fails the run
        for ln in (ROOT / ".ci" / "run").read_text().splitlines()
        if ln and not ln.startswith(("#", "set ", "cd "))
    ]
    assert ci == block


def test_the_test_command_checks_the_figures() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert block[1].endswith("&& attnbench findings --check")


@pytest.mark.parametrize("name", DOCS)
def test_no_measured_figure_is_typed_by_hand(name: str) -> None:
    found = hand_typed((ROOT / name).read_text(encoding="utf-8"))
    assert not found, f"{name}: measured figures outside the generated block: {found}"


def test_the_rule_sees_hand_typed_figures_and_skips_generated_and_code() -> None:
    typed = "FA3 takes 71.3 ms; copy 4,223-4,258 GB/s; 0.45-1.64x; faster in 58 of 137; 98%."
    assert len(hand_typed(typed)) == 5
    assert hand_typed("32 x 16k decode, head_dim 128, page 16, 4x16k prefill") == []
    assert hand_typed(f"{BEGIN}\n| 71.3 ms |\n{END}\n`--threshold 5%`\n    run 3 ms\n") == []
    assert hand_typed("The error budget is 4x the error of rounding.") == []
    assert hand_typed("The error budget is 4x and 5x.") == ["The error budget is 4x and 5x."]


def test_the_readme_links_the_findings_page_and_its_answer_table() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "[docs/findings.md](docs/findings.md)" in readme
    assert "[DESIGN.md](DESIGN.md)" in readme
    assert "--help" in readme
    block = readme[readme.index(BEGIN) : readme.index(END)]
    assert "(docs/findings.md#" in block


README_MAX_BYTES = 12 * 1024
DESIGN_MAX_BYTES = 25 * 1024
ANSWER_WITHIN_LINES = 60
PARAGRAPH_MAX_WORDS = 80
HOW_IT_MEASURES_MAX_BULLETS = 8


def test_the_readme_and_design_stay_short() -> None:
    assert len((ROOT / "README.md").read_bytes()) <= README_MAX_BYTES
    assert len((ROOT / "DESIGN.md").read_bytes()) <= DESIGN_MAX_BYTES


def test_the_answer_table_starts_within_the_first_lines() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index(BEGIN)
    assert start < ANSWER_WITHIN_LINES
    assert lines[start + 1].startswith("| GPU | model | engine | traffic |")


def paragraphs(text: str) -> list[str]:
    """The prose paragraphs of `text`: no generated block, code, table, heading or list."""
    out = []
    for para in re.split(r"\n\s*\n", _prose(text)):
        lines = [ln for ln in para.splitlines() if ln.strip()]
        if lines and not lines[0].lstrip().startswith(("#", "|", "-", "*", "<!--")):
            out.append(" ".join(lines))
    return out


def test_no_readme_paragraph_is_long() -> None:
    long = [p for p in paragraphs((ROOT / "README.md").read_text())
            if len(p.split()) > PARAGRAPH_MAX_WORDS]  # fmt: skip
    assert not long, long


def test_how_it_measures_has_few_bullets() -> None:
    readme = (ROOT / "README.md").read_text()
    part = readme.split("## How it measures", 1)[1].split("\n## ", 1)[0]
    bullets = [ln for ln in part.splitlines() if ln.startswith("- ")]
    assert 0 < len(bullets) <= HOW_IT_MEASURES_MAX_BULLETS


PATH = re.compile(r"(?<![\w./:-])(\.?[\w-]+(?:\.[\w]+)?(?:/[\w.-]+)+/?)(?::\d+(?:-\d+)?)?")
"""`src/attnbench/deploy/ask.py`, `docs/findings.md`, `report/findings/`, `.ci/run`: a repository
path (relative to the root or to `src/attnbench/`), with an optional `:line`."""
NOT_PATHS = ("runs/", "http", "sm90", "GB/s", "TFLOP/s", "tok/s", "req/s", "B/A")
"""Path-looking words that name no repository file: git-ignored output, units, URLs."""


def named_paths(text: str) -> list[str]:
    """Each repository path that a code span or link of `text` names (globs and placeholders
    left out)."""
    spans = re.findall(r"`([^`\n]+)`", text) + re.findall(r"\]\(([^)#\s]+)", text)
    found = []
    for span in spans:
        for m in PATH.finditer(span):
            path = m.group(1)
            if any(c in span[m.start() : m.end() + 1] for c in "*<>{}") or path.startswith(
                NOT_PATHS
            ):
                continue
            if "/" in path and not path.startswith(("/", "~")):
                found.append(path)
    return found


def _exists(base: Path, path: str) -> bool:
    """`path` under `base`, also as a module (`cli/__init__`) or a module's name
    (`analysis/fidelity.disagreement_cause`)."""
    module = path.rsplit(".", 1)[0]
    return any((base / p).exists() for p in (path, f"{path}.py", f"{module}.py"))


@pytest.mark.parametrize("name", DOCS)
def test_every_path_the_doc_names_exists(name: str) -> None:
    text = (ROOT / name).read_text(encoding="utf-8")
    bases = (ROOT, ROOT / "src" / "attnbench", ROOT / "src")
    missing = [p for p in named_paths(text) if not any(_exists(b, p) for b in bases)]
    assert not missing, f"{name} names paths that do not exist: {missing}"


def test_the_path_rule_sees_paths() -> None:
    text = "see `src/attnbench/deploy/ask.py:34`, [x](docs/findings.md) and `runs/<time>.jsonl`"
    assert named_paths(text) == ["src/attnbench/deploy/ask.py", "docs/findings.md"]
