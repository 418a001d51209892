"""The HTML page around a report's sections: one file, its style inline, its pictures ``data:`` URIs and
one inline script that records, once the page has loaded, how many of its images decoded
(``<body data-images="LOADED/TOTAL">``: what the browser test reads). Nothing is fetched."""
from __future__ import annotations

from html import escape
from typing import Sequence

__all__ = ["page", "table", "figure", "section"]

STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 1400px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.6em 0; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; vertical-align: top; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
figure { display: inline-block; margin: 0.4em; vertical-align: top; }
figcaption { font-size: 0.8em; color: #555; max-width: 400px; }
img { max-width: 100%; }
figure.small img { width: 320px; }
.note { color: #555; font-size: 0.9em; }
"""

CHECK = """
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var loaded = images.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute("data-images", loaded + "/" + images.length);
});
"""


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """An HTML table of text cells (escaped; None is empty)."""
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{'' if c is None else escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def figure(uri: str, caption: str, small: bool = False) -> str:
    """A picture (a ``data:`` URI) with its caption (``small``: shown 320 pixels wide)."""
    kind = ' class="small"' if small else ""
    return f'<figure{kind}><img src="{uri}" alt="{escape(caption)}"><figcaption>{escape(caption)}</figcaption></figure>'


def section(title: str, body: str, note: str = "") -> str:
    return f"<section><h2>{escape(title)}</h2>" + (f'<p class="note">{escape(note)}</p>' if note else "") + \
        body + "</section>"


def page(title: str, sections: Sequence[str], note: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
            f"<body><h1>{escape(title)}</h1><p class=\"note\">{escape(note)}</p>{''.join(sections)}"
            f"<script>{CHECK}</script></body></html>\n")
