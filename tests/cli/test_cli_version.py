"""``vlm-perf --version`` answers without loading the library: no model family, no FLOPs convention, no polars
(the command modules import them when a command runs)."""

import subprocess
import sys


def test_version_loads_no_family():
    code = ("import sys\nfrom vlm_perf.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('vlm_perf.arch.families', 'vlm_perf.flops', 'vlm_perf.analysis', 'polars', "
            "'matplotlib') if m in sys.modules]\nprint('HEAVY', heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "vlm-perf 0.1.0" in done.stdout or "vlm-perf " in done.stdout
    assert "HEAVY []" in done.stdout, done.stdout
