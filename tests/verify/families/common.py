"""Generic FlopCounterMode harness for any transformers VLM, FLOPs split by part.

A family harness (``tests/verify/families/<family>.py``) says which *sibling* modules of the model make
up each part::

    vision_tower    the vision encoder (patch embed, positions, layers, post norm)
    projector       merger / multimodal projector / pixel-shuffle MLP / downsample conv / connector
    language_model  the LM decoder + lm_head (logits over every position)
    rope            every ``*Rotary*`` module (position tables; must be attributable, never a part's FLOPs)

and this module counts a forward (and, for training, ``logits.mean().backward()``) under
:class:`PartCounter`, a :class:`torch.utils.flop_counter.FlopCounterMode` (same op registry and per-op
formulas) that attributes every counted op to a part exactly as ``tests/verify/measure.py`` does for the
Qwen families: forward ops by a stack of module pre/post hooks (innermost wins), backward ops by the
part tag that the part's forward post-hook put on every autograd node its forward created (walk from the
part's outputs, stopping at nodes already tagged, i.e. created by an earlier part; helpers reused from
``measure``). Ops outside every listed module land in ``other``; :meth:`PartMeasurement.check` asserts
``other`` is 0 and that the parts sum to FlopCounterMode's own ``Global`` total, so a harness that forgot
a module fails loudly instead of mis-attributing.

``frozen`` names parts whose parameters get ``requires_grad_(False)`` for the training measurement; the
rest stays trainable. Units: FLOPs (one multiply-add = 2 FLOPs, FlopCounterMode's convention).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence


PARTS = ("vision_tower", "projector", "language_model")
OPTIONAL_PARTS = ("audio",)  # an audio encoder (Omni thinkers): measured and reported only where a harness lists it
ALL_PARTS = PARTS + OPTIONAL_PARTS + ("rope",)

# Token ids shared by the tiny configs (vocab 1000; plain text is drawn from [0, 900)).
VOCAB = 1000
TEXT_MAX = 900


@dataclass
class FamilyHarness:
    """How to build, feed and split one transformers VLM family (one object per family, registered)."""

    name: str
    tiny_config: Callable[..., Any]  # (**overrides) -> transformers config
    build_model: Callable[[Any, int], Any]  # (config, seed) -> model in eval mode, float64, eager
    part_modules: Callable[[Any], dict]  # model -> {part: [modules]}
    make_inputs: Callable[..., tuple[dict, dict]]  # (model, image_sizes, video_sizes, text_len, seed, **kw)
    run: Callable[[Any, dict], Any] | None = None  # (model, inputs) -> logits; default model(**inputs).logits
    # (model, part) -> parameters of that part held outside its hooked modules (frozen with it)
    loose_params: Callable[[Any, str], list] | None = None
    notes: str = ""


REGISTRY: dict[str, FamilyHarness] = {}


def register(harness: FamilyHarness) -> FamilyHarness:
    """Add ``harness`` to :data:`REGISTRY`; a second harness with the same name is an error."""
    if harness.name in REGISTRY:
        raise ValueError(f"family harness {harness.name!r} registered twice")
    REGISTRY[harness.name] = harness
    return harness


def processor_images_kwargs(processor_cls) -> dict:
    """The ``images_kwargs`` class defaults a ProcessorMixin subclass forces on every image-processor call.

    ``ProcessorMixin._merge_kwargs`` (processing_utils.py) passes them as call kwargs, so they beat the
    image processor's own (saved) settings; this harness applies them the same way.
    """
    return dict(getattr(processor_cls, "images_kwargs", None) or {})


def random_images(sizes: Sequence[tuple[int, int]], seed: int = 0):
    """RGB uint8 numpy images of the given (height, width) pixels (random content; the FLOPs do not depend on it)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8) for h, w in sizes]


def text_ids(n: int, gen) -> list[int]:
    import torch

    return torch.randint(0, TEXT_MAX, (n,), generator=gen).tolist()


def tiny_text(model_type: str = "llama") -> dict:
    """The tiny decoder LM config of the fixed-tile harnesses (DeepSeek-VL, its hybrid, Janus, GOT-OCR2): hidden
    64, 4 heads, 2 KV heads, SwiGLU 96, 2 layers, vocab :data:`VOCAB`."""
    return dict(model_type=model_type, vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, pad_token_id=0,
                bos_token_id=2, eos_token_id=1)


def one_square_inputs(processor, image_sizes: Sequence[tuple[int, int]], text_len: int, seed: int, image_token: int,
                      per_image: int, before: Sequence[int] = (), after: Sequence[int] = (),
                      extra: dict[str, str] | None = None) -> tuple[dict, dict]:
    """Model inputs and media for a family whose image processor makes one fixed square per image (DeepSeek-VL,
    its hybrid, Janus): ``text_len`` text ids, then per image ``before`` + ``per_image`` x ``image_token`` +
    ``after`` and 2 text ids; ``processor`` is called on random images of ``image_sizes``; ``extra`` maps further
    processor outputs the model takes to the media key of their shape."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    media: dict = {"images_in_tower": 0, "visual_tokens": 0}
    inputs: dict = {}
    if image_sizes:
        out = processor(random_images(image_sizes, seed), return_tensors="pt", input_data_format="channels_last")
        for _ in image_sizes:
            ids += list(before) + [image_token] * per_image + list(after) + text_ids(2, gen)
        media["images_in_tower"] = int(out["pixel_values"].shape[0])
        media["pixel_shape"] = tuple(out["pixel_values"].shape[1:])
        media["visual_tokens"] = per_image * len(image_sizes)
        inputs["pixel_values"] = out["pixel_values"].to(torch.float64)
        for name, key in (extra or {}).items():
            media[key] = tuple(out[name].shape)
            inputs[name] = out[name].to(torch.float64)
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media


def eager(config, experts: bool = False) -> None:
    """Eager attention (and eager experts) on the config and every sub-config."""
    config._attn_implementation = "eager"
    for sub in ("text_config", "vision_config"):
        if hasattr(config, sub) and getattr(config, sub) is not None:
            getattr(config, sub)._attn_implementation = "eager"
    if experts:
        config._experts_implementation = "eager"
        if getattr(config, "text_config", None) is not None:
            config.text_config._experts_implementation = "eager"


def finish_model(model):
    """float64 for every floating-point tensor (complex RoPE tables stay complex), eval mode (no dropout;
    gradients still flow)."""
    model._apply(lambda t: t.double() if t.is_floating_point() else t)
    model.eval()
    return model


def rotary_modules(model) -> list:
    return [m for _, m in model.named_modules() if "Rotary" in type(m).__name__]


# --------------------------------------------------------------------------- counter
def _make_counter_class():
    from ..measure import _make_counter_class as qwen_counter_class

    class PartCounter(qwen_counter_class()):
        """tests/verify/measure.py's per-(phase, part) counter over an explicit ``parts`` mapping, keeping
        the arguments of grouped-convolution backwards (see `PartMeasurement.grouped_conv_overcount`)."""

        def __init__(self, parts: dict[str, list], **kwargs):
            super().__init__(parts=parts, **kwargs)
            self.grouped_conv_bw: list[dict] = []

        def _record(self, func_packet, args, phase, part, flops):
            if str(func_packet) == "aten.convolution_backward" and args[9] != 1:
                # (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                #  output_padding, groups, output_mask): kept so a harness can correct torch's
                #  grad-weight formula, which ignores groups
                self.grouped_conv_bw.append(dict(part=part, groups=args[9], weight_shape=tuple(args[2].shape),
                                                 grad_out_shape=tuple(args[0].shape),
                                                 input_shape=tuple(args[1].shape), transposed=args[7],
                                                 output_mask=tuple(args[10]), flops=flops))

    return PartCounter


@dataclass
class PartMeasurement:
    """FlopCounterMode FLOPs of one run, per phase and part, plus the media the processor produced."""

    forward: dict[str, int]
    backward: dict[str, int]
    total: int  # FlopCounterMode's own Global count
    by_op: dict
    media: dict = field(default_factory=dict)
    grouped_conv_bw: list = field(default_factory=list)
    optional_parts: tuple = ()  # OPTIONAL_PARTS the harness listed (e.g. "audio")

    def grouped_conv_overcount(self) -> dict[str, int]:
        """Per part, what torch's ``conv_backward_flop`` over-counts for grouped convolutions.

        Its grad-weight term treats the batch as channels and ignores ``groups``: for a depthwise conv
        (groups = channels) it is ``groups`` times the real 2*N*C*L*k. The real term is the counted one
        divided by ``groups``; the difference is returned (0 for every family without a grouped conv).
        """
        from torch.utils.flop_counter import conv_flop_count

        def t(shape):
            return [shape[1], shape[0]] + list(shape[2:])

        over: dict[str, int] = defaultdict(int)
        for ev in self.grouped_conv_bw:
            if not ev["output_mask"][1] or ev["transposed"]:
                continue
            counted = conv_flop_count(t(ev["input_shape"]), t(ev["grad_out_shape"]), t(ev["weight_shape"]),
                                      transposed=False)
            over[ev["part"]] += counted - counted // ev["groups"]
        return dict(over)

    def training(self, corrected: bool = True) -> dict[str, int]:
        """forward + backward per part; ``corrected`` removes :meth:`grouped_conv_overcount`."""
        keys = set(self.forward) | set(self.backward)
        over = self.grouped_conv_overcount() if corrected else {}
        return {k: self.forward.get(k, 0) + self.backward.get(k, 0) - over.get(k, 0) for k in keys}

    def parts(self, mode: str = "forward", corrected: bool = True) -> dict[str, int]:
        """{vision_tower, projector, language_model} (+ ``audio`` where the harness lists it) for ``mode`` =
        "forward" or "training"."""
        src = self.forward if mode == "forward" else self.training(corrected)
        return {p: src.get(p, 0) for p in PARTS + self.optional_parts}

    def check(self) -> None:
        """Parts (incl. rope) sum to Global, and nothing is left unattributed."""
        parts_sum = sum(self.forward.values()) + sum(self.backward.values())
        assert parts_sum == self.total, (parts_sum, self.total)
        assert self.forward.get("other", 0) == 0 and self.backward.get("other", 0) == 0, (
            {k: v for k, v in self.by_op.items() if k[1] == "other"})


def freeze_parts(model, parts: dict[str, list], frozen: Sequence[str], loose_params=None) -> None:
    """Everything trainable, then ``requires_grad_(False)`` on the modules of each named part (and on the
    part's parameters that sit outside those modules, ``loose_params(model, part)``)."""
    model.requires_grad_(True)
    for name in frozen:
        if name not in PARTS + OPTIONAL_PARTS or name not in parts:
            raise ValueError(f"unknown part {name!r}; expected one of {tuple(p for p in PARTS + OPTIONAL_PARTS if p in parts)}")
        for mod in parts[name]:
            mod.requires_grad_(False)
        for param in (loose_params(model, name) if loose_params else []):
            param.requires_grad_(False)


def default_run(model, inputs: dict):
    return model(**inputs).logits


def count(model, inputs: dict, parts: dict[str, list], training: bool = False,
          frozen: Sequence[str] = (), run: Callable[[Any, dict], Any] | None = None,
          loose_params=None) -> PartMeasurement:
    """Run ``run(model, inputs)`` -> logits (default ``model(**inputs).logits``), and
    ``logits.mean().backward()`` if ``training``, under :class:`PartCounter`."""
    import torch

    from ..measure import forward_only

    counter_cls = _make_counter_class()
    freeze_parts(model, parts, frozen, loose_params)
    for p in model.parameters():
        p.grad = None
    grad_ctx = contextlib.nullcontext() if training else forward_only(model)
    counter = counter_cls(parts)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny GEMMs: intra-op threading only adds overhead
    try:
        with grad_ctx, counter:
            logits = (run or default_run)(model, inputs)
            if training:
                logits.mean().backward()
    finally:
        torch.set_num_threads(threads)
        model.requires_grad_(True)
    fw = {p: n for (ph, p), n in counter.counts.items() if ph == "forward"}
    bw = {p: n for (ph, p), n in counter.counts.items() if ph == "backward"}
    return PartMeasurement(forward=fw, backward=bw, total=counter.get_total_flops(), by_op=dict(counter.by_op),
                           grouped_conv_bw=list(counter.grouped_conv_bw),
                           optional_parts=tuple(p for p in OPTIONAL_PARTS if p in parts))


def linear_flops_by_hand(tokens: int, shapes: Sequence[tuple[int, int]]) -> int:
    """2 * tokens * in * out summed over Linear layers (in, out): the forward GEMM FLOPs."""
    return sum(2 * tokens * i * o for i, o in shapes)
