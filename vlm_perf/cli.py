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

COMMAND_MODULES = ("flops", "parse", "metadata", "report", "explain", "families", "compare", "trace")


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
        app(args=args, standalone_mode=True)
    except (ValueError, OSError) as exc:  # VlmPerfError is a ValueError
        if debug:
            traceback.print_exc()
        print(f"error: {_first_line(exc)}", file=sys.stderr)
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
