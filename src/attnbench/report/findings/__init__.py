"""Every measured figure the README and docs quote, generated from the committed files
(`attnbench findings`): the document `docs/findings.md` and the README's short table between its
`findings:begin` / `findings:end` markers. `attnbench findings --check` fails when either
differs from what the files give, so no figure can drift from its rows.

Rules every section follows: ranges cover every matching row (the unfavourable ones included);
every table row names its file and the commit of the runs that wrote its rows (`sources`);
rows are read through `load_inputs` (the project's one loader, gzipped or not); no torch.

Adding a section is one function in one of the modules `SECTION_MODULES` lists (or a new module
added there), registered under a unique key; the document shows sections in registration order:

    from attnbench.report.findings.core import Inputs, Section, Table, section, sources

    @section("head-dim")
    def head_dim(inputs: Inputs) -> Section | None:
        ok = inputs.ok("h200-headdim")           # the file's stem: .jsonl or .jsonl.gz alike
        if ok.empty:
            return None                          # not among the inputs: no section
        rows = [[str(d), f"{g['latency_us'].min():,.1f}", *sources(g)]
                for d, g in ok.groupby("head_dim")]
        return Section("Head dims", "What the rows are.", [Table(["head_dim", "fastest µs",
                       "file", "commit"], rows)])

A section may add `Headline`s: rows of the README's short table (keep them few). Then run
`attnbench findings` to rewrite the document and the README block, and commit both.
"""

from __future__ import annotations

from importlib import import_module

from attnbench.report.findings.core import (
    DEFAULT_FOLDER,
    REGISTRY,
    Headline,
    Inputs,
    Section,
    Table,
    load_inputs,
    section,
    sources,
)
from attnbench.report.findings.render import (
    BEGIN,
    END,
    FAILED,
    BlockMarkersError,
    Difference,
    build,
    difference,
    document,
    readme_block,
    splice,
)

SECTION_MODULES = (
    "attnbench.report.findings.hardware",
    "attnbench.report.findings.kernels",
    "attnbench.report.findings.workloads",
    "attnbench.report.findings.studies",
    "attnbench.report.findings.headdim",
    "attnbench.report.findings.profiling",
    "attnbench.report.findings.engines",
    "attnbench.report.findings.anchors",
    "attnbench.report.findings.replay",
    "attnbench.report.findings.runs",
)
"""The modules whose `@section` functions make the document, in the document's order."""

for _name in SECTION_MODULES:
    import_module(_name)

__all__ = [
    "BEGIN",
    "DEFAULT_FOLDER",
    "END",
    "FAILED",
    "REGISTRY",
    "SECTION_MODULES",
    "BlockMarkersError",
    "Difference",
    "Headline",
    "Inputs",
    "Section",
    "Table",
    "build",
    "difference",
    "document",
    "load_inputs",
    "readme_block",
    "section",
    "sources",
    "splice",
]
