"""`vlm-perf flops` on a BLIP-2 checkpoint folder (blip2-opt-2.7b's hub config layout): the Q-Former by hand, and
visual tokens counted as the queries (32 LM tokens per image, whatever the image's 16 x 16 patch grid)."""

import json
import sys
from pathlib import Path

import pytest

from tests.support import run_main as cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "arch"))
from config_samples import sample  # noqa: E402


@pytest.fixture
def checkpoint(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(sample("blip-2")))
    return str(tmp_path)


def test_qformer_forward_by_hand(checkpoint):
    """One 224-px image: 16 x 16 patches + CLS = 257 tower rows of width 1408; the Q-Former's 32 queries of width 768,
    12 layers (self-attention + FFN 3072), cross-attention in 6 of them, then Linear(768 -> 2560) on each query."""
    r = cli("flops", "--model", checkpoint, "--seq-len", "64", "--image-size", "480,640", "--mode", "forward",
            "--json")
    assert r.returncode == 0, r.stderr
    layer = 2 * 32 * 4 * 768 * 768 + 2 * 2 * 768 * 32 * 32 + 2 * 32 * 2 * 768 * 3072
    cross = 2 * 32 * 2 * 768 * 768 + 2 * 257 * 2 * 1408 * 768 + 2 * 2 * 768 * 32 * 257
    assert json.loads(r.stdout)["components"]["vision.merger"] == 12 * layer + 6 * cross + 2 * 32 * 768 * 2560


def test_an_explicit_grid_gives_the_queries_as_visual_tokens(checkpoint):
    ok = cli("flops", "--model", checkpoint, "--seq-len", "40", "--grid", "1,16,16", "--json")
    assert ok.returncode == 0, ok.stderr
    two = cli("flops", "--model", checkpoint, "--seq-len", "40", "--grid", "1,16,16", "--grid", "1,16,16")
    assert two.returncode == 2 and "the media give 64 visual tokens, more than the 40 LM tokens" in two.stderr
