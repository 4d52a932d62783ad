#!/usr/bin/env bash
# Regenerate the report screenshots committed under docs/screenshots/ from the committed results.
#
#   scripts/screenshot_report.sh [RESULTS...]      (default: results/)
#
# Builds the report with `attnbench report`, photographs the page's first screen (1400 x 900:
# the decision and its figure) and its top at phone width (390 px), cuts the HTML page into one
# page per section of interest (same header, navigation and CSS) and photographs each at
# 1400 px, trims the blank margin and reduces the palette so the set stays well under 1 MB.
# SHOTS_390=DIR also photographs every section at 390 px into DIR (to check, not committed). Needs chromium (`apt-get install -y chromium`) and
# Pillow (a matplotlib dependency). Set KEEP=1 to keep the work folder.
# To check that nothing makes the page scroll sideways at 390 or 1400 px (every <details> open):
#   python scripts/report_layout.py WORK/report/report.html 390 1400   (with KEEP=1)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/docs/screenshots"
work="$(mktemp -d)"
[[ "${KEEP:-}" == 1 ]] || trap 'rm -rf "$work"' EXIT
browser="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
if [[ -z "$browser" ]]; then
  echo "chromium not found: apt-get install -y chromium (or set CHROMIUM=/path/to/chrome)" >&2
  exit 2
fi

cd "$root"
if [[ $# -eq 0 ]]; then set -- results; fi
attnbench report "$@" --out "$work/report" >/dev/null
mkdir -p "$out"

# One page per section: (file stem, section id, width, height).
python - "$work" <<'PY'
import re
import sys
from pathlib import Path

work = Path(sys.argv[1])
page = (work / "report" / "report.html").read_text(encoding="utf-8")
head, _, rest = page.partition("<main>")
nav = re.search(r"<nav>.*?</nav>", rest, re.S)
found_all = re.findall(r'(<section id="([^"]+)">.*?</section>)', rest, re.S)
sections = {anchor: html for html, anchor in found_all}
wanted = {
    "raggedness": ["raggedness"],
    "trees": ["speculative-trees"],
    "shared-prefix": ["shared-prefix"],
    "replay": ["serving-replay"],
    "mla": ["mla-deepseek-v3-shape"],
    "gqa": ["gqa-ratio-sweep"],
}
for stem, ids in wanted.items():
    # with rows of several GPUs each section id starts with its GPU's (`nvidia-h200-raggedness`):
    # the first GPU's (the one with the most rows, which the report leads with)
    found = [next(html for a, html in sections.items() if a == i or a.endswith("-" + i))
             for i in ids if any(a == i or a.endswith("-" + i) for a in sections)]
    if not found:
        print(f"no section {ids} in the report: {stem} skipped", file=sys.stderr)
        continue
    body = head + "<main>" + "".join(found) + "</main></body></html>\n"
    (work / f"{stem}.html").write_text(body, encoding="utf-8")
PY

shoot() {  # page, png, width, height
  "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
    --window-size="$3,$4" --screenshot="$2" "file://$1" >/dev/null 2>&1
}
for page in "$work"/*.html; do
  stem="$(basename "$page" .html)"
  shoot "$page" "$work/$stem-1400.png" 1400 6000
done
shoot "$work/report/report.html" "$work/first-screen-1400.png" 1400 900
shoot "$work/report/report.html" "$work/top-390.png" 390 1600
if [[ -n "${SHOTS_390:-}" ]]; then
  mkdir -p "$SHOTS_390"
  for page in "$work"/*.html; do shoot "$page" "$SHOTS_390/$(basename "$page" .html)-390.png" 390 6000; done
fi

python - "$work" "$out" <<'PY'
import sys
from pathlib import Path

from PIL import Image, ImageChops

work, out = Path(sys.argv[1]), Path(sys.argv[2])
for old in out.glob("*.png"):
    old.unlink()
# Where a section runs long, its top is what the shot is for: the padding figure, the first
# (single-rate) replay with its legend beside the plot. The first screen is the browser's.
max_height = {"first-screen": 900, "top": 1600, "raggedness": 1250, "replay": 1120, "gqa": 1400}
total = 0
for png in sorted(work.glob("*.png")):
    im = Image.open(png).convert("RGB")
    bg = Image.new("RGB", im.size, im.getpixel((im.width - 1, im.height - 1)))
    box = ImageChops.difference(im, bg).getbbox()
    height = min(im.height, box[3] + 16) if box else im.height
    height = min(height, max_height.get(png.stem.rsplit("-", 1)[0], height))
    im = im.crop((0, 0, im.width, height))
    im = im.quantize(colors=128, method=Image.Quantize.MEDIANCUT)
    dest = out / png.name
    im.save(dest, optimize=True)
    total += dest.stat().st_size
    print(f"{dest.relative_to(out.parent.parent)}: {im.width}x{im.height}, {dest.stat().st_size // 1024} KiB")
print(f"total {total // 1024} KiB")
PY
