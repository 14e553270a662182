"""Which tier each test runs in: the FAST tier (``python3 dev.py test --fast``: ``-m "not measured and not slow"``,
<= 2 min on an idle 2-core machine) or only the FULL tier (``python3 dev.py test``, what CI runs: every test).

Markers written on a test stay authoritative; this file adds them where a whole directory or a known-heavy test is
concerned, in one place, so the tiers are a reviewable list rather than decorations scattered over 200 files.
Times are CPU seconds measured in a full run on 2026-12-07 (2 workers, load average ~5 on 2 cores, so about twice
an idle machine's). Every package of vlm_perf keeps fast tests: what leaves the fast tier here is the second and
third end-to-end render of a sample run, long fuzz campaigns (their short siblings stay) and the type checker.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from functools import lru_cache
from pathlib import Path

# Beside the hand list below, every test whose last measured time exceeded FAST_BUDGET_S is full-tier only: the
# node ids are in MEASURED_SLOW_FILE, written from a JUnit XML of a fast-tier run by
# ``python -m tests.tiers JUNIT.xml`` (a new test is fast until measured; re-measure when the fast tier grows).
FAST_BUDGET_S = 1.0
MEASURED_SLOW_FILE = Path(__file__).with_name("slow_tests.txt")
# Seconds each test module took in a full-tier run, written from its JUnit XML by ``python -m tests.tiers --modules
# JUNIT.xml``. The full tier hands modules to the two workers heaviest first (longest-processing-time order), so no
# worker is left running a 20-60 s module alone at the end while the other idles; a module not listed counts 0 s.
MODULE_SECONDS_FILE = Path(__file__).with_name("module_seconds.txt")

# Every test in these directories measures FLOPs with torch's FlopCounterMode on transformers' own classes, or
# trains a tiny model (the verify extra): ~57% of the suite's CPU time.
MEASURED_DIRS = ("tests/verify/",)

# node-id prefixes (file, or file::test function) -> why the test is FULL tier only
SLOW = {
    "tests/report/test_one_truth.py": "renders 12 perturbed sample runs through every output (36 s)",
    "tests/test_docs_run.py": "runs every documented command block end to end (33 s)",
    "tests/test_notebooks.py": "executes the five notebooks in a kernel (25 s)",
    "tests/test_lint.py::test_mypy_core_packages": "mypy over the core packages (24 s); ruff stays fast",
    "tests/ingest/logs/test_unknown_keys_early.py::test_fuzz_unknown_keys": "fuzz campaign (19 s)",
    "tests/ingest/test_metadata_robustness.py::test_fuzz_reader_counts_every_line_and_never_crashes":
        "fuzz campaign (18 s)",
    "tests/scale/test_scheduler_cli.py": "starts local Dask clusters per test (32 s)",
    "tests/scale/test_remote_inputs.py": "reports over fsspec URLs, several clusters (28 s)",
    "tests/ingest/test_hostile_inputs.py::test_non_finite_and_deep_json_exit_2": "8 CLI subprocesses (15 s)",
    "tests/report/test_run_discovery.py::test_parse_and_report_read_the_same_files": "5 full reports (14 s)",
    "tests/report/test_run_options.py::test_report_frozen_flag_equals_the_run_yaml_key": "2 full reports (12 s)",
    "tests/rl/test_rl_bundle.py::test_report_equals_measured_per_step_phase_and_part": "GRPO report (12 s)",
    "tests/ingest/test_metadata_source.py::test_engine_and_chunking_do_not_change_results":
        "4 engines x chunkings of one metadata file (11 s)",
    "tests/ingest/logs/test_chunked_reader.py::test_generated_log_parses_the_same_as_with_the_whole_file_reader":
        "large generated logs (11 s)",
    "tests/ingest/test_logs_timing_collect.py::test_fuzz_collector_equals_the_whole_frame_extraction":
        "fuzz campaign (10 s)",
    "tests/flops/test_regime.py::test_whole_part_freezing_equals_compute_flops_on_every_preset":
        "45 presets x 3 parts (10 s); the per-family regime tests stay fast",
    "tests/report/test_red_flags.py::test_one_bad_step_time_is_excluded_and_counted": "4 full reports (9 s)",
    "tests/cli/test_cli_compare.py::test_json_deltas_equal_the_reports_numbers": "2 reports + compare (9 s)",
    "tests/ingest/test_logs_baseline_agreement.py::test_vectorised_matches_per_line_baseline": "7 s",
    "tests/ingest/logs/test_fuzz.py::test_mutating_one_line_changes_nothing_else": "fuzz campaign (7 s)",
    "tests/test_input_fuzz.py::test_metadata_against_config_errors_or_matches_hand_arithmetic": "fuzz (6 s)",
    "tests/test_input_fuzz.py::test_run_yaml_mutations_error_or_read_exactly": "fuzz (5 s)",
    "tests/test_input_fuzz.py::test_config_mutations_error_or_change_nothing": "fuzz (4 s)",
    "tests/report/test_trace_section.py": "trace sections of full reports (11 s)",
    "tests/cli/test_real_run.py::test_report_parses_every_logged_step": "5 s",
    "tests/report/test_figures_thin.py::test_thinned_figures_keep_the_report_numbers": "5 s",
    "tests/test_hardware_audit.py::test_report_states_the_peak_and_override_wins": "5 s",
    "tests/analysis/test_window_sums.py::test_estimate_report_summary_identical_to_the_reference_path": "5 s",
    "tests/cli/test_real_lora_run.py::test_report_states_the_regime_found_in_the_folder": "5 s",
    "tests/analysis/test_hfu.py::test_megatron_arguments_block_sets_the_rule": "4 s",
    "tests/cli/test_cli_first_use.py::test_a_tiny_cpu_run_reads_in_gflops_everywhere": "4 s",
    "tests/cli/test_cli_report.py::test_bad_metadata_line_errors_or_is_counted": "4 s",
    "tests/analysis/test_checks.py::test_bad_step_times_never_poison_the_means": "4 s",
    "tests/report/test_red_flags.py::test_wrong_gpu_count": "4 s",
    "tests/scale/test_trace_scheduler.py::test_many_rank_files_and_an_nsight_url_on_the_cluster": "a cluster (3 s)",
    "tests/cli/test_trace_equals_report.py": "4 perturbed runs through both trace and report (15 s)",
    "tests/cli/test_cross_command.py": "6 perturbed reports + trace, flops, compare and explain on every sample",
    "tests/arch/test_params.py::test_matches_transformers_modules":
        "45 presets built by transformers on the meta device (7 s); the hand-count tests stay fast",
    "tests/ingest/test_traces.py::test_chunk_boundaries_do_not_matter": "every chunk size of a trace (5 s)",
    "tests/ingest/logs/test_unknown_keys_early.py::test_generated_logs_with_unknown_keys": "generated logs (4 s)",
    "tests/report/test_regime_report.py::test_whole_part_freezing_gives_todays_numbers": "4 full reports (4 s)",
    "tests/scale/test_dask.py::test_logs_mixed_run_bit_identical": "6 Dask reads of one run (3 s)",
    "tests/export/test_export_scheme.py::test_fuzz_one_finite_point_per_metric_and_step_from_the_last_segment":
        "fuzz campaign (5 s)",
    "tests/export/test_export_backends.py": "exports a sample run to every backend and reads each back with the "
        "backend's own reader (W&B, MLflow, TensorBoard libraries; 50 s)",
}


@lru_cache(maxsize=1)
def measured_slow() -> frozenset[str]:
    """The node ids listed in `MEASURED_SLOW_FILE` (``#`` lines are comments)."""
    if not MEASURED_SLOW_FILE.is_file():
        return frozenset()
    lines = MEASURED_SLOW_FILE.read_text().splitlines()
    return frozenset(line for line in lines if line.strip() and not line.startswith("#"))


def tier_markers(nodeid: str) -> tuple[str, ...]:
    """The markers this file adds to a test (``measured`` and/or ``slow``) by its node id."""
    marks = []
    if nodeid.startswith(MEASURED_DIRS):
        marks.append("measured")
    if nodeid in measured_slow() or any(nodeid == key or nodeid.startswith((key + "::", key + "[")) for key in SLOW):
        marks.append("slow")
    return tuple(marks)


@lru_cache(maxsize=1)
def module_seconds() -> dict[str, float]:
    """Module path -> the seconds it took in the last measured full-tier run (`MODULE_SECONDS_FILE`)."""
    if not MODULE_SECONDS_FILE.is_file():
        return {}
    pairs = (line.split(maxsplit=1) for line in MODULE_SECONDS_FILE.read_text().splitlines()
             if line.strip() and not line.startswith("#"))
    return {path.strip(): float(seconds) for seconds, path in pairs}


def heaviest_modules_first(nodeids: list[str]) -> list[int]:
    """The order (indexes into ``nodeids``) that runs whole modules heaviest first by `module_seconds`, keeping the
    order of tests inside a module and of modules that weigh the same (a stable sort)."""
    weights = module_seconds()

    def weight(i: int) -> float:
        return -weights.get(nodeids[i].split("::", 1)[0], 0.0)

    return sorted(range(len(nodeids)), key=weight)


def _module_path(case: ET.Element) -> str:
    """The file of a JUnit test case: its classname's module part (a test class adds a capitalised last part)."""
    parts = (case.get("classname") or "").split(".")
    while len(parts) > 1 and parts[-1][:1].isupper():
        parts.pop()
    return "/".join(parts) + ".py"


def write_module_seconds(junit: Path) -> int:
    """Write `MODULE_SECONDS_FILE` from a full-tier JUnit XML: each module's summed test time, heaviest first."""
    seconds: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = _module_path(case)
        seconds[path] = seconds.get(path, 0.0) + float(case.get("time") or 0)
    header = (f"# Seconds per test module in a full-tier run (2 workers); the full tier runs modules heaviest first.\n"
              f"# Written by `python -m tests.tiers --modules {junit.name}`; re-measure when modules grow.\n")
    rows = sorted(seconds.items(), key=lambda item: -item[1])
    MODULE_SECONDS_FILE.write_text(header + "".join(f"{value:.1f} {path}\n" for path, value in rows if value >= 1.0))
    return sum(value >= 1.0 for _, value in rows)


def write_measured_slow(junit: Path) -> int:
    """Write `MEASURED_SLOW_FILE` from a JUnit XML (pytest --junitxml): the tests over `FAST_BUDGET_S` seconds."""
    slow = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        seconds = float(case.get("time") or 0)
        if seconds > FAST_BUDGET_S:
            path = (case.get("classname") or "").replace(".", "/") + ".py"
            slow.append((f"{path}::{case.get('name')}", seconds))
    kept = sorted(set(measured_slow()) | {nodeid for nodeid, _ in slow})
    header = (f"# Tests measured over {FAST_BUDGET_S:g} s (setup + call) in a fast-tier run: full tier only.\n"
              f"# Written by `python -m tests.tiers {junit.name}`; entries are only added (remove by hand).\n")
    MEASURED_SLOW_FILE.write_text(header + "".join(f"{nodeid}\n" for nodeid in kept))
    return len(kept)


if __name__ == "__main__":
    if sys.argv[1] == "--modules":
        print(f"{write_module_seconds(Path(sys.argv[2]))} modules listed in {MODULE_SECONDS_FILE}")
    else:
        print(f"{write_measured_slow(Path(sys.argv[1]))} tests listed in {MEASURED_SLOW_FILE}")
