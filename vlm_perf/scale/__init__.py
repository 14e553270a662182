"""Scaling beyond one process: Dask-distributed aggregation with the single-machine code per partition.

``aggregate_metadata_dask`` and ``parse_logs_dask`` need the optional ``dask`` extra
(``pip install 'vlm-perf[dask]'``); importing this package does not import dask.
See ``docs/scale.md``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["aggregate_metadata_dask", "parse_logs_dask", "plan_partitions"]


def __getattr__(name: str) -> Any:  # lazy: dask is imported only when the backend is used
    if name in __all__:
        from . import dask_backend

        return getattr(dask_backend, name)
    raise AttributeError(name)
