"""What the tests check of a command's error output: one line, starting ``error: ``, no traceback."""
from __future__ import annotations


def one_line_error(err: str, *words: str) -> str:
    """The one ``error: `` line of ``err`` (a command's standard error), which must hold each of ``words``."""
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]
