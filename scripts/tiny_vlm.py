"""The tiny random-init Qwen2-VL set-up shared by the REAL-run scripts (make_real_run.py, make_real_grpo.py).

Everything is built offline: a word-level tokenizer (``tokenizers``) with Qwen2-VL's special tokens, HF's own
``Qwen2VLImageProcessorPil`` and ``Qwen2VLProcessor`` around it, a tiny ``Qwen2VLConfig`` (eager attention), and
seeded synthetic images. The scripts put this folder on ``sys.path`` (it is a script's own folder).
"""

from __future__ import annotations

import json
from pathlib import Path

WORDS = ("the a an cat dog bird sees image picture photo of red blue green yellow square circle disc box on left "
         "right top bottom middle describe what is in this there two one three small large near far above below "
         "and with without color shape count how many which where").split()
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
           "<|video_pad|>"]
IMAGE_SIZES = [(56, 56), (84, 112), (100, 150), (140, 140), (168, 224), (224, 196), (60, 300)]  # (H, W) px


def build_tokenizer(extra_words: tuple[str, ...] = ()):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(WORDS + list(extra_words))],
                            trainers.WordLevelTrainer(special_tokens=["<unk>"] + SPECIAL))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<|endoftext|>",
                                   eos_token="<|im_end|>")


def build_processor(tokenizer):
    from transformers import Qwen2VLImageProcessorPil, Qwen2VLProcessor

    image_processor = Qwen2VLImageProcessorPil(patch_size=14, temporal_patch_size=2, merge_size=2,
                                               min_pixels=56 * 56, max_pixels=224 * 224)
    # Qwen2VLProcessor also wants a video processor, and HF's Qwen2VLVideoProcessor needs torchvision
    # (not installed here). This run has no videos: let the processor accept None for it.
    check = Qwen2VLProcessor.check_argument_for_proper_class

    def lenient(self, name, arg):
        return None if name == "video_processor" and arg is None else check(self, name, arg)

    Qwen2VLProcessor.check_argument_for_proper_class = lenient
    try:
        return Qwen2VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=None)
    finally:
        Qwen2VLProcessor.check_argument_for_proper_class = check


def build_config(tokenizer):
    from transformers import Qwen2VLConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL}
    text = dict(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                bos_token_id=None, eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]})
    vision = dict(depth=2, embed_dim=64, hidden_size=128, mlp_ratio=2, num_heads=4, in_channels=3, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2)
    config = Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                           video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                           vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=False)
    config._attn_implementation = "eager"
    return config


def write_config(config, path) -> None:
    """The tiny model's ``config.json`` (``config.to_json_file``'s text) with the LM's attention kernel added as
    ``attn_implementation``: transformers does not save it (``_remove_keys_not_serialized``), and vlm-perf reads it
    to warn when an eager core is counted ``--causal half``."""
    data = json.loads(config.to_json_string())
    data["attn_implementation"] = config.text_config._attn_implementation
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def make_image(rng, height: int, width: int):
    import numpy as np
    from PIL import Image

    img = rng.integers(0, 60, (height, width, 3)).astype(np.uint8)
    yy, xx = np.mgrid[:height, :width]
    for _ in range(int(rng.integers(1, 4))):
        color = rng.integers(80, 256, 3)
        cy, cx, r = rng.integers(0, height), rng.integers(0, width), rng.integers(8, max(9, min(height, width) // 2))
        if rng.random() < 0.5:
            img[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = color
        else:
            img[max(0, cy - r):cy + r, max(0, cx - r):cx + r] = color
    return Image.fromarray(img)


# ----------------------------------------------------------------------------------------- the child process
def run_child(script: str, out, args: list[str], what: str = "training") -> None:
    """Run ``script --child --out OUT *args`` (a REAL-run script's training half) in the offline, one-thread,
    unbuffered environment the bundled runs were made in; its console (tqdm step times, the Trainer's log dicts)
    is written to ``OUT/train.log`` (the run's log) and echoed. A failure exits naming the log."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_MININTERVAL": "0"}
    cmd = [sys.executable, str(Path(script).resolve()), "--child", "--out", str(out), *args]
    with open(Path(out) / "train.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=str(root))
        for chunk in iter(lambda: proc.stdout.read1(4096), b""):  # type: ignore[union-attr]
            log.write(chunk)
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        rc = proc.wait()
    if rc:
        sys.exit(f"{what} failed (exit {rc}); see {Path(out) / 'train.log'}")


def remove_tree(path) -> None:
    """Delete the Trainer's scratch folder ``path`` (files, then folders deepest first), if it exists."""
    from pathlib import Path

    path = Path(path)
    if not path.exists():
        return
    for leftover in sorted(path.glob("**/*"), reverse=True):
        leftover.unlink() if leftover.is_file() else leftover.rmdir()
    path.rmdir()
