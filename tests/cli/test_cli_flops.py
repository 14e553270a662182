"""CLI contract of `vlm-perf flops` / `explain` / `conventions`: JSON shape, errors as one line + exit 2."""

import json

import pytest

from tests.support import run_cli, run_main as cli  # in-process entry point; run_cli: a real subprocess


def test_flops_json_contract():
    r = run_cli("flops", "--model", "qwen3-vl-30b-a3b", "--seq-len", "4096", "--grid", "1,64,64", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for key in ("total", "vision", "language", "components", "inputs"):
        assert key in out
    assert out["total"] == pytest.approx(out["vision"] + out["language"])
    assert out["inputs"]["grids"] == [[1, 64, 64]] and out["inputs"]["seq_len"] == 4096
    assert out["vision"] > 0 and set(out["components"]) >= {"vision.patch_embed", "lm.logits", "lm.router"}
    assert out["components"]["vision.patch_embed"] == 2 * 2 * 4096 * 1536 * 1152  # training x2 (pixels need no dgrad)


def test_flops_table_and_all_conventions():
    r = cli("flops", "--model", "qwen2.5-vl-7b", "--seq-lens", "3000,1096", "--video-grid", "4,36,64",
            "--convention", "all")
    assert r.returncode == 0, r.stderr
    for name in ("exact", "megatron-lm", "megatron-bridge", "mbridge-pr2575", "torchtitan", "verl", "6nd"):
        assert name in r.stdout


def test_frozen_and_forward():
    base = ["flops", "--model", "qwen3-vl-8b", "--seq-len", "2048", "--grid", "1,32,32", "--json"]
    train = json.loads(cli(*base).stdout)
    frozen = json.loads(cli(*base, "--frozen", "vision").stdout)
    fwd = json.loads(cli(*base, "--mode", "forward").stdout)
    assert frozen["language"] == train["language"]
    assert frozen["vision"] == pytest.approx(fwd["vision"])  # frozen vision = forward only
    assert train["components"]["vision.mlp"] == 3 * fwd["components"]["vision.mlp"]


@pytest.mark.parametrize("args, needle", [
    (["flops", "--model", "qwen3-vl-30b", "--seq-len", "10"], "qwen3-vl-30b-a3b"),
    (["flops", "--model", "qwen3-vl-8b", "--seq-len", "4096", "--grid", "1,63,64"], "divisible"),
    (["flops", "--model", "qwen3-vl-8b", "--seq-len", "4096", "--grid", "0,64,64"], "positive"),
    (["flops", "--model", "qwen3-vl-8b", "--seq-len", "4096", "--grid", "1,64"], "T,H,W"),
    (["flops", "--model", "qwen3-vl-8b", "--seq-len", "100", "--grid", "1,64,64"], "placeholder"),
    (["flops", "--model", "qwen3-vl-8b"], "--seq-len"),
    (["flops", "--model", "qwen3-vl-8b", "--seq-len", "10", "--convention", "megatron"], "unknown convention"),
    (["flops", "--model", "qwen3-vl-8b", "--seq-len", "10", "--frozen", "eyes"], "frozen part"),
    (["flops", "--model", "qwen3-vl-8b", "--seq-len", "10", "--causal", "quarter"], "causal"),
    (["flops", "--model", "/nonexistent/config.json", "--seq-len", "10"], "no such config"),
    (["explain", "--model", "qwen3-30b-a3b", "--before", "494", "--after", "554"], "no vision tower"),
])
def test_bad_input_is_one_line(args, needle):
    r = cli(*args)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], r.stderr


def test_unsupported_model_type(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "fuyu", "hidden_size": 8}))  # mllama: issue 21
    r = cli("flops", "--model", str(tmp_path), "--seq-len", "10")
    assert r.returncode == 2 and "unsupported model_type 'fuyu'" in r.stderr


def test_missing_field(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
           "vocab_size": 100}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = cli("flops", "--model", str(tmp_path / "config.json"), "--seq-len", "10")
    assert r.returncode == 2 and "intermediate_size" in r.stderr


def test_explain_json():
    r = run_cli("explain", "--model", "qwen3-vl-30b-a3b", "--before", "494", "--after", "554", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    share = {f["patches_per_frame"]: f["visual_token_share"] for f in out["frames"]}
    assert 0.20 < share[1024] < 0.24


def test_conventions_listing():
    r = run_cli("conventions")
    assert r.returncode == 0 and "PR #2575" in r.stdout and "4x" in r.stdout


def test_packed_rows_with_samples():
    # four 1024-token documents packed into ONE 4096-token row: torchtitan bills its configured length
    packed = json.loads(cli("flops", "--model", "qwen3-30b-a3b", "--seq-lens", "1024,1024,1024,1024",
                            "--samples", "1", "--convention", "torchtitan", "--json").stdout)
    full = json.loads(cli("flops", "--model", "qwen3-30b-a3b", "--seq-len", "4096", "--convention", "torchtitan",
                          "--json").stdout)
    assert packed["total"] == full["total"]
    exact = json.loads(cli("flops", "--model", "qwen3-30b-a3b", "--seq-lens", "1024,1024,1024,1024",
                           "--samples", "1", "--json").stdout)
    assert exact["stats"]["lm_tokens_sq"] == 4 * 1024**2  # exact still attends per document


@pytest.mark.parametrize("args, needle", [
    (["explain", "--model", "qwen3-vl-30b-a3b", "--before", "554", "--after", "494"], "below --before"),
    (["conventions", "nosuch"], "unknown convention"),
    (["flops", "--model", "qwen3-vl-8b", "--seq-len", "10", "--convention", "verl", "--frozen", "bogus"],
     "frozen part"),
    (["flops", "--model", "qwen3-vl-8b", "--seq-lens", "10,20", "--samples", "3"], "samples"),
])
def test_more_bad_input(args, needle):
    r = cli(*args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and needle in r.stderr, r.stderr


def test_explain_says_when_its_convention_counts_no_vision():
    """mbridge-pr2575 (explain's default 'after' convention) counts no vision for Qwen2.5-VL: the answer says so and
    names the conventions that do, instead of a table of zeros; the suggested one solves the delta."""
    from vlm_perf.analysis.explain import explain_delta
    from vlm_perf.arch import load_model
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = load_model("qwen2.5-vl-7b")
    image = BatchStats.from_batch(seq_len=4096, image_grids=[(1, 32, 32)], spec=spec)
    assert compute_flops(spec, image, "mbridge-pr2575").vision == 0 < compute_flops(spec, image, "exact").vision
    r = cli("explain", "--model", "qwen2.5-vl-7b", "--before", "494", "--after", "554")
    assert r.returncode == 0, r.stderr
    assert "mbridge-pr2575 convention counts no vision FLOPs for qwen2.5-vl-7b" in " ".join(r.stdout.split())
    assert "--convention exact" in " ".join(r.stdout.split()) and "0.00x" not in r.stdout
    result = explain_delta(spec, 494, 554)
    assert result.counts_no_vision and "exact" in result.vision_conventions
    assert "mbridge-pr2575" not in result.vision_conventions
    assert not explain_delta(spec, 494, 554, convention="exact").counts_no_vision
