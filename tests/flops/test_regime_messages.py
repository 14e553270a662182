"""An adapter that adapts no module is one line naming its file and ``target_modules`` (issue 34, weak messages)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support import run_main

LORA = Path(__file__).resolve().parents[2] / "sample_logs" / "qwen2-vl-tiny-lora-real"


@pytest.mark.parametrize("targets", [["nonexistent_proj"], "^nothing\\.here$", ["lm_head_x", "visual_y"]])
def test_an_adapter_that_adapts_nothing_names_its_file_and_field(tmp_path, targets):
    run = tmp_path / "run"
    shutil.copytree(LORA, run)
    cfg = json.loads((run / "adapter_config.json").read_text())
    cfg["target_modules"] = targets
    (run / "adapter_config.json").write_text(json.dumps(cfg))
    (run / "trainability.json").unlink()  # the callback's record would state what trained instead
    done = run_main("report", run, "-o", tmp_path / "out")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1
    assert f"{run / 'adapter_config.json'}: target_modules {targets!r} match no module of" in line
    assert "PEFT refuses" in line
