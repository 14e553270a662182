"""`BatchStats`: the additive sufficient statistics every FLOPs formula consumes.

A `BatchStats` holds either Python numbers (one batch, one iteration) or polars expressions
(one value per row of a frame of microbatches/iterations). All fields are additive, so
statistics of microbatches sum to those of an iteration, of ranks to the global batch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from ..errors import InputError
from .lm import decoder_stats, seq_len_stats, text_x_vision, uniform_stats
from .vision import grid_row_stats, validate_grid

if TYPE_CHECKING:  # pragma: no cover
    from ..arch.spec import ModelSpec

DEFAULT_MERGE_SIZE = 2
DEFAULT_WINDOW_SIDE = 4  # Qwen2.5-VL: window_size 112 px // merge 2 // patch 14


@dataclass(frozen=True)
class BatchStats:
    """Sufficient statistics of one batch (numbers) or of many rows (polars expressions).

    LM (tokens are LM sequence positions, visual placeholder tokens included):
      lm_tokens         sum of causal sub-sequence lengths, real tokens
      lm_tokens_sq      sum of squared sub-sequence lengths
      lm_sequences      number of causal sub-sequences (packed documents)
      lm_samples        number of samples (rows of the token tensor)
      lm_padded_tokens  tokens the framework computed on, padding included (>= lm_tokens)
      lm_tokens_sq_beyond_window  sum over sequences of max(s - W, 0)^2 for the model's sliding window W
                        (0 without one); a windowed causal kernel computes (s^2 - that)/2 score entries of
                        a sliding-window layer. 0 when unknown: the layer is then counted as full causal
                        (an upper bound, never an under-count). Per document: transformers' sliding mask under
                        packing is cut per document (position ids), so it is a function of the document lengths alone
    Vision (all media; ``video_*`` repeat the share that came from video grids):
      vision_patches, vision_patches_sq_frame, vision_patches_sq_item, vision_merged_tokens,
      vision_window_sq (Qwen2.5-VL exact sum of window^2; equals the per-frame sum otherwise),
      vision_frames, vision_items,
      vision_cls_tokens (CLS positions the tower adds, one per tile/frame for InternViT; 0 for Qwen towers;
      the squared sums above then count each tile's sequence with its CLS token)
      lm_tokens_sq_beyond_chunks  sum over sequences of s^2 - Σ_chunks c^2 for the model's attention chunk C
                        (Llama 4 chunked layers: causal within consecutive chunks of C tokens); 0 when unknown: the
                        chunked layers are then counted as full causal (an upper bound). Chunks start at each
                        document's first token (transformers' chunked mask: per row, or per packed document through
                        its position ids), so it is a function of the document lengths alone
      lm_tokens_no_vision  LM tokens of microbatches without any image or video (Mllama's MllamaTextModel skips its
                        cross-attention decoder layers entirely there); 0 when unknown: those layers are then counted
                        as run (an upper bound). A per-microbatch statistic: ``from_batch`` treats its input as ONE
                        microbatch
    Text x vision, per sample (cross-attention: every LM token of a sample attends to the vision tokens of
    that sample's images, Mllama):
      lm_x_vision_patches  sum over samples of (LM tokens of the sample) x (vision patches of its media)
      lm_x_vision_frames   sum over samples of (LM tokens of the sample) x (frames / tiles of its media)
                        Exact when each image's sample is known (``images_per_sample``), when a microbatch
                        holds one sample, or when every sample has the same length; otherwise the longest
                        sample's length x the microbatch's patches / frames (an upper bound, never an
                        under-count). Only cross-attention blocks read them.
    Encoder-decoder LMs (Florence-2's BART): the ``lm_*`` statistics above are the ENCODER's sequences (image
    tokens + prompt); the decoder reads a second, target sequence per sample:
      lm_decoder_tokens     sum over samples of the decoder length (labels, padding included when the batch
                        pads them: transformers runs the decoder on every label position)
      lm_decoder_tokens_sq  sum over samples of the squared decoder length (decoder self-attention)
      lm_decoder_x_encoder  sum over samples of decoder length x encoder length (cross-attention: every decoder
                        position attends to its own sample's encoder positions)
                        ``from_batch`` fills them from ``decoder_lens``; for an encoder-decoder model given none, each
                        sample's decoder length is taken equal to its encoder length (a stated stand-in, see
                        docs/metadata-schema.md); 0 for decoder-only models (no block reads them there)
    Audio (models with an audio encoder; exact per encoder call, additive over calls -- ``stats/audio.py``):
      audio_items (clips), audio_conv_frames (chunks x the call's longest chunk: the convolutions' input
      positions, padding included), audio_conv_frames_s2 / _s4 / _s8 (that length halved 1 / 2 / 3 times by
      stride-2 convolutions), audio_tokens (encoder positions), audio_tokens_sq (sum of squared attention
      chunk / window lengths), audio_out_tokens (output-head rows = the LM's audio placeholder tokens), audio_calls
      (encoder calls), audio_sequences (the encoder's attention sequences: chunks / windows / Phi-4-multimodal's
      500-position pieces; Phi-4-multimodal's depthwise convolutions pad each one by kernel - 1)

    Adding a statistic: a field here (default 0) and its per-row formula in ``stats/vision.py``; frames,
    metadata aggregation, Dask and the FLOPs columns all iterate :meth:`field_names`.
    """

    lm_tokens: Any = 0
    lm_tokens_sq: Any = 0
    lm_sequences: Any = 0
    lm_samples: Any = 0
    lm_padded_tokens: Any = 0
    vision_patches: Any = 0
    vision_patches_sq_frame: Any = 0
    vision_patches_sq_item: Any = 0
    vision_merged_tokens: Any = 0
    vision_window_sq: Any = 0
    vision_frames: Any = 0
    vision_items: Any = 0
    video_patches: Any = 0
    video_patches_sq_frame: Any = 0
    video_merged_tokens: Any = 0
    vision_cls_tokens: Any = 0
    lm_tokens_sq_beyond_window: Any = 0
    lm_x_vision_patches: Any = 0
    lm_x_vision_frames: Any = 0
    lm_tokens_sq_beyond_chunks: Any = 0
    audio_items: Any = 0
    audio_conv_frames: Any = 0
    audio_conv_frames_s2: Any = 0
    audio_conv_frames_s4: Any = 0
    audio_conv_frames_s8: Any = 0
    audio_tokens: Any = 0
    audio_tokens_sq: Any = 0
    audio_out_tokens: Any = 0
    audio_calls: Any = 0  # encoder calls (Gemma 3n: pos_proj runs once per layer per call)
    audio_sequences: Any = 0  # the audio encoder's attention sequences (Phi-4-multimodal's depthwise-conv padding)
    lm_tokens_no_vision: Any = 0
    lm_decoder_tokens: Any = 0
    lm_decoder_tokens_sq: Any = 0
    lm_decoder_x_encoder: Any = 0

    # --- construction -------------------------------------------------------------------
    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def columns(cls, prefix: str = "") -> "BatchStats":
        """Statistics as polars column expressions named ``prefix + field``, cast to Float64.

        The cast makes every formula built on these expressions overflow-safe: FLOPs of one
        large step exceed the Int64 range (9.2e18; Llama-3.1-405B on 16M tokens is ~1e20), and
        integer polars arithmetic wraps silently. Float64 is exact for integers up to 2^53 and
        keeps a relative error of a few 1e-16 per operation beyond (tested to 1e-12 against exact
        Python integers at 1e20+ FLOPs per row, tests/flops/test_overflow.py).
        """
        import polars as pl

        return cls(**{name: pl.col(prefix + name).cast(pl.Float64) for name in cls.field_names()})

    @classmethod
    def from_batch(
        cls,
        seq_lens: Sequence[int] | None = None,
        image_grids: Iterable[Sequence[int]] = (),
        video_grids: Iterable[Sequence[int]] = (),
        *,
        seq_len: int | None = None,
        samples: int | None = None,
        padded_tokens: int | None = None,
        spec: "ModelSpec | None" = None,
        merge_size: int | None = None,
        window_side: int | None = None,
        audio_frames: Sequence[int] = (),
        images_per_sample: Sequence[int] | None = None,
        image_merged_tokens: Sequence[int | None] = (),
        decoder_lens: Sequence[int] | None = None,
    ) -> "BatchStats":
        """Statistics of one batch given explicitly (Python numbers; validates every value).

        Give either ``seq_lens`` (packed causal sub-sequence lengths, one per document) or
        ``seq_len`` and ``samples`` (B unpacked sequences of S tokens). Grids are rows of
        ``image_grid_thw`` / ``video_grid_thw`` in patches before merging. The merge size and
        window side come from ``spec`` when it has a vision tower. ``images_per_sample`` (one count per
        entry of ``seq_lens``, in the order of ``image_grids``) says which sample each image belongs to, for
        the text x vision statistics (see the class docstring). ``audio_frames``: mel frames of each audio
        clip of this batch (one audio-encoder call; needs a ``spec`` with an audio encoder).
        ``image_merged_tokens``: per image grid, the projector rows when the family's media rule says they are
        not the grid's m x m fold (``DerivedMedia.merged_tokens``: Phi-4-multimodal projects its crops after
        dropping padding and adding separators); None or absent entries keep the fold.
        ``decoder_lens``: an encoder-decoder model's decoder (target) length per sample, one per entry of
        ``seq_lens`` (or per sample of ``seq_len``); without it such a model's decoder length is each sample's
        encoder length (:func:`~vlm_perf.stats.lm.decoder_stats`); a decoder-only model refuses it.
        """
        if seq_lens is not None and seq_len is not None:
            raise InputError("give either seq_lens or seq_len/samples, not both")
        lm_window = getattr(getattr(spec, "lm", None), "sliding_window", None)
        lm_chunk = getattr(getattr(spec, "lm", None), "attention_chunk", None)
        if seq_lens is not None:
            lm = seq_len_stats(seq_lens, window=lm_window, chunk=lm_chunk)
            if samples is not None and (int(samples) != samples or not 0 < samples <= lm["sequences"]):
                raise InputError(f"samples must be an integer from 1 to the number of sequences ({lm['sequences']}), "
                                 f"got {samples!r}")
            n_samples = samples if samples is not None else lm["sequences"]
        elif seq_len is not None:
            if int(seq_len) != seq_len or seq_len <= 0:
                raise InputError(f"seq_len must be a positive integer, got {seq_len!r}")
            n_samples = 1 if samples is None else samples
            if int(n_samples) != n_samples or n_samples <= 0:
                raise InputError(f"samples must be a positive integer, got {samples!r}")
            lm = uniform_stats(int(seq_len), int(n_samples), window=lm_window, chunk=lm_chunk)
        else:
            lm = {"tokens": 0, "tokens_sq": 0, "sequences": 0, "tokens_sq_beyond_window": 0, "tokens_sq_beyond_chunks": 0}
            n_samples = samples or 0
        padded = lm["tokens"] if padded_tokens is None else padded_tokens
        if padded < lm["tokens"]:
            raise InputError(f"padded_tokens ({padded}) is smaller than the real token count ({lm['tokens']})")

        vision = spec.vision if spec is not None else None
        m = merge_size or (vision.spatial_merge_size if vision else DEFAULT_MERGE_SIZE)
        u = window_side if window_side is not None else (vision.window_side_merged if vision else None)
        cls_per_frame = vision.cls_per_frame if vision else 0
        chunk = vision.temporal_chunk if vision else 0
        totals = dict.fromkeys(("patches", "patches_sq_per_frame", "patches_sq_per_item", "merged_tokens",
                                "window_patches_sq", "frames", "cls_tokens"), 0)
        video = dict.fromkeys(("patches", "patches_sq_per_frame", "merged_tokens"), 0)
        items = 0
        per_image: list[tuple[int, int]] = []  # (patches, frames) of each image, in order
        video_frames = 0
        # a tower that takes only fixed-size tiles (SAM's patch embed, a SigLIP position table without
        # interpolation) states its side: another grid would be counted as a tile it cannot run
        fixed = spec.extra.get("fixed_grid_side") if spec is not None else None
        fixed_h = (spec.extra.get("fixed_grid_height") or fixed) if spec is not None and fixed else None  # Mllama
        # a resampler that pairs frames (ERNIE-4.5-VL) runs an image as one frame and a video as frame pairs
        pairs = bool(spec.extra.get("frame_pairs")) if spec is not None else False
        for kind, grids in (("image", image_grids), ("video", video_grids)):
            for i, row in enumerate(grids):
                t, h, w = validate_grid(row, m, where=f"{kind} grid #{i + 1}")
                if pairs and spec is not None and (t != 1 if kind == "image" else t % 2):
                    want = "an image is one frame: t = 1" if kind == "image" else \
                        "a video has an even frame count (its processor copies the last frame)"
                    raise InputError(f"{kind} grid #{i + 1}: {spec.family} pairs frames in its resampler ({want}), "
                                     f"got {t},{h},{w}")
                if spec is not None and fixed and (h, w) != (fixed_h, fixed):
                    want = (f"t = tiles, h = w = {fixed}" if fixed_h == fixed
                            else f"1,{fixed_h},{fixed}: every image runs {fixed_h // fixed} stacked tiles")
                    raise InputError(f"{kind} grid #{i + 1}: {spec.family} runs fixed {fixed}x{fixed}-patch tiles (its "
                                     f"position embeddings have one entry per patch of a tile), got {t},{h},{w} "
                                     f"(give {want})")
                row_stats = grid_row_stats(t, h, w, m, u, cls_per_frame=cls_per_frame, temporal_chunk=chunk)
                override = image_merged_tokens[i] if kind == "image" and i < len(image_merged_tokens) else None
                if override is not None:
                    if isinstance(override, bool) or int(override) != override or override < 0:
                        raise InputError(f"image #{i + 1}: merged tokens must be a non-negative integer, "
                                         f"got {override!r}")
                    row_stats["merged_tokens"] = int(override)
                items += 1
                for key in totals:
                    totals[key] += row_stats[key]
                if kind == "video":
                    for key in video:
                        video[key] += row_stats[key]
                    video_frames += row_stats["frames"]
                else:
                    per_image.append((row_stats["patches"], row_stats["frames"]))
        x_patches, x_frames = text_x_vision(seq_lens, seq_len, per_image, images_per_sample)
        if video_frames:  # videos carry no sample association: the longest sample's length (a bound)
            longest = seq_len if seq_lens is None else max(seq_lens, default=0)
            x_patches += (longest or 0) * video["patches"]
            x_frames += (longest or 0) * video_frames
        if totals["patches"] and vision is None and spec is not None:
            raise InputError(f"model {spec.name} has no vision tower, but image/video grids were given")
        audio: dict[str, int] = {}
        if len(audio_frames):
            encoder = getattr(spec, "audio", None)
            if encoder is None:
                name = spec.name if spec is not None else "the model"
                raise InputError(f"{name} has no audio encoder (or no model was given), but audio clips were given")
            from .audio import audio_call_stats

            audio = audio_call_stats(encoder, list(audio_frames))
        decoder = decoder_stats(seq_lens, seq_len, n_samples, decoder_lens,
                                encoder_decoder=bool(spec is not None and spec.extra.get("encoder_decoder")),
                                model=spec.name if spec is not None else "the model")
        return cls(
            **audio, **decoder,
            lm_tokens=lm["tokens"], lm_tokens_sq=lm["tokens_sq"], lm_sequences=lm["sequences"],
            lm_samples=n_samples, lm_padded_tokens=padded,
            vision_patches=totals["patches"], vision_patches_sq_frame=totals["patches_sq_per_frame"],
            vision_patches_sq_item=totals["patches_sq_per_item"], vision_merged_tokens=totals["merged_tokens"],
            vision_window_sq=totals["window_patches_sq"], vision_frames=totals["frames"], vision_items=items,
            video_patches=video["patches"], video_patches_sq_frame=video["patches_sq_per_frame"],
            video_merged_tokens=video["merged_tokens"], vision_cls_tokens=totals["cls_tokens"],
            lm_tokens_sq_beyond_window=lm["tokens_sq_beyond_window"],
            lm_x_vision_patches=x_patches, lm_x_vision_frames=x_frames,
            lm_tokens_sq_beyond_chunks=lm["tokens_sq_beyond_chunks"],
            lm_tokens_no_vision=0 if items else lm["tokens"],
        )

    # --- algebra ------------------------------------------------------------------------
    def __add__(self, other: "BatchStats") -> "BatchStats":
        return BatchStats(**{n: getattr(self, n) + getattr(other, n) for n in self.field_names()})

    def scaled(self, factor: Any) -> "BatchStats":
        return BatchStats(**{n: getattr(self, n) * factor for n in self.field_names()})

    def as_dict(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in self.field_names()}

    def with_(self, **changes: Any) -> "BatchStats":
        return replace(self, **changes)

    # --- views --------------------------------------------------------------------------
    def images_only(self) -> "BatchStats":
        """The statistics with video grids removed (for conventions that ignore video)."""
        return self.with_(
            vision_patches=self.vision_patches - self.video_patches,
            vision_patches_sq_frame=self.vision_patches_sq_frame - self.video_patches_sq_frame,
            vision_merged_tokens=self.vision_merged_tokens - self.video_merged_tokens,
            video_patches=0, video_patches_sq_frame=0, video_merged_tokens=0,
        )
