"""Every ```python block in README.md and docs/*.md runs (blocks of one page share a namespace)."""
import re
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("page", [p for p in PAGES if BLOCK.search(p.read_text())], ids=lambda p: p.name)
def test_page_examples_run(page: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the examples' mkdtemp() folders go with tmp_path
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(BLOCK.findall(page.read_text())):
        exec(compile(code, f"{page.name}[block {i}]", "exec"), namespace)  # noqa: S102 - our own docs
