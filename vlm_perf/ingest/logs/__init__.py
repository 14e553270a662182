"""Training-log ingestion: many log formats -> one tidy polars iteration table.

Public API: ``parse_logs``, ``ParseResult``, ``Diagnostics``, ``CORE_COLUMNS``, ``FORMATS``.
See docs/log-formats.md for formats, units and the dedup/segment rules.
"""

from .diagnostics import Diagnostics
from .parser import ParseResult, parse_logs
from .schema import CORE_COLUMNS, FORMATS

__all__ = ["parse_logs", "ParseResult", "Diagnostics", "CORE_COLUMNS", "FORMATS"]
