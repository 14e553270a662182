"""Everything that parsed before the format-registry refactor parses identically.

``fixtures/snapshot.json`` was written by ``tests/ingest/logs/snapshot.py`` on the commit before the
refactor (the router's if-chain), over the bundled sample logs and one real-shaped fixture per
format. A digest mismatch means the parsed table changed: regenerate only for an intended change.
"""

from __future__ import annotations

import json

import pytest

from .snapshot import ROOT, SNAPSHOT, digest

_SNAP = json.loads(SNAPSHOT.read_text())


@pytest.mark.parametrize("name", _SNAP["files"])
def test_output_identical_to_pre_registry_parser(name):
    assert digest(ROOT / name) == _SNAP["digests"][name]
