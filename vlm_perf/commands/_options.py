"""Typer flags generated from the run-option declaration (`vlm_perf.run.options`): one spelling, one
help text and one metavar for every command an option affects.

``@run_options("report")`` on a command function adds a keyword parameter per declared option and
hands their values to the function as one dict, ``options`` (``compare``'s per-run options as
``NAME_a`` / ``NAME_b``). A command that is not a run command (``flops``, ``explain``) declares the options it
shares with them one by one, ``name: int = declared("gpus", "flops", default=1)``: the same spellings, metavar
and help text, its own default and type.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, List, Optional

import typer

from ..errors import ConfigError
from ..run.options import MissingSettings, RunOption, check_value, option, option_for_field, options_for

_TYPES: dict[str, Any] = {"int": Optional[int], "float": Optional[float], "str": Optional[str], "choice": str,
                          "bool": bool, "list": List[str]}


def _params(command: str) -> list[tuple[str, Any, Any]]:
    """(parameter name, annotation, typer.Option) of every generated flag of ``command``."""
    out = []
    for opt in options_for(command):
        variants = [("_a", "-a", " (run A)"), ("_b", "-b", " (run B)")] if (command == "compare" and opt.per_run) \
            else [("", "", "")]
        for suffix, flag_suffix, note in variants:
            decls = [opt.flag + flag_suffix] + ([opt.short] if opt.short and not flag_suffix else []) + \
                [alias + flag_suffix for alias in opt.aliases]
            default = list(opt.default) if isinstance(opt.default, list) else opt.default
            info = typer.Option(default, *decls, help=opt.help_for(command) + note,
                                metavar=None if opt.kind == "bool" else opt.metavar, show_default=opt.kind != "list")
            out.append((opt.name + suffix, _TYPES[opt.kind], info))
    return out


_REQUIRED = object()


def declared(name: str, command: str, default: Any = _REQUIRED) -> Any:
    """The ``typer.Option`` of declared option ``name`` in ``command`` (one whose declaration lists it): the
    declared spellings (flag, short form, aliases), metavar and help (with the command's note); ``default``:
    the command's own (none given: the flag is required). The parameter's name and type are the command's."""
    opt = option(name)
    if command not in opt.commands:
        raise RuntimeError(f"{command}: option {name} is not declared for it in vlm_perf.run.options")
    decls = [opt.flag] + ([opt.short] if opt.short else []) + list(opt.aliases)
    value = ... if default is _REQUIRED else default
    return typer.Option(value, *decls, help=opt.help_for(command), metavar=None if opt.kind == "bool" else opt.metavar,
                        show_default=not isinstance(value, list) and value is not ...)


def run_options(command: str) -> Callable[[Callable], Callable]:
    """Decorator: the command's declared run options become flags; the function receives ``options``."""
    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "options"]
        generated = _params(command)
        names = [name for name, _, _ in generated]
        clash = set(names) & {p.name for p in own}
        if clash:
            raise RuntimeError(f"{command}: {sorted(clash)} declared both by hand and in vlm_perf.run.options")

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            options = {name: kwargs.pop(name) for name in names if name in kwargs}
            for name, value in options.items():
                _check(command, name, value)
            try:
                return fn(*args, options=options, **kwargs)
            except MissingSettings as exc:  # the library names the settings; the command line adds its flags
                flags = [_flag(command, o) for o in map(option_for_field, exc.fields) if o and command in o.commands]
                if not flags:
                    raise
                raise ConfigError(f"{exc}; on the command line: {', '.join(flags)}") from None

        params = own + [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=ann)
                        for name, ann, info in generated]
        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {**{p.name: p.annotation for p in own}, **{n: a for n, a, _ in generated},
                                   "return": sig.return_annotation}
        return wrapper
    return decorate


def _flag(command: str, opt: RunOption) -> str:
    """How ``command`` spells ``opt`` (compare: both runs' flags)."""
    metavar = f" {opt.metavar}" if opt.metavar else ""
    if command == "compare" and opt.per_run:
        return f"{opt.flag}-a{metavar} / {opt.flag}-b{metavar}"
    return f"{opt.flag}{metavar}"


def _check(command: str, name: str, value: Any) -> None:
    """The declared bounds, with the flag named (the library's message names the field)."""
    base = name[:-2] if command == "compare" and name.endswith(("_a", "_b")) else name
    opt = option(base)
    try:
        check_value(base, value)
    except ConfigError as exc:
        flag = opt.flag + ("-" + name[-1] if base != name else "")
        label = opt.field or opt.name
        text = str(exc)
        if label == opt.name and text.startswith(label):
            raise ConfigError(flag + text[len(label):]) from None
        raise ConfigError(f"{flag}: {text}") from None


def load_run_arguments(options: dict, suffix: str = "") -> dict:
    """A command's generated ``options`` as `vlm_perf.pipeline.load_run` keyword arguments (the declared names, each
    checked again by `RunOptions.of`) for commands that hand them on to a library call (a sweep's runs, `export`);
    ``suffix`` ``_a`` / ``_b``: the options of one run of a two-run `compare`."""
    out = {}
    for name, value in options.items():
        if suffix and name.endswith(("_a", "_b")):
            if not name.endswith(suffix):
                continue
            name = name[: -len(suffix)]
        out[name] = value
    return out
