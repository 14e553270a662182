"""One run, one truth: every quantity shown in more than one place shows the same value everywhere.

Runs `vlm-perf report` and `vlm-perf compare` on every bundled sample and on perturbed copies of them
(a step time 100x longer and a non-positive one, DP ranks missing from the metadata, estimate mode
without metadata, a frozen vision tower) and reads each quantity back from every place it is shown:
summary.json, report.md (rendered by an independent CommonMark parser), report.html, the terminal
summary, compare.json, compare.md, compare.html and the compare terminal table. The expected
strings are the summary.json values formatted at the precision each place states (one decimal for
TFLOP/s and the report's percentages, two for compare's percentages), so a place that computed its
own variant of a number (another window selection, another vision-share definition) fails here.
"""

from __future__ import annotations

import gzip
import html
import json
import re
import shutil
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from vlm_perf.cli import app

ROOT = Path(__file__).resolve().parents[2]
# every bundled run with a training log (qwen2-vl-tiny-trace is a profiler trace for `vlm-perf trace`, no log)
SAMPLES = sorted(p for p in (ROOT / "sample_logs").iterdir() if p.is_dir() and any(p.glob("train.log*")))
SFT = ROOT / "sample_logs" / "qwen3-vl-30b-a3b-sft"
VIDEO = ROOT / "sample_logs" / "qwen2.5-vl-7b-video"
MD = MarkdownIt("commonmark").enable(["table"])


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


def _found(lines: list[str], pattern: str) -> list[tuple]:
    return [m.groups() for line in lines for m in [re.search(pattern, line)] if m]


@pytest.fixture(scope="module", params=list(CASES))
def shown(request, tmp_path_factory):
    """(summary, {place: page text}) of one case: report + compare of the run with itself."""
    tmp = tmp_path_factory.mktemp(request.param)
    run = tmp / "run"
    extra = CASES[request.param](run)
    runner = CliRunner()
    r = runner.invoke(app, ["report", str(run), "-o", str(tmp / "out"), *extra])
    assert r.exit_code == 0, (r.output, r.exception)
    terminal = r.stdout
    r2 = runner.invoke(app, ["compare", str(run), str(run), "-o", str(tmp / "cmp"), *_per_run(extra)],
                       env={"COLUMNS": "220"})
    assert r2.exit_code == 0, (r2.output, r2.exception)
    out = tmp / "out"
    return {"summary": json.loads((out / "summary.json").read_text()),
            "report.md": MD.render((out / "report.md").read_text()), "report.html": (out / "report.html").read_text(),
            "terminal": terminal, "compare.json": json.loads((tmp / "cmp" / "compare.json").read_text()),
            "compare.md": MD.render((tmp / "cmp" / "compare.md").read_text()),
            "compare.html": (tmp / "cmp" / "compare.html").read_text(), "compare terminal": r2.stdout}


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
    s, text = shown["summary"], shown[page]
    exact = s["conventions"]["exact"]
    tf, mfu = _num(exact["tflops_per_gpu_mean"]), _pct(exact["mfu_mean"])
    rows = [row for row in _cells(text) if row and row[0] == "exact"]
    assert [row[1:3] for row in rows] == [[tf, mfu]]  # the conventions table
    lines = _lines(text)
    assert _found(lines, r"Quote exact \(([\d,.—]+) TFLOP/s/GPU, MFU ([^)]+)\)") == [
        (tf, mfu if exact["mfu_mean"] is not None else "unknown without a GPU peak")]
    headline = _found(lines, r"exact with vision ([\d,.]+) TFLOP/s/GPU .*?MFU \S+ → (\S+) on")
    if s["conventions"].get("megatron-lm", {}).get("tflops_per_gpu_mean") and exact["tflops_per_gpu_mean"]:
        assert headline == [(tf, mfu)]
    hfu = _found(lines, r"MFU \(exact\) (\S+) → HFU (\S+);")
    if s["hfu"]["hfu_mean"] is not None:
        assert hfu == [(mfu, _pct(s["hfu"]["hfu_mean"]))]
    else:
        assert hfu == []
    vision = _found(lines, r"Vision share of exact training FLOPs: (\S+) ")
    assert vision == ([] if s["vision_share_mean"] is None else [(_pct(s["vision_share_mean"]),)])
    regime, shown_regime = s["regime"], _found(lines, r"^Regime: (.+?) \(.*?×([\d.]+) these FLOPs")
    assert shown_regime == ([] if not regime else [(regime["description"],
                                                    f"{regime['full_training_over_regime']:.3f}")])
    b = s["balance"]
    idle = _found(lines, r"idles (\S+) of the step \(median; FLOPs-weighted mean (\S+);")
    heavy = _found(lines, r"Heaviest rank / mean: median ([\d.]+) ")
    if b and b.get("iterations") and b.get("dp_ranks", 0) > 1:
        assert idle == [(_pct(b["idle_fraction_median"]), _pct(b["idle_fraction_mean"]))]
        assert heavy == [(_num(b["flops_max_over_mean_median"], 3),)]
    else:
        assert idle == heavy == []


def test_terminal_shows_the_summary_values(shown):
    s, text = shown["summary"], shown["terminal"]
    lines = text.splitlines()
    for name, entry in s["conventions"].items():
        if entry["tflops_per_gpu_mean"] is None:
            continue
        want = (_num(entry["tflops_per_gpu_mean"]), _pct(entry["mfu_mean"]) if entry["mfu_mean"] is not None else None)
        got = _found(lines, rf"^\s+{re.escape(name)}\s+([\d,.]+) TFLOP/s/GPU(?:\s+MFU\s+(\S+))?$")
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
    exact = s["conventions"]["exact"]
    for page in ("compare.md", "compare.html"):
        rows = {row[0]: row for row in _cells(shown[page]) if row}
        assert rows["exact"][1] == rows["exact"][2] == _num(exact["tflops_per_gpu_mean"])
        assert rows["exact"][5] == rows["exact"][6] == _pct(exact["mfu_mean"], 2)
        share = rows.get("vision share of exact FLOPs")
        assert share is None if s["vision_share_mean"] is None else share[1] == _pct(s["vision_share_mean"], 2)
        hfu = _found(_lines(shown[page]), r"HFU \(exact \+ recompute\): A (\S+) ")
        assert hfu == ([] if s["hfu"]["hfu_mean"] is None else [(_pct(s["hfu"]["hfu_mean"], 2),)])
    terminal = [[c.strip() for c in line.split("│")[1:-1]] for line in shown["compare terminal"].splitlines()
                if "│" in line]
    row = next(r for r in terminal if r and r[0] == "exact")
    assert row[1] == row[2] == _num(exact["tflops_per_gpu_mean"])
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
