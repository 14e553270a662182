"""``vlm-perf parse`` progress: a rich bar (bytes of the files parsed) on a terminal for large input, quiet otherwise."""

from __future__ import annotations

import io
import os
import sys

import pytest

from vlm_perf.cli import main
from vlm_perf.commands import _progress
from vlm_perf.ingest.logs import parse_logs

LINE = ("[default0]: iteration {it:8d}/    1000 | consumed samples: {cs:12d} | elapsed time per iteration (ms): "
        "1000.0 | learning rate: 1.000000E-04 | global batch size:     8 | lm loss: 2.000000E+00 |")


class Tty(io.StringIO):
    def isatty(self):
        return True


def _logs(tmp_path, n=3):
    files = []
    for k in range(n):
        p = tmp_path / f"attempt{k}.log"
        p.write_text("\n".join(LINE.format(it=10 * k + i, cs=8 * (10 * k + i)) for i in range(1, 11)) + "\n")
        files.append(p)
    return files


def test_parse_logs_reports_bytes_of_the_files_done(tmp_path):
    files = _logs(tmp_path)
    sizes = [os.path.getsize(f) for f in files]
    calls = []
    parse_logs(files, progress=lambda done, total: calls.append((done, total)))
    total = sum(sizes)
    assert calls == [(0, total), (sizes[0], total), (sizes[0] + sizes[1], total), (total, total)]


def _parse(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    return info.value.code, *capsys.readouterr()


def test_bar_on_a_terminal_for_large_input(tmp_path, capsys, monkeypatch):
    files = _logs(tmp_path)
    tty = Tty()
    monkeypatch.setattr(_progress, "LARGE_INPUT_BYTES", 1)  # every input counts as large
    monkeypatch.setattr(sys, "stderr", tty)
    code, out, _ = _parse(["parse", *map(str, files)], capsys)
    assert code == 0 and "parsing logs" in tty.getvalue()


@pytest.mark.parametrize("terminal,large", [(True, False), (False, True)])
def test_quiet_otherwise(tmp_path, capsys, monkeypatch, terminal, large):
    files = _logs(tmp_path)
    stream = Tty() if terminal else io.StringIO()
    if large:
        monkeypatch.setattr(_progress, "LARGE_INPUT_BYTES", 1)
    monkeypatch.setattr(sys, "stderr", stream)
    code, out, _ = _parse(["parse", *map(str, files)], capsys)
    text = stream.getvalue()
    assert code == 0 and "parsing logs" not in text and "\x1b[" not in text and "\r" not in text
    assert "records 30" in text  # the diagnostics still go to stderr
