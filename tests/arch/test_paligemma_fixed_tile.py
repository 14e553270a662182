"""PaliGemma's tower runs one fixed tile (image_size / patch_size patches a side): any other --grid is one line,
through the shared fixed-tile rule (issue 34)."""

from __future__ import annotations

import pytest

from vlm_perf.arch import load_model
from vlm_perf.errors import InputError
from vlm_perf.stats import BatchStats

from tests.support import run_main


@pytest.mark.parametrize("preset", ["paligemma-3b-224", "paligemma2-3b-224"])
def test_the_tower_states_its_one_tile(preset):
    spec = load_model(preset)
    assert spec.extra["fixed_grid_side"] == spec.extra["image_size"] // spec.vision.patch_size == 16
    BatchStats.from_batch(seq_lens=[512], image_grids=[(1, 16, 16)], spec=spec)
    for grid in [(1, 32, 32), (1, 16, 20), (1, 1 << 20, 1 << 20), (1, 2, 2)]:
        with pytest.raises(InputError, match="paligemma runs fixed 16x16-patch tiles"):
            BatchStats.from_batch(seq_lens=[512], image_grids=[grid], spec=spec)


@pytest.mark.parametrize("grid", ["1,32,32", "1,64,16", "1,1048576,1048576"])
def test_flops_refuses_another_grid_in_one_line(grid):
    done = run_main("flops", "--model", "paligemma-3b-224", "--seq-len", "512", "--grid", grid)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().startswith("error: image grid #1: paligemma runs fixed 16x16-patch tiles")


def test_the_tile_itself_is_counted():
    assert run_main("flops", "--model", "paligemma-3b-224", "--seq-len", "512", "--grid", "1,16,16").returncode == 0
