"""What a report is made of (text, tables, figures, sections) and the registry of section
builders. Each section module registers its builders here with `register_section`:

    from attnbench.report.blocks import ReportData, Section, Table, Text, register_section

    @register_section("Serving replay", order=85, per_gpu=False)
    def replay_section(data: ReportData) -> Section | None:
        docs = [p for p in data.extras if p.name.startswith("replay")]
        if not docs:
            return None
        return Section("Serving replay", [Text("..."), Table(["backend", "ITL p99"], rows)])

and `report.build` imports the module before a report is built. `per_gpu=False` sections run
once, with the first GPU's data (or empty rows). Sections are built in parallel worker
processes; those that share a cached value (`ReportData.cache`) name it in `shares` and are
built one after the other in the same worker, so the value is computed once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from attnbench.analysis.frame import Loaded


@dataclass
class Text:
    """Markdown-lite: paragraphs, `- ` bullets, `code`, **bold**."""

    markdown: str


@dataclass
class Code:
    text: str


@dataclass
class Table:
    headers: Sequence[str]
    rows: Sequence[Sequence[Any]]
    caption: str = ""


@dataclass
class Figure:
    png: bytes
    caption: str
    name: str = "figure"
    narrow: bytes | None = None
    """A rendition for phones (panels in one column, drawn to read at 390 px): the HTML page
    shows it at <= 640 px, fitted to the width; None: the figure keeps its drawn size there
    and scrolls sideways in its box (every figure of `report.plots*` has one: `Drawing`)."""


@dataclass(frozen=True)
class Drawing:
    """A figure drawn for the page (`png`) and for phones (`narrow`, panels in one column):
    what every figure function of `report.plots*` returns."""

    png: bytes
    narrow: bytes

    def figure(self, caption: str, name: str) -> Figure:
        return Figure(self.png, caption, name, self.narrow)


Block = Text | Code | Table | Figure


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)


@dataclass
class ReportData:
    loaded: Loaded
    gpu: str
    rows: pd.DataFrame
    """Latest row per (case, backend) on this GPU, every status."""
    ok: pd.DataFrame
    """The rows that passed the accuracy gate and were timed."""
    label: str
    """GPU, library versions and date: stamped on every figure."""
    ceilings: dict[str, Any]
    extras: list[Path] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict)
    """Shared between sections of one GPU (e.g. the recommendation, computed once)."""


SectionBuilder = Callable[[ReportData], Section | None]


@dataclass(frozen=True)
class RegisteredSection:
    name: str
    order: int
    per_gpu: bool
    build: SectionBuilder
    shares: str = ""
    """Sections with the same non-empty tag are built in one task, in report order."""


_SECTIONS: dict[str, RegisteredSection] = {}


def register_section(
    name: str, order: int = 50, per_gpu: bool = True, shares: str = ""
) -> Callable[[SectionBuilder], SectionBuilder]:
    """Decorator: add (or replace, by name) a section builder; lower `order` comes first."""

    def deco(fn: SectionBuilder) -> SectionBuilder:
        _SECTIONS[name] = RegisteredSection(name, order, per_gpu, fn, shares)
        return fn

    return deco


def registered_sections() -> list[RegisteredSection]:
    """Every registered builder, in report order."""
    return sorted(_SECTIONS.values(), key=lambda r: (r.order, r.name))
