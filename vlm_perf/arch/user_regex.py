"""Regular expressions written by a user (PEFT ``adapter_config.json`` fields): compiled once, matched with a bound.

Python's ``re`` backtracks and cannot be interrupted, so a pattern such as ``(a+)+$`` or ``(.*)*x`` can take
exponential time on a 40-character module name. `compile_user_regex` therefore refuses, in one line naming the
file and field, a pattern that is not a valid Python regex or that falls outside the bound below; every pattern
it accepts runs in polynomial time of low degree on the names it is matched against:

* at most `MAX_PATTERN_CHARS` characters;
* no repetition inside a repetition (star height 1: ``(a+)+``, ``(.*)*``, ``(\\.\\w+)*`` are refused), and no
  alternation inside a repetition (``(a|a)*`` backtracks exponentially as well);
* no backreference (``\\1``, ``(?P=name)``: matching with them is NP-hard);
* at most `MAX_UNBOUNDED` unbounded repetitions (``*``, ``+``, ``{n,}``) in the whole pattern, so a name of n
  characters costs at most about n^`MAX_UNBOUNDED` steps, and names are at most `MAX_NAME_CHARS` characters
  (module names of released models are under 120).

Real adapter configs stay well inside this (``.*\\.(q_proj|v_proj)$``, ``^(?!.*visual).*(?:q_proj|k_proj).*``,
``model\\.layers\\.\\d+\\.self_attn\\.(q|k|v)_proj``). Repetitions with an upper bound of 1 (``?``, ``{0,1}``) are
not repetitions for these rules.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from ..errors import ConfigError

try:  # the parser behind re.compile (the module was renamed in Python 3.11)
    from re import _constants as _sre_constants, _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_constants  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

__all__ = ["MAX_PATTERN_CHARS", "MAX_UNBOUNDED", "MAX_NAME_CHARS", "compile_user_regex"]

#: longest user pattern accepted
MAX_PATTERN_CHARS = 500
#: most unbounded repetitions (``*``, ``+``, ``{n,}``) in one pattern
MAX_UNBOUNDED = 4
#: longest name a user pattern is matched against (longer names do not match)
MAX_NAME_CHARS = 500

_REPEATS = {_sre_constants.MAX_REPEAT, _sre_constants.MIN_REPEAT, getattr(_sre_constants, "POSSESSIVE_REPEAT", None)}
_MAXREPEAT = _sre_constants.MAXREPEAT


def _problem(parsed: Any) -> str | None:
    """Why ``parsed`` (an ``sre_parse`` tree) is outside the bound, or None."""
    unbounded = 0

    def walk(items: Any, in_repeat: bool) -> str | None:
        nonlocal unbounded
        for op, av in items:
            if op in _REPEATS:
                low, high, body = av
                repeats = high > 1
                if repeats and in_repeat:
                    return "a repetition inside a repetition (such as (a+)+ or (.*)*) can take exponential time"
                if high == _MAXREPEAT:
                    unbounded += 1
                found = walk(body, in_repeat or repeats)
            elif op is _sre_constants.BRANCH:
                if in_repeat:
                    return "an alternation inside a repetition (such as (a|ab)*) can take exponential time"
                found = next((p for p in (walk(b, in_repeat) for b in av[1]) if p), None)
            elif op is _sre_constants.SUBPATTERN:
                found = walk(av[-1], in_repeat)
            elif op in (_sre_constants.ASSERT, _sre_constants.ASSERT_NOT):
                found = walk(av[1], in_repeat)
            elif op in (_sre_constants.GROUPREF, _sre_constants.GROUPREF_EXISTS):
                return "a backreference makes matching take exponential time"
            elif op is getattr(_sre_constants, "ATOMIC_GROUP", None):
                found = walk(av, in_repeat)
            else:
                found = None
            if found:
                return found
        return None

    found = walk(parsed, False)
    if found:
        return found
    if unbounded > MAX_UNBOUNDED:
        return (f"{unbounded} unbounded repetitions (*, +, {{n,}}); at most {MAX_UNBOUNDED} keep the match time "
                "bounded")
    return None


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern | str:
    """The compiled pattern, or the one-line reason it is refused."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"{len(pattern)} characters, more than the {MAX_PATTERN_CHARS} a module-name pattern may have"
    try:
        parsed = _sre_parse.parse(pattern)
        compiled = re.compile(pattern)
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        return f"not a valid regular expression ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    problem = _problem(parsed)
    return problem if problem else compiled


def compile_user_regex(pattern: str, source: str, field: str) -> re.Pattern:
    """``pattern`` compiled (once: cached), or a `ConfigError` naming ``source`` (the file) and ``field``."""
    result = _compiled(pattern)
    if isinstance(result, str):
        shown = pattern if len(pattern) <= 60 else pattern[:45] + f"... ({len(pattern)} chars)"
        where = f"{source}: " if source else ""
        raise ConfigError(f"{where}field {field}: pattern {shown!r}: {result}")
    return result


def fullmatch(pattern: re.Pattern, name: str) -> bool:
    """``pattern.fullmatch(name)`` for a name of at most `MAX_NAME_CHARS` characters (longer: no match)."""
    return len(name) <= MAX_NAME_CHARS and pattern.fullmatch(name) is not None


def match(pattern: re.Pattern, name: str) -> bool:
    """``pattern.match(name)`` for a name of at most `MAX_NAME_CHARS` characters (longer: no match)."""
    return len(name) <= MAX_NAME_CHARS and pattern.match(name) is not None
