"""The gate and tree of what the findings read (`analysis.evidence`): per file, and the caveat
of every headline whose cells name its files (a frame's headline has its own, from its rows)."""

from __future__ import annotations

from collections.abc import Sequence

from attnbench.analysis.evidence import Evidence, evidence, evidence_of_commits
from attnbench.report.findings.core import Inputs, Section


def file_evidence(inputs: Inputs, name: str) -> Evidence:
    """The gate and tree of a results file's rows (the latest per case and variant)."""
    rows = inputs.rows
    return Evidence() if rows.empty else evidence(rows[rows["file"] == name])


def annotate(sections: Sequence[Section], inputs: Inputs) -> None:
    """Give each headline made from cells the caveat of its named files' rows and commits."""
    for sec in sections:
        for head in sec.headlines:
            if not head.named_files:
                continue
            rows = inputs.rows
            named = rows if rows.empty else rows[rows["file"].isin(head.named_files)]
            ev = evidence(named) + evidence_of_commits(head.named_commits)
            head.caveat = ev.caveat()
