"""Command-line entry point ``vlm-perf``.

Each sub-command lives in ``vlm_perf/commands/<name>.py`` and exposes ``register(app)``.
Bad input never produces a traceback: a ``VlmPerfError`` (or any ``ValueError`` / ``OSError``)
raised anywhere below is printed as one ``error: ...`` line on stderr and the process exits with
status 2. Any other exception is a bug: one line says so (exit 3), and the traceback is printed
only with ``--debug`` (or ``VLM_PERF_DEBUG=1``).
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Post-hoc compute accounting for VLM training runs.")

COMMAND_MODULES = ("flops", "parse", "metadata", "report", "explain", "families", "compare", "trace", "export")


def _register_all() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"vlm_perf.commands.{name}")
        except ModuleNotFoundError as exc:  # a command not built yet must not break the others
            if exc.name == f"vlm_perf.commands.{name}":
                continue
            raise
        module.register(app)


_register_all()


def _version(value: bool) -> None:
    if value:
        from . import __version__

        print(f"vlm-perf {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Post-hoc compute accounting for VLM training runs."""


def _plain_metavar(param) -> str:
    """``PATH``, ``N``, ``X``, ``TEXT``, ``A|B`` (not typer's ``<list[Path]>``/``<int>``); "" for a flag."""
    if getattr(param, "is_flag", False):
        return ""
    desc = getattr(param, "type_descriptor", None)
    if desc is None:
        return param.name.upper()
    if getattr(desc, "is_choice", False) and desc.choices:
        return "|".join(str(getattr(c, "value", c)) for c in desc.choices)
    if getattr(desc, "is_path", False):
        return "PATH"
    bare = param.bare_type() if hasattr(param, "bare_type") else "str"
    if "int" in bare:
        return "N"
    if "float" in bare:
        return "X"
    if "Path" in bare:
        return "PATH"
    return "TEXT"


def plain_metavars(command) -> None:
    """Give every option of ``command`` (a click group or command, recursively) a plain metavar, and
    every argument its upper-case name."""
    for param in getattr(command, "params", []):
        if param.param_type_name == "argument":
            name = param.name.upper() + ("..." if param.nargs != 1 else "")
            param.metavar = name
            param._usage_display_name = lambda name=name: name  # typer writes a required one as {NAME}
            param.display_type_rich = lambda ctx: None  # the name says it; no <path> beside it
        elif param.metavar is None:
            param.metavar = _plain_metavar(param)
    original = command.get_help_option

    def help_option(ctx, original=original):
        option = original(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = help_option
    for sub in getattr(command, "commands", {}).values():
        plain_metavars(sub)


#: bad-input errors whose fix is a command-line option: the library names no flag, the CLI adds it here
def _hint(exc: BaseException, args: list[str]) -> str:
    command = next((a for a in args if not a.startswith("-")), "")
    if getattr(exc, "skippable", False) and command in ("report", "metadata", "compare"):
        return " — pass --skip-bad to skip and count bad rows"
    if type(exc).__name__ == "MixedRunsError":
        if command == "report":
            return " — name the log file(s) of one run with --log FILE (repeatable), or pass --merge-logs"
        return " — give the log file of one run as the RUN argument"
    return ""


def _click_exceptions() -> dict[str, tuple[type[BaseException], ...]]:
    """click's exception classes, from click and from the copy newer typer releases vendor (``typer._click``).

    Either may be missing: typer >= 0.20 depends on no click (a base install without another package that pulls it
    in has none), older typer releases vendor none."""
    modules = []
    try:
        import click
        modules.append(click.exceptions)
    except ImportError:
        pass
    try:
        from typer import _click as vendored  # typer >= 0.20 ships its own click
        modules.append(vendored.exceptions)
    except ImportError:
        pass
    return {name: tuple({getattr(m, name) for m in modules if hasattr(m, name)})
            for name in ("NoArgsIsHelpError", "ClickException", "Abort")}


_CLICK = _click_exceptions()


def _first_line_of(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines) if len(lines) <= 3 else lines[0]


def _usage_hint(exc: BaseException) -> str:
    """`` (see `vlm-perf CMD --help`)`` for a usage error raised inside a command's context."""
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", "") if ctx is not None else ""
    return f" (see '{path} --help')" if path else ""


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text.strip() else type(exc).__name__


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = os.environ.get("VLM_PERF_DEBUG", "") not in ("", "0")
    if "--debug" in args:
        args.remove("--debug")
        debug = True
    try:
        command = typer.main.get_command(app)
        plain_metavars(command)
        # not standalone: click's usage errors come here and are said in one line (typer's standalone mode
        # draws them as a six-line box); --help and typer.Exit return their exit status
        code = command.main(args=args, prog_name="vlm-perf", standalone_mode=False)
        # as in standalone mode (and as a process): main always ends in SystemExit, 0 on success
        sys.exit(code if isinstance(code, int) and not isinstance(code, bool) else 0)
    except _CLICK["NoArgsIsHelpError"] as exc:  # `vlm-perf` or a group alone: its help, as before
        exc.show()
        sys.exit(exc.exit_code)
    except _CLICK["ClickException"] as exc:  # usage errors: no such option, missing or invalid value
        print(f"error: {_first_line_of(exc.format_message())}{_usage_hint(exc)}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except _CLICK["Abort"]:
        print("error: aborted", file=sys.stderr)
        sys.exit(1)
    except (ValueError, OSError) as exc:  # VlmPerfError is a ValueError
        if debug:
            traceback.print_exc()
        print(f"error: {_first_line(exc)}{_hint(exc, args)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - anything else is a bug, said in one line
        if debug:
            traceback.print_exc()
        print(f"error: internal error (a bug in vlm-perf, please report it): {type(exc).__name__}: "
              f"{_first_line(exc)}; rerun with --debug for the traceback", file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main()
