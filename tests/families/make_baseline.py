"""Record the FLOPs and parameter counts of every preset before the family-inventory refactor.

Run once on the pre-refactor code (commit 60f2c9a) to write ``baseline.json``; ``test_baseline.py``
then checks the refactored code reproduces every number bit for bit. Values are stored as
``repr`` strings (ints stay ints, floats keep every bit).

    PYTHONPATH=. python tests/families/make_baseline.py
"""

from __future__ import annotations

import json
from pathlib import Path

CASES_MEDIA = {
    "text": {"seq_lens": [3000, 1096], "images": [], "videos": []},
    "image": {"seq_lens": [4096, 1024, 77], "images": [(1, 36, 52), (1, 8, 8)], "videos": []},
    "video": {"seq_lens": [8192], "images": [(1, 20, 28)], "videos": [(4, 16, 24)]},
}
FROZEN = [(), ("vision_tower",), ("merger",), ("vision",), ("language_model",)]


def cases(presets=None):
    """(key, preset, convention, mode, causal, frozen, media) for every combination checked."""
    from vlm_perf.arch import preset_names
    from vlm_perf.flops import CONVENTIONS

    for preset in presets or preset_names():
        for media in CASES_MEDIA:
            for conv in CONVENTIONS:
                for mode in ("training", "forward"):
                    for causal in (("half", "full") if conv == "exact" else ("half",)):
                        for frozen in (FROZEN if conv == "exact" else [()]):
                            key = "|".join([preset, media, conv, mode, causal, ",".join(frozen)])
                            yield key, preset, conv, mode, causal, frozen, media


def compute(preset, conv, mode, causal, frozen, media):
    from vlm_perf.arch import load_model
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = load_model(preset)
    m = CASES_MEDIA[media]
    vision = spec.vision is not None
    stats = BatchStats.from_batch(seq_lens=m["seq_lens"], image_grids=m["images"] if vision else [],
                                  video_grids=m["videos"] if vision else [], spec=spec)
    try:
        b = compute_flops(spec, stats, conv, mode=mode, causal=causal, frozen=frozen)
    except ValueError:  # a convention without a formula for this family
        return {"error": "refused"}
    # floats: a convention may now return whole numbers as int (same value; the recorded reprs are floats)
    # totals exactly; components as floats to 14 significant digits, zero components left out: a convention
    # may return whole numbers as int, list a component it does not count as 0, or (forward first, then its
    # training rule) move the last bit of a non-integer component
    return digest({k: f"{float(v):.13e}" for k, v in b.components.items() if float(v) != 0}) + " " + repr(
        float(b.total))


def digest(components: dict) -> str:
    """First 16 hex digits of the sha256 of the components' reprs (keeps the file small)."""
    import hashlib

    return hashlib.sha256(json.dumps(components, sort_keys=True).encode()).hexdigest()[:16]


def frame_flops(preset):
    """The vectorised path: every media case as a row of Float64 columns, exact + megatron-bridge."""
    import polars as pl

    from vlm_perf.analysis.flops_frame import with_flops
    from vlm_perf.arch import load_model
    from vlm_perf.stats import BatchStats

    spec = load_model(preset)
    rows = []
    for m in CASES_MEDIA.values():
        vision = spec.vision is not None
        s = BatchStats.from_batch(seq_lens=m["seq_lens"], image_grids=m["images"] if vision else [],
                                  video_grids=m["videos"] if vision else [], spec=spec)
        rows.append(s.as_dict())
    out = with_flops(pl.DataFrame(rows), spec, ["exact", "megatron-bridge"])
    cols = [c for c in out.columns if c.startswith(("exact_", "megatron-bridge_", "flops."))]
    return {c: [repr(v) for v in out[c].to_list()] for c in cols}


def params(preset):
    from dataclasses import asdict

    from vlm_perf.arch import load_model
    from vlm_perf.arch.params import count_params

    # ``audio`` (an audio encoder's parameters) is 0 for every model without one: not part of the baseline
    return {k: v for k, v in asdict(count_params(load_model(preset))).items() if k != "audio" or v}


def main() -> None:
    from vlm_perf.arch import preset_names

    out = {"flops": {key: compute(*rest) for key, *rest in cases()},
           "params": {p: params(p) for p in preset_names()},
           "frames": {p: digest(frame_flops(p)) for p in preset_names()}}
    path = Path(__file__).with_name("baseline.json")
    path.write_text(json.dumps(out, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"{len(out['flops'])} FLOPs cases, {len(out['params'])} presets -> {path}")


if __name__ == "__main__":
    main()
