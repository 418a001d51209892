"""Open an HTML file in headless Chromium (the Debian package, /usr/bin/chromium) offline, and say whether it
worked as a reader's browser would show it: every image decoded, no console message, and a screenshot.

    python tools/bench.py report_page --page runs/NAME/report.html [--screenshot docs/images/report.png]

(the suite tools/suites/report_page.py; the report's test calls :func:`check_page` itself).

Offline: a fresh profile, no background networking, component updates, sync or QUIC, and every request
sent to a proxy that does not exist (127.0.0.1:9), so a page that needs the network shows it as a
missing image or a console error. The page's own inline script (vision_attn.analysis.report.page) writes
``data-images="LOADED/TOTAL"`` on ``<body>`` once loaded; ``--dump-dom`` reads it back, and Chromium's
log (``--enable-logging=stderr``) carries every console message as an ``INFO:CONSOLE`` line.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
OFFLINE = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--proxy-server=127.0.0.1:9", "--hide-scrollbars")
IMAGES = re.compile(r'data-images="(\d+)/(\d+)"')
CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\] (.*)")


@dataclass(frozen=True)
class PageCheck:
    """``loaded`` of ``total`` images decoded (None: the page's check did not run), the ``console``
    messages, and the ``screenshot`` written (or None)."""

    loaded: int | None
    total: int | None
    console: list[str]
    screenshot: Path | None


def _chromium(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        return subprocess.run([CHROMIUM, *OFFLINE, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=timeout)


def check_page(page: str | Path, screenshot: str | Path | None = None, *, width: int = 1280, height: int = 2400,
               timeout: float = 120) -> PageCheck:
    """Load ``page`` offline in headless Chromium once: its images and console (``--dump-dom``) and, with
    ``screenshot``, a PNG of the first ``width`` x ``height`` pixels."""
    url = Path(page).resolve().as_uri()
    shot = None if screenshot is None else Path(screenshot).resolve()
    extra = [] if shot is None else [f"--screenshot={shot}", f"--window-size={width},{height}"]
    if shot is not None:
        shot.parent.mkdir(parents=True, exist_ok=True)
    done = _chromium(["--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", *extra, "--dump-dom", url],
                     timeout)
    found = IMAGES.search(done.stdout)
    console = [m.group(1) for m in CONSOLE.finditer(done.stderr)]
    if shot is not None and not shot.is_file():
        raise RuntimeError(f"chromium wrote no screenshot of {page}")
    return PageCheck(int(found.group(1)) if found else None, int(found.group(2)) if found else None, console, shot)
