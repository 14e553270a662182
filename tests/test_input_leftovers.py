"""The earlier rounds' leftovers of issue 34, each closed at its cause and said in one line.

Specification:
* text encodings (`vlm_perf.ingest.textcodec`): a log or run.yaml that starts with a UTF-16 / UTF-32 byte-order
  mark is read as the text it holds (the same records, the same manifest); UTF-16 without a BOM is one line naming
  the file; a run.yaml byte that is not UTF-8 is one line naming ``run.yaml:line``;
* a directory, FIFO or dangling link under a manifest's name (run.yaml / run.yml / run.json) is refused in one line
  saying what it is (was: silently ignored, the report went on without the run's settings); a FIFO is never
  opened (a read would block);
* click / typer usage errors (unknown option or command, missing argument, invalid value) are ONE ``error:`` line
  naming the command's --help, exit 2 (was a six-line box);
* an output path under a file is one line naming the file (was ``[Errno 17] File exists``), for ``report -o``,
  ``parse --out`` and ``metadata --to-parquet``;
* a W&B Parquet export with a corrupt footer is one line naming the file (was silently skipped by ``report``,
  "no recognisable training-log record" from ``parse``);
* a 5,001-digit integer in config.json names the file, its line and the field's value size; an adapter's
  rank_pattern value 4.7 is refused as not a whole number (was truncated to 4).
Seeded, bounded fuzz: any text of the sample log written in any of the encodings parses to the same records; any
unknown option of any command is one line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.support import SAMPLE_LOGS, run_main
from vlm_perf.errors import ConfigError, InputError, SchemaError, VlmPerfError
from vlm_perf.ingest.logs import parse_logs
from vlm_perf.ingest.runconfig import find_manifest, load_manifest
from vlm_perf.ingest.textcodec import decode_text

TINY = SAMPLE_LOGS / "qwen2-vl-tiny-real"
FUZZ = settings(derandomize=True, deadline=None, database=None, max_examples=40,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
#: codec -> the bytes a Windows tool writes (the BOM included)
ENCODINGS = {"utf-8": lambda t: t.encode("utf-8"), "utf-8-sig": lambda t: t.encode("utf-8-sig"),
             "utf-16": lambda t: t.encode("utf-16"), "utf-16-be": lambda t: b"\xfe\xff" + t.encode("utf-16-be"),
             "utf-32": lambda t: t.encode("utf-32")}


def _one_line_error(done, *needles: str, code: int = 2, after_summary: bool = False) -> str:
    """The one error line (``after_summary``: the last line of stderr, after ``parse``'s summary lines)."""
    err = done.stderr.strip().splitlines()[-1] if after_summary and done.stderr.strip() else done.stderr.strip()
    assert done.returncode == code, (done.returncode, done.stdout[-500:], err)
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def _records(path: Path) -> list[tuple]:
    frame = parse_logs([path]).iterations
    cols = [c for c in ("iteration", "loss", "grad_norm", "lr") if c in frame.columns]
    return frame.select(cols).rows()


# ---- encodings ------------------------------------------------------------------------------------
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_a_log_in_any_bom_encoding_parses_to_the_same_records(tmp_path, encoding):
    text = (TINY / "train.log").read_bytes().decode("utf-8")
    path = tmp_path / "train.log"
    path.write_bytes(ENCODINGS[encoding](text))
    assert _records(path) == _records(TINY / "train.log") and len(_records(path)) == 20


def test_a_gzipped_utf16_log_is_read_too(tmp_path):
    import gzip

    path = tmp_path / "train.log.gz"
    path.write_bytes(gzip.compress((TINY / "train.log").read_bytes().decode().encode("utf-16")))
    assert _records(path) == _records(TINY / "train.log")


def test_utf16_without_a_bom_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "train.log"
    path.write_bytes((TINY / "train.log").read_bytes().decode().encode("utf-16-le"))
    with pytest.raises(InputError, match="train.log: looks like UTF-16 text without a byte-order mark"):
        parse_logs([path])
    _one_line_error(run_main("parse", path), "train.log: looks like UTF-16 text without a byte-order mark")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32", "utf-8-sig"])
def test_a_run_yaml_in_a_bom_encoding_is_the_same_manifest(tmp_path, encoding):
    run = tmp_path / "run"
    shutil.copytree(TINY, run)
    want = load_manifest(run / "run.yaml")
    (run / "run.yaml").write_bytes(ENCODINGS[encoding]((TINY / "run.yaml").read_text()))
    assert load_manifest(run / "run.yaml") == want


def test_a_run_yaml_byte_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_bytes(b"model: config.json\nnum_gpus: \xff1\n")
    with pytest.raises(SchemaError) as info:
        load_manifest(path)
    assert str(info.value) == f"{path}:2: byte 0xff is not UTF-8 text (save the file as UTF-8)"
    with pytest.raises(InputError, match="x.yaml: looks like UTF-16"):
        decode_text("model: a\n".encode("utf-16-le"), "x.yaml")


# ---- a manifest that is not a file ---------------------------------------------------------------
def _fifo(path: Path) -> None:
    os.mkfifo(path)


@pytest.mark.parametrize("name", ["run.yaml", "run.yml", "run.json"])
@pytest.mark.parametrize("kind,make", [("a directory", Path.mkdir), ("a FIFO (named pipe)", _fifo),
                                       ("a link to nothing", lambda p: p.symlink_to(p.parent / "gone.yaml"))])
def test_a_manifest_name_that_is_not_a_file_is_refused(tmp_path, name, kind, make):
    if kind.startswith("a FIFO") and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    run = tmp_path / "run"
    shutil.copytree(TINY, run)
    (run / "run.yaml").unlink()
    make(run / name)
    with pytest.raises(InputError, match=re.escape(f"{name}: is {kind}, not a file")):
        find_manifest(run)
    _one_line_error(run_main("report", run, "-o", tmp_path / "out"), f"{name}: is {kind}, not a file")
    with pytest.raises(SchemaError, match=re.escape(f"is {kind}, not a file")):  # given by name: never opened either
        load_manifest(run / name)


def test_a_regular_manifest_beside_a_folder_of_another_name_is_read(tmp_path):
    """Near miss: a folder called run.yaml.d or configs/ is no manifest."""
    run = tmp_path / "run"
    shutil.copytree(TINY, run)
    (run / "run.yaml.d").mkdir()
    (run / "configs").mkdir()
    assert find_manifest(run) == run / "run.yaml"


# ---- usage errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,needle", [
    (["report", "--bogus"], "No such option: --bogus"),
    (["frobnicate"], "No such command 'frobnicate'"),
    (["report"], "Missing argument 'RUN'"),
    (["flops", "--seq-len", "abc"], "Invalid value for '--seq-length' / '--seq-len'"),
    (["trace"], "Missing argument 'TRACES...'"),
])
def test_a_usage_error_is_one_line(argv, needle):
    err = _one_line_error(run_main(*argv), needle)
    assert "╭" not in err and "--help" in err


def test_help_and_version_still_exit_zero():
    for argv in (["--help"], ["report", "--help"], ["--version"]):
        done = run_main(*argv)
        assert done.returncode == 0 and done.stdout.strip(), argv


_COMMANDS = ["report", "flops", "parse", "metadata", "trace", "compare", "families", "explain"]


@pytest.mark.slow
@FUZZ
@given(command=st.sampled_from(_COMMANDS),
       option=st.text(st.sampled_from("abcxyz-_²é"), min_size=1, max_size=12))
def test_fuzz_an_unknown_option_of_any_command_is_one_line(command, option):
    done = run_main(command, f"--zz{option}")
    _one_line_error(done, "No such option")


# ---- an output path under a file -----------------------------------------------------------------
def test_an_output_folder_under_a_file_names_the_file(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    _one_line_error(run_main("report", TINY, "-o", blocker / "out"),
                    f"{blocker}: is a file, not a folder: the output cannot be written into it")
    _one_line_error(run_main("report", TINY, "-o", blocker / "a" / "b"), f"{blocker}: is a file")
    _one_line_error(run_main("parse", TINY / "train.log", "--out", blocker / "x.csv"), f"{blocker}: is a file",
                    after_summary=True)
    _one_line_error(run_main("metadata", TINY / "metadata", "--model", TINY / "config.json", "--to-parquet",
                             blocker / "m.parquet"), f"{blocker}: is a file")


# ---- corrupt Parquet ------------------------------------------------------------------------------
def _corrupt(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:-9] + b"XXXXPAR1")  # a footer length far beyond the file


def test_a_corrupt_wandb_parquet_footer_is_one_line_naming_the_file(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(TINY, run)
    export = run / "wandb_history.parquet"
    pl.DataFrame({"_step": [1, 2, 3], "train/loss": [2.0, 1.5, 1.2]}).write_parquet(export)
    _corrupt(export)
    with pytest.raises(InputError, match="wandb_history.parquet: cannot read Parquet"):
        parse_logs([export])
    _one_line_error(run_main("parse", export), "wandb_history.parquet: cannot read Parquet")
    _one_line_error(run_main("report", run, "-o", tmp_path / "out"), "wandb_history.parquet: cannot read Parquet")


def test_a_corrupt_metadata_parquet_footer_is_one_line_naming_the_file(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(TINY, run)
    shard = run / "metadata" / "metadata-rank00000.parquet"
    pl.read_ndjson(run / "metadata" / "metadata-rank00000.jsonl").write_parquet(shard)
    (run / "metadata" / "metadata-rank00000.jsonl").unlink()
    _corrupt(shard)
    _one_line_error(run_main("report", run, "-o", tmp_path / "out"), "metadata-rank00000.parquet: cannot read Parquet")


# ---- numbers that enter from configs ---------------------------------------------------------------
def test_a_5001_digit_integer_in_config_json_names_file_and_line(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(TINY, run)
    text = (run / "config.json").read_text()
    assert '"intermediate_size": 256' in text
    (run / "config.json").write_text(text.replace('"intermediate_size": 256', '"intermediate_size": ' + "9" * 5001, 1))
    line = next(n for n, t in enumerate((run / "config.json").read_text().splitlines(), 1) if "9" * 50 in t)
    _one_line_error(run_main("report", run, "-o", tmp_path / "out"),
                    f"config.json:{line}: a number of 5001 digits is not a value a config file can hold")


@pytest.mark.parametrize("value", [4.7, 0.5, -3])
def test_a_rank_pattern_value_that_is_not_a_positive_whole_number_is_refused(value):
    from vlm_perf.arch.adapters import adapter_from_dict

    data = {"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"], "rank_pattern": {"q_proj": value}}
    with pytest.raises(ConfigError, match=r"adapter_config.json: .*rank_pattern\['q_proj'\]"):
        adapter_from_dict(data, source="adapter_config.json")
    data["rank_pattern"] = {"q_proj": 4.0}  # near miss: a whole number written as a float is that number
    assert adapter_from_dict(data, source="adapter_config.json").rank_pattern == {"q_proj": 4}


# ---- fuzz: encodings ------------------------------------------------------------------------------
@pytest.mark.slow
@FUZZ
@given(encoding=st.sampled_from(sorted(ENCODINGS)), start=st.integers(0, 15), count=st.integers(1, 6),
       extra=st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=40))
def test_fuzz_any_slice_of_the_log_in_any_encoding_gives_the_utf8_records(tmp_path_factory, encoding, start, count,
                                                                          extra):
    lines = (TINY / "train.log").read_bytes().decode().split("\n")
    records = [n for n, line in enumerate(lines) if line.lstrip("\r ").startswith("{'loss'")]
    chosen = lines[:1] + [extra] + [lines[n] for n in records[start:start + count]]
    text = "\n".join(chosen) + "\n"
    folder = tmp_path_factory.mktemp("enc")
    (folder / "a.log").write_bytes(text.encode("utf-8"))
    (folder / "b.log").write_bytes(ENCODINGS[encoding](text))
    try:
        want = _records(folder / "a.log")
    except VlmPerfError:
        with pytest.raises(VlmPerfError):
            _records(folder / "b.log")
        return
    assert _records(folder / "b.log") == want


def test_config_json_numbers_in_json_records():
    """The bounded JSON loader is the one every record goes through (tests/test_input_fuzz_records.py fuzzes it);
    here only that a 5,001-digit value there is an error, never a hang."""
    from vlm_perf.arch.validate import loads_json

    with pytest.raises(VlmPerfError, match="5001 digits"):
        loads_json(json.dumps({"r": 1})[:-1] + ', "x": ' + "9" * 5001 + "}", "adapter_config.json", "adapter")


@pytest.mark.slow
def test_a_run_whose_log_and_run_yaml_are_utf16_reports_the_same_and_passes_strict(tmp_path):
    """Near miss: the same run saved by a Windows editor (UTF-16 with BOM) is the same run: summary.json equal, and
    --strict passes."""
    plain, wide = tmp_path / "plain" / "run", tmp_path / "wide" / "run"  # one name: summaries name the folder
    shutil.copytree(TINY, plain)
    shutil.copytree(TINY, wide)
    for name in ("train.log", "run.yaml"):
        (wide / name).write_bytes((plain / name).read_bytes().decode("utf-8").encode("utf-16"))
    for run in (plain, wide):
        done = run_main("report", run, "-o", tmp_path / f"out-{run.parent.name}", "--strict")
        assert done.returncode == 0, done.stderr[-800:]
    a = (tmp_path / "out-plain" / "summary.json").read_text().replace(str(plain), "RUN")
    b = (tmp_path / "out-wide" / "summary.json").read_text().replace(str(wide), "RUN")
    assert a == b
