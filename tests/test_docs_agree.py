"""Docs and tool agree: the sample numbers the READMEs quote are the numbers the report prints (its summary.json,
rendered by the real entry point), the README names every model family `vlm-perf families` lists and in the right
group, and every relative link of the docs points to a file of this repository (and, into a Markdown page, to one of
its headings)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import run_main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SAMPLES_README = ROOT / "sample_logs" / "README.md"
DOCS = sorted({README, SAMPLES_README, *(ROOT / "docs").glob("*.md"), *(ROOT / "notebooks").glob("*.md"),
               *(ROOT / "sample_logs").glob("*/README.md")})
NUMBER = re.compile(r"-?\d[\d,]*\.\d+|-?\d[\d,]*")


# ---- Markdown, read the way a renderer reads it ---------------------------------------------------------------
def prose(text: str) -> str:
    """``text`` without fenced code blocks (their lines blanked, so line numbers stay)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def tables(text: str) -> list[list[list[str]]]:
    """Every pipe table of ``text``: its rows (header first, the ``|---|`` rule dropped) as lists of cells."""
    found, current = [], []
    for line in prose(text).splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    return found


def first_number(cell: str) -> float:
    m = NUMBER.search(cell.replace("**", ""))
    assert m, f"no number in the cell {cell!r}"
    return float(m.group(0).replace(",", ""))


def _conventions() -> set[str]:
    from vlm_perf.flops import CONVENTIONS

    return set(CONVENTIONS)


def convention_columns(header: list[str]) -> dict[int, str]:
    """{column: convention} for the header cells that name one convention in backticks."""
    names = _conventions()
    out = {}
    for i, cell in enumerate(header):
        named = [n for n in re.findall(r"`([^`]+)`", cell) if n in names]
        if len(named) == 1:
            out[i] = named[0]
    return out


def assert_quoted(where: str, cell: str, entry: dict) -> None:
    """A cell quoting a convention's numbers: its first number is the mean TFLOP/s/GPU as the report prints it (one
    decimal), and an ``MFU x%`` in it is the mean MFU (one decimal)."""
    tf = entry["tflops_per_gpu_mean"]
    assert f"{first_number(cell):.1f}" == f"{tf:.1f}", f"{where}: the doc quotes {cell!r}, the report prints {tf:.1f}"
    mfu = re.search(r"MFU (\d+\.\d)%", cell)
    if mfu:
        assert mfu.group(1) == f"{100 * entry['mfu_mean']:.1f}", \
            f"{where}: the doc quotes {cell!r}, the report prints MFU {100 * entry['mfu_mean']:.1f}%"


# ---- the numbers --------------------------------------------------------------------------------------------
def test_the_table_reader_reads_cells_numbers_and_conventions():
    text = "x\n\n| run | `exact` (x) | `megatron-lm` |\n|---|---:|---|\n| a | **1,234.5** | 7 (MFU 2.0%) |\n\ny\n"
    (table,) = tables(text)
    assert table == [["run", "`exact` (x)", "`megatron-lm`"], ["a", "**1,234.5**", "7 (MFU 2.0%)"]]
    assert convention_columns(table[0]) == {1: "exact", 2: "megatron-lm"}
    assert first_number(table[1][1]) == 1234.5 and first_number(table[1][2]) == 7.0
    assert tables("```\n| a | b |\n```\n") == []  # a table inside a code block is code


@pytest.mark.slow  # three end-to-end reports (shared with the other tests through the session fixture)
def test_sample_logs_readme_quotes_what_the_report_prints(sample_report):
    (table,) = [t for t in tables(SAMPLES_README.read_text()) if t[0][0] == "Directory"]
    columns = convention_columns(table[0])
    assert set(columns.values()) == {"megatron-lm", "mbridge-pr2575", "exact"}, table[0]
    assert len(table) - 1 == 3
    for row in table[1:]:
        name = row[0].strip("`/")
        _, summary, _ = sample_report(name)
        for col, conv in columns.items():
            assert_quoted(f"sample_logs/README.md, {name}, {conv}", row[col], summary["conventions"][conv])
    _, video, _ = sample_report("qwen2.5-vl-7b-video")  # the prose of section (c) quotes one more row
    bridge = video["conventions"]["megatron-bridge"]["tflops_per_gpu_mean"]
    assert f"`megatron-bridge` row reads {bridge:.1f} TFLOP/s/GPU" in SAMPLES_README.read_text()


def test_readme_headline_table_is_the_sample_reports(sample_report):
    """The README's headline numbers are those of `python3 dev.py main`'s report (the sft sample)."""
    _, summary, _ = sample_report("qwen3-vl-30b-a3b-sft")  # rendered for the fast tier's report tests too
    quick = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    (table,) = [t for t in tables(quick) if t[0][:2] == ["convention", "TFLOP/s/GPU"]]
    names = _conventions()
    quoted = {}
    for row in table[1:]:
        (conv,) = [n for n in re.findall(r"`([^`]+)`", row[0]) if n in names]
        quoted[conv] = row
        assert_quoted(f"README.md, {conv}", f"{row[1]} (MFU {row[2]})", summary["conventions"][conv])
    assert {"megatron-lm", "exact"} <= set(quoted)
    assert f"{summary['logged_tflops_per_gpu_mean']:.1f}" == f"{first_number(quoted['megatron-lm'][1]):.1f}", \
        "the README calls the megatron-lm row what the log printed"


# ---- the families -------------------------------------------------------------------------------------------
def _families_paragraph() -> str:
    text = README.read_text()
    start = text.index("Supported architectures")
    return text[start:text.index("\nEach family is one module", start)]


def test_readme_names_every_family_vlm_perf_families_lists():
    done = run_main("families")
    assert done.returncode == 0, done.stderr
    listed = [m.group(1) for m in re.finditer(r"^(\S+) \(", done.stdout, re.M)]
    assert len(listed) >= 40, done.stdout[:500]
    named = re.findall(r"`([^`]+)`", _families_paragraph())
    missing = [f for f in listed if f not in named]
    assert not missing, f"README.md's 'Supported architectures' does not name {missing} (`vlm-perf families`)"


def test_readme_groups_each_family_by_what_it_models():
    from vlm_perf.arch.families import FAMILIES

    paragraph = _families_paragraph()
    groups = {"Vision + LM:": (True, False), "vision + audio + LM": (True, True), "LM-only:": (False, False)}
    starts = sorted((paragraph.index(g), g) for g in groups)
    for (start, group), (end, _) in zip(starts, starts[1:] + [(len(paragraph), None)]):
        names = [n for n in re.findall(r"`([^`]+)`", paragraph[start:end]) if n in FAMILIES]
        assert names, group
        for name in names:
            fam = FAMILIES[name]
            assert (fam.is_vlm, bool(getattr(fam, "has_audio", False))) == groups[group], f"{name} is not {group}"
    assert not [n for n in re.findall(r"`([a-z0-9_-]+)`", paragraph[starts[0][0]:]) if n not in FAMILIES], \
        "a name in the list that is no family"


# ---- the links ----------------------------------------------------------------------------------------------
def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    out: set[str] = set()
    for line in prose(doc.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base, n = slug(m.group(1)), 1
            name = base
            while name in out:  # GitHub numbers repeated headings: name, name-1, name-2
                name, n = f"{base}-{n}", n + 1
            out.add(name)
    out |= set(re.findall(r'<a (?:name|id)="([^"]+)"', doc.read_text()))
    return out


def links_in(text: str) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link or image, reference definition and HTML href/src outside code."""
    out = []
    for n, line in enumerate(prose(text).splitlines(), 1):
        line = re.sub(r"`[^`]*`", "", line)  # code spans are code
        for target in re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", line):
            out.append((n, target))
        out += [(n, t) for t in re.findall(r"^\s*\[[^\]]+\]:\s*(\S+)", line)]
        out += [(n, t) for t in re.findall(r"(?:href|src)=\"([^\"]+)\"", line)]
    return out


def test_the_link_reader_finds_links_not_code():
    assert slug("Many runs: a sweep (`vlm-perf compare RUN1 ... RUNn`)") == "many-runs-a-sweep-vlm-perf-compare-run1--runn"
    assert slug("RL steps (GRPO / PPO)") == "rl-steps-grpo--ppo"
    assert slug("Profiler traces (`benchmarks/bench_trace.py`)") == "profiler-traces-benchmarksbench_tracepy"
    doc = "# T\n\n```\n[x](nowhere.md)\n```\nsee [a](b.md#c) and `[y](not-a-link.md)`\n"
    assert [t for _, t in links_in(doc)] == ["b.md#c"]


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_relative_link_points_into_the_repository(doc):
    bad = []
    for line, target in links_in(doc.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        where = f"{doc.relative_to(ROOT)}:{line}: {target}"
        if ROOT not in file.parents and file != ROOT:
            bad.append(f"{where} (outside the repository)")
        elif not file.exists():
            bad.append(f"{where} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            bad.append(f"{where} (no heading with that anchor)")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_repository_paths_named_in_code_exist(doc):
    """A test or docs page named as `tests/....py` / `docs/....md` is this repository's, and exists; no doc sends the
    reader to a reference folder that is not in the repository."""
    text = doc.read_text()
    named = re.findall(r"`((?:tests|docs)/[\w./-]+\.(?:py|md))(?:::\w+)?`", text)
    missing = sorted({p for p in named if not (ROOT / p).exists()})
    assert not missing, f"{doc.relative_to(ROOT)} names files that do not exist: {missing}"
    assert "shared/reference" not in text, f"{doc.relative_to(ROOT)} points to shared/reference/, not in the repository"
