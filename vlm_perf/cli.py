"""Command-line entry point ``vlm-perf``.

Each sub-command lives in ``vlm_perf/commands/<name>.py`` and exposes ``register(app)``.
Bad input never produces a traceback: a ``ValueError`` / ``OSError`` raised anywhere below is
printed as one ``error: ...`` line on stderr and the process exits with status 2.
"""

from __future__ import annotations

import importlib
import sys

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Post-hoc compute accounting for VLM training runs.")

COMMAND_MODULES = ("flops", "parse", "metadata", "report", "explain")


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


def main(argv: list[str] | None = None) -> None:
    try:
        app(args=argv, standalone_mode=True)
    except (ValueError, OSError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
