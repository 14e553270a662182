"""``vlm-perf flops --new-tokens N``: what generating N tokens after a prompt costs, per part.

The prompt is what ``flops`` takes (``--seq-len`` / ``--seq-lens``, media by grid or by pixels); the count is
`vlm_perf.flops.generation.generation_flops`, the function the RL phases use: a prefill over each prompt (the
tower and projector over the media, the LM over the prompt with the output head on its last position) and N - 1
one-token decode steps per sequence against the KV cache, as Hugging Face ``generate()`` runs them. An adapter
(``--adapter``) runs its low-rank forward on every prefill and decode token.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from rich.console import Console
from rich.table import Table

from ..errors import ConfigError
from ._common import human_flops

FLAG = "--new-tokens"
PARTS = ("vision_tower", "projector", "language_model")
#: prompts one command counts (each is walked on its own: its cache, its decode steps); more is refused
MAX_PROMPTS = 1 << 16


def parse_new_tokens(text: Any) -> int:
    """The value of ``--new-tokens``: a whole number from 1 to ``MAX_NEW_TOKENS``, else one ConfigError line."""
    from ..flops.generation import MAX_NEW_TOKENS

    raw = str(text).strip()
    wanted = f"{FLAG} must be a whole number of tokens from 1 to {MAX_NEW_TOKENS:,}, got {raw[:40]!r}"
    if not raw.lstrip("+").isdigit() or len(raw) > 20:
        raise ConfigError(wanted)
    value = int(raw)
    if not 1 <= value <= MAX_NEW_TOKENS:
        raise ConfigError(wanted)
    return value


def refuse_training_flags(*, convention: str, mode: Optional[str], frozen: list, trainable: list,
                          input_require_grads: bool, log_tflops: Optional[str], samples: Optional[int],
                          seq_lens: Optional[str], audio: bool) -> None:
    """Flags that describe a training step (or a packing of documents) have no meaning for generation: each is
    refused by name rather than silently ignored."""
    if convention.strip().lower() != "exact":
        raise ConfigError(f"{FLAG} counts generation exactly; the named conventions count training steps: drop "
                          "--convention")
    if mode is not None:
        raise ConfigError(f"{FLAG} counts forward passes only (prefill and decode): drop --mode")
    for flag, given in (("--frozen", frozen), ("--trainable", trainable),
                        ("--input-require-grads", input_require_grads), ("--log-tflops", log_tflops)):
        if given:
            raise ConfigError(f"{flag} describes a training step; {FLAG} counts generation (forward passes only): "
                              f"drop {flag}")
    if seq_lens is not None and samples is not None:
        raise ConfigError(f"with {FLAG}, --seq-lens lists one prompt per sequence (no packing): drop --samples")
    if audio:
        raise ConfigError(f"{FLAG}: generation after an audio prompt is not modelled (the audio encoder's prefill)")


def generation(spec: Any, new_tokens: int, prompts: list[int], images: list, videos: list,
               image_merged_tokens: list, *, causal: str, adapter: Optional[str], qlora: bool, as_json: bool,
               inputs: dict, media: list, notes: tuple[str, ...]) -> None:
    """Count and print generation of ``new_tokens`` per prompt (``prompts``: each prompt's LM positions)."""
    from ..arch.trainability import Trainability
    from ..flops.generation import generation_flops
    from ..ingest.adapter_config import read_adapter_config

    if len(prompts) > MAX_PROMPTS:
        raise ConfigError(f"{FLAG}: {len(prompts):,} prompts is over the bound of {MAX_PROMPTS:,} per command (each "
                          "prompt is counted on its own); count fewer and scale")
    if qlora and not adapter:
        raise ConfigError("--qlora describes the base weights of an adapter run: give --adapter too")
    config = read_adapter_config(adapter, quantized_base=qlora) if adapter else None
    regime = Trainability.build(adapter=config) if config is not None else None
    gen = generation_flops(spec, prompts, [new_tokens] * len(prompts), image_grids=images, video_grids=videos,
                           causal=causal, adapters=regime, image_merged_tokens=image_merged_tokens)
    parts = {k: gen.prefill[k] + gen.decode[k] for k in gen.prefill}
    notes = notes + (
        "prefill: the output head on each prompt's last position only (generate() keeps one logit row)",
        f"decode: {new_tokens - 1} one-token step(s) per sequence (the last token needs none), step j attending to "
        "the prompt + j cached positions",
        "each sequence's own work: a batched generate() that pads finished rows would run more",
    ) + ((f"adapter: {regime.describe()}, its low-rank forward on every prefill and decode token",) if regime else ())
    if as_json:
        payload = {"inputs": {**inputs, "new_tokens": new_tokens, "adapter": adapter, "qlora": qlora},
                   "generation": {**gen.to_dict(), "parts": parts, "prompts": list(prompts),
                                  "new_tokens_per_sequence": new_tokens},
                   "total": gen.total, "notes": list(notes)}
        if config is not None:
            payload["adapter_config"] = config.as_dict()
        if media:
            payload["media"] = [m.as_dict() for m in media]
        print(json.dumps(payload))
        return
    console = Console()
    for item in media:
        console.print(f"{item.kind} {'x'.join(map(str, item.pixels))} px -> grid "
                      f"{' + '.join(','.join(map(str, g)) for g in item.grids)}, {item.visual_tokens} visual tokens")
    many = len(prompts) > 1
    lengths = str(prompts[0]) if len(set(prompts)) == 1 else ", ".join(map(str, prompts[:8])) + (
        ", ..." if len(prompts) > 8 else "")
    prompt = f"{len(prompts)} prompts of {lengths} tokens" if many else f"a {prompts[0]}-token prompt"
    table = Table(title=f"{spec.name} - generate {new_tokens} token(s) after {prompt} - exact, causal {causal}")
    for col in ("part", "prefill", "decode", "FLOPs", "share"):
        table.add_column(col, justify="left" if col == "part" else "right")
    total = gen.total or 1
    for part in [p for p in gen.prefill if p in PARTS or parts[p]]:
        table.add_row(part, human_flops(gen.prefill[part]), human_flops(gen.decode[part]), f"{parts[part]:,.0f}",
                      f"{100 * parts[part] / total:.2f}%")
    table.add_section()
    table.add_row("total", human_flops(sum(gen.prefill.values())), human_flops(sum(gen.decode.values())),
                  f"{gen.total:,.0f}", "100.00%")
    console.print(table)
    console.print(f"{human_flops(gen.total)} for {gen.new_tokens:,} generated token(s): "
                  f"{human_flops(gen.total / gen.new_tokens)} per generated token, the prefill included")
    for note in notes:
        console.print(f"[yellow]note:[/] {note}")
