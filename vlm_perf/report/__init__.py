"""Report writing: summary.json, report.md, self-contained report.html and PNG figures."""

from .context import ReportContext
from .document import build_summary, write_report

__all__ = ["ReportContext", "build_summary", "write_report"]
