"""The run layer: what a run on disk is (its files: `discover`), how it is configured (`options`: every
option declared once) and the `Run` opened once from both (`vlm_perf.run.open`). Below analysis: it
imports ingest, arch and flops, never analysis, report or the CLI."""
