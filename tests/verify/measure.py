"""Measurement harness: tiny transformers Qwen-VL models under ``FlopCounterMode``, FLOPs split by part.

Everything torch/transformers-related is imported lazily, so importing this module never needs the
``verify`` extra; the tests call ``pytest.importorskip`` before using it.

How measured FLOPs are mapped to parts
--------------------------------------
``PartFlopCounter`` is a :class:`torch.utils.flop_counter.FlopCounterMode` (same op registry, same
per-op formulas, same ``Global`` total and per-module-FQN table) that additionally attributes every
counted op to one *part* of the model:

* ``tower``  = ``model.visual.patch_embed`` + ``model.visual.blocks.*``
* ``merger`` = ``model.visual.merger`` + ``model.visual.deepstack_merger_list.*``
* ``lm``     = ``model.language_model`` + ``lm_head``
* ``rope``   = every ``*Rotary*`` module (the M-RoPE / vision-RoPE tables; the LM one is a tiny
  ``inv_freq @ position_ids`` matmul that the library rightly does not count as model FLOPs)
* ``other``  = anything else (must stay 0: there is no other matmul in these models)

Forward ops are attributed by a stack of forward pre/post hooks on those modules (innermost wins).
Backward ops cannot be attributed by module hooks reliably (``ModuleTracker``'s backward hooks do not
fire for modules whose inputs need no gradient, e.g. a frozen tower, leaving stale parents), so
instead every autograd node created inside a part's forward is tagged in ``node.metadata`` by a
forward post-hook (graph walk from the part's outputs, stopping at nodes already tagged, which
belong to earlier parts); during backward the op is attributed to the tag of
``torch._C._current_autograd_node()``. Forward and backward FLOPs are kept separately
(``counts[(phase, part)]``); ``check_consistency`` asserts the parts sum to ``Global``.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

PARTS = ("tower", "merger", "lm")
TAG = "vlm_perf_part"

# Token ids used by every tiny config (vocab 1000).
VOCAB = 1000
IMAGE_TOKEN, VIDEO_TOKEN, VISION_START, VISION_END = 990, 991, 992, 993

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")


# --------------------------------------------------------------------------- tiny configs
def tiny_config_kwargs(family: str, **over: Any) -> dict:
    """Keyword arguments for the top-level transformers config of a tiny ``family`` model.

    Patch size 2 keeps pixel tensors small; LM head_dim 16 -> M-RoPE sections sum to 8.
    Qwen2.5-VL: window_size = 4 merged tokens * merge 2 * patch 2 = 16 px (window side 4 merged,
    as in the released models: 112 // 2 // 14 = 4), full attention in blocks 1 and 3.
    """
    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]})
    if family in ("qwen2_vl", "qwen2_5_vl"):
        text.update(bos_token_id=None, eos_token_id=None)  # class defaults lie outside the tiny vocab
    if family == "qwen2_vl":
        vision = dict(depth=2, embed_dim=32, hidden_size=64, mlp_ratio=2, num_heads=2, in_channels=3,
                      patch_size=2, spatial_merge_size=2, temporal_patch_size=2)
    elif family == "qwen2_5_vl":
        vision = dict(depth=4, hidden_size=32, intermediate_size=48, num_heads=2, in_channels=3, patch_size=2,
                      spatial_merge_size=2, temporal_patch_size=2, window_size=16, out_hidden_size=64,
                      fullatt_block_indexes=[1, 3])
    elif family in ("qwen3_vl", "qwen3_vl_moe"):
        vision = dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3, patch_size=2,
                      spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                      num_position_embeddings=16, deepstack_visual_indexes=[0, 1])
        text["head_dim"] = 16
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3],
                                   "mrope_interleaved": True}
        if family == "qwen3_vl_moe":
            text.update(bos_token_id=None, eos_token_id=None)
            text.update(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1,
                        mlp_only_layers=[])
    else:
        raise ValueError(family)
    text.update(over.pop("text", {}))
    vision.update(over.pop("vision", {}))
    cfg = dict(text_config=text, vision_config=vision, image_token_id=IMAGE_TOKEN, video_token_id=VIDEO_TOKEN,
               vision_start_token_id=VISION_START, vision_end_token_id=VISION_END, tie_word_embeddings=False)
    cfg.update(over)
    return cfg


def build_model(family: str, seed: int = 0, dtype=None, **over: Any):
    """A tiny randomly initialised ``<Family>ForConditionalGeneration`` with eager attention/experts."""
    import torch
    import transformers

    cfg_cls, model_cls = {
        "qwen2_vl": ("Qwen2VLConfig", "Qwen2VLForConditionalGeneration"),
        "qwen2_5_vl": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration"),
        "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration"),
        "qwen3_vl_moe": ("Qwen3VLMoeConfig", "Qwen3VLMoeForConditionalGeneration"),
    }[family]
    config = getattr(transformers, cfg_cls)(**tiny_config_kwargs(family, **over))
    # Eager attention everywhere (vision + text sub-configs): every attention matmul is a bmm the
    # counter sees; eager experts: a per-expert F.linear over exactly the routed tokens.
    config._attn_implementation = "eager"
    if family == "qwen3_vl_moe":
        config._experts_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config)
    model.to(dtype or torch.float64)
    model.eval()  # no dropout; gradients still flow in eval mode
    if family == "qwen3_vl_moe":
        # a zero-initialised router gives all-tied scores; random weights make routing non-trivial
        with torch.no_grad():
            for layer in model.model.language_model.layers:
                gate = getattr(layer.mlp, "gate", None)
                if gate is not None:
                    gate.weight.normal_(0, 0.5)
    assert model.config.text_config._attn_implementation == "eager"
    assert model.config.vision_config._attn_implementation == "eager"
    return model


# --------------------------------------------------------------------------- inputs
@dataclass
class Batch:
    inputs: dict
    seq_lens: list[int]
    image_grids: list[tuple[int, int, int]] = field(default_factory=list)
    video_grids: list[tuple[int, int, int]] = field(default_factory=list)


def make_batch(model, image_grids: Sequence[Sequence[int]] = (), video_grids: Sequence[Sequence[int]] = (),
               text_tokens: int = 7, seed: int = 1, rows: int = 1) -> Batch:
    """``rows`` unpacked sequences of equal length (no padding), each: text, every image, every video.

    Each image: ``<vision_start> <image>*(t*h*w/m^2) <vision_end>`` followed by text. Videos in
    Qwen2/2.5-VL are one placeholder run of ``t*h*w/m^2`` tokens; Qwen3-VL's M-RoPE splits videos
    into frames separated by timestamp text, so there each frame is its own run. With ``rows > 1``
    every row holds the same media layout (so the grid list is repeated once per row).
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    vc = model.config.vision_config
    m = vc.spatial_merge_size
    per_frame = model.config.model_type.startswith("qwen3_vl")

    def text(n):
        return torch.randint(0, 900, (n,), generator=g).tolist()

    all_ids, all_types = [], []
    for _ in range(rows):
        ids: list[int] = text(text_tokens)
        types: list[int] = [0] * text_tokens

        def add_run(token, kind, n):
            ids.extend([VISION_START] + [token] * n + [VISION_END] + text(3))
            types.extend([0] + [kind] * n + [0] + [0] * 3)

        for t, h, w in image_grids:
            add_run(IMAGE_TOKEN, 1, t * h * w // (m * m))
        for t, h, w in video_grids:
            if per_frame:
                for _ in range(t):
                    ids.extend(text(2))
                    types.extend([0, 0])
                    add_run(VIDEO_TOKEN, 2, h * w // (m * m))
            else:
                add_run(VIDEO_TOKEN, 2, t * h * w // (m * m))
        all_ids.append(ids)
        all_types.append(types)
    image_grids = [tuple(x) for x in image_grids] * rows
    video_grids = [tuple(x) for x in video_grids] * rows

    patch_dim = vc.in_channels * vc.temporal_patch_size * vc.patch_size**2
    dtype = next(model.parameters()).dtype
    seq_len = len(all_ids[0])
    inputs: dict[str, Any] = {
        "input_ids": torch.tensor(all_ids),
        "mm_token_type_ids": torch.tensor(all_types, dtype=torch.int32),
        "attention_mask": torch.ones(rows, seq_len, dtype=torch.long),
        "use_cache": False,
    }
    if image_grids:
        n = sum(t * h * w for t, h, w in image_grids)
        inputs["pixel_values"] = torch.randn(n, patch_dim, generator=g, dtype=torch.float64).to(dtype)
        inputs["image_grid_thw"] = torch.tensor([list(x) for x in image_grids])
    if video_grids:
        n = sum(t * h * w for t, h, w in video_grids)
        inputs["pixel_values_videos"] = torch.randn(n, patch_dim, generator=g, dtype=torch.float64).to(dtype)
        inputs["video_grid_thw"] = torch.tensor([list(x) for x in video_grids])
    return Batch(inputs=inputs, seq_lens=[seq_len] * rows, image_grids=image_grids, video_grids=video_grids)


# --------------------------------------------------------------------------- part mapping
def part_modules(model) -> dict[str, list]:
    """part name -> list of modules (see module docstring)."""
    inner = model.model
    visual = inner.visual
    parts = {
        "tower": [visual.patch_embed, *visual.blocks],
        "merger": [visual.merger, *getattr(visual, "deepstack_merger_list", [])],
        "lm": [inner.language_model, model.lm_head],
        "rope": [mod for name, mod in model.named_modules() if "Rotary" in type(mod).__name__],
    }
    return parts


def _tensors(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def _tag_graph(outputs, part: str) -> None:
    """Tag every not-yet-tagged autograd node reachable from ``outputs`` with ``part``."""
    stack = [t.grad_fn for t in _tensors(outputs) if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or TAG in node.metadata:
            continue
        node.metadata[TAG] = part
        stack.extend(nxt for nxt, _ in node.next_functions if nxt is not None)


def _make_counter_class():
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    class PartFlopCounter(FlopCounterMode):
        """FlopCounterMode that also splits FLOPs by (phase, part); see the module docstring."""

        def __init__(self, model=None, parts: dict | None = None, **kwargs):
            """``parts``: part name -> modules; default: the Qwen-VL split of ``model`` (`part_modules`)."""
            super().__init__(display=False, **kwargs)
            self.model = model
            self.parts = parts
            self.part_stack: list[str] = []
            self.counts: dict[tuple[str, str], int] = defaultdict(int)
            self.by_op: dict[tuple[str, str, str], int] = defaultdict(int)
            self._handles: list = []

        def __enter__(self):
            self.counts.clear()
            self.by_op.clear()
            for part, mods in (self.parts if self.parts is not None else part_modules(self.model)).items():
                for mod in mods:
                    self._handles.append(mod.register_forward_pre_hook(self._pre(part)))
                    self._handles.append(mod.register_forward_hook(self._post(part), always_call=True))
            return super().__enter__()

        def __exit__(self, *args):
            try:
                return super().__exit__(*args)
            finally:
                for h in self._handles:
                    h.remove()
                self._handles.clear()

        def _pre(self, part):
            def hook(mod, args):
                self.part_stack.append(part)
            return hook

        def _post(self, part):
            def hook(mod, args, out):
                self.part_stack.pop()
                if torch.is_grad_enabled():
                    _tag_graph(out, part)
            return hook

        def _count_flops(self, func_packet, out, args, kwargs):
            if func_packet in self.flop_registry:
                flops = self.flop_registry[func_packet](*args, **kwargs, out_val=out)
                node = torch._C._current_autograd_node()
                if node is not None:
                    phase, part = "backward", node.metadata.get(TAG, "other")
                else:
                    phase, part = "forward", self.part_stack[-1] if self.part_stack else "other"
                self.counts[(phase, part)] += flops
                self.by_op[(phase, part, str(func_packet))] += flops
                self._record(func_packet, args, phase, part, flops)
            return super()._count_flops(func_packet, out, args, kwargs)

        def _record(self, func_packet, args, phase: str, part: str, flops: int) -> None:
            """Hook for subclasses that keep more per-op detail (nothing here)."""

    return PartFlopCounter


@dataclass
class Measured:
    forward: dict[str, int]
    backward: dict[str, int]
    total: int  # FlopCounterMode's Global count
    module_counts: dict  # FlopCounterMode.get_flop_counts() (module FQN -> op -> flops)
    by_op: dict

    def training(self) -> dict[str, int]:
        keys = set(self.forward) | set(self.backward)
        return {k: self.forward.get(k, 0) + self.backward.get(k, 0) for k in keys}

    def check_consistency(self) -> None:
        parts_sum = sum(self.forward.values()) + sum(self.backward.values())
        assert parts_sum == self.total, (parts_sum, self.total)
        assert self.forward.get("other", 0) == 0 and self.backward.get("other", 0) == 0, (self.forward,
                                                                                          self.backward)


def measure_generate(model, inputs: dict, parts: dict, new_tokens: int, prompt_len: int) -> dict[str, float]:
    """Forward FLOPs per part of greedy ``model.generate`` with a KV cache and exactly ``new_tokens`` new tokens
    (``parts``: part name -> modules, a family harness's ``part_modules``); checks the output grew by that many."""
    import torch

    counter = _make_counter_class()(model, parts=parts)
    with torch.no_grad(), counter:
        out = model.generate(**{k: v for k, v in inputs.items() if k != "use_cache"}, max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, use_cache=True, pad_token_id=0)
    assert out.shape[1] == prompt_len + new_tokens
    return {p: n for (phase, p), n in counter.counts.items() if phase == "forward"}


def freeze(model, frozen: Sequence[str] = ()) -> None:
    """requires_grad_ on everything, then off for the named parts.

    ``vision_tower`` = patch_embed + blocks (+ the learned position table of Qwen3-VL, which sits
    between them and is a lookup, not a matmul), ``merger`` = merger + deepstack mergers,
    ``language_model`` = language_model + lm_head, ``vision`` = tower + merger.
    """
    model.requires_grad_(True)
    visual = model.model.visual
    for name in frozen:
        if name in ("vision_tower", "vision"):
            visual.patch_embed.requires_grad_(False)
            visual.blocks.requires_grad_(False)
            if hasattr(visual, "pos_embed"):
                visual.pos_embed.requires_grad_(False)
        if name in ("merger", "vision"):
            visual.merger.requires_grad_(False)
            for mod in getattr(visual, "deepstack_merger_list", []):
                mod.requires_grad_(False)
        if name == "language_model":
            model.model.language_model.requires_grad_(False)
            model.lm_head.requires_grad_(False)


@contextlib.contextmanager
def forward_only(model):
    """``torch.no_grad()`` with every parameter of ``model`` set not to require grad, restored on exit.

    A forward-only count must not record a graph, and under ``no_grad`` the flags change no op that runs. They
    matter to torch's ``ModuleTracker`` (inside FlopCounterMode): it hooks every module input that requires grad,
    and a view of a parameter taken under ``no_grad`` (``conv1d.weight.squeeze(1)``) still requires grad but has
    no grad_fn, which ``register_multi_grad_hook`` rejects ("Expected gradient function to be set"). Since
    transformers 5.25 (``kernels`` became a hard dependency) the hub-kernelizable functions, e.g. Qwen3.5's and
    Nemotron-H's ``causal_conv1d_fn``, are called as ``nn.Module``s, so such a view enters a module."""
    import torch

    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        with torch.no_grad():
            yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def measure(model, batch: Batch, training: bool = False, frozen: Sequence[str] = (),
            loss: str = "logits_mean", also_frozen: Sequence = ()) -> Measured:
    """Run forward (and backward if ``training``) under ``PartFlopCounter``.

    ``frozen``: part names (see :func:`freeze`); ``also_frozen``: extra parameters to freeze.
    Every parameter is trainable again afterwards.
    """
    import torch

    counter_cls = _make_counter_class()
    freeze(model, frozen)
    for p in also_frozen:
        p.requires_grad_(False)
    for p in model.parameters():
        p.grad = None
    grad_ctx = contextlib.nullcontext() if training else forward_only(model)
    counter = counter_cls(model)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny GEMMs: intra-op threading only adds overhead (x30 on a loaded box)
    try:
        with grad_ctx, counter:
            out = model(**batch.inputs)
            if training:
                value = out.logits.mean() if loss == "logits_mean" else out.logits.sum()
                value.backward()
    finally:
        torch.set_num_threads(threads)
    fw = {p: n for (ph, p), n in counter.counts.items() if ph == "forward"}
    bw = {p: n for (ph, p), n in counter.counts.items() if ph == "backward"}
    m = Measured(forward=fw, backward=bw, total=counter.get_total_flops(),
                 module_counts=counter.get_flop_counts(), by_op=dict(counter.by_op))
    model.requires_grad_(True)
    return m


# --------------------------------------------------------------------------- library side
TOWER_COMPONENTS = ("vision.patch_embed", "vision.attn_proj", "vision.attn_core", "vision.mlp")
MERGER_COMPONENTS = ("vision.merger", "vision.deepstack_merger")


def library_parts(breakdown) -> dict[str, float]:
    """Breakdown.components -> {"tower", "merger", "lm"} (lm = every ``lm.*`` component)."""
    comps = dict(breakdown.components)
    out = {
        "tower": sum(comps.get(k, 0) for k in TOWER_COMPONENTS),
        "merger": sum(comps.get(k, 0) for k in MERGER_COMPONENTS),
        "lm": sum(v for k, v in comps.items() if k.startswith("lm.")),
    }
    unknown = [k for k in comps if not (k in TOWER_COMPONENTS or k in MERGER_COMPONENTS or k.startswith("lm."))]
    if unknown:
        out["unmapped"] = sum(comps[k] for k in unknown)
    return out


def library_flops(config_dict: dict, batch: Batch, mode: str = "forward", frozen: Sequence[str] = ()):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(config_dict, name="tiny")
    stats = BatchStats.from_batch(seq_lens=batch.seq_lens, image_grids=batch.image_grids,
                                  video_grids=batch.video_grids, spec=spec)
    return compute_flops(spec, stats, convention="exact", mode=mode, causal="full", frozen=tuple(frozen))


def rel_err(measured: float, library: float) -> float:
    if measured == 0:
        return 0.0 if library == 0 else float("inf")
    return abs(library - measured) / measured


# --------------------------------------------------------------------------- hub-layout configs
def hub_layout_config(family: str, **over: Any) -> dict:
    """The tiny config written the way the released hub ``config.json`` files are laid out.

    Qwen2-VL / Qwen2.5-VL: LM fields flat at the top level, ``in_chans`` in the vision config,
    ``rope_scaling: {type: mrope}``; Qwen3-VL(-MoE): nested ``text_config``, ``in_channels``.
    """
    kw = tiny_config_kwargs(family, **over)
    text, vision = dict(kw.pop("text_config")), dict(kw.pop("vision_config"))
    rope = dict(text.pop("rope_parameters"))
    theta = rope.pop("rope_theta")
    rope.pop("rope_type")
    for k in ("bos_token_id", "eos_token_id"):
        text.pop(k, None)
    if family in ("qwen2_vl", "qwen2_5_vl"):
        vision["in_chans"] = vision.pop("in_channels")
        if family == "qwen2_5_vl":
            vision["spatial_patch_size"] = vision["patch_size"]
            vision["tokens_per_second"] = 2
            vision["hidden_act"] = "silu"
        else:
            vision["hidden_act"] = "quick_gelu"
        return {"architectures": [f"{family}_ForConditionalGeneration"], "model_type": family, **kw, **text,
                "rope_theta": theta, "rope_scaling": {"type": "mrope", **rope}, "torch_dtype": "bfloat16",
                "vision_config": {**vision, "model_type": family}}
    text["model_type"] = "qwen3_vl_moe_text" if family == "qwen3_vl_moe" else "qwen3_vl_text"
    text["rope_scaling"] = {"rope_type": "default", **rope}
    text["rope_theta"] = theta
    vision["model_type"] = family
    return {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": family, **kw,
            "text_config": text, "vision_config": vision}
