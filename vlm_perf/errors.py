"""The exception hierarchy every vlm-perf layer raises for bad input.

All of them derive from :class:`VlmPerfError` (itself a ``ValueError``, so older callers that
catch ``ValueError`` keep working). The CLI prints ``error: <message>`` on one line and exits
with status 2 for any of them; anything else is a bug and is reported as such (the traceback
only with ``--debug``). Library messages say how to fix the input and name the file:line or
the field, never a command-line flag (the library does not know how it was called).
"""

from __future__ import annotations


class VlmPerfError(ValueError):
    """Base class: bad or unsupported input, stated in one line."""


class InputError(VlmPerfError):
    """A file (log, metadata, config) that cannot be read as it claims to be.

    ``source`` is ``path`` or ``path:line`` when known; it prefixes the message.
    """

    def __init__(self, message: str, source: str | None = None) -> None:
        self.source = source
        super().__init__(f"{source}: {message}" if source else message)


class SchemaError(InputError):
    """A record that violates a documented schema (metadata v1/v2, run.yaml keys)."""


class ConfigError(VlmPerfError):
    """A run configuration that is missing a value or contradicts itself."""


class UnsupportedModelError(VlmPerfError):
    """A model family, preset or config field vlm-perf does not (yet) model exactly."""


class ConventionNotDefined(VlmPerfError):
    """A FLOPs convention asked for a family or input it does not define a number for."""


class ClusterError(VlmPerfError):
    """A Dask cluster (``--scheduler``) that cannot be reached, runs other versions, or lost a worker."""


__all__ = ["VlmPerfError", "InputError", "SchemaError", "ConfigError", "UnsupportedModelError",
           "ConventionNotDefined", "ClusterError"]
