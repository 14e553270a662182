"""``parse_logs(DIR)`` looks in DIR and its named sub-folders only; record-less logs are skipped with a note."""

from __future__ import annotations

import pytest

from vlm_perf.errors import InputError
from vlm_perf.ingest.logs import parse_logs

LINE = (" [2024-05-01 12:00:00] iteration {it:8d}/    1000 | consumed samples: {cs:12d} | elapsed time per "
        "iteration (ms): 1000.0 | learning rate: 1.000000E-04 | global batch size:     8 | lm loss: 2.5 |")


def mlog(path, its):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(LINE.format(it=i, cs=8 * i) for i in its) + "\n")
    return path


def test_directory_is_searched_at_top_level_and_named_subfolders_only(tmp_path):
    mlog(tmp_path / "train.log", [1, 2])
    mlog(tmp_path / "logs" / "rank0.log", [3])
    mlog(tmp_path / "checkpoints" / "iter_0000100" / "old.log", [99])  # not a log folder: never read
    (tmp_path / "nccl.log").write_text("NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\nNCCL INFO cudaDriverVersion 12040\n")
    (tmp_path / "metadata.jsonl").write_text('{"iteration": 1}\n')  # metadata is not a log
    r = parse_logs(tmp_path)
    assert sorted(r.raw.get_column("iteration").to_list()) == [1, 2, 3]
    assert any("nccl.log: skipped, no training-log record" in n for n in r.diagnostics.notes)
    assert not any("old.log" in f for f in r.diagnostics.files)
    assert not any("metadata" in f for f in r.diagnostics.files)


def test_directory_without_logs_is_a_one_line_error(tmp_path):
    (tmp_path / "deep" / "logs").mkdir(parents=True)
    mlog(tmp_path / "deep" / "logs" / "train.log", [1])
    with pytest.raises(InputError, match="no training log found"):
        parse_logs(tmp_path)


def test_all_files_without_records_is_an_error_single_file_names_it(tmp_path):
    a = tmp_path / "a.log"
    a.write_text("hello\n")
    b = tmp_path / "b.log"
    b.write_text("world\n")
    with pytest.raises(InputError, match="none of 2 log files"):
        parse_logs([a, b])
    with pytest.raises(InputError, match=r"a\.log: no recognisable"):
        parse_logs([a])
