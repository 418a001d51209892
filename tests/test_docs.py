"""Every ```python block in README.md and docs/*.md runs (blocks of one page share a namespace), and
prints what the page says it prints.

A ```python block may be followed (after at most one blank line) by a ```text block: its exact
output, as a reader sees it. The test captures the block's stdout and compares it with the text
block line by line (trailing spaces ignored): `...` inside an expected line matches any run of
characters (timings, random numbers, temporary paths), and a line that is only `...` matches any
number of lines. A block that prints but has no text block after it fails.
"""
import contextlib
import functools
import io
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")
ELLIPSIS = "..."


@dataclass(frozen=True)
class Example:
    code: str
    line: int  # 1-based line of the ```python fence
    expected: str | None  # the ```text block right after it, if any


def _fenced(lines: list[str]) -> list[tuple[str, int, int, str]]:
    """(language, fence line index, closing fence line index, body) of every fenced block."""
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```"), None)
        if end is None:
            raise ValueError(f"unclosed ``` block at line {i + 1}")
        blocks.append((m.group(1), i, end, "".join(line + "\n" for line in lines[i + 1:end])))
        i = end + 1
    return blocks


def examples(text: str) -> list[Example]:
    """The page's ```python blocks, each with the ```text block that follows it (at most one blank line between)."""
    lines = text.split("\n")
    blocks = _fenced(lines)
    found = []
    for k, (lang, start, end, body) in enumerate(blocks):
        if lang != "python":
            continue
        expected = None
        if k + 1 < len(blocks):
            nlang, nstart, _, nbody = blocks[k + 1]
            between = lines[end + 1:nstart]
            if nlang == "text" and len(between) <= 1 and all(not s.strip() for s in between):
                expected = nbody
        found.append(Example(body, start + 1, expected))
    return found


def _line_matches(pattern: str, line: str) -> bool:
    if ELLIPSIS not in pattern:
        return pattern == line
    regex = ".*".join(re.escape(part) for part in pattern.split(ELLIPSIS))
    return re.fullmatch(regex, line, re.S) is not None


def _split(text: str) -> list[str]:
    text = text.rstrip("\n")
    return [] if not text else [line.rstrip() for line in text.split("\n")]


def mismatch(expected: str, actual: str) -> str | None:
    """None when `actual` matches `expected` (with `...` wildcards), else a message saying where it differs."""
    want, got = _split(expected), _split(actual)
    best = [0, 0]  # the furthest point reached: (expected line, actual line)

    @functools.lru_cache(maxsize=None)
    def match(i: int, j: int) -> bool:
        if (i, j) > tuple(best):
            best[:] = [i, j]
        if i == len(want):
            return j == len(got)
        if want[i] == ELLIPSIS:
            return any(match(i + 1, k) for k in range(j, len(got) + 1))
        return j < len(got) and _line_matches(want[i], got[j]) and match(i + 1, j + 1)

    if match(0, 0):
        return None
    i, j = best
    expected_line = want[i] if i < len(want) else "<end of output>"
    actual_line = got[j] if j < len(got) else "<end of output>"
    return (f"output line {j + 1} does not match expected line {i + 1}:\n"
            f"  expected: {expected_line}\n  got:      {actual_line}\n"
            "full output:\n" + "\n".join(got))


def run_examples(text: str, page: str) -> None:
    """Run the page's ```python blocks in one namespace, each checked against its ```text block."""
    namespace: dict = {"__name__": f"docs_{Path(page).stem}"}
    for i, example in enumerate(examples(text)):
        where = f"block {i} of {page} (line {example.line})"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(example.code, f"{Path(page).name}[block {i}]", "exec"), namespace)  # noqa: S102 - our own docs
        printed = out.getvalue()
        if example.expected is None:
            assert not printed.strip(), f"{where} prints but has no ```text block after it:\n{printed}"
        else:
            problem = mismatch(example.expected, printed)
            assert problem is None, f"{where} does not print its ```text block: {problem}"


@pytest.mark.parametrize("page", [p for p in PAGES if examples(p.read_text())], ids=lambda p: p.name)
def test_page_examples_run(page: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the examples' mkdtemp() folders go with tmp_path
    run_examples(page.read_text(), page.relative_to(ROOT).as_posix())


# the rule itself

def test_examples_pairs_text_blocks():
    page = ("# t\n\n```python\nprint(1)\n```\n\n```text\n1\n```\n\n"
            "```python\nx = 2\n```\nprose\n\n```text\nnot an output\n```\n"
            "```bash\nls\n```\n```python\nprint(x)\n```\n```text\n2\n```\n")
    found = examples(page)
    assert [e.code for e in found] == ["print(1)\n", "x = 2\n", "print(x)\n"]
    assert [e.expected for e in found] == ["1\n", None, "2\n"]
    assert found[0].line == 3


def test_run_examples_checks_what_blocks_print():
    run_examples("```python\nx = 6 * 7\n```\n\n```python\nprint(x)\n```\n\n```text\n42\n```\n", "docs/t.md")
    with pytest.raises(AssertionError, match=r"block 1 of docs/t.md \(line 5\) prints but has no ```text block"):
        run_examples("```python\nx = 6 * 7\n```\n\n```python\nprint(x)\n```\n", "docs/t.md")
    with pytest.raises(AssertionError, match=r"block 0 of docs/t.md \(line 1\) does not print its ```text block"):
        run_examples("```python\nprint(41)\n```\n```text\n42\n```\n", "docs/t.md")


def test_mismatch_exact_and_wrong():
    assert mismatch("torch.Size([2, 10])\nTrue\n", "torch.Size([2, 10])\nTrue\n") is None
    assert mismatch("a  \n", "a\n\n") is None  # trailing spaces and newlines do not count
    message = mismatch("torch.Size([2, 10])\nTrue\n", "torch.Size([2, 10])\nFalse\n")
    assert message is not None
    assert "output line 2 does not match expected line 2" in message
    assert "expected: True" in message and "got:      False" in message
    assert "<end of output>" in mismatch("a\nb\n", "a\n")
    assert "<end of output>" in mismatch("a\n", "a\nb\n")


def test_mismatch_ellipsis_in_a_line():
    assert mismatch("took ... s (... img/s)\n", "took 1.25 s (812 img/s)\n") is None
    assert mismatch("tensor([...])\n", "tensor([0.1, -0.3])\n") is None
    assert mismatch("/.../run\n", "/tmp/abc/run\n") is None
    assert mismatch("took ... s\n", "took 1.25 ms\n") is not None
    assert mismatch("a...b\n", "a\nb\n") is not None  # within one line only


def test_mismatch_ellipsis_as_a_line():
    assert mismatch("first\n...\nlast\n", "first\nx\ny\nlast\n") is None
    assert mismatch("first\n...\nlast\n", "first\nlast\n") is None  # any number of lines, none too
    assert mismatch("...\nlast\n", "a\nlast\nb\nlast\n") is None
    assert mismatch("first\n...\nlast\n", "first\nx\n") is not None
    assert mismatch("...\n", "") is None
