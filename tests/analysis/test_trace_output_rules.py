"""``vlm-perf trace -o DIR`` follows the report's output rules (issue 34, security class).

1. Escaping: every op / kernel / part name and note in trace_parts.md goes through the report's escaping
   (`vlm_perf.report.content`), so whatever a trace names an op, an independent CommonMark + GFM renderer
   (markdown-it-py, raw HTML enabled) shows that name as the text of one code span in one table cell: a backtick
   cannot close the span, a ``|`` cannot split the cell, ``<script>`` / ``<img onerror>`` never become elements.
2. Output folder: the report's rule (`vlm_perf.report.output.atomic_report_dir`): files are created new in a fresh
   folder renamed into place, never written through a symlink (a symlinked ``-o`` or a link planted inside it
   leaves its target untouched), and a folder holding anything but an earlier ``trace -o`` output is refused.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from markdown_it import MarkdownIt

from tests.support import run_main
from vlm_perf.analysis.trace_parts import attribute
from vlm_perf.commands.trace import markdown
from vlm_perf.ingest.traces import read_traces

MD = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
HOSTILE = ["a`b", "``x``", "a | b | c", "<script>alert(1)</script>", "<img src=x onerror=alert(1)>",
           "ampere_sgemm|<b>x</b>", "**bold** [l](http://x)", "line\nbreak", "\\`tick", "$x^2$ ~~s~~ &amp;"]


def _trace(folder: Path, op: str) -> Path:
    """One ProfilerStep holding one CPU op named ``op`` (50 µs of a 100 µs step)."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
          {"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": 10, "dur": 50}]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "rank0.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def _top_cells(md: str) -> list[str]:
    """The rendered cells (HTML) of the top-ops table's rows, asserting no element other than a code span
    appears in any of them."""
    rendered = MD.render(md)
    body = rendered.split("<th>top ops / kernels by time</th>", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", body.split("<tbody>", 1)[1], re.S)
    cells = []
    for row in rows:
        tds = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        assert len(tds) == 4, row  # op, part, time, calls: a `|` in a name did not split the cell
        cells.append(tds[0])
    return cells


def _assert_shown_as(md: str, name: str) -> None:
    shown = " ".join(name[:90].splitlines())
    cells = _top_cells(md)
    assert len(cells) == 1
    code = re.fullmatch(r"<code>(.*)</code>", cells[0], re.S)
    assert code is not None, cells[0]  # one code span and nothing else: no <script>, <img>, <em>, <a>
    assert "<" not in code.group(1)
    assert html.unescape(code.group(1)).strip() == shown.strip()


@pytest.mark.parametrize("name", HOSTILE)
def test_an_op_name_is_shown_as_its_own_text_in_one_code_span(tmp_path, name):
    result = attribute(read_traces(_trace(tmp_path, name)).events, first_iteration=1)
    _assert_shown_as(markdown(result), name)


@settings(derandomize=True, deadline=None, database=None, max_examples=60)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")) | st.sampled_from(
    list("<>&*_`[]()#!|~$-+.=\\ \n")), min_size=1, max_size=60).filter(lambda s: s.strip() and s == s.strip()))
def test_fuzz_any_op_name_renders_as_its_text(tmp_path_factory, name):
    result = attribute(read_traces(_trace(tmp_path_factory.mktemp("t"), name)).events, first_iteration=1)
    _assert_shown_as(markdown(result), name)


def test_trace_o_writes_escaped_markdown_through_the_cli(tmp_path):
    trace = _trace(tmp_path / "in", "x`<script>alert(1)</script>|y")
    r = run_main("trace", trace, "-o", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "out" / "trace_parts.md").read_text()
    _assert_shown_as(md, "x`<script>alert(1)</script>|y")
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"trace_parts.json", "trace_parts.md",
                                                              "trace_parts.png", "per_step.csv", ".vlm-perf-report"}


def test_a_link_planted_in_the_output_folder_is_never_written_through(tmp_path):
    trace = _trace(tmp_path / "in", "aten::mm")
    out = tmp_path / "out"
    assert run_main("trace", trace, "-o", out).returncode == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (out / "trace_parts.md").unlink()
    (out / "trace_parts.md").symlink_to(victim)  # an attacker's link where the next run writes
    r = run_main("trace", trace, "-o", out)
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "keep me\n"
    assert not (out / "trace_parts.md").is_symlink() and "aten::mm" in (out / "trace_parts.md").read_text()


def test_a_symlinked_output_folder_is_refused_in_one_line(tmp_path):
    trace = _trace(tmp_path / "in", "aten::mm")
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    r = run_main("trace", trace, "-o", tmp_path / "link")
    assert r.returncode != 0 and r.stderr.strip().count("\n") == 0
    assert "symlink" in r.stderr and "link" in r.stderr
    assert list(real.iterdir()) == []


@pytest.mark.parametrize("foreign", ["notes.txt", "summary.json"])
def test_a_folder_of_other_files_is_refused_not_replaced(tmp_path, foreign):
    trace = _trace(tmp_path / "in", "aten::mm")
    out = tmp_path / "out"
    out.mkdir()
    (out / foreign).write_text("mine\n")
    r = run_main("trace", trace, "-o", out)
    assert r.returncode != 0 and r.stderr.strip().count("\n") == 0
    assert "not a vlm-perf trace -o folder" in r.stderr
    assert (out / foreign).read_text() == "mine\n"


def test_an_earlier_trace_output_is_replaced_as_a_whole(tmp_path):
    out = tmp_path / "out"
    assert run_main("trace", _trace(tmp_path / "a", "first_op"), "-o", out).returncode == 0
    assert run_main("trace", _trace(tmp_path / "b", "second_op"), "-o", out).returncode == 0
    md = (out / "trace_parts.md").read_text()
    assert "second_op" in md and "first_op" not in md


def test_compare_o_follows_the_same_rule(tmp_path):
    """The same mechanism (`atomic_report_dir` with the compare kind): a link planted where compare.md goes is not
    written through, and a folder of other files is refused."""
    from vlm_perf.analysis.compare import compare_summaries
    from vlm_perf.report.compare_page import write_compare
    from vlm_perf.errors import VlmPerfError
    from tests.report.test_escaping import _hostile_summary

    cmp = compare_summaries(_hostile_summary("a", 400.0), _hostile_summary("b", 500.0))
    out = tmp_path / "cmp"
    write_compare(cmp, out)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (out / "compare.md").unlink()
    (out / "compare.md").symlink_to(victim)
    write_compare(cmp, out)
    assert victim.read_text() == "keep me\n" and not (out / "compare.md").is_symlink()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine\n")
    with pytest.raises(VlmPerfError, match="not a vlm-perf compare -o folder"):
        write_compare(cmp, other)
    assert (other / "notes.txt").read_text() == "mine\n"
