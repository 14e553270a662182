"""vlm-perf: post-hoc compute accounting for vision-language-model training runs.

Layers (data flows one way; lower layers never import higher ones):
arch (model description, block inventory) -> stats -> flops (formulas, conventions) and ingest (logs, metadata,
traces) -> run (one opened run) -> analysis (the Run facade) -> report / notebooks / CLI.
"""

__version__ = "0.1.0"
