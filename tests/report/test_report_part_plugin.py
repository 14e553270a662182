"""Adding a report section touches one module: a report part defined in ONE new module (written to a temporary
folder, imported after vlm_perf, as a plugin is) shows in summary.json and the schema, report.md, report.html,
the terminal summary and the Figures section; the strings it computes are escaped in every format.

The Markdown is read back with an independent CommonMark renderer (markdown-it-py): the hostile text must
render as that text and nothing else (no emphasis, link, table cell or live HTML)."""

from __future__ import annotations

import html
import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from tests.support import invoke_cli

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_logs" / "qwen2-vl-tiny-real"
MD = MarkdownIt("commonmark", {"html": True}).enable(["table"])
HOSTILE = "<script>x</script> **not bold** | cell [link](http://x)"

PLUGIN = '''
"""A whole report part in one module: computed result, summary key + schema, section, figure, terminal line."""
import matplotlib.pyplot as plt

from vlm_perf.report.content import Bullets, SectionContent, T
from vlm_perf.report.figures import Skip
from vlm_perf.report.parts import Figure, ReportPart, register_part
from vlm_perf.report.schema import key

HOSTILE = {hostile!r}


def compute(ctx):
    return {{"iterations": ctx.analysis.per_iteration.height, "label": HOSTILE}}


def section(inputs):
    block = inputs.summary["plugin_part"]
    return SectionContent("Plugin part", [Bullets([T(f"{{block['iterations']}} iterations; label ", block["label"])])])


def draw(run, ctx, path):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    fig.savefig(path)
    plt.close(fig)


def nothing(run, ctx, path):
    raise Skip("nothing to show in this test")


register_part(ReportPart(
    "plugin_part", order=37, compute=compute, section=section,
    keys=(key("plugin_part", "block", dict, "a plugin's block", "tests.plugin", fields=(
        key("iterations", "count", int, "iterations with statistics", "tests.plugin"),
        key("label", "text", str, "a string from the input", "tests.plugin"))),),
    figures=(Figure("plugin.png", "The plugin's figure", draw), Figure("plugin_empty.png", "An empty one", nothing)),
    terminal=lambda summary: [f"  plugin: {{summary['plugin_part']['iterations']}} iterations"]))
'''


@pytest.fixture
def plugin(tmp_path):
    from vlm_perf.report.parts import PARTS

    path = tmp_path / "plugin_part_module.py"
    path.write_text(textwrap.dedent(PLUGIN.format(hostile=HOSTILE)))
    spec = importlib.util.spec_from_file_location("plugin_part_module", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["plugin_part_module"] = module
    spec.loader.exec_module(module)  # registers the part, after vlm_perf was imported
    yield module
    PARTS.pop("plugin_part")
    sys.modules.pop("plugin_part_module")


def test_a_part_in_one_module_shows_everywhere(plugin, tmp_path):
    from vlm_perf.report.schema import SUMMARY, check_summary, schema_markdown

    out = tmp_path / "out"
    r = invoke_cli("report", SAMPLE, "-o", out)
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    iterations = summary["iterations"]  # the core's count: what the plugin computed from the same run
    assert summary["plugin_part"] == {"iterations": iterations, "label": HOSTILE}
    assert check_summary(summary) == []  # its keys are in the schema (nested ones checked too)
    assert "plugin_part" in [k.name for k in SUMMARY]
    assert "| `plugin_part.label` | text |" in schema_markdown()
    assert summary["figures"]["plugin.png"] == "drawn" and (out / "plugin.png").is_file()
    assert summary["figures"]["plugin_empty.png"] == "skipped: nothing to show in this test"

    md = (out / "report.md").read_text()
    assert md.index("## Run health") < md.index("## Plugin part") < md.index("## Step-time attribution")
    line = next(x for x in md.splitlines() if "iterations; label" in x)
    rendered = MD.render(line).strip()
    # one list item whose text is exactly the line: the hostile string rendered as text, no element from it
    assert rendered == f"<ul>\n<li>{iterations} iterations; label {html.escape(HOSTILE, quote=False)}</li>\n</ul>"
    assert "![The plugin's figure](plugin.png)" in md and "An empty one: not drawn (nothing to show" in md

    page = (out / "report.html").read_text()
    assert f"{iterations} iterations; label {html.escape(HOSTILE)}" in page and "<script>x" not in page
    assert 'alt="The plugin&#39;s figure" src="data:image/png;base64,' in page

    assert f"  plugin: {iterations} iterations" in r.stdout.splitlines()


def test_a_part_is_declared_once(plugin):
    from vlm_perf.report.parts import ReportPart, register_part
    from vlm_perf.report.schema import key

    with pytest.raises(ValueError, match="already registered"):
        register_part(ReportPart("plugin_part", order=1))
    with pytest.raises(ValueError, match="summary key 'hfu' is already declared"):
        register_part(ReportPart("other", order=1, keys=(key("hfu", "block", dict, "", "x"),)))
    with pytest.raises(ValueError, match="summary key 'checks' is already declared"):
        register_part(ReportPart("other", order=1, keys=(key("checks", "block", list, "", "x"),)))
    with pytest.raises(ValueError, match="figure 'plugin.png' is already declared"):
        register_part(ReportPart("other", order=1, figures=(plugin.Figure("plugin.png", "", plugin.draw),)))
