"""One self-contained HTML page of runs and ablations (``vision-attn report``; ``ablate`` and ``compare
--html`` write one too): :func:`write_html_report`."""
from vision_attn.analysis.report.report import HtmlReport, html_report, write_html_report

__all__ = ["HtmlReport", "html_report", "write_html_report"]
