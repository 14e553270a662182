"""The log-format registry: duplicates rejected, the router's candidates come from the formats, and
every format's documented example parses as that format (so docs/log-formats.md cannot drift)."""

from __future__ import annotations

import re

import pytest

from vlm_perf.ingest.logs import FORMATS, LogFormat, parse_logs, register, registry
from vlm_perf.ingest.logs import formats as formats_mod
from vlm_perf.ingest.logs.parser import CANDIDATE_RE


def test_duplicate_registration_is_rejected():
    with pytest.raises(ValueError, match="already registered"):
        register(LogFormat(name="megatron", source="x", example="x"))


def test_bad_definitions_fail_at_registration():
    with pytest.raises(ValueError):
        LogFormat(name="Bad Name", source="x", example="x")
    with pytest.raises(re.error):
        LogFormat(name="broken-regex", source="x", example="x", prefilter="(")
    with pytest.raises(ValueError, match="both sniff and read"):
        LogFormat(name="half-file", source="x", example="x", sniff=lambda p: True)


def test_formats_tuple_is_the_registry():
    assert FORMATS == tuple(registry())
    for name in ("megatron", "megatron-bridge", "nemo1", "nemo2", "hf", "verl", "torchtitan", "tensorboard",
                 "maxtext", "automodel"):
        assert name in FORMATS


def test_candidate_prefilter_is_built_from_the_formats():
    for fmt in formats_mod.line_formats():
        if fmt.prefilter:
            assert f"(?:{fmt.prefilter})" in CANDIDATE_RE, fmt.name


@pytest.mark.parametrize("name", [n for n, f in registry().items() if f.example])
def test_documented_example_parses_as_its_format(tmp_path, name):
    fmt = registry()[name]
    path = tmp_path / f"example{fmt.example_suffix}"
    path.write_text(fmt.example + "\n", encoding="utf-8")
    r = parse_logs([path], format=name)
    assert r.raw.height >= 1
    assert set(r.raw.get_column("framework").to_list()) == {name}
    assert r.diagnostics.failed_count == 0 and r.diagnostics.partial_count == 0


def test_docs_format_section_is_generated_from_the_registry():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "log-formats.md").read_text(encoding="utf-8")
    assert formats_mod.docs_markdown() in doc, "run: python -m vlm_perf.ingest.logs.formats"
    for name in registry():
        assert f"### `{name}`" in doc
