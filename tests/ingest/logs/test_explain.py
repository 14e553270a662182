"""`vlm-perf parse FILE --explain`: per distinct line shape, the format, kind, field mapping and
unknown keys (issue 19)."""

from __future__ import annotations

from pathlib import Path


from vlm_perf.ingest.logs.explain import explain, shape_of_line

PUBLIC = Path(__file__).resolve().parent / "fixtures" / "public"


def test_shape_masks_numbers_and_prefix():
    assert shape_of_line("[rank0]: step: 10  loss: 1.5") == shape_of_line("[rank3]: step: 11  loss: 1.25")


def test_explain_names_format_kind_mapping_and_unknown_keys():
    infos, distinct = explain(PUBLIC / "nanochat.log")
    nano = next(i for i in infos if i.framework == "nanochat")
    assert nano.count == 2 and nano.kind == "train"
    assert any(f.startswith("dt -> elapsed_s") for f in nano.fields)
    assert any("mfu -> mfu_logged (nanochat prints MFU in percent" in f for f in nano.fields)
    assert nano.unknown == ["lrm"]
    gen = next(i for i in infos if i.framework == "generic")
    assert gen.confidence.startswith("lower")
    eval_line = next(i for i in infos if i.sample.startswith("step 250"))
    # nanoGPT's periodic estimate of the loss on both splits: an evaluation record (issue 31: multi-word keys are
    # read), never a training iteration
    assert eval_line.framework == "generic" and eval_line.kind == "eval"


def test_explain_kind_of_a_validation_only_step():
    infos, _ = explain(PUBLIC / "verl_sft_grpo.log")
    assert [i.kind for i in infos if i.framework == "verl"][0] == "eval"


def test_cli_explain(cli):
    res = cli("parse", str(PUBLIC / "xtuner_mmengine.log"), "--explain")
    assert res.exit_code == 0, res.output
    assert "format mmengine" in res.output and "time -> elapsed_s" in res.output and "data_time" in res.output
