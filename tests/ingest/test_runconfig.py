"""Run configuration: precedence CLI > manifest > log, conflicts reported, manifest validation."""

from __future__ import annotations

import json

import pytest

from vlm_perf.ingest.runconfig import RunConfig, find_manifest, load_manifest, resolve_run_config

LOG = {"world_size": 128, "seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 512,
       "tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 2, "context_parallel_size": 1,
       "expert_model_parallel_size": 8, "train_iters": 1000}


def test_log_only():
    cfg = resolve_run_config(LOG, None, {})
    assert isinstance(cfg, RunConfig)
    assert (cfg.num_gpus, cfg.seq_length, cfg.global_batch_size) == (128, 8192, 512)
    assert (cfg.tensor_parallel, cfg.pipeline_parallel, cfg.context_parallel, cfg.expert_parallel) == (4, 2, 1, 8)
    assert cfg.sources["num_gpus"] == "log"
    assert cfg.conflicts == []
    assert cfg.unused_log_keys == {"train_iters": 1000}


def test_precedence_and_conflicts(tmp_path):
    manifest = tmp_path / "run.yaml"
    manifest.write_text("model: qwen2.5-vl-7b\nnum_gpus: 64\ngpu: H100-SXM\ndtype: bf16\nseq_length: 8192\n"
                        "frozen: [vision]\nimage_grid: [1, 32, 32]\nsynthetic: false\nnotes: test run\n")
    cfg = resolve_run_config(LOG, manifest, {"gpu": "H200", "dtype": None})
    assert cfg.num_gpus == 64 and cfg.sources["num_gpus"] == "manifest"  # manifest > log
    assert cfg.gpu == "H200" and cfg.sources["gpu"] == "cli"  # cli > manifest
    assert cfg.dtype == "bf16"  # a None override is "not given"
    assert cfg.frozen == ("vision",) and cfg.image_grid == (1, 32, 32) and cfg.synthetic is False
    assert cfg.model == "qwen2.5-vl-7b"
    by_field = {c["field"]: c for c in cfg.conflicts}
    assert by_field["num_gpus"]["values"] == {"manifest": 64, "log": 128}
    assert by_field["num_gpus"]["used"] == "manifest"
    assert by_field["gpu"]["values"] == {"cli": "H200", "manifest": "H100-SXM"}
    assert "seq_length" not in by_field  # same value in two sources is no conflict
    assert any("num_gpus: manifest says 64, log says 128" in m for m in cfg.conflict_messages())
    json.dumps(cfg.to_dict())


def test_gpu_names_of_one_device_are_no_conflict(tmp_path):
    """``--gpu H100`` against run.yaml's ``H100-SXM``: one device (plain H100 means SXM), one peak, no conflict;
    a different device still is one."""
    manifest = tmp_path / "run.yaml"
    manifest.write_text("gpu: H100-SXM\n")
    for same in ("H100", "h100 sxm", "NVIDIA H100 80GB HBM3"):
        cfg = resolve_run_config({}, manifest, {"gpu": same})
        assert cfg.conflicts == [] and cfg.gpu == same and cfg.sources["gpu"] == "cli"
    cfg = resolve_run_config({}, manifest, {"gpu": "H100-PCIe"})
    assert [c["field"] for c in cfg.conflicts] == ["gpu"]
    cfg = resolve_run_config({}, manifest, {"gpu": "not-a-gpu"})  # unknown names compare as written
    assert [c["field"] for c in cfg.conflicts] == ["gpu"]


def test_cli_overrides_everything(tmp_path):
    manifest = tmp_path / "run.json"
    manifest.write_text(json.dumps({"num_gpus": 64}))
    cfg = resolve_run_config(LOG, manifest, {"num_gpus": 32})
    assert cfg.num_gpus == 32 and cfg.sources["num_gpus"] == "cli"
    assert {c["field"]: c["values"] for c in cfg.conflicts}["num_gpus"] == {"cli": 32, "manifest": 64, "log": 128}


def test_log_internal_conflict():
    cfg = resolve_run_config({"world_size": 16, "num_gpus": 8}, None, {})
    assert cfg.num_gpus == 16
    assert cfg.conflicts[0]["values"] == {"log:world_size": 16, "log:num_gpus": 8}


def test_parallel_sizes_inconsistent_with_gpus():
    cfg = resolve_run_config({"world_size": 12, "tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 1,
                              "context_parallel_size": 1}, None, {})
    assert any(c.get("note", "").startswith("num_gpus is not a multiple") for c in cfg.conflicts)


def test_unknown_manifest_key(tmp_path):
    manifest = tmp_path / "run.yaml"
    manifest.write_text("num_gpus: 8\nnum_gpu: 8\n")
    with pytest.raises(ValueError, match=r"run\.yaml: unknown manifest key 'num_gpu'"):
        resolve_run_config({}, manifest, {})


@pytest.mark.parametrize("text, match", [
    ("num_gpus: -1\n", "num_gpus must be a positive integer"),
    ("num_gpus: 1.5\n", "num_gpus must be a positive integer"),
    ("frozen: [eyes]\n", "frozen: unknown part"),
    ("image_grid: [1, 2]\n", "image_grid must be"),
    ("synthetic: maybe\n", "synthetic must be"),
    ("- a\n- b\n", "mapping"),
    ("num_gpus: [\n", "cannot parse"),
])
def test_bad_manifest_values(tmp_path, text, match):
    manifest = tmp_path / "run.yaml"
    manifest.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_manifest(manifest)


def test_model_path_relative_to_manifest(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text("{}")
    manifest = tmp_path / "run.yaml"
    manifest.write_text("model: cfg/config.json\n")
    assert load_manifest(manifest)["model"] == str((tmp_path / "cfg" / "config.json").resolve())
    manifest.write_text("model: qwen3-vl-8b\n")
    assert load_manifest(manifest)["model"] == "qwen3-vl-8b"


def test_find_manifest(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("")
    assert find_manifest(log) is None
    (tmp_path / "run.yaml").write_text("num_gpus: 8\n")
    assert find_manifest(log) == tmp_path / "run.yaml"
    assert find_manifest(tmp_path) == tmp_path / "run.yaml"
    (tmp_path / "run.json").write_text("{}")
    with pytest.raises(ValueError, match="several manifests"):
        find_manifest(tmp_path)


def test_unknown_override():
    with pytest.raises(ValueError, match="unknown override 'gpus'"):
        resolve_run_config({}, None, {"gpus": 8})
    with pytest.raises(ValueError, match="num_gpus"):
        resolve_run_config({}, None, {"num_gpus": "eight"})
