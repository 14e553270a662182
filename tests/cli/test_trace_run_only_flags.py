"""`vlm-perf trace` without ``--run``: the FLOPs per part are the matmul shapes the trace recorded, so the flags that
act on a run's metadata FLOPs (the model, the world size they are divided by, the regime, the attention core) would
change nothing. Each is a one-line usage error naming the flag and what to add (exit 2), never silently ignored;
with ``--run`` the same flags are accepted."""

from __future__ import annotations

import pytest

from tests.support import SAMPLE_LOGS, run_main
from vlm_perf.commands.trace import RUN_ONLY
from vlm_perf.run.options import option

TRACE_RUN = SAMPLE_LOGS / "qwen2-vl-tiny-trace"
ADAPTER = SAMPLE_LOGS / "qwen2-vl-tiny-lora-real" / "adapter_config.json"

#: one command line per run-only flag (each flag's value as a user would type it)
GIVEN = {"model": ["--model", "qwen2.5-vl-7b"], "gpus": ["--gpus", "8"], "frozen": ["--frozen", "vision_tower"],
         "trainable": ["--trainable", "lm.attention"], "adapter": ["--adapter", str(ADAPTER)],
         "qlora": ["--qlora"], "causal": ["--causal", "full"]}


def test_every_run_only_flag_has_a_case_and_is_a_trace_flag():
    assert set(GIVEN) == set(RUN_ONLY)
    assert all("trace" in option(name).commands for name in RUN_ONLY)


@pytest.mark.parametrize("name", sorted(GIVEN))
def test_a_run_only_flag_without_run_is_one_usage_error_naming_it_and_the_fix(name):
    r = run_main("trace", TRACE_RUN / "trace", *GIVEN[name])
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert f"{option(name).flag} acts on the run's metadata FLOPs: add --run RUN_DIR" in lines[0]
    assert r.stdout == ""


def test_the_default_typed_out_is_refused_too_and_every_flag_is_named_once():
    r = run_main("trace", TRACE_RUN / "trace", "--causal", "half", "--qlora", "--frozen", "vit")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--frozen, --qlora, --causal act on the run's metadata FLOPs: add --run RUN_DIR" in r.stderr


def test_without_them_trace_runs_and_the_peak_flags_still_apply():
    r = run_main("trace", TRACE_RUN / "trace", "--peak-tflops", "100", "--json")
    assert r.returncode == 0, r.stderr
    assert '"peak_flops": 100000000000000.0' in r.stdout


@pytest.mark.slow
def test_with_run_the_same_flags_are_accepted():
    r = run_main("trace", TRACE_RUN / "trace", "--run", TRACE_RUN, "--causal", "full", "--frozen", "vision_tower",
                 "--gpus", "1", "--json")
    assert r.returncode == 0, r.stderr
