"""run.yaml / run.json loading by defect class: duplicate keys (every key), alias expansion, nesting, non-finite
and out-of-range numbers (every integer key), bounded values in every message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vlm_perf.errors import SchemaError, VlmPerfError
from vlm_perf.ingest.runconfig import _INT_FIELDS, MANIFEST_KEYS, load_manifest
from tests.support import run_main  # the CLI entry point in-process (same exit statuses, one-line errors)

# one valid YAML value per manifest key (hand-written)
VALID = {"model": "qwen2.5-vl-7b", "num_gpus": "8", "gpu": "H100", "dtype": "bf16", "frozen": "[vision_tower]",
         "log_interval": "10", "seq_length": "4096", "image_grid": "[1, 28, 28]", "image_size": "[448, 448]",
         "images_per_sample": "1", "global_batch_size": "256", "micro_batch_size": "1", "synthetic": "false",
         "generator": "x", "seed": "1", "notes": "hi", "recompute_granularity": "full", "recompute_method": "uniform",
         "recompute_num_layers": "1", "gradient_checkpointing": "true", "trainable": "['lm[20:].mlp']",
         "adapter": "adapter_config.json", "qlora": "false"}
INT_KEYS = [k for k in MANIFEST_KEYS if k in _INT_FIELDS]


def _yaml(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_manifest_key_has_a_valid_example():
    assert set(VALID) == set(MANIFEST_KEYS)


@pytest.mark.parametrize("key", MANIFEST_KEYS)
def test_duplicate_yaml_key_names_the_key_and_both_lines(tmp_path, key):
    text = f"{key}: {VALID[key]}\nnotes: between\n{key}: {VALID[key]}\n" if key != "notes" else \
        "notes: a\nmodel: x\nnotes: b\n"
    with pytest.raises(SchemaError, match=rf"run.yaml: line 3: duplicate key '{key}' \(first at line 1\)"):
        load_manifest(_yaml(tmp_path, text))


@pytest.mark.parametrize("key", MANIFEST_KEYS)
def test_duplicate_json_key_names_the_key(tmp_path, key):
    with pytest.raises(SchemaError, match=f"duplicate key '{key}'"):
        load_manifest(_yaml(tmp_path, f'{{"{key}": 1, "{key}": 2}}', "run.json"))


def test_valid_manifest_still_loads(tmp_path):
    text = "".join(f"{k}: {v}\n" for k, v in VALID.items())
    out = load_manifest(_yaml(tmp_path, text))
    assert out["num_gpus"] == 8 and out["image_grid"] == (1, 28, 28) and out["frozen"] == ("vision_tower",)


def _bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\nnotes: *a{levels - 1}\n"


@pytest.mark.parametrize("levels", [5, 9])
def test_alias_bomb_is_refused_quickly_with_a_bounded_message(tmp_path, levels):
    """9 levels of 9 aliases (about 1.2 KB) expand to 9^9 = 387,420,489 strings; 5 levels to 59,049 (> 10,000)."""
    path = _yaml(tmp_path, _bomb(levels))
    code = f"from vlm_perf.ingest.runconfig import load_manifest\nload_manifest({str(path)!r})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "expands to more than 10000 values through aliases" in proc.stderr
    assert len(proc.stderr.strip().splitlines()[-1]) < 400


def test_small_aliases_still_work(tmp_path):
    text = "frozen: &f [vision_tower]\nnotes: plain\n"
    assert load_manifest(_yaml(tmp_path, text))["frozen"] == ("vision_tower",)


@pytest.mark.parametrize("depth", [65, 100_000])
def test_deep_yaml_nesting_is_refused(tmp_path, depth):
    with pytest.raises(SchemaError, match="nested deeper than 64"):
        load_manifest(_yaml(tmp_path, "notes: " + "[" * depth + "]" * depth + "\n"))


def test_recursive_alias_is_refused(tmp_path):
    with pytest.raises(SchemaError):
        load_manifest(_yaml(tmp_path, "notes: &a [*a]\n"))


@pytest.mark.parametrize("key", INT_KEYS)
@pytest.mark.parametrize("value", ["1e20", "1.0e+20", "99999999999999999999999", ".inf", ".nan", "-.inf", "0", "-3",
                                   "2.5", "true", "[1]", "{a: 1}"])
def test_integer_keys_are_bounded_and_typed(tmp_path, key, value):
    with pytest.raises(SchemaError, match=key) as err:
        load_manifest(_yaml(tmp_path, f"{key}: {value}\n"))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("key", ["image_grid", "image_size"])
@pytest.mark.parametrize("value", ["[1, 1.0e+30, 2]", "[.nan, 2, 2]", "[0, 0, 0]"])
def test_list_keys_are_bounded(tmp_path, key, value):
    if key == "image_size":
        value = value.replace("[1, ", "[").replace("[.nan, 2, 2]", "[.nan, 2]").replace("[0, 0, 0]", "[0, 0]")
    with pytest.raises(SchemaError, match=key):
        load_manifest(_yaml(tmp_path, f"{key}: {value}\n"))


@pytest.mark.parametrize("key", MANIFEST_KEYS)
def test_every_message_prints_a_bounded_value(tmp_path, key):
    """A long, wrongly typed value for any key: the error stays one short line (the value elided)."""
    long_list = "[" + ", ".join(["{x: " + "y" * 50 + "}"] * 2000) + "]"
    try:
        load_manifest(_yaml(tmp_path, f"{key}: {long_list}\n"))
    except VlmPerfError as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 600, message[:300]
    else:
        raise AssertionError(f"{key}: a list of mappings was accepted")


def test_several_manifests_is_an_input_error(tmp_path):
    from vlm_perf.errors import InputError
    from vlm_perf.ingest.runconfig import find_manifest

    _yaml(tmp_path, "notes: a\n")
    _yaml(tmp_path, "{}", "run.json")
    with pytest.raises(InputError, match="several manifests"):
        find_manifest(tmp_path)


def test_log_interval_1e20_exits_2_from_report(tmp_path):
    """End to end (the run folder of the bundled video sample): exit 2, one line, not an internal error."""
    import shutil

    src = Path(__file__).resolve().parents[2] / "sample_logs" / "qwen2.5-vl-7b-video"
    run = tmp_path / "run"
    shutil.copytree(src, run)
    manifest = run / "run.yaml"
    text = "".join(line for line in manifest.read_text().splitlines(keepends=True) if not line.startswith("log_interval"))
    manifest.write_text(text + "log_interval: 1.0e+20\n")
    proc = run_main("report", str(run), "-o", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr[-500:]
    assert "log_interval must be a positive integer" in proc.stderr and "internal error" not in proc.stderr
