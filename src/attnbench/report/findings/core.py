"""The pieces every findings section uses: the loaded inputs (`Inputs`), what a section returns
(`Section`, `Table`, `Headline`), the registry (`section`) and the number formats.

A section function takes the `Inputs` and returns a `Section`, or None when the files it reads
are not among the inputs. Every table row names the file it comes from and the commit of the
runs whose rows it uses (the header's `git_sha`; a document's `provenance.git_sha`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from attnbench.analysis.evidence import caveat_by_gpu, evidence_of_commits
from attnbench.analysis.frame import (
    NoResultsError,
    dtype_label,
    empty_frame,
    flatten,
    resolve_paths,
)
from attnbench.results import (
    Footer,
    Header,
    is_document_path,
    is_results_path,
    read_for_analysis,
    read_json,
    read_text,
)

UNKNOWN = "unknown"
DEFAULT_FOLDER = Path("results")
"""What `attnbench findings` reads without RESULTS: the committed H200 files."""
TEXT_FOLDERS = ("", "logs")
"""Where text files (`.txt`: GPU test reports, session logs) are read, below a results folder."""
_STEM_SUFFIXES = (".jsonl.gz", ".jsonl", ".json.gz", ".json", ".txt")


def stem(name: str) -> str:
    """`h200-ragged.jsonl.gz` -> `h200-ragged`: a file's name, plain or gzipped alike."""
    for suffix in _STEM_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _suite_of(file_stem: str) -> str:
    """`h100-ragged` -> `ragged`: the name after a file's GPU tag (`h100`, `h200`, `gpu`...)."""
    tag, _, rest = file_stem.partition("-")
    return rest if (tag[:1].isalpha() and tag[1:].isdigit()) or tag == "gpu" else ""


def header_commit(header: Header | None) -> str:
    sha = header.provenance.get("git_sha") if header is not None else None
    return str(sha) if sha else UNKNOWN


def doc_commit(doc: Any) -> str:
    """The commit a JSON document names (`provenance.git_sha`), or `unknown`."""
    prov = doc.get("provenance") if isinstance(doc, dict) else None
    sha = prov.get("git_sha") if isinstance(prov, dict) else None
    return str(sha) if sha else UNKNOWN


def joined(values: Iterable[Any]) -> str:
    """Distinct values in order of first appearance, comma-joined."""
    return ", ".join(dict.fromkeys(str(v) for v in values))


@dataclass
class Inputs:
    """Everything a section reads, loaded once."""

    rows: pd.DataFrame
    """Every result row (all statuses), the latest per (file, case, variant), flattened as
    `analysis.frame` does, plus `file` (the file's name), `commit` (the git_sha of the header
    written before the row) and `bandwidth_frac_read`."""
    headers: dict[str, list[Header]] = field(default_factory=dict)
    """Each results file's headers, by file name."""
    docs: dict[str, Any] = field(default_factory=dict)
    """Each JSON document (`.json`, `.json.gz`), parsed, by file name."""
    texts: dict[str, str] = field(default_factory=dict)
    """Each text file (`x.txt`, `logs/x.txt`), by its name relative to its results folder."""
    written: dict[str, Counter[str]] = field(default_factory=dict)
    """Each results file's rows by status as written, superseded (resumed) rows included."""
    footers: dict[str, list[Footer]] = field(default_factory=dict)
    """Each results file's footers (one per run that ran to its end), by file name."""

    def name(self, file_stem: str) -> str | None:
        """The loaded file whose stem is `file_stem` (gzipped or not), or None."""
        for name in [*self.headers, *self.docs, *self.texts]:
            if stem(name) == file_stem:
                return name
        return None

    def stems_of(self, suite: str) -> list[str]:
        """The loaded files of one suite on every GPU, by stem: `ragged` -> `h100-ragged`,
        `h200-ragged` (a GPU tag, a dash, the suite's name; `h200-ragged-x` is another)."""
        return sorted({stem(n) for n in [*self.headers, *self.docs] if _suite_of(stem(n)) == suite})

    def of_suite(self, *suites: str) -> pd.DataFrame:
        """Rows of these suites' files on every GPU (`stems_of`), every status."""
        return self.of(*(s for suite in suites for s in self.stems_of(suite)))

    def of(self, *stems: str) -> pd.DataFrame:
        """Rows of the files with these stems, every status."""
        if self.rows.empty:
            return self.rows
        return self.rows[self.rows["file"].map(stem).isin(stems)]

    def ok(self, *stems: str) -> pd.DataFrame:
        """Rows of those files that passed the accuracy gate and were timed."""
        rows = self.of(*stems)
        return rows[(rows["status"] == "ok") & rows["latency_us"].notna()]

    def doc(self, file_stem: str) -> tuple[str, Any] | None:
        """(name, parsed document) of the document with this stem, or None."""
        name = self.name(file_stem)
        return (name, self.docs[name]) if name in self.docs else None


def _text_files(folders: Iterable[Path]) -> dict[str, str]:
    out: dict[str, str] = {}
    for folder in folders:
        for sub in TEXT_FOLDERS:
            where = folder / sub if sub else folder
            for p in sorted(where.glob("*.txt")) if where.is_dir() else []:
                out[str(p.relative_to(folder))] = read_text(p)
    return out


def _frame(paths: Sequence[Path], into: Inputs) -> pd.DataFrame:
    """Every file's rows, flattened; its headers, status counts and footers go `into`."""
    records: list[dict[str, Any]] = []
    for path in paths:
        rf = read_for_analysis(path)  # refuses rows the test-only fake timer timed
        into.headers[path.name] = rf.headers
        into.written[path.name] = Counter(r.status for r in rf.rows)
        into.footers[path.name] = rf.footers
        for i, row in enumerate(rf.rows):
            header = rf.header_at(i)
            rec = flatten(row, header, path, len(records))
            rec["file"] = path.name
            rec["commit"] = header_commit(header)
            rec["bandwidth_frac_read"] = row.bandwidth_frac_read
            records.append(rec)
    if not records:
        return empty_frame().assign(file=pd.Series(dtype=object), commit=pd.Series(dtype=object))
    frame = pd.DataFrame.from_records(records)
    return frame.drop_duplicates(["file", "case_id", "backend"], keep="last")


def load_inputs(paths: Sequence[str | Path] | None = None) -> Inputs:
    """Read RESULTS (files or folders; default `results/`) with the project's one loader:
    results files through `read_for_analysis`, documents through `read_json`, and the `.txt`
    files of each folder (and its `logs/`)."""
    given = list(paths) if paths else [DEFAULT_FOLDER]
    folders = [Path(p) for p in given if Path(p).is_dir()]
    texts = _text_files(folders)
    try:
        files = resolve_paths(given)
    except NoResultsError:
        if not texts:
            raise
        files = []  # a folder of reports and logs only
    out = Inputs(empty_frame(), texts=texts)
    out.rows = _frame([p for p in files if is_results_path(p)], out)
    out.docs = {p.name: read_json(p) for p in files if is_document_path(p)}
    return out


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]
    note: str = ""
    """One line under the table: how its rows were chosen."""
    title: str = ""
    """A line above the table (what it covers)."""


@dataclass
class Headline:
    """One row of the README's short table: a topic, its figure, where it comes from."""

    topic: str
    figure: str
    file: str
    commit: str
    caveat: str = ""
    """Where the figure's rows are not at today's gate (`analysis.evidence`): what they are."""
    named_files: tuple[str, ...] = ()
    """Every file the cells name, for `report.findings.evidence.annotate` (cells given)."""
    named_commits: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, topic: str, figure: str, rows: pd.DataFrame | list[str], gated: bool = True
    ) -> Headline:
        """A headline whose file and commit cells name the sources of `rows` (a frame with
        `file` and `commit`, or the two cells of a table row), abbreviated past two. A frame's
        rows give its caveat (their gate and tree; only the tree where not `gated`: a wall
        time, a ceiling); cells give the tree of their commits, and the build adds the gate
        of the named files' rows."""
        if isinstance(rows, pd.DataFrame):
            files, commits = list(rows["file"]), list(rows["commit"])
            caveat = caveat_by_gpu(rows) if gated else evidence_of_commits(commits).caveat()
            return cls(topic, figure, abbreviated(files), abbreviated(commits), caveat)
        files = [f.strip() for f in rows[0].split(",")]
        commits = [c.strip() for c in rows[1].split(",")]
        caveat = evidence_of_commits(commits).caveat()
        named = tuple(f.strip("`") for f in files) if gated else ()
        return cls(
            topic, figure, abbreviated(files), abbreviated(commits), caveat, named, tuple(commits)
        )

    @property
    def text(self) -> str:
        """The figure, and what its rows are where they are not at today's gate."""
        return (
            f"{self.figure} — *not at today's gate*: {self.caveat}"
            if self.caveat
            else (self.figure)
        )


def abbreviated(values: Iterable[str]) -> str:
    """Distinct values joined, or the first and how many more past two."""
    seen = list(dict.fromkeys(str(v).strip("`") for v in values))
    return ", ".join(seen) if len(seen) <= 2 else f"{seen[0]} and {len(seen) - 1} more"


@dataclass
class Section:
    title: str
    text: str = ""
    """What the rows are, in a sentence or two (the method, no figures)."""
    tables: list[Table] = field(default_factory=list)
    headlines: list[Headline] = field(default_factory=list)
    key: str = ""
    """The key the section function is registered under (`build` sets it)."""


SectionFn = Callable[[Inputs], Section | None]
REGISTRY: dict[str, SectionFn] = {}
"""Section functions by key, in registration order (the document's order)."""


def section(key: str) -> Callable[[SectionFn], SectionFn]:
    """Register a section function under `key` (unique)."""

    def register(fn: SectionFn) -> SectionFn:
        if key in REGISTRY:
            raise ValueError(f"findings section {key!r} registered twice")
        REGISTRY[key] = fn
        return fn

    return register


NOT_KERNELS = frozenset({"reference", "faults"})
"""Libraries whose rows are not attention kernels to compare (the fp64 oracle, fault injection)."""


def kernels(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` without the oracle and fault injection."""
    return rows if rows.empty else rows[~rows["library"].isin(NOT_KERNELS)]


def case_label(r: Any) -> str:
    """`decode bs32 ctx65536 bf16/e4m3` (+ the model, layer kind and page size where set)."""
    model = f"{r['model']}/tp{r['tp']} " if r["model"] else ""
    layer = getattr(r["spec"], "layer_type", "")
    page = f" p{r['page_size']}" if int(r["page_size"]) != 16 else ""
    kind = f"{r['kind']} {layer}" if layer else str(r["kind"])
    return f"{model}{kind} bs{r['batch_size']} {r['lengths']} {dtype_label(r)}{page}"


def sources(rows: pd.DataFrame) -> list[str]:
    """The `file` and `commit` cells of a table row made from `rows`."""
    if rows.empty:
        return ["-", "-"]
    return [joined(rows["file"]), joined(rows["commit"])]


def fnum(v: float | None, digits: int = 1) -> str:
    """`1,018.4`: thousands separated, `-` for a missing value."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:,.{digits}f}"


def fpct(frac: float | None, digits: int = 0) -> str:
    """A fraction as a percentage: 0.981 -> `98%`."""
    if frac is None or (isinstance(frac, float) and math.isnan(frac)):
        return "-"
    return f"{100 * frac:.{digits}f}%"


def fx(ratio: float | None, digits: int = 2) -> str:
    """A ratio: `1.64x`."""
    if ratio is None or (isinstance(ratio, float) and math.isnan(ratio)):
        return "-"
    return f"{ratio:.{digits}f}x"


def frange(values: Iterable[float], fmt: Callable[[float], str]) -> str:
    """`lo–hi` (an en dash) over every value; one value once; `-` for none."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not vals:
        return "-"
    lo, hi = fmt(min(vals)), fmt(max(vals))
    return lo if lo == hi else f"{lo}–{hi}"


def tokens(n: float) -> str:
    """1024 -> `1k`, 65536 -> `64k`, 200 -> `200`."""
    n = int(n)
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else f"{n:,}"
