"""The GPU of every figure the findings page shows, and the page organised per GPU.

Each file has one GPU: its rows' (`gpu`), its document's (`gpu`, `provenance.gpu`), else the GPU
that the tag of its name (`h200-`, `h100-`: `scripts/h200/gpu_tag.sh`) stands for in the
results files, else `CPU` for a document written without CUDA. A table row's GPUs are those of
the files its `file` / `log` cells name (a row naming no file: the GPU its cells name).

`by_gpu` heads every section by the GPUs whose rows it holds: a section of one GPU goes under
that GPU; a section whose rows come from several GPUs, each row from one, is split, one section
per GPU; a section with a row of several GPUs stays whole under "Across GPUs", and every table
of it whose rows span GPUs has a GPU column."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any

from attnbench.report.findings.core import Headline, Inputs, Section, Table

CPU = "CPU"
"""The device of a document written on a machine without CUDA (the CPU fp8 study)."""
ACROSS = "Across GPUs"
FILE_COLUMNS = ("file", "log")
GPU_COLUMN = "GPU"


def short(gpu: str) -> str:
    """`NVIDIA H100 80GB HBM3` -> `H100 80GB HBM3`."""
    return gpu.removeprefix("NVIDIA ").strip()


def _tag(name: str) -> str:
    return PurePosixPath(name).name.split("-", 1)[0]


def _doc_gpu(doc: Any) -> str:
    if not isinstance(doc, dict):
        return ""
    prov = doc.get("provenance")
    prov = prov if isinstance(prov, dict) else {}
    return str(doc.get("gpu") or prov.get("gpu") or "")


def _on_cpu(doc: Any) -> bool:
    prov = doc.get("provenance") if isinstance(doc, dict) else None
    return isinstance(prov, dict) and "cuda" in prov and not prov.get("cuda")


def file_gpus(inputs: Inputs) -> dict[str, str]:
    """Each loaded file's GPU by file name (`""`: none known)."""
    out: dict[str, str] = {}
    rows = inputs.rows
    if not rows.empty:
        for name, gpus in rows.groupby("file")["gpu"]:
            found = sorted({str(g) for g in gpus if isinstance(g, str) and g})
            if len(found) == 1:
                out[str(name)] = found[0]
    tags: dict[str, set[str]] = {}
    for name, gpu in out.items():
        tags.setdefault(_tag(name), set()).add(gpu)
    by_tag = {t: next(iter(g)) for t, g in tags.items() if len(g) == 1}
    for name, doc in inputs.docs.items():
        out[name] = _doc_gpu(doc) or by_tag.get(_tag(name), "") or (CPU if _on_cpu(doc) else "")
    for name in inputs.texts:
        out[name] = by_tag.get(_tag(name), "")
    return out


def named_files(cell: str) -> list[str]:
    """The file names a `file` cell lists (`a.jsonl.gz, b.json` or `` `a` and 3 more ``)."""
    return [f.strip().strip("`") for f in cell.replace(" and ", ",").split(",") if f.strip()]


def row_gpus(table: Table, row: Sequence[str], files: Mapping[str, str]) -> set[str]:
    """The GPUs of the files a row names; a row naming none: the GPUs its cells name."""
    found = {
        g
        for col, cell in zip(table.columns, row, strict=False)
        if col in FILE_COLUMNS
        for f in named_files(cell)
        if (g := files.get(f))
    }
    return found or named_gpus(" ".join(row), set(files.values()))


def named_gpus(text: str, known: Iterable[str]) -> set[str]:
    """The GPUs of `known` that `text` names (in full or without `NVIDIA `); the longest name
    first, so `H100 80GB HBM3` is not also read as a shorter name."""
    found: set[str] = set()
    rest = text
    for gpu in sorted({g for g in known if g and g != CPU}, key=len, reverse=True):
        for name in (gpu, short(gpu)):
            if name in rest:
                found.add(gpu)
                rest = rest.replace(name, " ")
    return found


@dataclass
class Part:
    """The sections of one GPU (or of a comparison across GPUs), in the page's order."""

    gpu: str
    """A GPU's name, `CPU`, `ACROSS` or `""` (no device known)."""
    sections: list[Section] = field(default_factory=list)
    gpus: dict[int, set[str]] = field(default_factory=dict)
    """Per section (its `id`), the GPUs whose rows it holds."""

    @property
    def title(self) -> str:
        return self.gpu or "No device named"


def table_gpus(table: Table, files: Mapping[str, str]) -> list[set[str]]:
    return [row_gpus(table, r, files) for r in table.rows]


def gpu_label(gpus: Iterable[str]) -> str:
    return ", ".join(short(g) if g != CPU else CPU for g in sorted(gpus))


def _titled(sec: Section, gpus: set[str]) -> Section:
    return replace(sec, title=f"{sec.title} ({gpu_label(gpus)})") if gpus else sec


def _with_gpu_column(table: Table, gpus: list[set[str]]) -> Table:
    """`table` with a GPU column first, where its rows span GPUs and it has none."""
    if GPU_COLUMN in table.columns or len(set().union(*gpus)) < 2:
        return table
    rows = [[gpu_label(g) or "-", *r] for r, g in zip(table.rows, gpus, strict=True)]
    return replace(table, columns=[GPU_COLUMN, *table.columns], rows=rows)


def _only(table: Table, gpus: list[set[str]], gpu: str) -> Table:
    rows = [r for r, g in zip(table.rows, gpus, strict=True) if not g or g == {gpu}]
    return replace(table, rows=rows)


def headline_gpus(h: Headline, files: Mapping[str, str]) -> set[str]:
    """The GPUs of the files a headline names and those its topic or figure names."""
    names = [*named_files(h.file), *h.named_files]
    found = {g for f in names if (g := files.get(f))}
    return found | named_gpus(f"{h.topic} {h.figure}", set(files.values()))


def _split(sec: Section, gpus: list[list[set[str]]], files: Mapping[str, str]) -> list[Section]:
    """One section per GPU, each with its tables' rows of that GPU and its headlines."""
    order = sorted(set().union(*(set().union(*g) for g in gpus if g)))
    out = []
    for gpu in order:
        tables = [_only(t, g, gpu) for t, g in zip(sec.tables, gpus, strict=True)]
        heads = [h for h in sec.headlines if headline_gpus(h, files) == {gpu}]
        piece = replace(sec, tables=[t for t in tables if t.rows], headlines=heads)
        out.append(_titled(piece, {gpu}))
    rest = [h for h in sec.headlines if not any(h in s.headlines for s in out)]
    if out and rest:
        out[0].headlines = [*out[0].headlines, *rest]
    return out


def _place(sec: Section, files: Mapping[str, str]) -> list[tuple[str, Section, set[str]]]:
    """(part, section, its GPUs) for one built section: whole, titled, or split per GPU."""
    gpus = [table_gpus(t, files) for t in sec.tables]
    every: set[str] = set().union(*(set().union(*g) for g in gpus if g))
    if len(every) <= 1:
        gpu = next(iter(every), "")
        return [(gpu, _titled(sec, every), every)]
    if not any(len(r) > 1 for g in gpus for r in g):
        pieces = _split(sec, gpus, files)
        return [(min(g), s, g) for s in pieces if (g := _gpus_of(s, files))]
    tables = [_with_gpu_column(t, g) for t, g in zip(sec.tables, gpus, strict=True)]
    return [(ACROSS, _titled(replace(sec, tables=tables), every), every)]


def _gpus_of(sec: Section, files: Mapping[str, str]) -> set[str]:
    return {g for t in sec.tables for r in table_gpus(t, files) for g in r}


def by_gpu(sections: Sequence[Section], inputs: Inputs) -> list[Part]:
    """The sections organised per GPU: each GPU's part (GPUs in name order), then the
    comparisons across GPUs, then sections of no GPU (a CPU study) and of no known device."""
    files = file_gpus(inputs)
    parts: dict[str, Part] = {}
    for sec in sections:
        for where, placed, gpus in _place(sec, files):
            part = parts.setdefault(where, Part(where))
            part.sections.append(placed)
            part.gpus[id(placed)] = gpus
    rank = {ACROSS: 1, CPU: 2, "": 3}
    return sorted(parts.values(), key=lambda p: (rank.get(p.gpu, 0), p.gpu))
