"""Print measured (FlopCounterMode) vs library FLOPs per part for one case per family.

    PYTHONPATH=/work/main /work/main/.venv/bin/python -m tests.verify.report
"""

from __future__ import annotations

from .measure import FAMILIES, PARTS, build_model, library_flops, library_parts, make_batch, measure

IMAGES, VIDEOS = [(1, 4, 4), (1, 10, 14)], [(2, 4, 6)]
RUNS = [("forward", ()), ("training", ()), ("training", ("vision_tower",)), ("training", ("vision",)),
        ("training", ("language_model",))]


def main() -> None:
    print(f"images={IMAGES} videos={VIDEOS} (t,h,w patches); causal=full, convention=exact")
    for family in FAMILIES:
        model = build_model(family)
        batch = make_batch(model, IMAGES, VIDEOS)
        print(f"\n== {family}  seq_len={batch.seq_lens[0]}")
        print(f"{'run':34s} {'part':7s} {'measured':>14s} {'library':>14s} {'lib-meas':>12s} {'rel':>9s}")
        for mode, frozen in RUNS:
            m = measure(model, batch, training=mode == "training", frozen=frozen)
            m.check_consistency()
            got = m.forward if mode == "forward" else m.training()
            lib = library_parts(library_flops(model.config.to_dict(), batch, mode=mode, frozen=frozen))
            label = f"{mode} frozen={'+'.join(frozen) or '-'}"
            for part in PARTS:
                g, w = got.get(part, 0), lib[part]
                rel = (w - g) / g if g else 0.0
                flag = "" if abs(rel) <= 0.005 else "  <-- MISMATCH"
                print(f"{label:34s} {part:7s} {g:14,d} {w:14,.0f} {w - g:+12,.0f} {100 * rel:+8.3f}%{flag}")


if __name__ == "__main__":
    main()
