"""Lay the HTML report out in headless chromium at given widths and say what is too wide.

    python scripts/report_layout.py REPORT.html [WIDTH ...]      (default widths: 390 1400)

Every `<details>` is opened; then per width it prints the page's scroll width, each figure's
drawn and shown width (its scale), and every element that makes a container without its own
scroll box wider than itself (what would make the whole page scroll sideways). Exits 1 when
the page is wider than the window at some width. The page is laid out in an iframe of that
width: headless chromium's own window is at least 500 px wide. Needs chromium (`CHROMIUM=`
names another browser).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MEASURE_JS = r"""
function measure() {
  const doc = window.frames[0].document, win = window.frames[0];
  doc.querySelectorAll('details').forEach(d => d.open = true);
  const vw = doc.documentElement.clientWidth;
  const out = {vw, page: doc.documentElement.scrollWidth, imgs: [], wide: []};
  doc.querySelectorAll('img').forEach(im => {
    const sec = im.closest('section');
    out.imgs.push({sec: sec ? sec.id : '', natural: im.naturalWidth,
      shown: Math.round(im.getBoundingClientRect().width), alt: im.alt.slice(0, 40)});
  });
  doc.querySelectorAll('body *').forEach(e => {
    if (win.getComputedStyle(e).overflowX !== 'visible' || !e.clientWidth) return;
    for (let a = e.parentElement; a && a !== doc.body; a = a.parentElement)
      if (win.getComputedStyle(a).overflowX !== 'visible') return;
    if (e.scrollWidth > e.clientWidth + 1) {
      const sec = e.closest('section');
      out.wide.push({sec: sec ? sec.id : '', tag: e.tagName, sw: e.scrollWidth,
        cw: e.clientWidth, text: (e.textContent || '').slice(0, 60)});
    }
  });
  return out;
}
window.addEventListener('load', () => {
  let out; try { out = measure(); } catch (err) { out = {err: String(err)}; }
  const p = document.createElement('pre'); p.id = 'RESULT'; p.textContent = JSON.stringify(out);
  document.body.appendChild(p);
});
"""


def layout(page: Path, width: int, browser: str) -> dict:
    """The measurements of `page` laid out `width` px wide."""
    with tempfile.TemporaryDirectory() as tmp:
        inner, outer = Path(tmp) / "inner.html", Path(tmp) / "outer.html"
        shutil.copy(page, inner)
        outer.write_text(
            f'<html><body style="margin:0"><iframe src="inner.html" width="{width}" '
            f'height="900" style="border:0"></iframe><script>{MEASURE_JS}</script></body></html>'
        )
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--allow-file-access-from-files", f"--window-size={max(width, 500) + 20},900",
               "--virtual-time-budget=30000", "--dump-dom", f"file://{outer}"]  # fmt: skip
        dom = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    found = re.search(r'<pre id="RESULT">(.*?)</pre>', dom, re.S)
    if found is None:
        sys.exit(f"{page}: chromium gave no layout at {width} px")
    out: dict = json.loads(html.unescape(found.group(1)))
    if "err" in out:
        sys.exit(f"{page}: {out['err']}")
    return out


def report(out: dict, width: int) -> bool:
    """Print one width's findings; True when the page fits the window."""
    print(f"{width} px: page {out['page']} px wide in a {out['vw']} px window")
    for im in out["imgs"]:
        scale = im["shown"] / max(im["natural"], 1)
        print(f"  figure {im['sec'][:26]:26s} {im['natural']:5d} px shown {im['shown']:5d} "
              f"({scale:.2f}x) {im['alt']}")  # fmt: skip
    for w in out["wide"]:
        print(f"  too wide: {w['sec'][:26]:26s} <{w['tag'].lower()}> {w['sw']} > {w['cw']} "
              f"{w['text']!r}")  # fmt: skip
    return out["page"] <= out["vw"]


def main() -> int:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    page = Path(sys.argv[1]).resolve()
    widths = [int(w) for w in sys.argv[2:]] or [390, 1400]
    browser = os.environ.get("CHROMIUM") or shutil.which("chromium") or "chromium-browser"
    fits = [report(layout(page, w, browser), w) for w in widths]
    return 0 if all(fits) else 1


if __name__ == "__main__":
    sys.exit(main())
