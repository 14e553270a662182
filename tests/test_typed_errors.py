"""Bad input raises the typed errors of `vlm_perf.errors` in the run / analysis / report / command / scale
layers (no bare ``ValueError``), and library messages name no command-line flag (the CLI adds those)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "vlm_perf"
OWNED = [ROOT / "pipeline.py"] + sorted(p for d in ("analysis", "report", "commands", "scale", "run", "export")
                                        for p in (ROOT / d).rglob("*.py"))
LIBRARY = [p for p in OWNED if "commands" not in p.parts]
#: registering the same name twice is a programming error, not bad input
REGISTRATION = {("analysis/checks.py", "already registered"), ("report/sections/__init__.py", "already registered"),
                ("report/parts.py", "already registered"), ("report/parts.py", "already declared")}
TYPED = {"VlmPerfError", "InputError", "SchemaError", "ConfigError", "UnsupportedModelError", "ConventionNotDefined",
         "MissingSettings"}


def _raises(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
            text = " ".join(c.value for c in ast.walk(node.exc) if isinstance(c, ast.Constant)
                            and isinstance(c.value, str))
            yield node.exc.func.id, node.lineno, text


def test_no_bare_value_error_for_input_problems():
    bare = [f"{p.relative_to(ROOT)}:{line}" for p in OWNED for name, line, text in _raises(p)
            if name == "ValueError" and not any(str(p.relative_to(ROOT)) == f and s in text for f, s in REGISTRATION)]
    assert bare == []


def test_library_error_messages_name_no_flag():
    flagged = [f"{p.relative_to(ROOT)}:{line}: {text[:80]}" for p in LIBRARY for name, line, text in _raises(p)
               if name in TYPED | {"ValueError"} and re.search(r"(?<![\w-])--[a-z]", text)]
    assert flagged == []
