"""``python -m vlm_perf.synth --preset NAME --out DIR [--seed N] [--iterations N]``; ``--list`` shows presets."""

from __future__ import annotations

import argparse
import sys

from .presets import RUN_PRESETS, get_preset
from .runner import generate_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vlm_perf.synth",
                                     description="Generate a SYNTHETIC training run (train.log, metadata.jsonl.gz, "
                                                 "run.yaml, synthetic.yaml) from a seeded run preset.")
    parser.add_argument("--preset", help=f"run preset: {', '.join(RUN_PRESETS)}")
    parser.add_argument("--out", help="output directory of the run (created)")
    parser.add_argument("--seed", type=int, help="override the preset's seed")
    parser.add_argument("--iterations", type=int, help="override the number of iterations (multiple of log_interval)")
    parser.add_argument("--list", action="store_true", help="list the presets and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, spec in RUN_PRESETS.items():
            print(f"{name:24s} seed {spec.seed:5d}  {spec.description}")
        return 0
    if not args.preset or not args.out:
        parser.error("--preset and --out are required (or --list)")
    try:
        spec = get_preset(args.preset)
    except ValueError as exc:
        parser.error(str(exc))
    changes = {}
    if args.seed is not None:
        changes["seed"] = args.seed
    if args.iterations is not None:
        changes["iterations"] = args.iterations
    spec = spec.with_(**changes) if changes else spec
    out = generate_run(spec, args.out)
    print(f"wrote SYNTHETIC run {spec.name} (seed {spec.seed}) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
