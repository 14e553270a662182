"""Run options are declared once (`vlm_perf.run.options`): the flags of every command come from the
declaration with one spelling, docs/run-config.md's table is generated from it, and an option a command
gains this way (report --frozen) does what the same key in run.yaml does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer

from vlm_perf.cli import app
from vlm_perf.errors import ConfigError
from vlm_perf.ingest.runconfig import MANIFEST_KEYS
from vlm_perf.report.doc_tables import DOC, SCHEMA_DOC, with_schema, with_table
from vlm_perf.run.options import COMMANDS, OPTIONS, YAML_ONLY, check_value, options_for

ROOT = Path(__file__).resolve().parents[2]
VIDEO = ROOT / "sample_logs" / "qwen2.5-vl-7b-video"


def _flags(command: str) -> dict[str, list[str]]:
    group = typer.main.get_command(app)
    return {p.name: sorted(p.opts) for p in group.commands[command].params}


def test_doc_table_is_generated_from_the_declaration():
    text = DOC.read_text()
    assert with_table(text) == text, "docs/run-config.md is stale: run python -m vlm_perf.report.doc_tables"
    for o in OPTIONS:
        assert f"`{o.flag}`" in text
    schema = SCHEMA_DOC.read_text()
    assert with_schema(schema) == schema, "docs/report.md's summary schema is stale: run python -m vlm_perf.report.doc_tables"


#: every command of the CLI (the run commands and the others: flops, explain, families, ...), read from the app
ALL_COMMANDS = sorted(typer.main.get_command(app).commands)
#: commands that take another command's run options whole: `export` opens the run as `report` does
OPTIONS_OF = {"export": "report"}


def test_the_flag_test_sees_every_command():
    assert {"flops", "explain", "families", "parse", "metadata", "report", "compare", "trace", "export"} <= set(
        ALL_COMMANDS)
    assert set(COMMANDS) <= set(ALL_COMMANDS)


@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_every_command_spells_each_option_as_declared(command):
    """One flag per option: every flag of every command that takes a declared option's spelling IS that option,
    with the declaration's spellings, metavar and help text (the command's note after it, compare's "(run A)"),
    and every command a declaration lists has the flag."""
    params = {p.name: p for p in typer.main.get_command(app).commands[command].params}
    command = OPTIONS_OF.get(command, command)
    by_spelling = {s: o for o in OPTIONS for s in (o.flag, *o.aliases)}

    def expect(o, name, run=""):
        param = params.get(name)
        assert param is not None, f"{command} has no {o.flag}{'-' + run if run else ''} (declared for it)"
        suffix = f"-{run}" if run else ""
        spellings = [s + suffix for s in (o.flag, *o.aliases)] + ([o.short] if o.short and not run else [])
        assert sorted(param.opts) == sorted(spellings), (command, name, param.opts)
        note = {"a": " (run A)", "b": " (run B)"}.get(run, "")
        assert param.help == o.help_for(command) + note, (command, name, param.help)
        assert param.metavar == (None if o.kind == "bool" else o.metavar), (command, name, param.metavar)

    for o in options_for(command):
        if command == "compare" and o.per_run:
            expect(o, f"{o.name}_a", "a")
            expect(o, f"{o.name}_b", "b")
        else:
            expect(o, o.name)
    for name, param in params.items():  # no flag of this command spells a declared option any other way
        for spelled in param.opts:
            base = spelled[:-2] if command == "compare" and spelled.endswith(("-a", "-b")) else spelled
            o = by_spelling.get(base)
            if o is not None:
                assert command in o.commands, f"{command} {spelled}: declare {o.name} for {command} in run/options.py"
                assert name in (o.name, f"{o.name}_a", f"{o.name}_b"), (command, name, spelled)


def test_flops_gpu_is_reports_gpu():
    """`flops --gpu` (the peak of a --log-tflops reading's MFU) is the flag `report --gpu` is."""
    group = typer.main.get_command(app)
    flops = {p.name: p for p in group.commands["flops"].params}
    report = {p.name: p for p in group.commands["report"].params}
    for name in ("gpu", "dtype", "peak_tflops", "gpus", "model", "frozen", "causal"):
        assert flops[name].opts == report[name].opts and flops[name].metavar == report[name].metavar
        assert flops[name].help.startswith(report[name].help.split(" (default: run.yaml")[0])


def test_frozen_names_the_projector_part_alike_in_flops_report_and_compare():
    """The canonical projector part (the ``parts`` name `arch.parts.PROJECTOR`) is what --frozen's help names
    first in every command, with ``merger`` as its alias."""
    from vlm_perf.arch.parts import PART_ALIASES, PROJECTOR

    group = typer.main.get_command(app)
    helps = {c: next(p.help for p in group.commands[c].params if p.name in ("frozen", "frozen_a"))
             for c in ("flops", "report", "compare", "trace")}
    for command, text in helps.items():
        assert text.startswith(f"Frozen part or selector (repeatable): vision_tower, {PROJECTOR}, "), command
        assert "aliases vit, merger," in text, command
    assert PART_ALIASES["merger"] == PART_ALIASES[PROJECTOR]


def test_run_yaml_keys_are_the_declared_ones():
    declared = {o.field for o in OPTIONS if o.field} | {key for key, *_ in YAML_ONLY}
    assert declared == set(MANIFEST_KEYS)


@pytest.mark.parametrize("name,value", [("gpus", 0), ("gpus", -3), ("peak_tflops", 0.0), ("peak_tflops", float("nan")),
                                        ("peak_tflops", float("inf")), ("causal", "square"), ("seq_length", True)])
def test_values_outside_the_declared_bounds_are_config_errors(name, value):
    with pytest.raises(ConfigError) as err:
        check_value(name, value)
    assert "--" not in str(err.value)  # library messages name no flag


def test_report_frozen_flag_equals_the_run_yaml_key(tmp_path, cli):
    """The video sample freezes its vision tower in run.yaml; without run.yaml, --frozen vision gives the
    same numbers, and leaving it out counts the tower's backward (a higher, wrong TFLOP/s)."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("train.log", "metadata.jsonl.gz"):
        shutil.copy(VIDEO / name, bare / name)
    common = ["--model", "qwen2.5-vl-7b", "--gpus", "64", "--gpu", "H100-SXM"]
    exact = {}
    for label, run, extra in (("yaml", VIDEO, []), ("flag", bare, common + ["--frozen", "vision"]),
                              ("none", bare, common)):
        r = cli("report", str(run), "-o", str(tmp_path / label), *extra)
        assert r.exit_code == 0, r.output
        s = json.loads((tmp_path / label / "summary.json").read_text())
        exact[label] = s["conventions"]["exact"]["tflops_per_gpu_mean"]
        if label != "none":
            assert s["run_config"]["frozen"] == ["vision"]
    assert exact["flag"] == exact["yaml"]
    assert exact["none"] > exact["flag"] * 1.05


def test_every_spelling_of_an_option_is_accepted_where_one_is():
    """Across every command (the run commands and the hand-declared ones: flops, explain, families, conventions): a
    flag that takes a declared option's spelling takes all of that option's spellings (``--seq-length`` and
    ``--seq-len`` together, never one of them)."""
    spellings = {o.name: {o.flag, *o.aliases} for o in OPTIONS}
    group = typer.main.get_command(app)
    for command, cmd in group.commands.items():
        for param in cmd.params:
            opts = {o[:-2] if command == "compare" and o.endswith(("-a", "-b")) else o for o in param.opts}
            for spelled in spellings.values():
                if opts & spelled:
                    assert spelled <= opts, (command, param.name, sorted(param.opts), sorted(spelled))


def test_report_takes_the_seq_len_spelling_too(tmp_path, cli):
    """``report --seq-len`` was refused while ``flops`` took both spellings: now both commands take both."""
    r = cli("report", str(VIDEO), "-o", str(tmp_path / "out"), "--seq-len", "8192")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["run_config"]["seq_length"] == 8192


@pytest.mark.parametrize("command", ["flops", "explain"])
def test_model_level_commands_accept_the_declared_spelling(command):
    """`flops` and `explain` are not run commands, but where they take the same quantity (LM tokens per
    sample) they accept the declared spelling too (``--seq-len`` stays as an alias)."""
    flags = _flags(command)
    assert "--seq-length" in flags["seq_length"] and "--seq-len" in flags["seq_length"]
    assert "--model" in flags["model"] and "-m" in flags["model"]


@pytest.mark.parametrize("name", [o.name for o in OPTIONS if o.kind == "int" and o.field])
def test_an_integer_option_has_the_manifest_range_whichever_source_states_it(name):
    """A flag and a run.yaml key set the same field: one range (run.yaml's bounds, `ingest.runconfig.INT_MAX`)."""
    from vlm_perf.ingest.runconfig import INT_MAX, resolve_run_config

    opt = next(o for o in OPTIONS if o.name == name)
    high = INT_MAX.get(opt.field, 1 << 31)
    assert check_value(name, high) == high
    with pytest.raises(ConfigError):
        check_value(name, high + 1)
    with pytest.raises(ConfigError):
        resolve_run_config({}, None, {opt.field: high + 1})


# --- RunOptions: the one typed configuration generated from the declarations -------------------------------------
def test_run_options_has_one_field_per_declared_option_typed_by_its_kind():
    import dataclasses

    from vlm_perf.run.options import RunOptions

    fields = {f.name: f for f in dataclasses.fields(RunOptions)}
    assert list(fields) == [o.name for o in OPTIONS]
    kinds = {o.name: o.kind for o in OPTIONS}
    assert fields["frozen"].type == tuple[str, ...] and kinds["frozen"] == "list"
    assert fields["qlora"].type is bool and fields["causal"].type is str
    default = RunOptions()
    assert (default.frozen, default.qlora, default.causal, default.log_format) == ((), False, "half", "auto")
    with pytest.raises(dataclasses.FrozenInstanceError):
        default.gpus = 8  # type: ignore[misc]


def test_run_options_of_checks_each_value_once_and_states_only_what_was_given():
    from vlm_perf.run.options import RunOptions

    options = RunOptions.of(gpus=64, frozen=["vit", "projector"], qlora=False, peak_tflops=None)
    assert options.frozen == ("vit", "projector")  # the selectors as written: one type from flag to regime
    # the command line's layer of the configuration: RunConfig field -> value, unset options state nothing
    assert options.overrides() == {"num_gpus": 64, "frozen": ["vit", "projector"]}
    with pytest.raises(ConfigError, match="num_gpus must be a positive integer"):
        RunOptions.of(gpus=0)
    with pytest.raises(ConfigError, match="unknown run option"):
        RunOptions.of(logs=["train.log"])  # the declared name is 'log'


def test_run_options_from_a_commands_flags_picks_one_run_of_compare():
    from vlm_perf.run.options import RunOptions

    flags = {"frozen_a": ["vit"], "frozen_b": [], "gpus_a": 8, "gpus_b": 16, "causal": "full"}
    a, b = RunOptions.from_command(flags, "_a"), RunOptions.from_command(flags, "_b")
    assert (a.frozen, a.gpus, a.causal) == (("vit",), 8, "full")
    assert (b.frozen, b.gpus, b.causal) == ((), 16, "full")


def test_trace_gpus_divides_the_runs_flops_and_is_refused_without_a_run():
    """`trace --gpus` (report's flag) sets the world size the metadata's FLOPs are divided by (with --run); without
    a run folder nothing would use it, so it is refused by name rather than ignored."""
    from tests.support import SAMPLE_LOGS, run_main

    r = run_main("trace", SAMPLE_LOGS / "qwen2-vl-tiny-trace" / "trace", "--gpus", "8")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--gpus" in r.stderr and "--run" in r.stderr
