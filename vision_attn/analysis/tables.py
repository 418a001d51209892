"""Plain-text renderings of a table (headers and rows of cells) shared by the analysis commands:
Markdown (GitHub pipes) and CSV."""
from __future__ import annotations

import csv
import io
from typing import Any, Sequence

__all__ = ["to_markdown", "to_csv"]


def _cell(value: Any) -> str:
    return "" if value is None else str(value).replace("|", "\\|")


def to_markdown(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub Markdown table; ``None`` cells are left empty, ``|`` is escaped."""
    lines = ["| " + " | ".join(_cell(h) for h in headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def to_csv(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """The same table as CSV (RFC 4180 quoting, ``\\n`` line ends); ``None`` cells are empty."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows([["" if c is None else c for c in row] for row in rows])
    return buf.getvalue()
