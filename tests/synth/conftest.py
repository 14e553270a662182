import pytest

from vlm_perf.synth import RUN_PRESETS, generate_run


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """The tiny preset (restart, NaN line, srun prefixes) generated once per session."""
    return generate_run(RUN_PRESETS["tiny"], tmp_path_factory.mktemp("synth") / "tiny")


@pytest.fixture(scope="session")
def text_run(tmp_path_factory):
    """A shortened text-only control run."""
    spec = RUN_PRESETS["qwen3-30b-a3b-text"].with_(
        iterations=20, num_microbatches=2, log_interval=5)
    return generate_run(spec, tmp_path_factory.mktemp("synth") / "text")
