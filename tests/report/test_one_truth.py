"""One run, one truth: every quantity shown in more than one place shows the same value everywhere.

Runs `vlm-perf report` and `vlm-perf compare` on every bundled sample and on perturbed copies of them
(a step time 100x longer and a non-positive one, DP ranks missing from the metadata, estimate mode
without metadata, a frozen vision tower) and reads each quantity back from every place it is shown:
summary.json, report.md (rendered by an independent CommonMark parser), report.html, the terminal
summary, compare.json, compare.md, compare.html and the compare terminal table. The expected
strings are the summary.json values formatted at the precision each place states (one decimal for
TFLOP/s and the report's percentages, two for compare's percentages), so a place that computed its
own variant of a number (another window selection, another vision-share definition) fails here.
Rates are shown in one display unit per run (a tiny CPU run in GFLOP/s): the unit is read from the
report's conventions table, must be the same in every place, and scales by the SI prefix written
here. The per-window table (windows.parquet / windows.csv) must reproduce the headline means, the
windows used and the vision share over its ``reliable`` rows.
"""

from __future__ import annotations

import gzip
import html
import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from markdown_it import MarkdownIt

from tests.support import invoke_cli

ROOT = Path(__file__).resolve().parents[2]
# every bundled run with a training log (qwen2-vl-tiny-trace is a profiler trace for `vlm-perf trace`, no log)
SAMPLES = sorted(p for p in (ROOT / "sample_logs").iterdir() if p.is_dir() and any(p.glob("train.log*")))
SFT = ROOT / "sample_logs" / "qwen3-vl-30b-a3b-sft"
VIDEO = ROOT / "sample_logs" / "qwen2.5-vl-7b-video"
MD = MarkdownIt("commonmark").enable(["table"])
#: TFLOP/s in one of each display unit (SI prefixes)
SCALE = {"PFLOP/s": 1e3, "TFLOP/s": 1.0, "GFLOP/s": 1e-3, "MFLOP/s": 1e-6, "kFLOP/s": 1e-9, "FLOP/s": 1e-12}


def _slow_step(dst: Path) -> list[str]:
    """One window's step time x100 (an outlier) and another's 0 (non-positive): both excluded."""
    shutil.copytree(SFT, dst)
    log = (dst / "train.log").read_text()
    step = r"(iteration\s+{}/\s+200 \|.*?elapsed time per iteration \(ms\): )([0-9.]+)"
    log, n1 = re.subn(step.format(60), lambda m: m.group(1) + f"{100 * float(m.group(2)):.1f}", log, count=1)
    log, n2 = re.subn(step.format(120), lambda m: m.group(1) + "0.0", log, count=1)
    assert n1 == n2 == 1
    (dst / "train.log").write_text(log)
    return []


def _missing_ranks(dst: Path) -> list[str]:
    """DP rank 7's metadata rows missing for iterations 41..60."""
    shutil.copytree(SFT, dst)
    with gzip.open(SFT / "metadata.jsonl.gz", "rt") as f:
        rows = [line for line in f if not (json.loads(line)["dp_rank"] == 7 and 41 <= json.loads(line)["iteration"]
                                           <= 60)]
    (dst / "metadata.jsonl.gz").unlink()
    (dst / "metadata.jsonl").write_text("".join(rows))
    return []


def _estimate(dst: Path) -> list[str]:
    """No metadata: statistics estimated from run.yaml (one 448x448-pixel-ish image grid per sample)."""
    dst.mkdir()
    shutil.copy(SFT / "train.log", dst / "train.log")
    (dst / "run.yaml").write_text((SFT / "run.yaml").read_text() + "image_grid: [1, 32, 32]\n")
    return []


def _frozen_flags(dst: Path) -> list[str]:
    """The video sample (vision tower frozen) without its run.yaml: model, GPUs and the frozen tower as flags."""
    dst.mkdir()
    for name in ("train.log", "metadata.jsonl.gz"):
        shutil.copy(VIDEO / name, dst / name)
    return ["--model", "qwen2.5-vl-7b", "--gpus", "64", "--gpu", "H100-SXM", "--frozen", "vision"]


def _lora_checkpoint(dst: Path) -> list[str]:
    """The video sample (run.yaml: vision frozen) with PEFT checkpoints in its folder: LoRA r=16 on the LM-style
    names in checkpoint-200 (the latest; r=8 in checkpoint-100 must be ignored), found without a flag."""
    shutil.copytree(VIDEO, dst)
    for step, rank in ((100, 8), (200, 16)):
        (dst / f"checkpoint-{step}").mkdir()
        (dst / f"checkpoint-{step}" / "adapter_config.json").write_text(json.dumps({
            "peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "lora_dropout": 0.0,
            "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}))
    return []


CASES = {**{p.name: (lambda dst, p=p: (shutil.copytree(p, dst), [])[1]) for p in SAMPLES},
         "slow-and-zero-step": _slow_step, "missing-dp-ranks": _missing_ranks, "estimate": _estimate,
         "frozen-tower-by-flags": _frozen_flags, "lora-checkpoint": _lora_checkpoint}


def _per_run(args: list[str]) -> list[str]:
    """``compare`` spells per-run flags twice (``--NAME-a`` / ``--NAME-b``)."""
    out = []
    for flag, value in zip(args[::2], args[1::2]):
        out += [f"{flag}-a", value, f"{flag}-b", value]
    return out


def _cells(page: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", page, flags=re.S)
    return [[_text(c) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r, flags=re.S)] for r in rows]


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def _lines(page: str) -> list[str]:
    return [_text(x) for x in re.findall(r"<(?:li|p)>(.*?)</(?:li|p)>", page, flags=re.S)]


def _pct(x, digits=1) -> str:
    return "—" if x is None else f"{100 * x:.{digits}f}%"


def _num(x, digits=1) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def _rate(x, unit: str, digits=1) -> str:
    """A TFLOP/s value as shown in ``unit``."""
    return "—" if x is None else _num(x / SCALE[unit], digits)


def _unit(shown) -> str:
    """The report's display unit, from the header of its conventions table (``exact`` row's table)."""
    heads = [row for row in _cells(shown["report.md"]) if row and row[0] == "convention" and row[1].endswith("/GPU")]
    # the conventions table, and the every-convention-against-the-log table when the log prints a number:
    # one unit in both
    assert 1 <= len(heads) <= 2 and len({h[1] for h in heads}) == 1, heads
    unit = heads[0][1].removesuffix("/GPU")
    assert unit in SCALE
    return unit


def _found(lines: list[str], pattern: str) -> list[tuple]:
    return [m.groups() for line in lines for m in [re.search(pattern, line)] if m]


@pytest.fixture(scope="module", params=list(CASES))
def shown(request, tmp_path_factory):
    """(summary, {place: page text}) of one case: report + compare of the run with itself."""
    tmp = tmp_path_factory.mktemp(request.param)
    run = tmp / "run"
    extra = CASES[request.param](run)
    r = invoke_cli("report", str(run), "-o", str(tmp / "out"), *extra)
    assert r.exit_code == 0, (r.output, r.exception)
    terminal = r.stdout
    r2 = invoke_cli("compare", str(run), str(run), "-o", str(tmp / "cmp"), *_per_run(extra),
                    env={"COLUMNS": "220"})
    assert r2.exit_code == 0, (r2.output, r2.exception)
    out = tmp / "out"
    return {"summary": json.loads((out / "summary.json").read_text()),
            "report.md": MD.render((out / "report.md").read_text()), "report.html": (out / "report.html").read_text(),
            "terminal": terminal, "compare.json": json.loads((tmp / "cmp" / "compare.json").read_text()),
            "compare.md": MD.render((tmp / "cmp" / "compare.md").read_text()),
            "compare.html": (tmp / "cmp" / "compare.html").read_text(), "compare terminal": r2.stdout,
            "windows": pl.read_parquet(out / "windows.parquet"),
            "windows.csv": (out / "windows.csv").read_text()}


def test_summary_numbers_are_one_value(shown):
    s = shown["summary"]
    exact = s["conventions"]["exact"]
    assert s["hfu"]["mfu_mean"] == exact["mfu_mean"]
    assert s["hfu"]["model_tflops_per_gpu_mean"] == exact["tflops_per_gpu_mean"]
    assert s["step"]["vision_share"] == s["vision_share_mean"]
    if s["step"]["exact_flops_per_iteration"]:
        assert s["step"]["exact_vision_flops_per_iteration"] / s["step"]["exact_flops_per_iteration"] == pytest.approx(
            s["vision_share_mean"], rel=1e-12)
    if s["balance"] and s["balance"].get("iterations"):  # the balance uses the iterations of the windows the means use
        assert s["balance"]["iterations"] <= s["step"]["iterations"]


@pytest.mark.parametrize("page", ["report.md", "report.html"])
def test_report_pages_show_the_summary_values(shown, page):
    s, text, unit = shown["summary"], shown[page], _unit(shown)
    exact = s["conventions"]["exact"]
    tf, mfu = _rate(exact["tflops_per_gpu_mean"], unit), _pct(exact["mfu_mean"])
    rows = [row for row in _cells(text) if row and row[0] == "exact"]
    # the conventions table, and the table of every convention against the log's number when there is one
    again = s["log_reconcile"]["status"] == "ok"
    assert [row[1:3] for row in rows] == [[tf, mfu]] * (2 if again else 1)
    lines = _lines(text)
    quote = _found(lines, r"Quote exact \(([\d,.—]+)(?: (\S+)/GPU)?, MFU ([^)]+)\)")
    assert quote == [(tf, unit if tf != "—" else None,
                      mfu if exact["mfu_mean"] is not None else "unknown without a GPU peak")]
    headline = _found(lines, rf"exact with vision ([\d,.]+) {re.escape(unit)}/GPU .*?MFU \S+ → (\S+) on")
    if s["conventions"].get("megatron-lm", {}).get("tflops_per_gpu_mean") and exact["tflops_per_gpu_mean"]:
        assert headline == [(tf, mfu)]
    hfu = _found(lines, rf"MFU \(exact\) (\S+) → HFU (\S+);.*vs ([\d,.]+) {re.escape(unit)}/GPU\)")
    if s["hfu"]["hfu_mean"] is not None:  # HFU's model rate is the headline's exact rate, in the same unit
        assert hfu == [(mfu, _pct(s["hfu"]["hfu_mean"]), tf)]
    else:
        assert hfu == []
    vision = _found(lines, r"Vision share of exact training FLOPs: (\S+) ")
    assert vision == ([] if s["vision_share_mean"] is None else [(_pct(s["vision_share_mean"]),)])
    # full-training accounting is named beside a regime only where it differs from what ran
    regime = s["regime"]
    lead = [line for line in lines if not re.match(r"^Regime: .*? \(from ", line)]  # not the regime section's line
    shown_regime = _found(lead, r"^Regime: (.+?) \(.*?\)\.(?: Full-training accounting would count ×([\d.]+) these)?")
    ratio = (regime or {}).get("full_training_over_regime")
    assert shown_regime == ([] if not regime else [(regime["description"], f"{ratio:.3f}" if ratio and
                                                    abs(ratio - 1) > 1e-9 else None)])
    b = s["balance"]
    idle = _found(lines, r"idles (\S+) of the step \(median; FLOPs-weighted mean (\S+);")
    heavy = _found(lines, r"Heaviest rank / mean: median ([\d.]+) ")
    if b and b.get("iterations") and b.get("dp_ranks", 0) > 1:
        assert idle == [(_pct(b["idle_fraction_median"]), _pct(b["idle_fraction_mean"]))]
        assert heavy == [(_num(b["flops_max_over_mean_median"], 3),)]
    else:
        assert idle == heavy == []


def _lead_stats(page: str, text: str) -> dict[str, str]:
    """The headline cards: label -> value (report.html's cards; report.md's first table, labels over values)."""
    if page == "report.html":
        cards = re.findall(r'<div class="label">(.*?)</div><div class="value">(.*?)</div>', text, flags=re.S)
        return {html.unescape(k): html.unescape(v) for k, v in cards}
    header, values = _cells(text)[:2]
    return dict(zip(header, (v.strip("*") for v in values)))


@pytest.mark.parametrize("page", ["report.md", "report.html"])
def test_the_lead_shows_the_summary_values(shown, page):
    """The first screen's verdict and headline cards carry summary.json's numbers, formatted as everywhere else."""
    s, text, unit = shown["summary"], shown[page], _unit(shown)
    exact, lm = s["conventions"]["exact"], s["conventions"].get("megatron-lm", {})
    tf, mfu = _rate(exact["tflops_per_gpu_mean"], unit), _pct(exact["mfu_mean"])
    if exact["tflops_per_gpu_mean"] is None:
        assert "No headline number" in text and _lead_stats(page, text).get("quote") is None
        return
    stats = _lead_stats(page, text)
    before = lm.get("tflops_per_gpu_mean")
    assert stats[f"{unit}/GPU"] == (f"{_rate(before, unit)} → {tf}" if before is not None else tf)
    assert stats["MFU"] == (mfu if exact["mfu_mean"] is None or before is None else f"{_pct(lm['mfu_mean'])} → {mfu}")
    assert stats["quote"] == f"exact {tf}"
    assert stats.get("vision share") == (None if s["vision_share_mean"] is None else _pct(s["vision_share_mean"]))
    verdict = _text(text) if page == "report.md" else _text(re.search(r'<p class="verdict[^"]*">(.*?)</p>', text,
                                                                         flags=re.S).group(1))
    if not s["checks_failed"]:
        assert f"Quote {tf} {unit}/GPU" + (f" at MFU {mfu}" if exact["mfu_mean"] is not None else "") in verdict


def test_terminal_shows_the_summary_values(shown):
    s, text, unit = shown["summary"], shown["terminal"], _unit(shown)
    lines = text.splitlines()
    for name, entry in s["conventions"].items():
        if entry["tflops_per_gpu_mean"] is None:
            continue
        want = (_rate(entry["tflops_per_gpu_mean"], unit),
                _pct(entry["mfu_mean"]) if entry["mfu_mean"] is not None else None)
        got = _found(lines, rf"^\s+{re.escape(name)}\s+([\d,.]+) {re.escape(unit)}/GPU(?:\s+MFU\s+(\S+))?$")
        assert got == [want]
    hfu = _found(lines, r"HFU \(exact \+ recompute \S+\)\s+(\S+)\s+MFU \(exact\) (\S+)")
    assert hfu == ([] if s["hfu"]["hfu_mean"] is None else [(_pct(s["hfu"]["hfu_mean"]),
                                                              _pct(s["conventions"]["exact"]["mfu_mean"]))])
    vision = _found(lines, r"vision share of exact training FLOPs (\S+) ")
    assert vision == ([] if s["vision_share_mean"] is None else [(_pct(s["vision_share_mean"]),)])


def test_compare_shows_the_summary_values(shown):
    s, cmp = shown["summary"], shown["compare.json"]
    for name, entry in s["conventions"].items():
        assert cmp["conventions"][name]["a"] == cmp["conventions"][name]["b"] == entry["tflops_per_gpu_mean"]
        assert cmp["conventions"][name]["mfu"]["a"] == entry["mfu_mean"]
    assert cmp["hfu"]["hfu"]["a"] == s["hfu"]["hfu_mean"]
    if s["regime"]:
        assert cmp["runs"]["a"]["regime"] == {k: s["regime"][k] for k in ("description", "source",
                                                                           "full_training_over_regime")}
    assert cmp["step"]["vision_share"]["a"] == s["vision_share_mean"]
    exact, unit = s["conventions"]["exact"], _unit(shown)
    tf = _rate(exact["tflops_per_gpu_mean"], unit)
    for page in ("compare.md", "compare.html"):
        rows = {row[0]: row for row in _cells(shown[page]) if row}
        assert rows["convention"][1:3] == [f"A {unit}/GPU", f"B {unit}/GPU"]  # one unit for the run and its compare
        assert rows["exact"][1] == rows["exact"][2] == tf
        assert rows["exact"][5] == rows["exact"][6] == _pct(exact["mfu_mean"], 2)
        share = rows.get("vision share of exact FLOPs")
        assert share is None if s["vision_share_mean"] is None else share[1] == _pct(s["vision_share_mean"], 2)
        hfu = _found(_lines(shown[page]), r"HFU \(exact \+ recompute\): A (\S+) ")
        assert hfu == ([] if s["hfu"]["hfu_mean"] is None else [(_pct(s["hfu"]["hfu_mean"], 2),)])
    terminal = [[c.strip() for c in line.split("│")[1:-1]] for line in shown["compare terminal"].splitlines()
                if "│" in line]
    row = next(r for r in terminal if r and r[0] == "exact")
    assert row[1] == row[2] == tf
    assert row[5] == row[6] == _pct(exact["mfu_mean"], 2)  # the rows of compare.md, as the terminal shows them
    share = next((r for r in terminal if r and r[0] == "vision share of exact FLOPs"), None)
    assert share is None if s["vision_share_mean"] is None else share[1] == _pct(s["vision_share_mean"], 2)


def test_each_perturbation_took_effect(shown, request):
    """The perturbed runs are what they claim to be (otherwise the checks above prove less)."""
    s = shown["summary"]
    case = request.node.callspec.params["shown"]
    if case == "slow-and-zero-step":
        assert s["logged_windows"] - s["windows_used"] >= 3  # the two excluded step times + each first window
        assert any(c["name"] == "step_times" and c["status"] != "ok" for c in s["checks"])
    elif case == "missing-dp-ranks":
        assert s["metadata_coverage"]["iterations_short"] == 20
        assert s["step"]["iterations"] < 190
    elif case == "estimate":
        assert s["estimated"] and s["vision_share_mean"] > 0
    elif case == "lora-checkpoint":
        regime = s["regime"]
        assert regime["description"].startswith("LoRA r=16 on ") and "checkpoint-200" in regime["source"]
        assert regime["whole_parts"] is False and regime["full_training_over_regime"] > 1
    elif case == "frozen-tower-by-flags":
        assert s["run_config"]["frozen"] == ["vision"] and s["inputs"]["model_source"] == "cli"


def test_summary_conforms_to_its_declared_schema(shown):
    from vlm_perf.report.schema import check_summary

    s = shown["summary"]
    assert check_summary(s) == []
    bad = {**s, "vision_share": 0.1, "conventions": {**s["conventions"], "exact": {**s["conventions"]["exact"],
                                                                                   "mfu_mean": "22%"}}}
    del bad["windows_used"]
    assert sorted(check_summary(bad)) == ["summary.conventions.exact.mfu_mean: str, declared int/float",
                                          "summary.vision_share: not declared",
                                          "summary.windows_used: declared, missing"]


def test_every_convention_against_the_log_is_the_conventions_number(shown):
    """The log reconciliation's rows are `conventions.<name>` for the conventions the report computed."""
    r = shown["summary"]["log_reconcile"]
    if r["status"] != "ok":
        return
    rows = {c["convention"]: c for c in r["conventions"]}
    for name, entry in shown["summary"]["conventions"].items():
        assert (rows[name]["tflops_per_gpu_mean"], rows[name]["mfu_mean"]) == (entry["tflops_per_gpu_mean"],
                                                                               entry["mfu_mean"])


def test_trace_section_flops_are_the_reports_exact_flops(shown):
    """A run folder with profiler traces: the per-part section's FLOPs are the report's exact FLOPs of the
    profiled iterations (one truth), and report.md shows that total."""
    t = shown["summary"]["trace_parts"]
    if t is None:
        assert "Where the time went, per part" not in shown["report.md"]
        return
    assert t["flops_source"] == "metadata" and t["flops_match_report"] is True
    assert t["flops_total"] == pytest.approx(t["report_exact_flops"], rel=1e-12)
    assert sum(p["flops"] or 0 for p in t["parts"]) == pytest.approx(t["flops_total"], rel=1e-12)
    assert _found(_lines(shown["report.md"]), r"profiled iterations, ([\d.e+]+) in all, the same as the report's "
                                               r"exact FLOPs of those iterations \(([\d.e+]+)\)") == [
        (f"{t['flops_total']:.4e}", f"{t['report_exact_flops']:.4e}")]


def test_the_display_unit_fits_the_run(shown):
    """The unit is the largest in which the run's largest rate reads at least 1 (TFLOP/s from 1 TFLOP/s up)."""
    s, unit = shown["summary"], _unit(shown)
    rates = [abs(e["tflops_per_gpu_mean"]) for e in s["conventions"].values() if e["tflops_per_gpu_mean"]]
    if not rates or max(rates) >= 1:
        assert unit == "TFLOP/s"
    else:
        assert 1 <= max(rates) / SCALE[unit] < 1000


def test_windows_table_reproduces_the_headline(shown):
    """windows.parquet / windows.csv: its ``reliable`` rows are the windows the means use, and the headline
    rates, MFUs and the vision share are recomputed from them by hand (time-weighted means, ratio of sums)."""
    s, table = shown["summary"], shown["windows"]
    assert table.equals(pl.read_csv(shown["windows.csv"].encode(), schema=table.schema))
    assert table.height == s["logged_windows"]
    used = table.filter(pl.col("reliable"))
    assert used.height == s["windows_used"]
    assert used["step_time_excluded"].null_count() == used.height  # an excluded step time is excluded here too
    seconds = used["window_seconds"].sum()
    for name, entry in s["conventions"].items():
        for column, key in ((f"{name}_tflops_per_gpu", "tflops_per_gpu_mean"), (f"{name}_mfu", "mfu_mean")):
            if entry[key] is None:
                continue
            mean = (used[column] * used["window_seconds"]).sum() / seconds
            assert mean == pytest.approx(entry[key], rel=1e-9), (name, key)
    if s["vision_share_mean"] is not None:
        share = used["exact_vision_flops"].sum() / used["exact_flops"].sum()
        assert share == pytest.approx(s["vision_share_mean"], rel=1e-12)


def test_check_counts_are_one_value(shown):
    """The terminal's check tally is the checks of summary.json (evidence conflicts count as warnings)."""
    s = shown["summary"]
    failed = [c["name"] for c in s["checks"] if c["status"] == "fail"]
    warned = [c["name"] for c in s["checks"] if c["status"] == "warn"]
    assert s["checks_failed"] == failed
    tally = _found(shown["terminal"].splitlines(), r"^checks:\s+(none failed|\d+ FAILED)(?: \([^)]*\))?, (\d+) warning")
    assert tally == [("none failed" if not failed else f"{len(failed)} FAILED", str(len(warned)))]
    # a configuration conflict is stated once: by the configuration check (every conflict), never again as a message
    assert not [m for m in s["messages"] if "conflict" in m]
    config = next((c for c in s["checks"] if c["name"] == "configuration"), None)
    if config is not None and config["status"] == "warn":
        for conflict in config["details"]["conflicts"]:
            assert config["summary"].count(f"{conflict['field']}: ") >= 1


def test_memory_is_one_value(shown):
    """Peak memory per rank: report.md's line is summary.json's bytes in GiB (2^30)."""
    m = shown["summary"].get("memory")
    lines = _lines(shown["report.md"])
    got = _found(lines, r"highest max allocated (\S+) GiB, max reserved (\S+) GiB \(rank (\d+)\)")
    if not m:
        assert got == []
        return
    gib = [("—" if v is None else f"{v / 2 ** 30:,.2f}") for v in (m["max_allocated_bytes"], m["max_reserved_bytes"])]
    assert got == [(*gib, str(m["peak_rank"]))]


def test_rl_numbers_are_one_value(shown):
    """An RL run's generation share, training-only share, step FLOPs and per-phase FLOPs are the summary's values
    in report.md, report.html and the terminal (each formatted at the precision the place shows)."""
    s = shown["summary"]
    rl = s.get("rl")
    if not rl:
        pytest.skip("not an RL run")
    unit = _unit(shown)
    gen, only = _pct(rl["phases"]["generation"]["time_share"]), _pct(rl["training_only_share"])
    assert rl["headline"].endswith(f"generation {gen} of the step time")
    for page in ("report.md", "report.html"):
        lines = _lines(shown[page])
        assert _found(lines, r"generation (\S+) of the step time \(\d+ RL steps\)\. Training-only accounting "
                             r"counts (\S+) of") == [(gen, only)]
        assert _found(lines, rf"Whole RL steps: ([\d,]+) FLOPs in \S+ s = ([\d,.]+) {re.escape(unit)}/GPU") == [
            (f"{rl['flops_total']:,.0f}", _rate(rl["tflops_per_gpu"], unit))]
        rows = [row for row in _cells(shown[page]) if len(row) > 3]
        for name, phase in rl["phases"].items():  # the phase table (labelled; FLOPs) and the by-part table (keys)
            assert any(row[2] == f"{phase['flops']:,.0f}" and row[-2] == _pct(phase["time_share"]) for row in rows), (
                name, phase)
            parts = [f"{v:,.0f}" for v in phase["parts"].values()]
            assert [row[1:] for row in rows if row[0] == name] == ([parts] if phase["flops"] else []), (name, parts)
    terminal = _found(shown["terminal"].splitlines(),
                      rf"generation (\S+) of the step time; every phase ([\d,.]+) {re.escape(unit)}/GPU; "
                      r"training-only accounting (\S+) of")
    assert terminal == [(gen, _rate(rl["tflops_per_gpu"], unit), only)]
