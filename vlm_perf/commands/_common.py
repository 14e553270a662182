"""Small helpers shared by CLI commands (argument parsing, number formatting)."""

from __future__ import annotations

from ..errors import ConfigError

def parse_int_list(text: str, option: str) -> list[int]:
    """'1,2,3' -> [1, 2, 3]; a one-line ValueError naming the option otherwise."""
    try:
        values = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"{option}: expected comma-separated integers, got {text!r}") from None
    if not values:
        raise ConfigError(f"{option}: expected comma-separated integers, got {text!r}")
    return values


def parse_grid(text: str, option: str, size: int = 3) -> tuple[int, ...]:
    """'T,H,W' (or 'H,W' with ``size=2``) -> a tuple of integers; one-line error naming the option."""
    values = parse_int_list(text, option)
    if len(values) != size:
        shape = "T,H,W (three integers)" if size == 3 else "H,W (two integers)"
        raise ConfigError(f"{option}: expected {shape}, got {text!r}")
    return tuple(values)


def human_flops(value: float) -> str:
    """1.23e15 -> '1.230 PFLOP'."""
    for unit, scale in (("EFLOP", 1e18), ("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if abs(value) >= scale:
            return f"{value / scale:.3f} {unit}"
    return f"{value:.0f} FLOP"


OUT_SUFFIXES = (".parquet", ".csv", ".jsonl", ".ndjson")


def check_out_suffix(out) -> None:
    """Fail before any work when ``--out`` names a format we cannot write."""
    if out is not None and out.suffix.lower() not in OUT_SUFFIXES:
        raise ConfigError(f"--out {out}: unsupported format (use {', '.join(OUT_SUFFIXES)})")


def write_frame(frame, out) -> None:
    """Write a polars frame as parquet, CSV (scalar columns only) or JSON lines, by suffix."""
    check_out_suffix(out)
    suffix = out.suffix.lower()
    from ..report.output import make_folder
    make_folder(out.parent)
    if suffix == ".parquet":
        frame.write_parquet(out)
    elif suffix == ".csv":
        frame.write_csv(out)
    else:
        frame.write_ndjson(out)


def name_table(headers, rows, *, names=(0,), title=None, justify="left", name_justify="left", width=None):
    """A rich table for the terminal whose ``names`` columns (conventions, runs) are never cut nor broken: each is
    as wide as its longest name (or header word). The other columns wrap at spaces and fold what is left, so the
    table fits the terminal; with the terminal's ``width``, where it can, each keeps its longest word (a number) on
    one line and gets what room is left up to its natural width. ``rows``: the cells, already escaped for rich
    markup."""
    from rich.cells import cell_len
    from rich.table import Table

    def widest(i: int, name: bool) -> int:  # a name whole with its header's words; else the longest word (a number)
        words = [w for r in rows for w in ([str(r[i])] if name else str(r[i]).split())]
        return max([cell_len(w) for w in words] + ([cell_len(w) for w in str(headers[i]).split()] if name else [])
                   + [1])

    n = len(headers)
    least = [widest(i, i in names) for i in range(n)]
    want = [max(least[i], *(cell_len(str(r[i])) for r in rows), cell_len(str(headers[i]))) if i not in names
            else least[i] for i in range(n)]
    room = None if width is None else width - (3 * n + 1)  # padding (2) and a border (1) per column, one more
    sizes: list[int | None] = [None] * n
    if room is not None and sum(least) <= room:  # everything whole: fixed widths, the room shared out
        sizes = list(least)
        spare = room - sum(least)
        words = [max([least[i]] + [cell_len(w) for w in str(headers[i]).split()]) for i in range(n)]
        for goal in ([min(a, b) for a, b in zip(words, want)], want):  # headers' words whole first, then the rest
            while spare > 0 and any(s < g for s, g in zip(sizes, goal)):  # type: ignore[operator]
                for i in range(n):
                    if spare and sizes[i] < goal[i]:  # type: ignore[operator]
                        sizes[i] += 1  # type: ignore[operator]
                        spare -= 1
    table = Table(title=title)
    for i, header in enumerate(headers):
        if i in names:
            table.add_column(header, no_wrap=True, min_width=least[i], width=sizes[i], justify=name_justify)
        else:
            table.add_column(header, overflow="fold", justify=justify, width=sizes[i])
    for row in rows:
        table.add_row(*row)
    return table
