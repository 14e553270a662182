"""``vlm-perf flops``: FLOPs breakdown of one batch, and ``vlm-perf conventions``."""

from __future__ import annotations

import inspect

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional

import typer
from rich.console import Console
from rich.table import Table

from ..errors import ConfigError, ConventionNotDefined, UnsupportedModelError

if TYPE_CHECKING:
    from ..stats import BatchStats
from ._common import human_flops, name_table, parse_grid, parse_int_list
from ._options import declared


def flops(
    model: str = declared("model", "flops"),
    seq_length: Optional[int] = declared("seq_length", "flops", None),
    samples: Optional[int] = typer.Option(None, "--samples", help="Samples: sequences of --seq-length tokens "
                                          "(default 1), or rows the --seq-lens documents are packed into (default: "
                                          "one per document)."),
    seq_lens: Optional[str] = typer.Option(None, "--seq-lens", help="Packed causal sub-sequence lengths L1,L2,..."),
    image_size: List[str] = declared("image_size", "flops", []),
    video_size: List[str] = typer.Option([], "--video-size", help="Video T,H,W: sampled frames and pixels "
                                         "(repeatable)."),
    multi_image: bool = typer.Option(False, "--multi-image", help="The --image-size images form ONE sample (its "
                                     "processor's several-images rule: LLaVA-OneVision pads each image square to its "
                                     "base tile, no anyres); default: each image is a sample of its own."),
    image_grid: List[str] = declared("image_grid", "flops", []),
    video_grid: List[str] = typer.Option([], "--video-grid", help="Video grid T,H,W in patches (repeatable)."),
    audio_frames: Optional[str] = typer.Option(None, "--audio-frames", help="Audio clips of the batch (one audio-"
                                               "encoder call), mel frames each: F1,F2,... (models with an audio "
                                               "encoder: Omni thinkers)."),
    audio_samples: Optional[str] = typer.Option(None, "--audio-samples", help="Audio clips in samples (16 kHz) "
                                                "N1,N2,..., one feature-extractor call, through the family's own "
                                                "audio rule (mel frames, LM tokens)."),
    decoder_lens: Optional[str] = typer.Option(None, "--decoder-lens", help="Encoder-decoder LMs (Florence-2): the "
                                               "decoder (label) length of each sample D1,D2,...; --seq-length / "
                                               "--seq-lens are then the encoder's. Default: each sample's encoder "
                                               "length (docs/metadata-schema.md)."),
    mode: Optional[str] = typer.Option(None, "--mode", help="training | forward (default training)."),
    causal: str = declared("causal", "flops", "half"),
    convention: str = declared("convention", "flops", "exact"),
    frozen: List[str] = declared("frozen", "flops", []),
    trainable: List[str] = declared("trainable", "flops", []),
    adapter: Optional[str] = declared("adapter", "flops", None),
    qlora: bool = declared("qlora", "flops", False),
    input_require_grads: bool = typer.Option(False, "--input-require-grads", help="The gradient-checkpointing "
                                             "hook (enable_input_require_grads) is on: input gradients run down to "
                                             "the LM embeddings and the tower's patch embedding."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    log_tflops: Optional[str] = typer.Option(None, "--log-tflops", help="TFLOP/s per GPU a log printed for this "
                                             "batch: which conventions give it within its print precision."),
    step_time: Optional[float] = typer.Option(None, "--step-time", help="Seconds per step (with --log-tflops)."),
    gpus: int = declared("gpus", "flops", 1),
    gpu: Optional[str] = declared("gpu", "flops", None),
    dtype: Optional[str] = declared("dtype", "flops", None),
    peak_tflops: Optional[float] = declared("peak_tflops", "flops", None),
    new_tokens: Optional[str] = typer.Option(None, "--new-tokens", metavar="TOKENS", help="Generation instead of "
                                             "a training step: the prefill of each prompt (--seq-length / --seq-lens "
                                             "and the media) plus TOKENS generated per prompt with a KV cache, as "
                                             "Hugging Face generate() runs it, by part (--adapter: its forward on "
                                             "every token)."),
) -> None:
    """FLOPs of one batch (one iteration's worth of media and tokens), by component; with --new-tokens, of
    generating that many tokens after each prompt."""
    if seq_lens is not None and seq_length is not None:
        raise ConfigError("--seq-lens lists packed sequences; do not combine it with --seq-length")
    if seq_lens is None and seq_length is None:
        raise ConfigError("give the LM tokens: --seq-length S [--samples B] or --seq-lens L1,L2,...")
    peak = _peak(gpu, dtype, peak_tflops, log_tflops)
    from ..arch import load_model

    generate = None
    if new_tokens is not None:
        from ._generate import parse_new_tokens, refuse_training_flags

        generate = parse_new_tokens(new_tokens)
        refuse_training_flags(convention=convention, mode=mode, frozen=frozen, trainable=trainable,
                              input_require_grads=input_require_grads, log_tflops=log_tflops, samples=samples,
                              seq_lens=seq_lens, audio=bool(audio_frames or audio_samples))
    mode = mode or "training"
    spec = load_model(model)
    batch = _Batch.build(spec, seq_length, samples, parse_int_list(seq_lens, "--seq-lens") if seq_lens is not None
                         else None, image_size=image_size, video_size=video_size, multi_image=multi_image,
                         image_grid=image_grid, video_grid=video_grid, audio_frames=audio_frames,
                         audio_samples=audio_samples, decoder_lens=decoder_lens)
    if generate is not None:
        from ._generate import generation

        prompts = batch.packed if batch.packed is not None else [seq_length] * (samples or 1)
        generation(spec, generate, prompts, batch.images, batch.videos, batch.merged, causal=causal, adapter=adapter,
                   qlora=qlora, as_json=as_json, inputs=batch.inputs(model, spec, causal), media=batch.media,
                   notes=tuple(spec.extra.get("notes", ())))
        return
    if trainable or adapter or qlora or input_require_grads or any(_fine(x) for x in frozen):
        _regime(spec, batch.stats, model, batch.media, convention=convention, mode=mode, causal=causal,
                frozen=frozen, trainable=trainable, adapter=adapter, qlora=qlora,
                input_require_grads=input_require_grads, as_json=as_json)
        return
    every = convention.strip().lower() == "all"
    results, not_defined = _by_convention(spec, batch, convention, mode=mode, causal=causal, frozen=frozen)
    inputs = batch.inputs(model, spec, causal, training={"mode": mode, "causal": causal, "frozen": list(frozen)})
    if batch.clips:
        inputs["audio"] = [c.as_dict() for c in batch.clips]
    readings = _reconcile(results, log_tflops, step_time, gpus, peak) if log_tflops is not None else None
    if as_json:
        _print_json(spec, batch, results, not_defined, inputs, readings, every)
    else:
        _print_tables(spec, batch, results, not_defined, readings, log_tflops)


@dataclass
class _Batch:
    """One batch as the flags describe it: media (derived from pixel sizes by the family's processor rule, or
    given as grids), audio clips, and the statistics the FLOPs formulas read."""

    media: list
    images: list  # image grids (T, H, W): --grid first, then each derived image's
    videos: list
    clips: list
    merged: list  # per image grid: the family's projector rows on an item's first grid, else None
    stats: BatchStats
    seq_len: Optional[int]
    samples: Optional[int]
    packed: Optional[list[int]]  # --seq-lens
    decoder_lens_given: bool = False  # --decoder-lens (encoder-decoder LMs)

    @classmethod
    def build(cls, spec, seq_len: Optional[int], samples: Optional[int], packed: Optional[list[int]], *,
              image_size: List[str], video_size: List[str], multi_image: bool, image_grid: List[str],
              video_grid: List[str], audio_frames: Optional[str], audio_samples: Optional[str],
              decoder_lens: Optional[str] = None) -> "_Batch":
        from ..stats import BatchStats

        if image_grid and spec.vision is not None:
            from ..ingest.metadata_source import grids_exact

            if not grids_exact(spec):  # the metadata path's code 36 and the run estimate's refusal
                raise UnsupportedModelError(f"--grid: {spec.name}'s image tokens and tower crops are not derivable "
                                            "from per-image grids (separators, un-padded crops); give --image-size")
        media = derive_media(spec, [parse_grid(x, "--image-size", 2) for x in image_size],
                             [parse_grid(x, "--video-size") for x in video_size], multi_image=multi_image)
        images = [parse_grid(g, "--grid") for g in image_grid] + [g for m in media if m.kind == "image"
                                                                   for g in m.grids]
        videos = [parse_grid(g, "--video-grid") for g in video_grid] + [g for m in media if m.kind == "video"
                                                                         for g in m.grids]
        clips = _audio_clips(spec, audio_frames, audio_samples)
        merged = [None] * len(image_grid) + [rows for m in media if m.kind == "image"
                                             for rows in [m.merged_tokens] + [None] * (len(m.grids) - 1)]
        stats = BatchStats.from_batch(seq_lens=packed, seq_len=seq_len, samples=samples, image_grids=images,
                                      video_grids=videos, spec=spec, audio_frames=[c.mel_frames for c in clips],
                                      image_merged_tokens=merged, decoder_lens=parse_int_list(
                                          decoder_lens, "--decoder-lens") if decoder_lens is not None else None)
        _check_visual_tokens(stats, spec, media)
        return cls(media, images, videos, clips, merged, stats, seq_len, samples, packed, decoder_lens is not None)

    def inputs(self, model: str, spec, causal: str, training: Optional[dict] = None) -> dict:
        """The ``inputs`` record of the JSON output: generation's, or with ``training`` (mode, causal, frozen)
        a training step's."""
        return {"model": model, "model_name": spec.name, "seq_len": self.seq_len, "samples": self.samples,
                "seq_lens": self.packed or None,
                "grids": [list(g) for g in self.images], "video_grids": [list(g) for g in self.videos],
                "image_sizes": [list(m.pixels) for m in self.media if m.kind == "image"],
                "video_sizes": [list(m.pixels) for m in self.media if m.kind == "video"],
                **(training or {"causal": causal}), "family": spec.family}


def _by_convention(spec, batch: _Batch, convention: str, *, mode: str, causal: str, frozen: List[str]):
    """(results, {convention: why not defined}) of one convention, or of every one for ``all``; the model's notes
    (and the cross-attention bound's) are put in front of each result's own."""
    from ..flops import CONVENTIONS, compute_flops

    every = convention.strip().lower() == "all"
    results, not_defined = [], {}
    for name in (list(CONVENTIONS) if every else [convention]):
        try:
            results.append(compute_flops(spec, batch.stats, name, mode=mode, causal=causal, frozen=frozen))
        except ConventionNotDefined as exc:
            if not every:
                raise
            not_defined[name] = str(exc)
    model_notes = tuple(spec.extra.get("notes", ())) + cross_bound_notes(spec, batch.stats, batch.packed)
    if spec.extra.get("encoder_decoder") and not batch.decoder_lens_given:
        model_notes += ("assumed: each sample's decoder (label) length equals its encoder length (no --decoder-lens; "
                        "docs/metadata-schema.md); give --decoder-lens for the decoder's exact FLOPs",)
    return [r.__class__(r.convention, r.components, r.options, model_notes + r.notes) for r in results], not_defined


def _print_json(spec, batch: _Batch, results: list, not_defined: dict, inputs: dict, readings: Optional[dict],
                every: bool) -> None:
    payload = _payload(results[0], inputs, batch.stats) if not every else {
        "inputs": inputs, "stats": batch.stats.as_dict(),
        "conventions": {r.convention: _payload(r, None, None) for r in results},
        "not_defined": not_defined}
    if readings is not None:
        payload["reconcile"] = readings
    if batch.media:
        payload["media"] = [m.as_dict() for m in batch.media]
        payload["processor"] = _family(spec).media.settings(spec)
    print(json.dumps(payload))


def _print_tables(spec, batch: _Batch, results: list, not_defined: dict, readings: Optional[dict],
                  log_tflops: Optional[str]) -> None:
    console = Console()
    for item in batch.media:
        tiles = f", {item.tiles} tiles" if item.tiles is not None else ""
        console.print(f"{item.kind} {'x'.join(map(str, item.pixels))} px -> resized {item.resized[0]}x{item.resized[1]}"
                      f"{tiles}, grid {' + '.join(','.join(map(str, g)) for g in item.grids)}, {item.visual_tokens} visual tokens")
    for clip in batch.clips:
        console.print(f"audio {clip.samples:,} samples -> {clip.mel_frames:,} mel frames -> {clip.encoder_tokens:,} "
                      f"encoder tokens, {clip.audio_tokens:,} LM tokens")
    for result in results:
        _print_table(console, spec.name, result, batch.stats)
    for name, message in not_defined.items():
        console.print(f"[yellow]{name}:[/] {message}")
    if readings is not None:
        _print_readings(console, readings, log_tflops)


def _peak(gpu: Optional[str], dtype: Optional[str], peak_tflops: Optional[float],
          log_tflops: Optional[str]) -> Optional[dict]:
    """The peak behind the MFU of a --log-tflops reading (`vlm_perf.hardware.peak_used`, as the report records it),
    from --gpu (+ --dtype) or --peak-tflops; None when neither is given. They are refused without --log-tflops
    (one batch's FLOPs have no time, hence no MFU)."""
    given = [flag for flag, value in (("--gpu", gpu), ("--dtype", dtype), ("--peak-tflops", peak_tflops))
             if value is not None]
    if not given:
        return None
    if log_tflops is None:
        raise ConfigError(f"{', '.join(given)} set the peak for the MFU of a --log-tflops reading: give --log-tflops "
                          f"and --step-time, or drop {', '.join(given)}")
    if peak_tflops is not None and not (peak_tflops > 0 and peak_tflops != float("inf")):
        raise ConfigError(f"--peak-tflops must be a positive number, got {peak_tflops!r}")
    if gpu is None and peak_tflops is None:
        raise ConfigError("--dtype picks the peak of a --gpu: give --gpu TYPE (or --peak-tflops)")
    from ..hardware import peak_flops, peak_used

    if gpu is not None and peak_tflops is None:
        peak_flops(gpu, dtype or "bf16")  # an unknown GPU or dtype: its one-line error, naming --peak-tflops
    return peak_used(gpu, dtype or "bf16", peak_tflops)


def _reconcile(results, printed: str, step_time, gpus: int, peak: Optional[dict] = None) -> dict:
    """Every computed convention's TFLOP/s/GPU against the printed one (and its MFU of ``peak``, a
    `vlm_perf.hardware.peak_used` record); the closest one's departure from exact."""
    from ..flops.conventions.reconcile import component_difference, reconcile

    if step_time is None or not step_time > 0 or gpus <= 0:
        raise ConfigError("--log-tflops needs --step-time SECONDS (> 0) and --gpus N (> 0)")
    by_name = {r.convention: r for r in results}
    readings = reconcile(by_name, printed, 1 / (step_time * gpus * 1e12))
    best = readings[0]
    tflops = peak["tflops"] if peak else None
    out = {"printed": printed, "step_time": step_time, "gpus": gpus,
           "conventions": [{"convention": r.convention, "tflops_per_gpu": r.value, "matches": r.matches,
                            "rel_diff": r.rel_diff, **({"mfu": r.value / tflops} if tflops else {})}
                           for r in readings],
           "matches": [r.convention for r in readings if r.matches], "closest": best.convention}
    if peak is not None:
        out["peak"] = peak
    if "exact" in by_name and best.convention != "exact":
        out["closest_minus_exact"] = component_difference(by_name[best.convention], by_name["exact"])
    return out


def _print_readings(console: Console, readings: dict, printed: str) -> None:
    peak = readings.get("peak")
    headers = ("convention", "TFLOP/s/GPU", "vs printed", "within print precision") + (("MFU",) if peak else ())
    rows = [[r["convention"], f"{r['tflops_per_gpu']:.4g}", f"{100 * r['rel_diff']:+.2f}%",
             "yes" if r["matches"] else "", *((f"{100 * r['mfu']:.1f}%",) if peak else ())]
            for r in readings["conventions"]]
    console.print(name_table(headers, rows, title=f"printed {printed} TFLOP/s/GPU: which convention gives it",
                             justify="right", width=console.width))  # convention names whole at any width
    if peak:
        console.print(f"MFU of {peak['tflops']:g} TFLOP/s/GPU ({peak.get('device') or 'the given peak'}, "
                      f"{peak.get('dtype') or 'bf16'}; {peak.get('source_short') or peak.get('source')})",
                      highlight=False, markup=False)
    names = ", ".join(readings["matches"]) or "none"
    console.print(f"matches: {names}; closest: {readings['closest']}")
    for comp, diff in readings.get("closest_minus_exact", {}).items():
        console.print(f"  {readings['closest']} - exact, {comp}: {human_flops(diff) if diff > 0 else '-' + human_flops(-diff)}")


def _fine(selector: str) -> bool:
    """A --frozen value finer than a whole part (a layer range or module kinds)."""
    return "[" in selector or "." in selector


def _regime(spec, stats: BatchStats, model: str, media: list, *, convention: str, mode: str, causal: str,
            frozen: List[str], trainable: List[str], adapter: Optional[str], qlora: bool, input_require_grads: bool,
            as_json: bool) -> None:
    """``vlm-perf flops`` under a training regime finer than whole frozen parts (exact only)."""
    from ..arch.trainability import Trainability
    from ..errors import ConfigError
    from ..flops.regime import regime_flops
    from ..ingest.adapter_config import read_adapter_config

    from ..flops.conventions import get_convention

    name = convention.strip().lower()
    if name != "exact" and (name == "all" or get_convention(name).regime_training is None or mode != "training"):
        raise ConfigError("named conventions count full training of the parts they cover; --trainable, --adapter, "
                          "--qlora, --input-require-grads and layer/kind --frozen selectors need --convention exact "
                          "(or, for training, a convention that counts such regimes: veomni)")
    if qlora and not adapter:
        raise ConfigError("--qlora describes the base weights of an adapter run: give --adapter too")
    config = read_adapter_config(adapter, quantized_base=qlora) if adapter else None
    regime = Trainability.build(trainable, frozen, adapter=config, input_require_grads=input_require_grads)
    if name != "exact":  # the framework's own count of this regime (VeOmni's LoRA branches)
        named = get_convention(name).compute_regime(spec, stats, regime, causal=causal)
        if as_json:
            payload = _payload(named, {"model": model, "model_name": spec.name, "mode": mode, "adapter": adapter,
                                       "trainable": list(trainable), "family": spec.family}, stats)
            payload["regime"] = {"description": regime.describe()}
            print(json.dumps(payload))
        else:
            _print_table(Console(), spec.name, named, stats)
        return
    result = regime_flops(spec, stats, regime, causal=causal, mode=mode)
    if as_json:
        payload = _payload(result.breakdown, {"model": model, "model_name": spec.name, "mode": mode, "causal": causal,
                                              "frozen": list(frozen), "trainable": list(trainable),
                                              "adapter": adapter, "qlora": qlora,
                                              "input_require_grads": input_require_grads, "family": spec.family},
                           stats)
        payload["regime"] = {"description": regime.describe(), **result.to_dict(),
                             "adapter_config": config.as_dict() if config else None}
        if media:
            payload["media"] = [m.as_dict() for m in media]
        print(json.dumps(payload))
        return
    console = Console()
    _print_table(console, spec.name, result.breakdown, stats)
    table = Table(title=f"by part and kind of work ({regime.describe()})")
    table.add_column("part")
    for category in ("forward", "input_grad", "weight_grad", "adapter_forward", "adapter_backward", "dora_extra",
                     "total"):
        table.add_column(category.replace("_", " "), justify="right")
    for part, cats in result.by_part.items():
        table.add_row(part, *(human_flops(v) for v in cats.values()), human_flops(sum(cats.values())))
    console.print(table)
    if result.full_training is not None and mode == "training":
        full = result.full_training.total
        console.print(f"full training of every weight would be {human_flops(full)} "
                      f"({full / result.total:.3f}x this regime)" if result.total else "")


def _family(spec):
    from ..arch.families import FAMILIES

    return FAMILIES[spec.family]


def derive_media(spec, images: list, videos: list, multi_image: bool = False) -> list:
    """Pixels -> the family's derived media (grids, tiles, visual tokens), as its HF processor applies it.
    ``multi_image``: the images form one sample; a family whose processor treats that case differently
    (its rule's ``image`` takes ``multi_image``: LLaVA-OneVision) applies its several-images rule when there are
    two or more; for the others each image's rule is the same either way."""
    if not images and not videos:
        return []
    if spec.vision is None:
        raise ConfigError(f"model {spec.name} has no vision tower, but --image-size/--video-size were given")
    rule = _family(spec).media
    several = multi_image and len(images) > 1 and "multi_image" in inspect.signature(rule.image).parameters
    derived = [rule.image(spec, h, w, multi_image=True) if several else rule.image(spec, h, w) for h, w in images]
    if len(derived) > 1 and hasattr(rule, "one_call"):  # a batch-level rule (Phi-4-multimodal pads crops)
        derived = rule.one_call(spec, derived)
    return derived + [rule.video(spec, t, h, w) for t, h, w in videos]


def cross_bound_notes(spec, stats: BatchStats, lens: list[int] | None) -> tuple[str, ...]:
    """The named bound of a cross-attention model's core when images come with several unequal --seq-lens (the CLI
    has no per-sample image assignment: the longest sample's length x every image's vision tokens is counted)."""
    from ..ingest.metadata_source import cross_kv_tokens_per_frame

    t = cross_kv_tokens_per_frame(spec)
    if t is None or not lens or len(set(lens)) < 2 or not stats.vision_items:
        return ()
    counted = stats.lm_x_vision_patches + t * stats.lm_x_vision_frames
    low = counted // max(lens) * min(lens)
    return (f"upper bound: images with {len(lens)} samples of unequal lengths and no per-sample assignment: the "
            f"cross-attention core counts the longest sample ({max(lens)}) x every image's vision tokens (Σ S·V = "
            f"{counted:,}; the shortest sample gives {low:,}, the exact value lies between)",)


def _check_visual_tokens(stats: BatchStats, spec=None, media=()) -> None:
    # media from pixels carry the LM placeholder count their processor writes (LLaVA-OV: fewer than the
    # projector rows, after unpadding / pooling); explicit grids count their merged tokens
    from ..stats import grid_row_stats

    vision = spec.vision if spec is not None else None
    m = vision.spatial_merge_size if vision is not None else 1
    chunk = vision.temporal_chunk if vision is not None else 0
    # projector rows per item: the family's own count where it is not the grids' m x m fold (Phi-4-multimodal)
    rows = sum(item.merged_tokens if item.merged_tokens is not None else
               sum(grid_row_stats(*g, m, temporal_chunk=chunk)["merged_tokens"] for g in item.grids)
               for item in media)
    visual = stats.vision_merged_tokens - rows + sum(item.visual_tokens for item in media)
    per_frame = spec.extra.get("lm_tokens_per_frame") if spec is not None else None
    if per_frame is not None:  # a query transformer (BLIP-2): a fixed number of LM tokens per image, whatever its grid
        explicit = stats.vision_frames - sum(g[0] for item in media for g in item.grids)
        visual = explicit * per_frame + sum(item.visual_tokens for item in media)
    if visual > stats.lm_tokens:
        several = sum(1 for item in media if item.kind == "image") > 1 and spec is not None \
            and "multi_image" in inspect.signature(_family(spec).media.image).parameters \
            and not any(item.detail.get("multi_image") for item in media)
        hint = ("; if the images are one sample, --multi-image applies its processor's several-images rule"
                if several else "")
        raise ConfigError(f"the media give {visual} visual tokens, more than the "
                         f"{stats.lm_tokens} LM tokens; --seq-length counts every LM token, visual placeholders "
                         f"included{hint}")


def _audio_clips(spec, audio_frames: Optional[str], audio_samples: Optional[str]) -> list:
    """``--audio-frames`` (mel frames) and ``--audio-samples`` (through the family's audio rule) as DerivedAudio."""
    from ..arch.audio import clip_out_tokens, clip_tokens
    from ..arch.families.media import DerivedAudio

    frames = parse_int_list(audio_frames, "--audio-frames") if audio_frames else []
    samples = parse_int_list(audio_samples, "--audio-samples") if audio_samples else []
    if (frames or samples) and spec.audio is None and spec.family and _family(spec).has_audio:
        _family(spec).media.audio(spec, 16000)  # the family's own refusal (an encoder geometry not modelled)
    if (frames or samples) and spec.audio is None:
        raise ConfigError(f"{spec.name} has no audio encoder: --audio-frames / --audio-samples need an Omni thinker")
    out = [DerivedAudio(samples=0, mel_frames=f, encoder_tokens=clip_tokens(spec.audio, f),
                        audio_tokens=clip_out_tokens(spec.audio, f)) for f in frames]
    if samples:
        rule = _family(spec).media
        out += [rule.audio(spec, n, longest=max(samples)) for n in samples]
    return out


def _payload(result, inputs, stats) -> dict:
    out = {"convention": result.convention, "total": result.total, "vision": result.vision,
           "language": result.language, "parts": result.parts, "components": dict(result.components),
           "notes": list(result.notes)}
    if inputs is not None:
        out["inputs"] = inputs
    if stats is not None:
        out["stats"] = stats.as_dict()
        out["flops_per_lm_token"] = result.total / stats.lm_tokens if stats.lm_tokens else None
    return out


def _print_table(console: Console, model_name: str, result, stats: BatchStats) -> None:
    opts = result.options
    table = Table(title=f"{model_name} - {result.convention} - {opts.mode}, causal {opts.causal}"
                        + (f", frozen {','.join(opts.frozen)}" if opts.frozen else ""))
    table.add_column("component")
    table.add_column("FLOPs", justify="right")
    table.add_column("", justify="right")
    table.add_column("share", justify="right")
    total = result.total or 1
    for name, value in result.components.items():
        if value:
            table.add_row(name, f"{value:.4e}", human_flops(value), f"{100 * value / total:.2f}%")
    table.add_section()
    rows = (("vision", result.vision), ("language", result.language))
    if "audio" in result.parts:
        rows += (("audio", result.audio),)
    for label, value in rows + (("total", result.total),):
        table.add_row(label, f"{value:.4e}", human_flops(value), f"{100 * value / total:.2f}%")
    console.print(table)
    console.print(f"LM tokens {stats.lm_tokens:,} in {stats.lm_sequences:,} sequences; vision patches "
                  f"{stats.vision_patches:,} -> {stats.vision_merged_tokens:,} merged tokens")
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}")


def conventions(name: Optional[str] = typer.Argument(None, help="Show one convention only."),
                markdown: bool = typer.Option(False, "--markdown", help="Print the table of docs/conventions.md.")
                ) -> None:
    """List the FLOPs conventions: formula, source and how each deviates from exact."""
    if markdown:
        from ..flops.conventions.table import conventions_markdown

        print(conventions_markdown(), end="")
        return
    from ..flops import CONVENTIONS, get_convention

    console = Console()
    selected = [get_convention(name)] if name else list(CONVENTIONS.values())
    for conv in selected:
        console.print(f"[bold]{conv.name}[/]  ({conv.source})")
        if conv.pin is not None and conv.pin.verified:
            console.print(f"  verified: {conv.pin.verified}")
        if conv.refuses:
            for family, why in conv.refuses.items():
                console.print(f"  refuses {family}: {why}")
        console.print(f"  formula: {conv.formula}")
        for deviation in conv.deviations:
            console.print(f"  - {deviation}")
        console.print()


def register(app: typer.Typer) -> None:
    app.command("flops")(flops)
    app.command("conventions")(conventions)
