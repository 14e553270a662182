"""Strings from the input cannot become Markdown syntax, live HTML or matplotlib mathtext.

The Markdown side is checked with an independent CommonMark renderer (markdown-it-py, the parser
rich uses) with raw HTML enabled: whatever the text, it must render as that text and nothing else.
"""

import html
import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from markdown_it import MarkdownIt  # noqa: E402

from vlm_perf.report.content import B, T, md_escape, md_inline, mathtext_safe  # noqa: E402
from vlm_perf.report.render import _html_inline  # noqa: E402
from tests.support import run_main  # the CLI entry point in-process (same exit statuses, one-line errors)

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_A = ROOT / "sample_logs" / "qwen3-vl-30b-a3b-sft"
MD = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])

HOSTILE = ["<script>alert(1)</script>", "**bold** _it_ `code`", "[link](http://x)", "![img](x.png)", "# heading",
           "- item", "1. one", "> quote", "a | b | c", "$x^2$", "~~gone~~", "&amp; &lt;", "line\n# two", "\\*",
           "<img src=x onerror=alert(1)>", "H100 (SXM) 80GB", "---", "==="]


def _rendered_text(markdown: str) -> str:
    """Rendered HTML of ``markdown`` as one paragraph's text (asserting no other element appeared)."""
    out = MD.render(markdown).strip()
    assert out.startswith("<p>") and out.endswith("</p>"), out
    inner = out[3:-4]
    assert "<" not in inner.replace("&lt;", ""), out  # no element: not even <em>, <a>, <img>, <script>
    return html.unescape(inner)


@pytest.mark.parametrize("text", HOSTILE)
def test_md_escape_renders_as_the_text(text):
    assert _rendered_text(md_escape(text, line_start=True)) == " ".join(text.splitlines())


@settings(derandomize=True, deadline=None, max_examples=300)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")) | st.sampled_from(
    list("<>&*_`[]()#!|~$-+.=\\ 0123456789")), min_size=1, max_size=40))
def test_md_escape_fuzz(text):
    expected = " ".join(text.splitlines())
    if not expected.strip():
        return
    # CommonMark strips leading/trailing spaces of a paragraph and normalises some characters
    assert _rendered_text(md_escape(text, line_start=True)) == expected.strip().replace("\x00", "\ufffd")


def test_bold_spans_keep_their_text():
    md = md_inline(T("gpu ", B("<b>x</b>*"), " done"))
    assert MD.render(md).strip() == "<p>gpu <strong>&lt;b&gt;x&lt;/b&gt;*</strong> done</p>"
    assert str(_html_inline(T("gpu ", B("<script>")))) == "gpu <b>&lt;script&gt;</b>"


def test_script_in_run_yaml_is_not_live(tmp_path, sample_run):
    run = sample_run()
    manifest = (run / "run.yaml").read_text().replace("gpu: GB200", 'gpu: "<script>alert(1)</script>GB200"')
    (run / "run.yaml").write_text(manifest.split("\nnotes:")[0] + "\nnotes: '**bold** [x](javascript:alert(1)) "
                                  "<img src=x onerror=alert(1)> $x$'\n")
    out = tmp_path / "out"
    r = run_main("report", run, "-o", out)
    assert r.returncode == 0, r.stderr
    page = (out / "report.html").read_text()
    assert "<script" not in page.lower() and "<img src=x" not in page and "&lt;script&gt;" in page
    md = (out / "report.md").read_text()
    rendered = MD.render(md)
    assert "<script" not in rendered.lower() and "<img src=x" not in rendered and 'href="javascript' not in rendered
    prose = re.sub(r"(`{3,})json\n.*?\n\1", "", md, flags=re.S)  # the appendix's JSON block renders as code
    assert "<script" not in prose and "<img" not in prose and "&lt;script>" in prose
    s = json.loads((out / "summary.json").read_text())
    assert s["gpu"] == "<script>alert(1)</script>GB200"  # the JSON keeps the raw value


@pytest.mark.parametrize("title", ["cost $5 and $\\undefinedcommand{$ $", "$\\frac{1}{$", "a $x$ b \\$ c $"])
def test_titles_cannot_trigger_mathtext(title, tmp_path):
    fig, ax = plt.subplots()
    ax.set_title(mathtext_safe(title))
    fig.savefig(tmp_path / "t.png")  # raw, these titles raise a mathtext ParseException when drawn
    assert ax.title.get_text() == title.replace("$", "\\$")
    assert ax.title._preprocess_math(ax.title.get_text())[1] is False  # matplotlib's own math detection
    plt.close(fig)
    fig, ax = plt.subplots()
    ax.set_title(title)
    if (title.count("$") - title.count("\\$")) % 2 == 0 and "frac" in title or "undefined" in title:
        with pytest.raises(ValueError):
            fig.savefig(tmp_path / "raw.png")
    plt.close(fig)


def test_code_block_cannot_be_closed_by_its_content():
    from vlm_perf.report.content import md_fence

    text = 'x ``` y ```` z'
    fence = md_fence(text)
    md = f"{fence}json\n{text}\n{fence}\n"
    assert re.fullmatch(r"<pre><code class=\"language-json\">.*</code></pre>", MD.render(md).strip(), re.S)


def _hostile_summary(text: str, tflops: float) -> dict:
    return {"run": text, "model": text, "gpu": text, "dtype": text, "world_size": 8, "peak_tflops": 989.0,
            "synthetic": False, "estimated": False, "messages": [text],
            "conventions": {"exact": {"tflops_per_gpu_mean": tflops, "mfu_mean": tflops / 989.0}},
            "step": {"iterations": 10, "seconds_per_iteration": 1.0, "exact_flops_per_iteration": tflops * 8e12},
            "hfu": {"recompute": text, "rule": text, "source": text, "hfu_mean": tflops / 989.0},
            "log_crosscheck": {"message": text}}


@pytest.mark.parametrize("text", HOSTILE)
def test_compare_pages_escape_input_strings(text, tmp_path):
    """compare.md goes through the report's escaping: every input string renders as that text (CommonMark,
    raw HTML on); compare.html is autoescaped by the same template."""
    from vlm_perf.analysis.compare import compare_summaries
    from vlm_perf.report.compare_page import headline, write_compare

    cmp = compare_summaries(_hostile_summary(text, 400.0), _hostile_summary(text, 500.0))
    paths = write_compare(cmp, tmp_path)
    rendered = MD.render(paths["compare.md"].read_text())
    flat = " ".join(text.splitlines())
    items = [html.unescape(re.sub(r"<[^>]+>", "", li)) for li in re.findall(r"<li>(.*?)</li>", rendered, re.S)]
    assert items[0].startswith(f"A: {flat} — {flat} on 8 × {flat}")  # the run, model and GPU strings as text
    assert f"B: {flat}" in items and items[1].startswith(f"B: {flat}")
    assert f"A: {flat}" in items  # the messages
    assert items[0] == headline(cmp)[0].replace("\n", " ")
    for li in re.findall(r"<li>(.*?)</li>", rendered, re.S):  # no element but the page's own bold marks
        assert "<" not in li.replace("<strong>", "").replace("</strong>", ""), li
    assert "<script" not in rendered and "<img src=x" not in rendered
    page = paths["compare.html"].read_text()
    assert "<script" not in page and "<img src=x" not in page
    assert html.escape(text, quote=False) in page or html.escape(text) in page


def test_compare_terminal_prints_input_strings_as_text(cli, sample_run):
    """A run path holding rich markup is printed as written (the terminal is one more place input reaches)."""
    run = sample_run("qwen2-vl-tiny-real", "[red]run[/red] *x*")
    r = cli("compare", str(run), str(run), env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert f"A: {run} — " in r.stdout and f"B: {run} — " in r.stdout


@pytest.mark.parametrize("text", HOSTILE)
def test_sweep_page_escapes_input_strings(text, tmp_path):
    """The sweep page (three or more runs) goes through the same escaping: run, model, GPU and messages render as
    that text in every table cell and list item, and compare.html stays free of live HTML."""
    from vlm_perf.analysis.sweep import sweep_table
    from vlm_perf.report.sweep_page import FIGURES, render_html, render_markdown

    table = sweep_table([_hostile_summary(text, 400.0), _hostile_summary(text, 450.0), _hostile_summary(text, 500.0)])
    for name in FIGURES:  # the figures hold run indices only (#1, #2, ...): stand-ins keep this test fast
        (tmp_path / name).write_bytes(b"\x89PNG")
    rendered = MD.render(render_markdown(table))
    flat = " ".join(text.splitlines())
    rows = re.findall(r"<tr>(.*?)</tr>", rendered, re.S)[1:]
    assert len(rows) == 3
    for row in rows:
        cells = [html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", row, re.S)]
        assert "<" not in "".join(re.findall(r"<td>(.*?)</td>", row, re.S)).replace("&lt;", "")
        assert cells[1] == flat and cells[2] == flat and cells[3] == f"8 × {flat}"  # run, model, GPUs as text
    items = re.findall(r"<li>(.*?)</li>", rendered, re.S)
    assert f"#3 {flat}: {flat}" in [html.unescape(li) for li in items]  # a run's message, as text
    for li in items:  # no element but the page's own bold and code marks
        assert "<" not in re.sub(r"</?(strong|code)>", "", li), li
    assert "<script" not in rendered and "<img src=x" not in rendered
    page = render_html(table, tmp_path)
    assert "<script" not in page and "<img src=x" not in page
