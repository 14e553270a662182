"""The conventions table of docs/conventions.md, generated from the registry (``vlm-perf conventions
--markdown``); tests/flops/test_conventions_doc.py keeps the page in sync."""

from __future__ import annotations

from .base import CONVENTIONS, Convention

START, END = "<!-- conventions-table:start -->", "<!-- conventions-table:end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _row(c: Convention) -> str:
    if c.pin is not None:
        framework = c.pin.framework
        pinned = f"`{c.pin.repo}` `{c.pin.file}` {c.pin.function} @ {c.pin.version}"
        verified = c.pin.verified or "—"
    else:
        framework, pinned, verified = "—", c.source, "—"
    if c.name == "exact":
        verified = "FlopCounterMode on transformers' models (tests/verify/)"
    variant = f" (variant of `{c.variant_of}`)" if c.variant_of else ""
    differs = "; ".join(c.deviations) or "—"
    refuses = "; ".join(f"`{f}`: {why}" for f, why in c.refuses.items()) or "—"
    families = "every family" if c.families is None else ", ".join(f"`{f}`" for f in c.families)
    return (f"| `{c.name}`{variant} | {_cell(framework)} | {_cell(pinned)} | {_cell(c.formula)} | {_cell(differs)} "
            f"| {_cell(families)} | {_cell(refuses)} | {_cell(verified)} |")


def conventions_markdown() -> str:
    """One row per registered convention: framework, pinned source, what it counts, how it differs from exact
    (what it omits), the families it defines a number for, deliberate refusals, how it is verified."""
    lines = [START,
             "| convention | framework | reproduces (repo, file, function @ commit/release) | counts (training, "
             "per step) | omits / differs from `exact` | defined for | refuses (why) | verified by |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [_row(c) for c in CONVENTIONS.values()]
    lines.append(END)
    return "\n".join(lines) + "\n"
