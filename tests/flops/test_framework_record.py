"""vlm-perf's named conventions against the frameworks' OWN FLOPs functions on 21 model/batch cases.

``tests/flops/data/framework_flops.json`` holds what each framework's function returned at its pinned commit
(Megatron-LM main and PR #6173's head, Megatron-Bridge main and PR #2575's head, torchtitan main, veRL main and
v0.7.1, transformers' Trainer.floating_point_ops, ms-swift's perf_log MFU, LLaMA-Factory's cal_mfu.py), recorded by ``scripts/compare_frameworks.py record`` with the provenance of every number (repo, commit,
file, function, what was stubbed, the inputs and the command). Those are values the framework's code produced, so
they are independent of vlm-perf's conventions. Every row must agree within 0.1 % or be refused by both.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cf():
    # loaded by path: an installed package named ``scripts`` (veRL ships one) would shadow the repository's folder
    spec = importlib.util.spec_from_file_location("_compare_frameworks", ROOT / "scripts" / "compare_frameworks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def rows(cf):
    return cf.compare()


def test_record_has_provenance_for_every_framework_and_case(cf):
    data = cf.load_record()
    assert "compare_frameworks.py record" in data["command"]
    assert [c["id"] for c in data["cases"]] == [c.id for c in cf.CASES] and len(cf.CASES) == 21
    for key, fw in data["frameworks"].items():
        p = fw["provenance"]
        assert (len(p["commit"]) == 40 or "installed package" in p["commit"]) and p["repo"] and p["file"]
        assert p["function"] and p["stubs"] and p["inputs"]
        assert p == {k: cf.SOURCES[key][k] for k in p}, f"{key}: provenance differs from SOURCES"
        assert set(fw["cases"]) == {c.id for c in cf.CASES}
        for got in fw["cases"].values():
            assert ("flops" in got) != ("refused" in got)


def test_every_row_agrees_or_both_refuse(rows):
    bad = [(r.case, r.convention, r.framework, r.framework_refusal, r.ours, r.our_refusal) for r in rows if not r.agree]
    assert not bad, bad
    assert len(rows) == 21 * 10
    numeric = [r for r in rows if r.framework]
    assert len(numeric) >= 180  # most rows are numbers, not shared refusals
    assert max(abs(r.ratio - 1) for r in numeric) < 1e-3


def test_refusals_carry_the_frameworks_reason(rows):
    for r in rows:
        if r.framework is None:
            assert r.framework_refusal and r.our_refusal, (r.case, r.convention)


def test_docs_section_is_in_sync(cf, rows):
    doc = (ROOT / "docs" / "conventions.md").read_text(encoding="utf-8")
    assert cf.markdown(rows) in doc, ("docs/conventions.md is stale: paste `PYTHONPATH=. python "
                                      "scripts/compare_frameworks.py markdown` between its framework-comparison marks")


def test_ms_swift_rows_are_the_printed_mfu(cf, rows):
    # ms-swift prints round(total_flos / elapsed / (max_tflops * 1e12), 6): the recorded values have 6 decimals
    swift = [r for r in rows if r.convention == "ms-swift"]
    assert len(swift) == 21 and all(r.framework == round(r.framework, 6) and r.framework > 0 for r in swift)
