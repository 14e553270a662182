"""``python -m vlm_perf.export.wandb_child SPEC.json``: write one offline W&B run in a process of its own.

`vlm_perf.export.backends` runs the W&B write here rather than in the caller's process: ``run.finish()`` can
return before wandb's service has written the run file out, and only the end of the service (at this process's
exit) guarantees the file is complete before the export folder is renamed into place; it also keeps wandb's
global state (an active run of the caller's own, its exit hooks) out of the caller's process. SPEC.json: ``dir``,
``project``, ``name``, ``facts``, ``run_values``, ``points`` (a Parquet file of metric, step, value sorted by
step) and ``result`` (where the run id is written as JSON).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(spec_path: str) -> int:
    import polars as pl
    import wandb

    spec = json.loads(Path(spec_path).read_text())
    points = pl.read_parquet(spec["points"])
    settings = wandb.Settings(mode="offline", console="off", disable_git=True, save_code=False, silent=True,
                              x_disable_stats=True, x_disable_meta=True, x_save_requirements=False)
    run = wandb.init(dir=spec["dir"], project=spec["project"], name=spec["name"], config=spec["facts"],
                     settings=settings, job_type="vlm-perf-export", tags=["vlm-perf"])
    try:
        step, row = None, {}
        for s, metric, value in zip(*(points[c].to_list() for c in ("step", "metric", "value"))):
            if s != step:
                if row:
                    run.log(row, step=step)
                step, row = s, {}
            row[metric] = value
        if row:
            run.log(row, step=step)
        run.summary.update(spec["run_values"])
        Path(spec["result"]).write_text(json.dumps({"run_id": run.id}))
    finally:
        run.finish()
        wandb.teardown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
