"""vlm-perf: post-hoc compute accounting for vision-language-model training runs.

Layers (data flows one way; lower layers never import higher ones):
ingest -> stats -> flops -> analysis -> report / notebooks / CLI.
"""

__version__ = "0.1.0"
