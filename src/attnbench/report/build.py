"""The report: Markdown (report.md + figures/) and one self-contained HTML page (report.html:
inline CSS, figures embedded as base64 PNG, no external assets), built from sections.

Sections are produced by functions registered in `report.blocks`; each gets a `ReportData`
(the rows of one GPU, its provenance label and ceilings, and any extra JSON documents passed on
the command line, such as `attnbench fp8 --out` or `attnbench replay --out` files) and returns a
`Section` or None to be left out (e.g. no tree rows, no tree panel). The built-in section
modules are imported by `_load_sections` below.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnbench.analysis.candidates import NON_SERVING
from attnbench.analysis.frame import (
    Loaded,
    ceilings_for,
    gpu_order,
    latest,
    ok_rows,
    provenance_label,
)
from attnbench.report.blocks import (
    Block,
    Code,
    Figure,
    ReportData,
    Section,
    Table,
    Text,
    registered_sections,
)
from attnbench.report.parallel import Task, run_tasks, tasks_for
from attnbench.results import is_trials_name

if TYPE_CHECKING:
    import pandas as pd


def _load_sections() -> None:
    """Import the built-in section modules: importing one registers its sections."""
    from attnbench.report import (  # noqa: F401
        fidelity_section,
        first_screen,
        fp8_section,
        gqa_section,
        headdim_section,
        mla_section,
        per_model_section,
        replay_section,
        sections,
        sections_detail,
        sections_workloads,
        tuning_section,
    )


def registered() -> list[str]:
    _load_sections()
    return [r.name for r in registered_sections()]


def _lead_first(gpus: list[str], ok: pd.DataFrame) -> list[str]:
    """`gpus` with the GPU that measured traffic first (`first_screen.lead_gpu`), so the page
    leads with the answers measured on traffic, whichever GPU measured them."""
    from attnbench.report.first_screen import lead_gpu

    lead = lead_gpu(ok)
    return [lead, *(g for g in gpus if g != lead)] if lead in gpus else gpus


def build_sections(loaded: Loaded) -> list[tuple[str, list[Section]]]:
    """(GPU, sections) for every GPU in the rows, the GPU that measured traffic first; global
    (per_gpu=False) sections go in a last group, `ACROSS_GPUS` (with one GPU, in its group).
    Sections are built in parallel (`run_tasks`), and kept in report order."""
    _load_sections()
    if not loaded.frame.empty:  # a tune run's every trial is the tuning section's evidence only
        kept = ~loaded.frame["source"].map(is_trials_name)
        loaded = replace(loaded, frame=loaded.frame[kept])
    frame = latest(loaded.frame)
    gpus = _lead_first(gpu_order(frame), ok_rows(loaded.frame)) if not frame.empty else [""]
    ok = ok_rows(loaded.frame)
    if not ok.empty:  # performance sections show serving kernels, not the oracle or faults
        ok = ok[~ok["library"].isin(NON_SERVING | {"faulty"})]
    regs = registered_sections()
    tasks: list[Task] = []
    for i, gpu in enumerate(gpus):
        data = ReportData(
            loaded=loaded,
            gpu=gpu,
            rows=frame[frame["gpu"] == gpu] if gpu else frame,
            ok=ok[ok["gpu"] == gpu] if gpu and not ok.empty else ok,
            label=provenance_label(loaded.headers, gpu or None),
            ceilings=ceilings_for(loaded.headers, gpu) if gpu else {},
            extras=list(loaded.extras),
        )
        tasks += tasks_for([r for r in regs if r.per_gpu or i == 0], data)
    built: dict[tuple[str, str], Section | None] = {}
    for task, sections in zip(tasks, run_tasks(tasks), strict=True):
        for (reg, data), sec in zip(task, sections, strict=True):
            built[(data.gpu, reg.name)] = sec
    if len(gpus) == 1:  # one GPU: its page holds every section, in registration order
        secs = [s for r in regs if (s := built[(gpus[0], r.name)]) is not None]
        return [(gpus[0], [scrub(sec) for sec in secs])]
    out = []
    for gpu in gpus:
        secs = [s for r in regs if r.per_gpu and (s := built[(gpu, r.name)]) is not None]
        out.append((gpu, [scrub(sec) for sec in secs]))
    shared = [s for r in regs if not r.per_gpu and (s := built[(gpus[0], r.name)]) is not None]
    return [*out, (ACROSS_GPUS, [scrub(sec) for sec in shared])] if shared else out


ACROSS_GPUS = "Across GPUs"
"""The group of the sections that are not one GPU's (`per_gpu=False`: the serving replay's
documents, the fp8 study, which may have run on a CPU): never headed by a GPU's name."""


_MACHINE_PATH = re.compile(r"(?<![\w.~/:)\]-])~?(?:/[\w.+@-]+)+/([\w.+@-]+)")
"""An absolute path (`/root/out/replay-live.jsonl`): the page shows its file name only."""


def no_machine_paths(text: str) -> str:
    """`rows in /root/out/x.jsonl` -> `rows in x.jsonl`: the machine that wrote a file is not
    the reader's, and its folders say nothing about the measurement."""
    return _MACHINE_PATH.sub(r"\1", text)


def _clean(value: Any) -> Any:
    return no_machine_paths(value) if isinstance(value, str) else value


def scrub(sec: Section) -> Section:
    """The section with machine paths in its text, code, tables and captions cut to names."""
    blocks: list[Block] = []
    for b in sec.blocks:
        if isinstance(b, Text):
            blocks.append(Text(no_machine_paths(b.markdown)))
        elif isinstance(b, Code):
            blocks.append(Code(no_machine_paths(b.text)))
        elif isinstance(b, Table):
            rows = [[_clean(c) for c in r] for r in b.rows]
            heads = [_clean(h) for h in b.headers]
            blocks.append(Table(heads, rows, no_machine_paths(b.caption)))
        else:
            blocks.append(Figure(b.png, no_machine_paths(b.caption), b.name, b.narrow))
    return Section(no_machine_paths(sec.title), blocks)


# -- rendering -------------------------------------------------------------------------------


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def _md_cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _md_table(block: Table) -> list[str]:
    """A table's Markdown lines: its caption, header, rule and rows, then a blank line."""
    lines = [f"*{block.caption}*", ""] if block.caption else []
    lines.append("| " + " | ".join(_md_cell(h) for h in block.headers) + " |")
    lines.append("|" + "|".join("---" for _ in block.headers) + "|")
    lines += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in block.rows]
    return [*lines, ""]


def _md_block(block: Block, fig_dir: Path, count: int) -> tuple[list[str], int]:
    """One block's Markdown lines and the figure count after it (a figure is written out)."""
    if isinstance(block, Text):
        return [block.markdown, ""], count
    if isinstance(block, Code):
        return ["```", block.text, "```", ""], count
    if isinstance(block, Table):
        return _md_table(block), count
    count += 1
    name = f"{count:02d}-{_slug(block.name)}.png"
    (fig_dir / name).write_bytes(block.png)
    return [f"![{block.caption}]({fig_dir.name}/{name})", "", f"*{block.caption}*", ""], count


def render_markdown(
    groups: list[tuple[str, list[Section]]], title: str, intro: list[str], fig_dir: Path
) -> str:
    """Markdown text; figures are written to `fig_dir` and linked relatively."""
    fig_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", "", *intro, ""]
    count = 0
    for gpu, sections in groups:
        if len(groups) > 1:
            lines += [f"# {gpu}", ""]
        for sec in sections:
            where = f" ({device_name(gpu)})" if len(groups) > 1 and gpu != ACROSS_GPUS else ""
            lines += [f"## {sec.title}{where}", ""]
            for block in sec.blocks:
                block_lines, count = _md_block(block, fig_dir, count)
                lines += block_lines
    return "\n".join(lines).rstrip() + "\n"


_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")


def flag_groups(command: str) -> list[str]:
    """`vllm serve M --tp 8 --enforce-eager` -> [`vllm serve M`, `--tp 8`, `--enforce-eager`]:
    a command cut where a flag starts (a word after a space that begins with `-`), each flag
    with its values; the page breaks a command only between these groups."""
    groups: list[list[str]] = []
    for word in command.split(" "):
        if not groups or (word.startswith("-") and groups[-1]):
            groups.append([])
        groups[-1].append(word)
    return [" ".join(g) for g in groups]


def command_html(escaped: str) -> str:
    """An (escaped) command as flag groups that never break inside (`<span class="fl">`),
    one space between them where a line may break; text without flags is left as it is."""
    groups = flag_groups(escaped)
    if len(groups) < 2:
        return escaped
    return " ".join(f'<span class="fl">{g}</span>' for g in groups)


def _code(m: re.Match[str]) -> str:
    return f"<code>{command_html(m.group(1))}</code>"


def _inline(text: str) -> str:
    out = html.escape(str(text), quote=False)
    out = _CODE.sub(_code, out)
    return _BOLD.sub(r"<strong>\1</strong>", out)


def _text_html(md: str) -> str:
    parts = []
    for para in re.split(r"\n\s*\n", md.strip()):
        lines = para.splitlines()
        if all(ln.lstrip().startswith("- ") for ln in lines):
            items = "".join(f"<li>{_inline(ln.lstrip()[2:])}</li>" for ln in lines)
            parts.append(f"<ul>{items}</ul>")
        else:
            parts.append(f"<p>{'<br>'.join(_inline(ln) for ln in lines)}</p>")
    return "\n".join(parts)


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2430;
background:#f6f7f9;line-height:1.45}
header{background:#1d2430;color:#fff;padding:10px 32px}header h1{margin:0 0 2px;font-size:22px}
header p{margin:2px 0;font-size:13px;color:#c9d1dc}header code{background:#33405a;color:#fff}
main{max-width:1500px;margin:0 auto;padding:8px 32px 40px}
nav{background:#fff;border:1px solid #dde2ea;border-radius:6px;padding:10px 16px;margin:16px 0}
nav div{margin:2px 0}h2 span.gpu{font-size:13px;color:#555;font-weight:normal}
nav a{margin-right:10px;font-size:13px;color:#2454a6;text-decoration:none;white-space:nowrap;
display:inline-block}
section{background:#fff;border:1px solid #dde2ea;border-radius:6px;padding:6px 20px 14px;
margin:16px 0}
h2{font-size:19px;border-bottom:2px solid #e4e8ef;padding-bottom:4px}
h1.gpu{font-size:22px;margin-top:28px}
.scroll{overflow-x:auto;margin:8px 0}
table{border-collapse:collapse;font-size:12.5px}
th,td{border:1px solid #dde2ea;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eef1f6;position:sticky;top:0}tr:nth-child(even) td{background:#fafbfc}
caption{caption-side:top;text-align:left;font-style:italic;color:#555;padding:4px 0}
figure{margin:12px 0;overflow-x:auto}
figure img{max-width:100%;height:auto;border:1px solid #e4e8ef}
span.fl{white-space:nowrap}p,li{overflow-wrap:break-word}img{max-width:100%}
h1,h2,h3,summary,figcaption,caption{overflow-wrap:anywhere}
details{margin:8px 0}summary{cursor:pointer;color:#2454a6;font-size:13.5px;padding:3px 0}
figcaption{font-size:13px;color:#555}
code{background:#eef1f6;padding:0 3px;border-radius:3px;font-size:12px}
pre{background:#1d2430;color:#e8edf3;padding:10px 14px;border-radius:6px;overflow-x:auto;
font-size:12.5px;white-space:pre-wrap}
@media (max-width:640px){header{padding:12px 14px}main{padding:4px 6px 24px}
section{padding:4px 10px 10px}nav{padding:8px 10px}nav a{white-space:normal}
th,td{padding:2px 5px;min-width:5.5em}
table{font-size:11.5px}figure img{max-width:none}figure img.fit{max-width:100%}
.dc table,.dc caption,.dc tbody,.dc tr,.dc td{display:block}
.dc thead{display:none}.dc td{min-width:0;border-width:0 0 1px}
.dc td::before{content:attr(data-label);display:block;font-weight:600;color:#555}}
""".replace(".dc", 'section[id$="decision"]')
"""The decision section's id ends in `decision` (`nvidia-h200-decision` with a GPU's rows): on
a phone its table stacks each cell under its column's name."""


def device_name(gpu: str) -> str:
    """`NVIDIA H200` -> `H200`: short enough for every navigation entry."""
    return gpu.removeprefix("NVIDIA ").strip() or "unknown device"


def _table_html(block: Table) -> str:
    cap = f"<caption>{_inline(block.caption)}</caption>" if block.caption else ""
    head = "".join(f"<th>{_inline(h)}</th>" for h in block.headers)
    labels = [html.escape(str(h).replace("`", ""), quote=True) for h in block.headers]
    rows = "".join(
        "<tr>"
        + "".join(
            f'<td data-label="{labels[i] if i < len(labels) else ""}">{_inline(c)}</td>'
            for i, c in enumerate(r)
        )
        + "</tr>"
        for r in block.rows
    )
    return (
        f'<div class="scroll"><table>{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table></div>"
    )


def _block_html(block: Block) -> str:
    if isinstance(block, Text):
        return _text_html(block.markdown)
    if isinstance(block, Code):
        lines = html.escape(block.text).split("\n")
        return f"<pre>{chr(10).join(command_html(ln) for ln in lines)}</pre>"
    if isinstance(block, Table):
        return _table_html(block)
    return _figure_html(block)


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _figure_html(block: Figure) -> str:
    """`<figure>`: the drawn PNG; with a phone rendition, a `<picture>` that shows it at
    <= 640 px, fitted to the width (`img.fit`)."""
    alt = html.escape(block.caption, quote=True)
    fit = ' class="fit"' if block.narrow is not None else ""
    img = f'<img{fit} alt="{alt}" src="{_data_uri(block.png)}">'
    if block.narrow is not None:
        source = f'<source media="(max-width:640px)" srcset="{_data_uri(block.narrow)}">'
        img = f"<picture>{source}{img}</picture>"
    return f"<figure>{img}<figcaption>{_inline(block.caption)}</figcaption></figure>"


LEAD_TEXT_MAX = 700
"""A section's opening paragraph stays open when shorter than this (characters)."""


def lead_blocks(blocks: list[Block]) -> int:
    """How many of a section's blocks stay open: a short opening paragraph (no bullets) and
    the first figure; the rest goes behind `<details>`."""
    n = 0
    for b in blocks:
        if isinstance(b, Figure):
            return n + 1
        bullets = isinstance(b, Text) and any(
            ln.lstrip().startswith("- ") for ln in b.markdown.splitlines()
        )
        if n or not isinstance(b, Text) or bullets or len(b.markdown) > LEAD_TEXT_MAX:
            break
        n += 1
    return n


def _summary(blocks: list[Block]) -> str:
    kinds = [("figure", Figure), ("table", Table), ("note", Text), ("command", Code)]
    counts = [(name, sum(isinstance(b, t) for b in blocks)) for name, t in kinds]
    return ", ".join(f"{n} {name}{'s' if n > 1 else ''}" for name, n in counts if n)


def section_html(sec: Section, anchor: str, where: str = "", open_all: bool = False) -> str:
    """One `<section>`: its title, its lead (`lead_blocks`) and the rest in `<details>`."""
    n = len(sec.blocks) if open_all else lead_blocks(sec.blocks)
    inner = "".join(_block_html(b) for b in sec.blocks[:n])
    rest = sec.blocks[n:]
    if rest:
        body = "".join(_block_html(b) for b in rest)
        label = ("details: " if n else "") + _summary(rest)
        inner += f"<details><summary>{html.escape(label)}</summary>{body}</details>"
    title_html = f"<h2>{html.escape(sec.title)}{where}</h2>"
    return f'<section id="{anchor}">{title_html}{inner}</section>'


def render_html(
    groups: list[tuple[str, list[Section]]], title: str, intro: list[str], files: str = ""
) -> str:
    """One self-contained page: inline CSS, figures as data: URIs, no scripts, no links out.
    The first section (the decision, `report.first_screen`; with rows of several GPUs, the
    first GPU's: the one with the most rows) comes before the navigation; each other section
    shows its lead and keeps the rest behind `<details>`."""
    from attnbench.report.first_screen import FIRST_SCREEN_TITLE

    nav: list[str] = []
    body: list[str] = []
    first: list[str] = []
    several = len(groups) > 1
    for gpu, sections in groups:
        prefix = _slug(gpu) + "-" if several else ""
        where = (
            f' <span class="gpu">{html.escape(device_name(gpu))}</span>'
            if several and gpu != ACROSS_GPUS
            else ""
        )
        links = []
        if several:
            body.append(f'<h1 class="gpu" id="{_slug(gpu)}">{html.escape(gpu)}</h1>')
        for sec in sections:
            anchor = prefix + _slug(sec.title)
            name = (
                f"{sec.title} · {device_name(gpu)}" if several and gpu != ACROSS_GPUS else sec.title
            )
            links.append(f'<a href="#{anchor}">{html.escape(name)}</a>')
            lead = sec.title == FIRST_SCREEN_TITLE and not first and not nav
            (first if lead else body).append(section_html(sec, anchor, where, open_all=lead))
        label = f'<strong><a href="#{_slug(gpu)}">{html.escape(gpu)}</a></strong>: '
        if nav:  # the other GPUs' sections: one line each, their links behind a fold
            summary = f"<summary>{html.escape(gpu)}: {len(links)} sections</summary>"
            nav.append(f"<details>{summary}<div>{' '.join(links)}</div></details>")
        else:
            nav.append(f"<div>{label if several else ''}{' '.join(links)}</div>")
    head = "".join(f"<p>{_inline(line)}</p>" for line in intro)
    if files:
        nav.append(f"<details><summary>results files</summary><p>{_inline(files)}</p></details>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>{html.escape(title)}</h1>{head}</header><main>{''.join(first)}"
        f"<nav>{''.join(nav)}</nav>{''.join(body)}</main></body></html>\n"
    )


def write_report(
    loaded: Loaded, out_dir: Path, title: str = "attnbench report"
) -> tuple[Path, Path]:
    """Build every section and write out_dir/report.md (+ figures/) and out_dir/report.html."""
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = build_sections(loaded)
    gpus = ", ".join(g for g, _ in groups if g and g != ACROSS_GPUS) or "no GPU rows"
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    files = f"Results: {', '.join(p.name for p in loaded.paths)}."
    intro = [f"GPU: {gpus}. Generated {when} by `attnbench report`."]
    md = render_markdown(groups, title, [*intro, "", files], out_dir / "figures")
    md_path = out_dir / "report.md"
    md_path.write_text(md, encoding="utf-8")
    html_path = out_dir / "report.html"
    html_path.write_text(render_html(groups, title, intro, files), encoding="utf-8")
    return md_path, html_path
