"""`vlm-perf compare RUN1 ... RUNn` (a sweep): one row per run whose numbers are that run's own report numbers, the
table and figures written by the report's output rule, --scheduler giving the identical result, bad input named
in one line per run; two runs stay the A-vs-B page."""

from __future__ import annotations

import json

import polars as pl
import pytest

from tests.support import SAMPLE_LOGS, run_main as cli
from tests.sweep_runs import sweep_runs, variants

from vlm_perf.analysis.sweep import MAX_RUNS, changes, media_tokens_per_iteration, sweep_table
from vlm_perf.report.output import MARKER
from vlm_perf.report.sweep_page import FIGURES, SWEEP_FILES

SFT = "qwen3-vl-30b-a3b-sft"


@pytest.fixture(scope="module")
def sweep3(tmp_path_factory, sample_report):
    """A three-run sweep: the bundled image-SFT sample and two SYNTHETIC resolution variants (max_pixels 384^2 and
    896^2); each run's summary.json from its own `vlm-perf report`, and the sweep's --json output and -o folder."""
    from vlm_perf.synth import generate_run

    tmp = tmp_path_factory.mktemp("sweep3")
    runs, summaries = [SAMPLE_LOGS / SFT], [sample_report(SFT)[1]]  # rendered once per session (test_cli_report)
    for name, spec in (v for v in variants() if v[0] in ("tiny-res384", "tiny-res896")):
        runs.append(generate_run(spec, tmp / name))
        r = cli("report", runs[-1], "-o", tmp / f"report-{name}")
        assert r.returncode == 0, r.stderr
        summaries.append(json.loads((tmp / f"report-{name}" / "summary.json").read_text()))
    r = cli("compare", *runs, "-o", tmp / "sweep", "--json")
    assert r.returncode == 0, r.stderr
    return runs, summaries, json.loads(r.stdout), tmp / "sweep"


@pytest.mark.slow  # end to end: reports and a sweep of three runs
def test_each_row_holds_its_runs_report_numbers(sweep3):
    runs, summaries, table, _ = sweep3
    assert [row["run"] for row in table["runs"]] == [str(r) for r in runs]
    for row, summary in zip(table["runs"], summaries):
        assert set(row["conventions"]) == set(summary["conventions"])
        for conv, entry in row["conventions"].items():
            assert entry["tflops_per_gpu_mean"] == pytest.approx(summary["conventions"][conv]["tflops_per_gpu_mean"],
                                                                 rel=1e-12)
            assert entry["mfu_mean"] == pytest.approx(summary["conventions"][conv]["mfu_mean"], rel=1e-12)
        assert row["vision_share"] == pytest.approx(summary["vision_share_mean"], rel=1e-12)
        assert row["seconds_per_iteration"] == pytest.approx(summary["step"]["seconds_per_iteration"], rel=1e-12)
        assert (row["model"], row["world_size"], row["gpu"]) == (summary["model"], summary["world_size"],
                                                                 summary["gpu"])
        # media tokens per iteration = LM tokens per iteration x the visual-token share (the report's step block)
        step = summary["step"]
        assert row["media_tokens_per_iteration"] == pytest.approx(
            step["lm_tokens_per_iteration"] * step["visual_token_share"], rel=1e-12)
    for synthetic in table["runs"][1:]:  # labelled with the generator and the seed its run.yaml states
        assert synthetic["synthetic"] and synthetic["generator"] == "vlm_perf.synth" and synthetic["seed"] == 7
    # the larger pixel bound: more media tokens per iteration, a larger vision share
    low, high = table["runs"][1:]
    assert low["media_tokens_per_iteration"] < high["media_tokens_per_iteration"]
    assert low["vision_share"] < high["vision_share"]


@pytest.mark.slow  # end to end: reports and a sweep of three runs
def test_the_folder_holds_the_page_the_table_and_three_figures(sweep3):
    runs, _, table, out = sweep3
    assert sorted(p.name for p in out.iterdir()) == sorted([*SWEEP_FILES, MARKER])
    assert json.loads((out / "compare.json").read_text()) == table
    csv, parquet = pl.read_csv(out / "compare.csv"), pl.read_parquet(out / "compare.parquet")
    assert csv.height == parquet.height == 3
    assert csv["exact_tflops_per_gpu"].to_list() == pytest.approx(parquet["exact_tflops_per_gpu"].to_list(),
                                                                  rel=1e-15)
    assert csv["exact_mfu"].to_list() == [r["conventions"]["exact"]["mfu_mean"] for r in table["runs"]]
    assert csv["changed_vs_first"][0] == "baseline"
    md = (out / "compare.md").read_text()
    assert md.startswith("# vlm-perf compare: sweep of 3 runs")
    for figure in FIGURES:
        assert f"]({figure})" in md and (out / figure).read_bytes()[:4] == b"\x89PNG"
    assert "data:image/png;base64," in (out / "compare.html").read_text()  # self-contained


def test_changed_vs_the_first_run_names_configuration_then_data():
    def summary(run, gpus, seq, tokens, share):
        return {"run": run, "model": "m", "world_size": gpus, "gpu": "H100-SXM", "dtype": "bf16", "peak_tflops": 989.0,
                "conventions": {"exact": {"tflops_per_gpu_mean": 400.0, "mfu_mean": 0.4}},
                "run_config": {"seq_length": seq, "seed": 1},
                "step": {"lm_tokens_per_iteration": tokens, "visual_token_share": share}}

    first = summary("a", 64, 4096, 1000.0, 0.1)  # 100 media tokens per iteration
    other = summary("b", 32, 8192, 1000.0, 0.125)  # 125: x1.250
    assert media_tokens_per_iteration(other["step"]) == 125.0
    assert changes(other, first) == ["GPUs 64 → 32", "seq_length 4096 → 8192", "media tokens/iteration ×1.250"]
    assert changes(first, first) == []
    table = sweep_table([first, other])
    assert [r["changed"] for r in table["runs"]] == [[], changes(other, first)]
    assert [r["name"] for r in table["runs"]] == ["a", "b"]


@pytest.mark.slow  # two compares and two runs opened in-process
def test_two_runs_stay_the_a_vs_b_page(tmp_path):
    from vlm_perf.analysis.compare import compare_summaries
    from vlm_perf.pipeline import load_run
    from vlm_perf.report import build_summary
    from vlm_perf.report.compare_page import write_compare

    a, b = SAMPLE_LOGS / "qwen2-vl-tiny-real", SAMPLE_LOGS / "qwen2-vl-tiny-lora-real"
    r = cli("compare", a, b, "-o", tmp_path / "cli")
    assert r.returncode == 0, r.stderr
    loaded = [load_run(run) for run in (a, b)]
    write_compare(compare_summaries(*(build_summary(x.analysis, x.context) for x in loaded)), tmp_path / "lib")
    names = sorted(p.name for p in (tmp_path / "cli").iterdir())
    assert names == sorted(["compare.json", "compare.md", "compare.html", "compare.png", MARKER])
    for name in names:
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "lib" / name).read_bytes(), name
    r = cli("compare", a, b, "--sweep", "-o", tmp_path / "sweep")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir()) == sorted([*SWEEP_FILES, MARKER])


def test_each_run_that_cannot_be_opened_is_one_line_naming_it(tmp_path):
    missing = [tmp_path / f"no-such-run-{i}" for i in range(3)]
    r = cli("compare", *missing, "-o", tmp_path / "out")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 4
    for i, (line, run) in enumerate(zip(lines, missing), start=1):
        assert line.startswith(f"error: run #{i} {run}: ") and str(run) in line[len(f"error: run #{i} {run}: "):]
    assert lines[3].startswith("error: 3 of 3 run(s) could not be opened")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # opens two runs twice
def test_skip_bad_runs_leaves_a_bad_run_out_and_names_it(tmp_path):
    good = SAMPLE_LOGS / "qwen2-vl-tiny-real"
    missing = tmp_path / "no-such-run"
    r = cli("compare", good, missing, SAMPLE_LOGS / "qwen2-vl-tiny-lora-real", "-o", tmp_path / "out")
    assert r.returncode == 2 and r.stderr.startswith(f"error: run #2 {missing}: ")
    assert r.stderr.strip().splitlines()[1].startswith("error: 1 of 3 run(s) could not be opened")
    assert not (tmp_path / "out").exists()
    r = cli("compare", good, missing, SAMPLE_LOGS / "qwen2-vl-tiny-lora-real", "--skip-bad-runs", "-o",
            tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().startswith(f"warning: left out run #2 {missing}: ")
    table = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert [row["index"] for row in table["runs"]] == [1, 2]
    assert [e["run"] for e in table["left_out"]] == [str(missing)]
    assert "Runs left out" in (tmp_path / "out" / "compare.md").read_text()


@pytest.mark.parametrize("spelling", ["same", "trailing slash"])
def test_a_run_given_twice_is_refused(spelling, tmp_path):
    a, b = SAMPLE_LOGS / "qwen2-vl-tiny-real", SAMPLE_LOGS / "qwen2-vl-tiny-lora-real"
    again = str(a) if spelling == "same" else f"{a}/"
    r = cli("compare", a, b, again)
    assert r.returncode == 2
    assert r.stderr.startswith(f"error: run {again} is given twice, as #1 and #3") and r.stderr.count("\n") == 1


def test_more_than_100_runs_are_refused_before_any_is_opened(tmp_path):
    runs = [tmp_path / f"run{i}" for i in range(MAX_RUNS + 1)]  # none exists: nothing is opened
    r = cli("compare", *runs)
    assert r.returncode == 2
    assert r.stderr == f"error: {MAX_RUNS + 1} runs given; a sweep compares at most {MAX_RUNS} runs: split it into " \
                       f"sweeps of <= {MAX_RUNS} sharing run #1 as the baseline\n"


def test_per_run_flags_and_a_single_run_are_refused():
    a, b, c = (SAMPLE_LOGS / n for n in ("qwen2-vl-tiny-real", "qwen2-vl-tiny-lora-real", "qwen2-vl-tiny-trace"))
    r = cli("compare", a, b, c, "--gpus-a", "8")
    assert r.returncode == 2 and r.stderr.startswith("error: --gpus-a/-b set run A or B of a two-run compare")
    r = cli("compare", a)
    assert r.returncode == 2 and r.stderr.startswith("error: compare needs at least two runs")


@pytest.mark.slow
def test_twenty_runs_compare_in_one_command_serial_and_on_two_workers(tmp_path):
    """The fixture's 20 runs (7 bundled samples, 13 synthetic variants) in one command, in this process and on a
    local cluster of two workers (one task per run): the same table, page and figures, byte for byte."""
    runs = sweep_runs(tmp_path / "runs", 20)
    out = {}
    for label, extra in (("serial", ()), ("local2", ("--scheduler", "local:2"))):
        r = cli("compare", *runs, "-o", tmp_path / label, *extra)
        assert r.returncode == 0, r.stderr
        out[label] = tmp_path / label
    for name in SWEEP_FILES:  # the identical table, page and figures
        assert (out["serial"] / name).read_bytes() == (out["local2"] / name).read_bytes(), name
    table = json.loads((out["serial"] / "compare.json").read_text())
    assert len(table["runs"]) == 20 and table["left_out"] == []
    assert [row["run"] for row in table["runs"]] == [str(run) for run in runs]
    assert pl.read_csv(out["serial"] / "compare.csv")["exact_tflops_per_gpu"].to_list() == [
        (row["conventions"].get("exact") or {}).get("tflops_per_gpu_mean") for row in table["runs"]]
    resolution = [r for r in table["runs"] if r["name"].startswith("tiny-res")]
    # a resolution sweep: a larger pixel bound puts more media tokens and a larger vision share in each iteration
    assert [r["media_tokens_per_iteration"] for r in resolution] == sorted(r["media_tokens_per_iteration"]
                                                                           for r in resolution)
    assert resolution[0]["vision_share"] < resolution[-1]["vision_share"]


def test_every_run_is_opened_by_open_run_as_report_opens_it(monkeypatch):
    """The sweep has no reader of its own: each run goes through `pipeline.load_run` -> the `Run` facade ->
    `run.core.open_run`."""
    import vlm_perf.analysis.facade as facade
    from vlm_perf.sweep import summarize_runs

    opened = []
    real = facade.open_run

    def spy(path, *args, **kwargs):
        opened.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(facade, "open_run", spy)
    runs = [str(SAMPLE_LOGS / "qwen2-vl-tiny-real"), str(SAMPLE_LOGS / "qwen2-vl-tiny-lora-real")]
    outcomes = summarize_runs(runs, {"causal": "full"})
    assert opened == runs
    assert [o.summary["inputs"]["causal"] for o in outcomes] == ["full", "full"]  # shared options reach every run


def test_one_hundred_runs_are_accepted_one_more_is_not(tmp_path):
    from vlm_perf.errors import ConfigError
    from vlm_perf.sweep import check_run_list

    check_run_list([str(tmp_path / f"run{i}") for i in range(MAX_RUNS)])
    with pytest.raises(ConfigError, match=f"^{MAX_RUNS + 1} runs given"):
        check_run_list([str(tmp_path / f"run{i}") for i in range(MAX_RUNS + 1)])
    with pytest.raises(ConfigError, match="given twice, as #2 and #3"):
        check_run_list([str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "x" / ".." / "b")])
