"""Helpers shared by the test modules (plain functions, importable as ``tests.support`` where a fixture does not
fit: module-level case tables, module/session-scoped fixtures). The fixtures in ``tests/conftest.py`` wrap these.

- ``invoke_cli``: ``vlm_perf.cli.app`` in this process (click's ``Result``: exit_code, stdout, stderr, output).
- ``run_cli``: ``python -m vlm_perf.cli`` in a subprocess (``CompletedProcess``: returncode, stdout, stderr) for
  tests that must see what a user sees (exit status of the real entry point, tracebacks on stderr, hangs).
- ``run_main``: the same entry point (``vlm_perf.cli.main``: its one-line errors and exit statuses 2 / 3) called in
  this process, same ``CompletedProcess`` shape: for the many CLI checks that need the entry point's behaviour but
  not a new interpreter (a subprocess costs ~1-2 s of imports each). Each command keeps real-subprocess tests.
- ``megatron_line`` / ``write_log``: a Megatron-LM iteration line and a log file holding text.
- ``copy_sample``: a bundled sample run copied into a scratch folder.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import Result

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_LOGS = ROOT / "sample_logs"
SFT_SAMPLE = "qwen3-vl-30b-a3b-sft"


def invoke_cli(*args: object, **kwargs) -> Result:
    """Run ``vlm-perf ARGS`` in-process; keyword arguments go to ``CliRunner.invoke`` (env, input, ...)."""
    from typer.testing import CliRunner

    from vlm_perf.cli import app

    return CliRunner().invoke(app, [str(a) for a in args], **kwargs)


def run_cli(*args: object, timeout: float | None = 600, **kwargs) -> subprocess.CompletedProcess:
    """Run ``python -m vlm_perf.cli ARGS`` in a subprocess with text output captured."""
    return subprocess.run([sys.executable, "-m", "vlm_perf.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def run_main(*args: object, timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    """``vlm_perf.cli.main(ARGS)`` in this process, stdin/stdout/stderr and ``env`` (overlaid on ``os.environ``)
    swapped in by click's ``CliRunner.isolation``; a ``CompletedProcess`` as :func:`run_cli` gives. ``main`` turns
    every exception into its one-line error and exit status, as in a subprocess; ``timeout`` is not enforced."""
    from typer.testing import CliRunner

    from vlm_perf.cli import main

    unknown = set(kwargs) - {"env", "input"}
    if unknown:
        raise TypeError(f"run_main: unsupported keyword(s) {sorted(unknown)}")
    argv = [str(a) for a in args]
    with CliRunner().isolation(input=kwargs.get("input"), env=kwargs.get("env")) as (out, err, _):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    return subprocess.CompletedProcess([sys.executable, "-m", "vlm_perf.cli", *argv], code, stdout, stderr)


def megatron_line(it: int, loss: float | str = 2.5, prefix: str = "", *, ts: str = "2024-05-01 12:00:00",
                  after_loss: str = "", after_grad_norm: str = "") -> str:
    """One Megatron-LM iteration line: 1000 iterations in all, 8 samples per iteration, 1.0 s per iteration.

    ``loss`` is printed as ``%.6E`` (a string is printed as given); ``prefix`` goes before the timestamp (a launcher
    rank prefix such as ``[default0]:``); ``after_loss`` / ``after_grad_norm`` are extra ``| key: value |`` fields
    inserted after the ``lm loss`` / ``grad norm`` fields."""
    loss_text = loss if isinstance(loss, str) else f"{loss:.6E}"
    return (f"{prefix} [{ts}] iteration {it:8d}/    1000 | consumed samples: {it * 8:12d} |"
            f" elapsed time per iteration (ms): 1000.0 | learning rate: 1.000000E-04 | global batch size:     8 |"
            f" lm loss: {loss_text} |{after_loss} loss scale: 1.0 | grad norm: 1.000 |{after_grad_norm}"
            f" number of skipped iterations:   0 | number of nan iterations:   0 |")


def write_log(folder: Path, text: str | bytes, name: str = "train.log") -> Path:
    """``text`` written to ``folder/name`` (a string as UTF-8, bytes as they are); the path."""
    p = folder / name
    if isinstance(text, str):
        p.write_text(text, encoding="utf-8")
    else:
        p.write_bytes(text)
    return p


def copy_sample(dst: Path, name: str = SFT_SAMPLE, **kwargs) -> Path:
    """The bundled sample run ``sample_logs/NAME`` copied to ``dst`` (keyword arguments go to copytree); ``dst``."""
    shutil.copytree(SAMPLE_LOGS / name, dst, **kwargs)
    return dst


def edit_jsonl_line(path: Path, line: int, edit) -> None:
    """Apply ``edit(record)`` to the JSON object on 1-based ``line`` of a JSON-lines file, in place."""
    import json

    lines = path.read_text().splitlines()
    record = json.loads(lines[line - 1])
    edit(record)
    lines[line - 1] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")


# A tiny Qwen2 LM and its FLOPs by hand (h 64, 4 heads of 16, 2 KV heads, MLP 96, vocab 1000, untied), shared by the
# generation / RL / CLI tests that check those paths against hand arithmetic.
TINY_QWEN2 = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False,
              "max_position_embeddings": 4096}
#: forward FLOPs per token and layer of the weight GEMMs: q, k + v, o, the gated MLP
TINY_QWEN2_PER_TOKEN_LAYER = 2 * 64 * 64 + 2 * 2 * 64 * 32 + 2 * 64 * 64 + 3 * 2 * 64 * 96
#: per layer and (query, key) position pair: QK^T and AV, 2*H*d each
TINY_QWEN2_CORE_PER_POSITION = 2 * 4 * 2 * 16
#: the logits GEMM per token
TINY_QWEN2_HEAD = 2 * 64 * 1000
