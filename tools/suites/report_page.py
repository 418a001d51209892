"""An HTML page (a `vision-attn report`) opened offline in headless Chromium: every image decoded, no
console message, and a screenshot (tools/chromium_page.py; Chromium is the Debian package that
`make test` installs where it is missing).

    python tools/bench.py report_page --page runs/NAME/report.html --screenshot report.png --height 2200
"""
from __future__ import annotations

from tools.suites.harness import Param, Suite


def run(p, record) -> None:
    import shutil
    from pathlib import Path

    from tools.chromium_page import CHROMIUM, check_page

    if not Path(p.page).is_file():
        raise SystemExit(f"error: --page {p.page}: no such file; give a report made by `vision-attn report` or `ablate`")
    if shutil.which(CHROMIUM) is None:
        raise SystemExit(f"error: {CHROMIUM} is missing; install it with `apt-get install -y chromium`")
    result = check_page(p.page, p.screenshot or None, height=p.height)
    record.results.update(loaded=result.loaded, total=result.total, console=result.console,
                          screenshot=str(result.screenshot) if result.screenshot else None)
    record.line(f"images loaded: {result.loaded}/{result.total}; console messages: {len(result.console)}")
    for line in result.console:
        record.line(f"  console: {line}")
    if result.screenshot:
        record.line(f"screenshot: {result.screenshot}")


SUITE = Suite("report_page", "an HTML report opened offline in headless Chromium: images, console, screenshot", run, (
    Param("page", "runs/demo_ablation/report.html", "the HTML file"),
    Param("screenshot", "", "write a screenshot here (PNG)"),
    Param("height", 2400, "screenshot height in pixels"),
), group="check", doc=__doc__)
