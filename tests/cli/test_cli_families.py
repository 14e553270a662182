"""Issue-11 CLI contract: media in pixels through each family's processor rule, checkpoint directories with
processor files, ``parts`` in JSON, ``--frozen`` part names, conventions not defined for a family."""

import json

import pytest

from tests.support import run_cli, run_main as cli  # in-process entry point; run_cli: a real subprocess
from vlm_perf.arch import preset_config


def flops_json(*args):
    r = cli("flops", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_image_size_qwen_reference_defaults_and_parts():
    out = flops_json("--model", "qwen2.5-vl-7b", "--seq-len", "4096", "--image-size", "1080,1920")
    # smart_resize, factor 28, reference bounds (max 28^2*16384): 1080 -> 39*28 = 1092, 1920 -> 69*28 = 1932
    (m,) = out["media"]
    assert (m["resized"], m["grid"], m["visual_tokens"]) == ([1092, 1932], [1, 78, 138], 78 * 138 // 4)
    assert out["inputs"]["grids"] == [[1, 78, 138]] and out["inputs"]["image_sizes"] == [[1080, 1920]]
    parts = out["parts"]
    assert set(parts) == {"vision_tower", "projector", "language_model"}
    assert parts["vision_tower"] + parts["projector"] == out["vision"]
    assert parts["language_model"] == out["language"]
    # the same grid given directly gives the same FLOPs (the old contract)
    assert flops_json("--model", "qwen2.5-vl-7b", "--seq-len", "4096", "--grid", "1,78,138")["total"] == out["total"]


def test_checkpoint_directory_processor_files_override_defaults(tmp_path):
    cfg = {k: v for k, v in preset_config("qwen2.5-vl-7b").items() if not k.startswith("_")}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"min_pixels": 3136, "max_pixels": 28 * 28 * 256}))
    out = flops_json("--model", str(tmp_path), "--seq-len", "4096", "--image-size", "1080,1920")
    # over max_pixels: beta = sqrt(1080*1920/200704) = 3.214; floor(1080/beta/28)*28 = 336, floor(1920/beta/28)*28 = 588
    assert out["media"][0]["grid"] == [1, 24, 42] and out["media"][0]["visual_tokens"] == 252
    assert out["processor"]["source"] == "processor files" and out["processor"]["max_pixels"] == 200704


def test_internvl_tiles_and_processor_class_default(tmp_path):
    out = flops_json("--model", "internvl3-8b", "--seq-len", "8192", "--image-size", "1080,1920")
    # aspect 1.78: (2,1) and (4,2) tie at |1.78 - 2|; area 2.07M px > half of 8 tiles of 448^2 -> 4x2 + thumbnail
    (m,) = out["media"]
    assert (m["tiles"], m["grid"], m["visual_tokens"], m["canvas"]) == (9, [9, 32, 32], 9 * 256, [2, 4])
    assert out["stats"]["vision_cls_tokens"] == 9 and out["stats"]["vision_patches"] == 9 * 1024
    # the -hf checkpoints ship crop_to_patches false; InternVLProcessor forces tiling anyway
    cfg = {k: v for k, v in preset_config("internvl3-8b").items() if not k.startswith("_")}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(
        {"crop_to_patches": False, "min_patches": 1, "max_patches": 4, "size": {"height": 448, "width": 448}}))
    small = flops_json("--model", str(tmp_path), "--seq-len", "8192", "--image-size", "1080,1920")
    assert small["media"][0]["tiles"] == 2 + 1  # max 4 tiles: (2,1) wins the tie ((4,1) is farther), + thumbnail
    assert small["processor"]["crop_to_patches"] is True


def test_more_visual_tokens_than_seq_len_is_an_error():
    r = cli("flops", "--model", "internvl3-8b", "--seq-len", "2000", "--image-size", "1080,1920")
    assert r.returncode == 2 and "2304 visual tokens, more than the 2000 LM tokens" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("part", ["vision_tower", "projector", "language_model", "deepstack_merger", "merger", "vit"])
def test_frozen_part_names(part):
    out = flops_json("--model", "qwen3-vl-8b", "--seq-len", "2048", "--image-size", "512,512", "--frozen", part)
    assert out["inputs"]["frozen"] == [part]


def test_frozen_language_model_on_text_only_model_is_an_error():
    r = cli("flops", "--model", "llama3-8b", "--seq-len", "128", "--frozen", "language_model")
    assert r.returncode == 2 and "mode 'forward'" in r.stderr and "Traceback" not in r.stderr
    ok = cli("flops", "--model", "llama3-8b", "--seq-len", "128", "--frozen", "language_model", "--mode", "forward")
    assert ok.returncode == 0, ok.stderr


def test_convention_not_defined_for_family():
    r = cli("flops", "--model", "internvl3-8b", "--seq-len", "4096", "--convention", "megatron-bridge")
    assert r.returncode == 2 and "not defined for internvl" in r.stderr
    out = flops_json("--model", "internvl3-8b", "--seq-len", "4096", "--convention", "all")
    assert set(out["conventions"]) == {"exact", "6nd", "hf-trainer", "ms-swift"} and "megatron-bridge" in out["not_defined"]


def test_video_size_qwen2_and_qwen3():
    out = flops_json("--model", "qwen2-vl-7b", "--seq-len", "8192", "--video-size", "8,360,640")
    # video bounds per frame 128..768 merged tokens: 360 -> 13*28 = 364, 640 -> 23*28 = 644 (364*644 = 234416 <= 602112)
    assert out["media"][0]["grid"] == [4, 26, 46] and out["inputs"]["video_grids"] == [[4, 26, 46]]
    # Qwen3-VL: bounds on t_bar*h*w over the clip (4096 .. 25165824): 16*704*1280 = 14.4M fits; round(720/32) = 22
    out = flops_json("--model", "qwen3-vl-8b", "--seq-len", "16384", "--video-size", "16,720,1280")
    assert out["media"][0]["grid"] == [8, 44, 80] and out["media"][0]["visual_tokens"] == 8 * 22 * 40
    r = cli("flops", "--model", "qwen3-vl-8b", "--seq-len", "8192", "--video-size", "1,360,640")
    assert r.returncode == 2 and "at least temporal_patch_size=2 frames" in r.stderr


def test_bad_image_size_is_one_line():
    r = cli("flops", "--model", "qwen3-vl-8b", "--seq-len", "8192", "--image-size", "512")
    assert r.returncode == 2 and "--image-size: expected H,W" in r.stderr
    r = cli("flops", "--model", "llama3-8b", "--seq-len", "8192", "--image-size", "512,512")
    assert r.returncode == 2 and "no vision tower" in r.stderr


def test_config_without_model_type_is_stated_or_refused(tmp_path):
    text = {k: v for k, v in preset_config("qwen3-30b-a3b").items() if not k.startswith("_")}
    (tmp_path / "config.json").write_text(json.dumps({"text_config": text}))
    out = flops_json("--model", str(tmp_path), "--seq-len", "1024")
    assert any("no top-level model_type" in n for n in out["notes"])
    vlm = {k: v for k, v in preset_config("qwen3-vl-8b").items() if not k.startswith("_") and k != "model_type"}
    vlm["text_config"]["model_type"] = "qwen3"
    (tmp_path / "config.json").write_text(json.dumps(vlm))
    r = cli("flops", "--model", str(tmp_path), "--seq-len", "1024")
    assert r.returncode == 2 and "no top-level model_type" in r.stderr


def test_families_presets_lists_names_families_totals_and_repos():
    r = run_cli("families", "--presets")
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()}
    from vlm_perf.arch import preset_names

    assert sorted(rows) == preset_names()
    assert rows["llava-v1.6-mistral-7b"][1:] == ["llava_next", "7.57B", "llava-hf/llava-v1.6-mistral-7b-hf"]
    assert rows["paligemma-3b-224"][1:] == ["paligemma", "2.92B", "google/paligemma-3b-pt-224"]


def test_model_by_hub_repo_id_on_the_cli():
    a = flops_json("--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--seq-len", "1024")
    b = flops_json("--model", "qwen2.5-vl-7b", "--seq-len", "1024")
    assert a["total"] == b["total"]
    r = cli("flops", "--model", "Qwen/Qwen2-VL-2B-Instruct", "--seq-len", "1024")
    assert r.returncode == 2 and "did you mean" in r.stderr and "Traceback" not in r.stderr


def test_llava_onevision_multi_image_sample_uses_the_base_tile_rule():
    """Issue 21: several images in ONE LLaVA-OneVision sample use only the base tile per image in transformers
    (measured in tests/verify: CASES llava_onevision multi_image); --multi-image applies that rule on the CLI:
    each image one 27x27 tile, 729 + 1 newline tokens, no anyres."""
    args = ("--model", "llava-onevision-qwen2-7b", "--seq-len", "2000", "--image-size", "480,640",
            "--image-size", "1000,300")
    out = flops_json(*args, "--multi-image")
    assert [(m["grid"], m["visual_tokens"], m["tiles"]) for m in out["media"]] == [([1, 27, 27], 730, 1)] * 2
    assert out["total"] == flops_json("--model", "llava-onevision-qwen2-7b", "--seq-len", "2000",
                                      "--grid", "1,27,27", "--grid", "1,27,27")["total"]
    r = cli("flops", *args)  # anyres per image: 5764 tokens, more than 2000
    assert r.returncode == 2 and "--multi-image" in r.stderr and "Traceback" not in r.stderr
    one = flops_json("--model", "qwen2.5-vl-7b", "--seq-len", "4096", "--image-size", "480,640", "--image-size",
                     "100,100", "--multi-image")
    assert one["total"] == flops_json("--model", "qwen2.5-vl-7b", "--seq-len", "4096", "--image-size", "480,640",
                                      "--image-size", "100,100")["total"]  # same rule either way for Qwen
