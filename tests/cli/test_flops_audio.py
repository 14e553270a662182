"""``vlm-perf flops`` with audio clips (Omni thinkers): --audio-frames / --audio-samples reach the audio part;
models without an audio encoder refuse them in one line."""

from __future__ import annotations

import json

from tests.support import run_main as cli  # in-process entry point (flops keeps subprocess tests in test_cli_flops)
from vlm_perf.arch import load_model
from vlm_perf.flops import compute_flops
from vlm_perf.stats import BatchStats


def test_audio_samples_and_frames_agree():
    spec = load_model("qwen3-omni-30b-a3b")
    by_samples = cli("flops", "-m", "qwen3-omni-30b-a3b", "--seq-len", "4096", "--audio-samples", "480000,16000",
                     "--json")
    by_frames = cli("flops", "-m", "qwen3-omni-30b-a3b", "--seq-len", "4096", "--audio-frames", "3000,100", "--json")
    assert by_samples.returncode == 0 and by_frames.returncode == 0, (by_samples.stderr, by_frames.stderr)
    a, b = json.loads(by_samples.stdout), json.loads(by_frames.stdout)
    expected = compute_flops(spec, BatchStats.from_batch(seq_len=4096, spec=spec, audio_frames=[3000, 100]))
    assert a["parts"] == b["parts"] == expected.parts
    assert [c["audio_tokens"] for c in a["inputs"]["audio"]] == [390, 13]


def test_audio_needs_an_audio_encoder():
    r = cli("flops", "-m", "qwen2.5-vl-7b", "--seq-len", "4096", "--audio-frames", "300")
    assert r.returncode == 2 and "no audio encoder" in r.stderr and "Traceback" not in r.stderr
