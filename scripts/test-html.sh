#!/usr/bin/env bash
# report.html as a browser reads it: a tiny matrix run headless, its
# report.html loaded by headless Chromium (installed from Debian's packages if
# missing), and the DOM Chromium built checked: every table has a head row,
# every body row as many cells as its head, no cell of dashes (a Markdown
# divider read as data), emphasis rendered, the charts inline; and a
# screenshot taken (kept with KEEP=1).
#
# Usage (from the repository root, as root): bash scripts/test-html.sh [BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$(realpath "${1:-target/debug/tricklab}")"
[ -x "$BIN" ] || { echo "test-html: no binary at $BIN: build first" >&2; exit 1; }

if ! command -v chromium >/dev/null; then
  echo "test-html: installing chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

D="$(mktemp -d /tmp/tricklab-html.XXXXXX)"
cleanup() { if [ "${KEEP:-0}" != 1 ]; then rm -rf "$D"; else echo "test-html: kept $D"; fi; }
trap cleanup EXIT

"$BIN" run tests/fixtures/tiny.toml --headless --results "$D/res" --devices cpu >"$D/run.log" 2>&1 \
  || { cat "$D/run.log" >&2; echo "test-html: the tiny run failed" >&2; exit 1; }
PAGE="$(ls -d "$D"/res/*/*/report.html)"
browser() { timeout 120 chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars "$@" 2>"$D/chromium.log"; }
browser --dump-dom "file://$PAGE" >"$D/dom.html" \
  || { tail -5 "$D/chromium.log" >&2; echo "test-html: chromium could not load $PAGE" >&2; exit 1; }
browser --window-size=1300,2000 --screenshot="$D/report.png" "file://$PAGE" \
  || { tail -5 "$D/chromium.log" >&2; echo "test-html: chromium could not screenshot $PAGE" >&2; exit 1; }

python3 - "$D/dom.html" "$D/report.png" <<'PY'
import os, re, sys
from html.parser import HTMLParser

class Tables(HTMLParser):
    """Tables as Chromium serialised them: (head cells, body rows of cells)."""
    def __init__(self):
        super().__init__()
        self.tables, self.cell, self.row, self.part = [], None, None, None
        self.em, self.svgs = [], 0
        self.in_em = False
    def handle_starttag(self, tag, attrs):
        if tag == "table": self.tables.append({"head": [], "body": []})
        elif tag in ("thead", "tbody"): self.part = tag
        elif tag == "tr": self.row = []
        elif tag in ("td", "th"): self.cell = ""
        elif tag == "em": self.in_em = True; self.em.append("")
        elif tag == "svg": self.svgs += 1
    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.row is not None:
            self.row.append(self.cell.strip()); self.cell = None
        elif tag == "tr" and self.tables:
            (self.tables[-1]["head" if self.part == "thead" else "body"]).append(self.row)
            self.row = None
        elif tag == "em": self.in_em = False
    def handle_data(self, data):
        if self.cell is not None: self.cell += data
        if self.in_em: self.em[-1] += data

dom, png = sys.argv[1], sys.argv[2]
p = Tables(); p.feed(open(dom, encoding="utf-8").read())
fail = []
if len(p.tables) < 2: fail.append(f"{len(p.tables)} tables, expected the setup block and the results")
for i, t in enumerate(p.tables):
    if len(t["head"]) != 1: fail.append(f"table {i}: {len(t['head'])} head rows, expected 1")
    width = len(t["head"][0]) if t["head"] else 0
    for row in t["body"]:
        if len(row) != width: fail.append(f"table {i}: a row of {len(row)} cells under a head of {width}: {row}")
        for c in row:
            if re.fullmatch(r"[-|: ]{3,}", c): fail.append(f"table {i}: a cell of dashes: {row}")
if "noisy" not in p.em: fail.append(f"'*noisy*' not rendered as emphasis: {p.em}")
if "*noisy*" in open(dom, encoding="utf-8").read(): fail.append("literal *noisy* in the page")
if p.svgs < 5: fail.append(f"{p.svgs} inline SVG charts, expected 5")
if os.path.getsize(png) < 20_000: fail.append(f"screenshot of {os.path.getsize(png)} bytes: a blank page?")
if fail:
    print("test-html: FAILED\n  " + "\n  ".join(fail)); sys.exit(1)
print(f"test-html: report.html in Chromium: {len(p.tables)} tables with a head each, "
      f"{sum(len(t['body']) for t in p.tables)} body rows, {p.svgs} charts inline")
PY
