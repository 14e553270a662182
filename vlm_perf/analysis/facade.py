"""`Run`: THE facade of a finished run. ``Run.open(path, options)`` reads the run once (`vlm_perf.run.core.open_run`:
files, logs, configuration, model, peak, regime, metadata) with its options typed and validated once
(`vlm_perf.run.options.RunOptions`); every analysis is a cached, typed property that forwards to a pure function of
`vlm_perf.analysis` (one line each, listed below), so each number is derived once and every output (the report,
`compare`, `trace --run`, the notebooks) reads the same one.

=======================  ==========================================================================
property                 forwards to
=======================  ==========================================================================
``analysis``             `analysis.run.analyze_run` (windows x conventions), with ``checks`` and
                         ``messages`` below (what the report document reads)
``headline``             `RunAnalysis.convention_summary`: mean TFLOP/s/GPU and MFU per convention
``windows``              the logged windows (``analysis.windows``)
``peak``                 `hardware.peak_used`: the peak behind every MFU and its provenance
``regime_summary``       `analysis.regime.regime_summary`
``hfu``                  `analysis.hfu.hfu_of`
``log_reconcile``        `analysis.log_reconcile.log_reconcile`
``evidence``             `analysis.examine.evidence_of` (``checks``: `analysis.checks.run_checks`)
``balance``              `analysis.balance.balance_of`
``stragglers``           `analysis.stragglers.stragglers_of`
``memory``               `analysis.memory.peak_memory`
``rl``                   `analysis.rl.rl_part`
``trace_parts``          `analysis.trace_summary.trace_part`
``attribution``          `analysis.attribution.fit_step_time` (``analysis.attribution``)
``attention``            `analysis.attention_kernel.attention_kernel`: an eager attention core counted
                         ``--causal half`` (config or trace evidence) as a warning with its size and fix
``messages``             every analysis' messages, in one fixed order (never the order parts ran)
=======================  ==========================================================================

The per-microbatch FLOPs (24 bytes per microbatch, handed over by the metadata pass) live only until the three
analyses that need them (``evidence``, ``balance``, ``microbatch_vision_share``) have run.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Sequence

import polars as pl

from ..arch.spec import ModelSpec
from ..arch.trainability import Trainability
from ..errors import InputError
from ..flops import get_convention
from ..run.core import RunInputs, open_run, rank_timing_of, read_rl_of, read_trace_inputs
from ..run.options import RunOptions
from .attention_kernel import AttentionKernel, attention_kernel
from .balance import BalanceResult, costs_from_row_values, microbatch_cost_columns, microbatch_vision_share
from .hfu import Recompute, parse_recompute
from .rl import RLResult
from .run import DEFAULT_CONVENTIONS, RunAnalysis, analyze_run

__all__ = ["Run"]

#: the log events the run-health block counts
LOG_EVENTS = ("checkpoint", "validation", "traceback", "restart_banner")
#: the analyses that read the per-microbatch FLOPs; they are dropped once all three have run
_COST_READERS = frozenset({"evidence", "balance", "microbatch_vision_share"})


class Run:
    """One finished run: what it holds (``inputs``, a `RunInputs`) and every analysis of it, each computed once."""

    def __init__(self, inputs: RunInputs, conventions: Sequence[str], recompute: Recompute | None = None,
                 costs: pl.DataFrame | None = None, on_step: Callable[[str], None] = lambda text: None) -> None:
        self.inputs = inputs
        self.conventions = list(conventions)
        self.recompute = recompute
        self.on_step = on_step
        self._costs = costs
        self._cost_readers: set[str] = set()

    @classmethod
    def open(cls, path: str | Path, options: RunOptions | None = None, *, metadata: Sequence[str | Path] = (),
             on_step: Callable[[str], None] = lambda text: None,
             metadata_progress: Callable[[int, int], None] | None = None, per_rank: bool = False) -> "Run":
        """Open the run at ``path`` (a log file or a run folder, path or URL) under ``options``. Arguments override
        the manifest (run.yaml / run.json), which overrides what the log states, which overrides the checkpoint
        files (`vlm_perf.run.options`). ``metadata``: per-microbatch metadata paths (default: the folder's);
        ``metadata_progress(done_bytes, total_bytes)`` is called as it is read; ``per_rank=True`` also keeps the
        per-(iteration, dp_rank) statistics (``inputs.metadata.per_rank``) from the same pass. Log files of two
        different runs found together are refused (`analysis.evidence.MixedRunsError`) unless
        ``options.merge_logs``."""
        from .examine import examine_log_files

        options = options if options is not None else RunOptions()
        recompute = parse_recompute(options.recompute) if options.recompute is not None else None  # fail fast
        asked = list(options.convention)
        conventions = asked or list(DEFAULT_CONVENTIONS)
        for name in conventions:
            get_convention(name)  # fail fast on a typo
        inputs = open_run(path, options, metadata=metadata, on_step=on_step, metadata_progress=metadata_progress,
                          per_rank=per_rank, row_columns=microbatch_cost_columns,
                          examine_logs=lambda parsed, facts: examine_log_files(parsed, facts, options.merge_logs,
                                                                                str(path)))
        if not asked:  # the default set keeps only conventions defined for this family (asked-for ones still refuse)
            conventions = [c for c in conventions if get_convention(c).covers(inputs.spec.family)]
        # 24 bytes per microbatch (iteration, dp_rank, lm and vision FLOPs), handed over by the source so that they
        # are freed once the analyses that read them have run; the total is never materialised here
        costs = costs_from_row_values(inputs.metadata.take_row_values(), total=False) if inputs.metadata else None
        its = inputs.parsed.iterations
        if its.height == 0 or its.get_column("iteration").null_count() == its.height:
            files = inputs.parsed.diagnostics.files
            shown = f"{files[0]}" if len(files) == 1 else f"{len(files)} log files (first: {files[0] if files else '?'})"
            raise InputError(f"{shown}: {inputs.parsed.raw.height} log record(s) but no numbered training iteration (a "
                             "step or iteration count on each logged step); give the training log of the run")
        return cls(inputs, conventions, recompute, costs, on_step)

    # --- what the run holds ---------------------------------------------------------------------------------------
    @property
    def spec(self) -> ModelSpec:
        return self.inputs.spec

    @property
    def config(self) -> Any:
        """The resolved `RunConfig` (each value with its source)."""
        return self.inputs.config

    @property
    def options(self) -> RunOptions:
        return self.inputs.options

    @property
    def trainability(self) -> Trainability:
        return self.inputs.trainability

    @property
    def causal(self) -> str:
        return self.inputs.causal

    def _take_costs(self, reader: str) -> pl.DataFrame | None:
        """The per-microbatch FLOPs for ``reader``; dropped after the last of `_COST_READERS` took them."""
        costs = self._costs
        self._cost_readers.add(reader)
        if self._cost_readers >= _COST_READERS:
            self._costs = None
        return costs

    # --- the analyses: each a one-line forward to a pure function --------------------------------------------------
    @cached_property
    def numbers(self) -> RunAnalysis:
        """Windows x conventions (`analyze_run`), before the checks and the messages of the other analyses."""
        inputs, config = self.inputs, self.inputs.config
        self.on_step("recomputing FLOPs per window")
        ignored = inputs.parsed.diagnostics.ignored
        return analyze_run(inputs.parsed.iterations, inputs.spec, inputs.stats_frame, world_size=config.num_gpus,
                           peak_tflops=inputs.peak_tflops, conventions=self.conventions, frozen=self.trainability,
                           estimate=inputs.estimate, log_interval=config.log_interval,
                           global_batch_size=config.global_batch_size, log_segments=inputs.parsed.deduplicated,
                           micro_batch_size=config.micro_batch_size, causal=self.causal,
                           log_events={kind: int(ignored.get(kind, 0)) for kind in LOG_EVENTS})

    @cached_property
    def analysis(self) -> RunAnalysis:
        """The windows x conventions analysis with the run's checks and every message (what the report reads)."""
        return replace(self.numbers, messages=self.messages, checks=self.checks)

    @cached_property
    def headline(self) -> dict:
        """Mean TFLOP/s/GPU and MFU per convention over the selected windows."""
        return self.numbers.convention_summary()

    @property
    def windows(self) -> pl.DataFrame:
        return self.numbers.windows

    @property
    def attribution(self) -> Any:
        return self.numbers.attribution

    @cached_property
    def peak(self) -> dict | None:
        from ..hardware import peak_used

        return peak_used(self.config.gpu, self.config.dtype or "bf16", self.options.peak_tflops)

    @cached_property
    def regime_summary(self) -> dict | None:
        from .regime import regime_summary

        return regime_summary(self.inputs.regime, self.spec, self.causal, self.numbers)

    @cached_property
    def hfu(self) -> dict:
        from .hfu import hfu_of

        return hfu_of(self.numbers, self.spec, self.config, self.trainability, self.recompute, self.causal)

    @cached_property
    def log_reconcile(self) -> dict:
        from .log_reconcile import log_reconcile

        return log_reconcile(self.numbers, self.spec, self.inputs.log_facts, self.inputs.parsed.raw)

    @cached_property
    def evidence(self) -> Any:
        from .examine import evidence_of

        return evidence_of(self.inputs, self.numbers, self._take_costs("evidence"))

    @cached_property
    def checks(self) -> list:
        from .checks import run_checks

        return run_checks(self.numbers, self.inputs.parsed.diagnostics.to_dict(), self.inputs.metadata_diagnostics,
                          evidence=self.evidence)

    @cached_property
    def balance(self) -> BalanceResult | None:
        from .balance import balance_of

        costs = self._take_costs("balance")
        return balance_of(costs, self.numbers) if costs is not None else None

    @cached_property
    def microbatch_vision_share(self) -> pl.Series | None:
        """One value per microbatch of the iterations the means use (the one selection of windows)."""
        costs = self._take_costs("microbatch_vision_share")
        if costs is None:
            return None
        return microbatch_vision_share(costs.filter(pl.col("iteration").is_in(
            self.numbers.selection.iterations().implode())))

    @cached_property
    def stragglers(self) -> dict:
        from .stragglers import stragglers_of

        return stragglers_of(rank_timing_of(self.inputs), self.config, self.balance, self.numbers)

    @cached_property
    def memory(self) -> dict | None:
        from .memory import peak_memory

        return peak_memory(self.inputs.log_facts, self.inputs.parsed.raw)

    @cached_property
    def _rl(self) -> tuple[RLResult | None, list[str]]:
        from .rl import rl_part

        record, why = read_rl_of(self.inputs.files.folder)
        if record is None:  # an incomplete rl/ is said, not silently left out
            return None, [f"RL section left out: {why}"] if why else []
        return rl_part(self.spec, record, self.trainability, self.causal, num_gpus=self.config.num_gpus or 1,
                       peak_tflops=self.inputs.peak_tflops, iterations=self.inputs.parsed.iterations,
                       per_iteration=self.numbers.per_iteration)

    @property
    def rl(self) -> RLResult | None:
        return self._rl[0]

    @cached_property
    def _trace(self) -> tuple[dict | None, Any, list[str]]:
        from ..errors import VlmPerfError
        from .trace_summary import trace_part

        files = self.inputs.files.traces
        if not files:
            return None, None, []
        self.on_step(f"attributing {len(files)} profiler trace(s) to parts")
        try:
            partial, metadata = read_trace_inputs(self.inputs)
        except VlmPerfError as exc:  # a trace that cannot be read is a message, not a failed report
            return None, None, [f"profiler trace not analysed: {exc}"]
        return trace_part(files, partial, spec=self.spec, metadata=metadata, causal=self.causal,
                          trainability=self.trainability, world_size=self.config.num_gpus,
                          peak_tflops=self.inputs.peak_tflops, per_iteration=self.numbers.per_iteration)

    @property
    def trace_parts(self) -> tuple[dict | None, Any]:
        """(the summary block, the `TraceParts`) of the run folder's profiler traces; (None, None) without."""
        return self._trace[0], self._trace[1]

    @cached_property
    def attention(self) -> AttentionKernel:
        """The attention kernel against ``--causal`` (`AttentionKernel`): a WARNING (evidence, how low, the fix) when
        an eager core is counted causal half, a note for ``sdpa``; the config's and the profiler trace's evidence."""
        return attention_kernel(self.numbers, self.spec, self.causal, self.trainability, self.trace_parts[1])

    @cached_property
    def messages(self) -> list[str]:
        """Every message of the run, in one fixed order: the attention kernel's warning (it changes every exact
        number), the windows analysis', the regime's contradictions, the evidence place's, the RL part's, the trace
        part's."""
        from .examine import evidence_messages

        regime = self.regime_summary
        return [*self.attention.messages, *self.numbers.messages,
                *(f"training regime contradiction: {text}" for text in (regime or {}).get("contradictions", [])),
                *evidence_messages(self.inputs), *self._rl[1], *self._trace[2]]
