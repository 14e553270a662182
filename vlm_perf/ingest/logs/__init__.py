"""Training-log ingestion: many log formats -> one tidy polars iteration table.

Public API: ``parse_logs``, ``ParseResult``, ``Diagnostics``, ``CORE_COLUMNS``, ``FORMATS`` and the format
registry (``LogFormat``, ``register``, ``registry``; see ``formats.py``).
See docs/log-formats.md for formats, units and the dedup/segment rules.
"""

from .diagnostics import Diagnostics
from .formats import LogFormat, register, registry
from .parser import ParseResult, parse_logs
from .schema import CORE_COLUMNS



def __getattr__(name: str):
    # ``FORMATS``: registered format names (``parse_logs(format=...)`` and the ``framework`` column), in
    # registration order, read at each access so a format registered after import is listed
    if name == "FORMATS":
        return tuple(registry())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["parse_logs", "ParseResult", "Diagnostics", "CORE_COLUMNS", "FORMATS", "LogFormat", "register",
           "registry"]
