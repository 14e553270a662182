"""``vlm-perf explain``: which data mix turns TFLOP/s/GPU X into Y once vision is counted."""

from __future__ import annotations

import json
import re

import typer
from rich.console import Console

from ..errors import ConfigError
from ._common import name_table
from ._options import declared


def explain(
    model: str = declared("model", "explain"),
    before: float = typer.Option(..., "--before", help="TFLOP/s/GPU printed before vision was counted."),
    after: float = typer.Option(..., "--after", help="TFLOP/s/GPU printed after vision was counted."),
    convention: str = declared("convention", "explain", "mbridge-pr2575"),
    before_convention: str = typer.Option("megatron-lm", "--before-convention", help="Convention of 'before'."),
    seq_length: int = declared("seq_length", "explain", 4096),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Solve for the visual-token share that explains a before/after TFLOP/s/GPU pair."""
    seq_len = seq_length
    from ..analysis import explain_delta
    from ..arch import load_model

    try:
        result = explain_delta(load_model(model), before, after, convention=convention, seq_len=seq_len,
                               before_convention=before_convention)
    except ConfigError as exc:  # the library names the values; the command line names its flags
        raise ConfigError(re.sub(r"\b(before|after)\b(?= \(|$| and| must| is)", r"--\1", str(exc))) from None
    if as_json:
        print(json.dumps(result.to_dict()))
        return
    console = Console()
    console.print(result.statement)
    if result.counts_no_vision:
        suggested = "exact" if "exact" in result.vision_conventions else next(iter(result.vision_conventions), None)
        if suggested:
            console.print(f"[yellow]hint:[/] vlm-perf explain --model {model} --before {before:g} --after {after:g} "
                          f"--convention {suggested}", highlight=False)
        return
    headers = ("patches/frame", "vision GFLOP per visual token", "vision/LM per visual token (bound)",
               "visual share of LM tokens", "ViT patches per LM token", "frames per sample")
    rows = [[str(f.patches_per_frame), f"{f.vision_flops_per_visual_token / 1e9:.2f}",
             f"{f.vision_to_lm_per_visual_token:.3f}",
             "exceeds bound" if f.visual_token_share is None else f"{100 * f.visual_token_share:.1f}%",
             "—" if f.patches_per_lm_token is None else f"{f.patches_per_lm_token:.2f}",
             "—" if f.frames_per_sample is None else f"{f.frames_per_sample:.2f}"] for f in result.frames]
    # headers wrap at spaces, numbers fold: nothing is cut at 80 columns
    console.print(name_table(headers, rows, title=f"solutions at {seq_len} LM tokens per sample (LM "
                             f"{result.lm_flops_per_token / 1e9:.3f} GFLOP/token, {before_convention})",
                             justify="right", name_justify="right", width=console.width))


def register(app: typer.Typer) -> None:
    app.command("explain")(explain)
