"""The block inventory laid out the way data flows, layer by layer, with Hugging Face module names (pure).

Whole-part freezing needs only the block inventory; finer regimes do not: whether a frozen weight's input
gradient runs depends on whether anything EARLIER in the graph trains (a LoRA adapter in LM layer 0, the
last four tower layers unfrozen), and an adapter config names modules (``...layers.3.self_attn.q_proj``).
:func:`layout` expands a :class:`~vlm_perf.arch.spec.ModelSpec` into one :class:`StageLayout` per stage
(tower, merger, deepstack mergers, LM, in data-flow order), each a ``head`` (ops before the layers),
``layers`` (per layer: sublayers in order) and a ``tail``:

* :class:`Lin`: one Linear (or a kernel = stride convolution, the patch embed) with its rows statistic,
  widths, module name and kind;
* :class:`Params`: weights with no matmul (norms, embedding tables, position tables, CLS tokens);
* :class:`AttnSub` / :class:`MlpSub`: a pre-norm attention / MLP sublayer;
* :class:`Chain`: a projector (optional norm, then Linears in sequence);
* :class:`Opaque`: a block laid out as a whole (kinds without a per-Linear layout: MoE MLPs, MLA, gated
  delta nets, ...); fine-grained trainability or adapters inside one are refused by the FLOPs side, except on
  the Linears laid out inside it (``shared``: an MoE MLP's shared expert).

Names follow transformers 5 (``model.visual.blocks.N.attn.qkv``, ``model.language_model.layers.N.self_attn
.q_proj``, ``lm_head``), verified on the releases in :data:`VERIFIED_TRANSFORMERS`. Families without a name table get ``names=False``: selectors still work, adapter
configs (which name modules) are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from .blocks import (Block, norm_params, ClsToken, DecoderAttention, DenseMLP, DownsampleConv, ExtraNorms, ExtraParams, FinalNorm,
                     ForwardOnly, GatedDecoderAttention, GatedMergerMLP, ImageVideoPatchEmbed, LinearProjector,
                     LMHead, LMLayerNorms, MlpProjector, MoEMLP, NormLinearProjector, PatchEmbed, PooledVideoProjector,
                     PositionTable, SharedGateMoEMLP, SinkDecoderAttention, TokenEmbedding, VisionLayers)
from .parts import AUDIO, DEEPSTACK_MERGER, LANGUAGE_MODEL, MERGER, STAGES, VISION_TOWER
from .spec import ModelSpec
from .trainability import ATTENTION, EMBEDDINGS, HEAD, MLP, NORMS

__all__ = ["AttnSub", "Chain", "Lin", "Layer", "MlpSub", "Opaque", "Params", "StageLayout", "layout"]


@dataclass(frozen=True)
class Lin:
    """One Linear on ``rows`` (statistic names, summed) of ``n_in`` -> ``n_out`` values."""

    name: str
    kind: str
    rows: tuple[str, ...]
    n_in: int
    n_out: int
    component: str
    bias: bool = False
    pixels: bool = False  # its input is data (the patch embed): never an input gradient
    head: bool = False  # the output head (excluded from PEFT's "all-linear")
    adaptable: bool = True  # an nn.Linear / conv PEFT can wrap (False: a bare weight matmul, Gemma 3's projector)
    tied: bool = False  # the head shares the input embedding's weight (trains when either is selected)
    conv: bool = False  # a convolution with kernel = stride (a patch embed, GLM's downsample): one GEMM
    pool: int = 1  # video rows pooled pool x pool before it (LLaVA-NeXT-Video): rows - video + video / pool²


@dataclass(frozen=True)
class Params:
    """Weights without a matmul (a norm, an embedding / position table, a CLS token). ``numel``: its parameters
    (a norm's weight and bias), ``bias``: how many of them are a bias (a LayerNorm's); None where the layout does
    not carry the size (adapter parameter counts of ``modules_to_save`` / ``bias='all'`` then say so)."""

    name: str
    kind: str
    numel: int | None = None
    bias: int | None = None


def _extra_norm(name: str, b: Block) -> Params:
    """A tower norm outside the layers: sized from its block (an ``ExtraParams``' bias share is not known)."""
    if isinstance(b, ExtraNorms) and b.count == 1:
        return _norm(name, b.width, b.norm)
    return Params(name, NORMS, b.params() if b.count == 1 else None)


def _norm(name: str, width: int, kind: str) -> Params:
    """A norm's Params with its size (``kind``: layernorm | rmsnorm, as ``blocks.norm_params``)."""
    return Params(name, NORMS, norm_params(width, kind), width if kind == "layernorm" else 0)


@dataclass(frozen=True)
class AttnSub:
    """norm -> projections (q/k/v fused or separate; ``sources`` = which projection gives q, k, v) -> optional
    q/k norms -> attention core (``core``: the block, count 1, whose weight-less terms are the core) -> out."""

    norm: Params | None
    projections: tuple[Lin, ...]
    sources: tuple[int, int, int]
    qk_norms: tuple[Params, ...]  # () or (q norm, k norm)
    core: Block
    out: Lin
    post_norm: Params | None = None  # a norm on the sublayer output before the residual add (Gemma)
    core_params: tuple[Params, ...] = ()  # weights inside the core's softmax (gpt-oss attention sinks)


@dataclass(frozen=True)
class MlpSub:
    """norm -> ``ins`` (gate/up or fc1) -> activation -> ``out`` (down / fc2)."""

    norm: Params | None
    ins: tuple[Lin, ...]
    out: Lin
    post_norm: Params | None = None


@dataclass(frozen=True)
class Chain:
    """A projector: optional norm, then Linears applied one after the other."""

    norm: Params | None
    linears: tuple[Lin, ...]


@dataclass(frozen=True)
class Opaque:
    """A block (``count`` 1 per layer when inside a layer, else as stored) laid out as a whole; ``kind``: the
    module kind its weights have; ``norm``: the layer norm in front of it, if any."""

    block: Block
    kind: str
    norm: Params | None = None
    name: str = ""  # the module holding its weights (observed trainability maps parameters under it here)
    # the nn.Linear / Conv modules inside it, relative to ``name``: an adapter that targets one is refused (the
    # block has no per-Linear layout, so the adapter's FLOPs and gradient flow cannot be placed)
    inner: tuple[str, ...] = ()
    # parameters PEFT ``target_parameters`` can wrap, relative to ``name``, with their role: "gate_up" / "down"
    # (the fused routed-expert stacks, E x ... ) or "router" (the router weight E x h)
    params: tuple[tuple[str, str], ...] = ()
    # the block's own Linears laid out inside it (an MoE MLP's shared expert: an MlpSub reading the block input,
    # and Qwen's sigmoid shared-expert gate Lin h -> 1); they replace the block's ``lm.shared_experts`` term
    shared: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Layer:
    index: int
    subs: tuple[Any, ...]


@dataclass(frozen=True)
class StageLayout:
    """One stage. ``taps``: for the deepstack stage, the tower layer each ``head`` chain reads (else empty).
    ``expanded``: False when the stage is a list of :class:`Opaque` blocks in inventory order (no layout)."""

    stage: str
    num_layers: int
    head: tuple[Any, ...] = ()
    layers: tuple[Layer, ...] = ()
    tail: tuple[Any, ...] = ()
    taps: tuple[int, ...] = ()
    expanded: bool = True
    dead: tuple[Any, ...] = ()  # layers / ops that run after ``tail``'s inputs are taken, output unread: forward only


# --------------------------------------------------------------------------- module names
@dataclass(frozen=True)
class _Names:
    patch: str
    pos: str
    cls: str
    tower_layer: str  # format with i
    tower_norms: tuple[str, str]
    tower_qkv: tuple[str, ...]  # one (fused) or three names
    tower_out: str
    tower_mlp_in: tuple[str, ...]
    tower_mlp_out: str
    merger_norm: str
    merger_linears: tuple[str, ...]
    deepstack: str  # format with k: prefix of deepstack merger k
    deepstack_norm: str
    deepstack_linears: tuple[str, ...]
    lm_prefix: str  # "model.language_model" or "model"
    tower_qk_norms: tuple[str, str] = ("attn.q_norm", "attn.k_norm")
    tower_tail_norm: str = ""
    head: str = "lm_head"
    tower_head_norms: tuple[str, ...] = ()  # standalone norms between the patch embed and the layers, in order
    tower_dead_norm: str = ""  # a norm on an output nothing reads (CLIP's post_layernorm on the pooled CLS)
    merger_adaptable: bool = True  # False: the projector's matmul is a bare weight, not an nn.Linear
    newline: str = ""  # a learned separator row appended after the projector (LLaVA-NeXT image_newline)
    downsample: str = ""  # GLM: the downsample conv in front of the merger
    merger_mlp: tuple[str, str, str, str] = ("", "", "", "")  # GLM merger: post-proj norm, gate, up, down
    lm_gate_up: str = ""  # a fused gate/up Linear (GLM-4V's mlp.gate_up_proj), else gate_proj + up_proj
    # (after-attention, before-MLP, after-MLP) norm names of a 4-norm decoder layer
    lm_sandwich: tuple[str, str, str] = ("post_attention_layernorm", "pre_feedforward_layernorm",
                                         "post_feedforward_layernorm")


_QWEN2_VL = _Names(patch="model.visual.patch_embed.proj", pos="model.visual.pos_embed", cls="",
                   tower_layer="model.visual.blocks.{i}", tower_norms=("norm1", "norm2"), tower_qkv=("attn.qkv",),
                   tower_out="attn.proj", tower_mlp_in=("mlp.fc1",), tower_mlp_out="mlp.fc2",
                   merger_norm="model.visual.merger.ln_q",
                   merger_linears=("model.visual.merger.mlp.0", "model.visual.merger.mlp.2"),
                   deepstack="", deepstack_norm="", deepstack_linears=(), lm_prefix="model.language_model")
_NAMES = {
    "qwen2_vl": _QWEN2_VL,
    "qwen2_5_vl": replace(_QWEN2_VL, tower_mlp_in=("mlp.gate_proj", "mlp.up_proj"), tower_mlp_out="mlp.down_proj"),
    "qwen3_vl": replace(_QWEN2_VL, tower_mlp_in=("mlp.linear_fc1",), tower_mlp_out="mlp.linear_fc2",
                        merger_norm="model.visual.merger.norm",
                        merger_linears=("model.visual.merger.linear_fc1", "model.visual.merger.linear_fc2"),
                        deepstack="model.visual.deepstack_merger_list.{k}", deepstack_norm="norm",
                        deepstack_linears=("linear_fc1", "linear_fc2")),
}
_NAMES["qwen3_vl_moe"] = _NAMES["qwen3_vl"]
_NAMES["qwen3_5"] = _NAMES["qwen3_5_moe"] = _NAMES["qwen3_vl"]  # no deepstack mergers; LM: gated delta nets
_NAMES["internvl"] = _Names(
    patch="model.vision_tower.embeddings.patch_embeddings.projection",
    pos="model.vision_tower.embeddings.position_embeddings", cls="model.vision_tower.embeddings.cls_token",
    tower_layer="model.vision_tower.encoder.layer.{i}", tower_norms=("layernorm_before", "layernorm_after"),
    tower_qkv=("attention.q_proj", "attention.k_proj", "attention.v_proj"), tower_out="attention.projection_layer",
    tower_mlp_in=("mlp.fc1",), tower_mlp_out="mlp.fc2", merger_norm="model.multi_modal_projector.layer_norm",
    merger_linears=("model.multi_modal_projector.linear_1", "model.multi_modal_projector.linear_2"),
    deepstack="", deepstack_norm="", deepstack_linears=(), lm_prefix="model.language_model",
    tower_qk_norms=("attention.q_norm", "attention.k_norm"), tower_tail_norm="model.vision_tower.layernorm")
_NAMES["gemma3"] = _Names(
    patch="model.vision_tower.embeddings.patch_embedding", pos="model.vision_tower.embeddings.position_embedding",
    cls="", tower_layer="model.vision_tower.encoder.layers.{i}", tower_norms=("layer_norm1", "layer_norm2"),
    tower_qkv=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), tower_out="self_attn.out_proj",
    tower_mlp_in=("mlp.fc1",), tower_mlp_out="mlp.fc2", merger_norm="model.multi_modal_projector.mm_soft_emb_norm",
    merger_linears=("model.multi_modal_projector.mm_input_projection_weight",),
    deepstack="", deepstack_norm="", deepstack_linears=(), lm_prefix="model.language_model",
    tower_tail_norm="model.vision_tower.post_layernorm", merger_adaptable=False)
_SIGLIP = replace(_NAMES["gemma3"], merger_norm="", merger_linears=(), merger_adaptable=True)
_NAMES["paligemma"] = replace(_SIGLIP, merger_linears=("model.multi_modal_projector.linear",))
_NAMES["idefics3"] = replace(
    _SIGLIP, patch="model.vision_model.embeddings.patch_embedding",
    pos="model.vision_model.embeddings.position_embedding", tower_layer="model.vision_model.encoder.layers.{i}",
    tower_tail_norm="model.vision_model.post_layernorm", merger_linears=("model.connector.modality_projection.proj",),
    lm_prefix="model.text_model")
_NAMES["smolvlm"] = _NAMES["idefics3"]
_LLAVA_PROJ = ("model.multi_modal_projector.linear_1", "model.multi_modal_projector.linear_2")
_NAMES["llava_onevision"] = replace(_SIGLIP, merger_linears=_LLAVA_PROJ, newline="model.image_newline")
_CLIP = replace(_SIGLIP, cls="model.vision_tower.embeddings.class_embedding", merger_linears=_LLAVA_PROJ,
                tower_head_norms=("model.vision_tower.pre_layrnorm",), tower_tail_norm="",
                tower_dead_norm="model.vision_tower.post_layernorm")
_NAMES["llava"] = _CLIP  # or _PIXTRAL, by its tower (_names_for)
_NAMES["llava_next"] = replace(_CLIP, newline="model.image_newline")
_NAMES["llava_next_video"] = _NAMES["llava_next"]
_PIXTRAL = replace(
    _SIGLIP, patch="model.vision_tower.patch_conv", pos="", tower_layer="model.vision_tower.transformer.layers.{i}",
    tower_norms=("attention_norm", "ffn_norm"), tower_qkv=("attention.q_proj", "attention.k_proj", "attention.v_proj"),
    tower_out="attention.o_proj", tower_mlp_in=("feed_forward.gate_proj", "feed_forward.up_proj"),
    tower_mlp_out="feed_forward.down_proj", tower_head_norms=("model.vision_tower.ln_pre",), tower_tail_norm="",
    merger_linears=_LLAVA_PROJ)
_NAMES["mistral3"] = replace(_PIXTRAL, merger_norm="model.multi_modal_projector.norm",
                             merger_linears=("model.multi_modal_projector.patch_merger.merging_layer",) + _LLAVA_PROJ)
_NAMES["glm4v"] = replace(
    _QWEN2_VL, pos="model.visual.embeddings.position_embedding",
    tower_mlp_in=("mlp.gate_proj", "mlp.up_proj"), tower_mlp_out="mlp.down_proj",
    tower_head_norms=("model.visual.post_conv_layernorm",), tower_tail_norm="model.visual.post_layernorm",
    merger_norm="", merger_linears=("model.visual.merger.proj",), downsample="model.visual.downsample",
    merger_mlp=("model.visual.merger.post_projection_norm", "model.visual.merger.gate_proj",
                "model.visual.merger.up_proj", "model.visual.merger.down_proj"),
    lm_gate_up="mlp.gate_up_proj",
    lm_sandwich=("post_self_attn_layernorm", "post_attention_layernorm", "post_mlp_layernorm"))
_NAMES["glm4v_moe"] = replace(_NAMES["glm4v"], lm_gate_up="")
_NAMES["glm46v"] = _NAMES["glm4v_moe"]
_LM_ONLY_PREFIX = "model"

# The transformers releases (major.minor, inclusive) whose module names the tables above were verified against by the
# measured tests (tests/verify: PEFT wraps transformers' own classes, the library must adapt the same modules). An
# adapter config names modules; outside this range a name the layout does not know may be a module it lacks.
VERIFIED_TRANSFORMERS = ("5.24", "5.25")


def transformers_version(spec: ModelSpec) -> tuple[str, str]:
    """(version, where it came from) of the transformers release whose module names apply to ``spec``: the
    config's ``transformers_version`` (the release that wrote it), else the installed one (read from the package
    metadata, transformers is not imported), else ("", "")."""
    recorded = spec.extra.get("transformers_version")
    if isinstance(recorded, str) and recorded:
        return recorded, "the config's transformers_version"
    from importlib import metadata

    try:
        return metadata.version("transformers"), "the installed transformers"
    except metadata.PackageNotFoundError:
        return "", ""


def names_verified_on(version: str) -> bool:
    """Whether ``version`` (e.g. ``5.25.0``, ``5.26.0.dev0``) lies in :data:`VERIFIED_TRANSFORMERS`."""
    def minor(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", v)[:2])

    lo, hi = (minor(v) for v in VERIFIED_TRANSFORMERS)
    return len(minor(version)) == 2 and lo <= minor(version) <= hi


def _names_for(spec: ModelSpec) -> _Names | None:
    """The name table of ``spec`` (LLaVA: by its tower, CLIP or Pixtral; GLM-4.6V: by its LM, dense or MoE)."""
    if spec.model_type == "llava":
        return _PIXTRAL if _has_pixtral_tower(spec) else _CLIP
    if spec.model_type == "glm46v" and not spec.lm.moe_layers:
        return _NAMES["glm4v"]
    return _NAMES.get(spec.model_type)


def _has_pixtral_tower(spec: ModelSpec) -> bool:
    return not any(isinstance(b, ClsToken) for b in spec.blocks if b.part == VISION_TOWER)


_LM_ONLY_FAMILIES = ("qwen2", "qwen3", "qwen3_moe", "llama", "mistral", "gpt_oss", "deepseek_v3")


def module_names_known(spec: ModelSpec) -> bool:
    """Whether :func:`layout` gives this model its real Hugging Face module names."""
    return _names_for(spec) is not None or (not spec.is_vlm and spec.family in _LM_ONLY_FAMILIES)


def named_model_types() -> tuple[str, ...]:
    """The model types whose module names are laid out (VLMs, then LM-only families): adapters resolve on them."""
    return tuple(sorted(_NAMES)) + _LM_ONLY_FAMILIES


# --------------------------------------------------------------------------- layout
def layout(spec: ModelSpec) -> tuple[StageLayout, ...]:
    """Every stage the model has, in data-flow order (see the module docstring)."""
    names = _names_for(spec)
    out = []
    by_stage: dict[str, list[Block]] = {s: [] for s in STAGES}
    for b in spec.blocks:
        by_stage[b.part].append(b)
    if by_stage[VISION_TOWER]:
        out.append(_tower(spec, by_stage[VISION_TOWER], names))
    if by_stage[MERGER]:
        out.append(_projectors(spec, MERGER, by_stage[MERGER], names))
    if by_stage[DEEPSTACK_MERGER]:
        out.append(_projectors(spec, DEEPSTACK_MERGER, by_stage[DEEPSTACK_MERGER], names))
    if by_stage[AUDIO]:  # an audio encoder: trains or freezes as a whole (no per-layer layout)
        out.append(_opaque_stage(AUDIO, by_stage[AUDIO], spec.audio.num_layers if spec.audio else 0))
    if by_stage[LANGUAGE_MODEL]:
        out.append(_lm(spec, by_stage[LANGUAGE_MODEL], names))
    return tuple(out)


def _opaque_stage(stage: str, blocks: list[Block], num_layers: int) -> StageLayout:
    return StageLayout(stage, num_layers, tail=tuple(Opaque(b, MLP) for b in blocks), expanded=False)


def _generic(stage: str, what: str) -> str:
    return f"<{stage}>.{what}"


def _tower(spec: ModelSpec, blocks: list[Block], names: _Names | None) -> StageLayout:
    v = spec.vision
    assert v is not None
    depth = v.depth
    layers_blocks = [b for b in blocks if type(b) is VisionLayers]
    # layers whose output nothing reads (LLaVA's CLIP past vision_feature_layer): forward only
    dead_blocks = [b for b in blocks if isinstance(b, ForwardOnly) and type(b.module) is VisionLayers]
    if dead_blocks and (names is None or len(dead_blocks) > 1
                        or any(isinstance(b, ForwardOnly) and b not in dead_blocks for b in blocks)):
        return _opaque_stage(VISION_TOWER, blocks, depth)
    head: list[Any] = []
    tail: list[Any] = []
    dead: list[Any] = []
    per_layer: dict[int, VisionLayers] = {}
    live_depth = sum(b.count for b in layers_blocks)
    dead_depth = sum(b.count * b.module.count for b in dead_blocks)
    if len(layers_blocks) == 1 and live_depth + dead_depth == depth:
        per_layer = {i: layers_blocks[0] for i in range(live_depth)}
        dead_module = dead_blocks[0].module if dead_blocks else None
        if isinstance(dead_module, VisionLayers):
            per_layer.update({i: replace(dead_module, count=1) for i in range(live_depth, depth)})
    elif (len(layers_blocks) == 2 and {b.attention for b in layers_blocks} == {"frame", "window"}
          and sum(b.count for b in layers_blocks) == depth and not dead_blocks):
        full = set(v.full_attention_layers)
        frame = next(b for b in layers_blocks if b.attention == "frame")
        window = next(b for b in layers_blocks if b.attention == "window")
        per_layer = {i: frame if i in full else window for i in range(depth)}
    else:
        return _opaque_stage(VISION_TOWER, blocks, depth)
    head_norms = list(names.tower_head_norms) if names else []
    seen_layers = False
    for b in blocks:
        if isinstance(b, ImageVideoPatchEmbed):  # two projections on two row kinds: no per-Linear layout
            return _opaque_stage(VISION_TOWER, blocks, depth)
        if isinstance(b, PatchEmbed):
            head.append(Lin(names.patch if names else _generic("vision_tower", "patch_embed"), EMBEDDINGS,
                            ("vision_patches",), b.in_volume, b.width, "vision.patch_embed", b.bias, pixels=True,
                            conv=True))
        elif isinstance(b, PositionTable):
            head.append(Params(names.pos if names and names.pos else _generic("vision_tower", b.kind), EMBEDDINGS))
        elif isinstance(b, ClsToken):
            head.append(Params(names.cls if names and names.cls else _generic("vision_tower", b.kind), EMBEDDINGS))
        elif type(b) is VisionLayers or isinstance(b, ForwardOnly):
            seen_layers = True
            continue
        elif isinstance(b, ExtraNorms) and b.count == 2 and len(head_norms) == 1 and names and names.tower_tail_norm:
            head.append(_norm(head_norms.pop(0), b.width, b.norm))  # GLM: post_conv_layernorm, then post_layernorm
            tail.append(_norm(names.tower_tail_norm, b.width, b.norm))
        elif isinstance(b, (ExtraParams, ExtraNorms)) and not seen_layers and head_norms:
            head.append(_extra_norm(head_norms.pop(0), b))
        elif isinstance(b, (ExtraParams, ExtraNorms)) and seen_layers and names and names.tower_dead_norm:
            dead.append(_extra_norm(names.tower_dead_norm, b))
        elif isinstance(b, (ExtraParams, ExtraNorms)):
            tail.append(_extra_norm(names.tower_tail_norm if names and names.tower_tail_norm
                                    else _generic("vision_tower", b.kind), b))
        else:
            tail.append(Opaque(b, MLP))
    layers = tuple(Layer(i, _vision_layer(per_layer[i], i, names)) for i in range(live_depth))
    dead = [Layer(i, _vision_layer(per_layer[i], i, names)) for i in range(live_depth, depth)] + dead
    return StageLayout(VISION_TOWER, depth, tuple(head), layers, tuple(tail), dead=tuple(dead))


def _vision_layer(b: VisionLayers, i: int, names: _Names | None) -> tuple[Any, ...]:
    pre = names.tower_layer.format(i=i) + "." if names else f"<vision_tower>.layers.{i}."
    rows = ("vision_patches", "vision_cls_tokens") if b.cls else ("vision_patches",)
    h, q = b.width, b.attn_width
    norms = names.tower_norms if names else ("norm1", "norm2")
    qkv_names = names.tower_qkv if names else ("attn.qkv",)
    if len(qkv_names) == 1:
        projections: tuple[Lin, ...] = (Lin(pre + qkv_names[0], ATTENTION, rows, h, 3 * q, "vision.attn_proj",
                                            b.qkv_bias),)
        sources = (0, 0, 0)
    else:
        projections = tuple(Lin(pre + n, ATTENTION, rows, h, q, "vision.attn_proj", b.qkv_bias) for n in qkv_names)
        sources = (0, 1, 2)
    qk_names = names.tower_qk_norms if names else ("attn.q_norm", "attn.k_norm")
    qk = tuple(_norm(pre + n, q, b.qk_norm) for n in qk_names) if b.qk_norm != "none" else ()
    # InternViT layer scale: lambda_1 / lambda_2 scale each sublayer's output before the residual add
    scale = ((Params(pre + "lambda_1", NORMS, h, 0), Params(pre + "lambda_2", NORMS, h, 0)) if b.layer_scale
             else (None, None))
    attn = AttnSub(_norm(pre + norms[0], h, b.norm), projections, sources, qk, replace(b, count=1),
                   Lin(pre + (names.tower_out if names else "attn.proj"), ATTENTION, rows, q, h, "vision.attn_proj",
                       b.proj_bias), scale[0])
    mlp_in = (names.tower_mlp_in if names else (("mlp.gate_proj", "mlp.up_proj") if b.mlp_gated else ("mlp.fc1",)))
    if len(mlp_in) != b.mlp_matrices - 1:
        raise ValueError(f"layout: {len(mlp_in)} MLP input names for a {b.mlp_matrices}-matrix MLP")
    mlp = MlpSub(_norm(pre + norms[1], h, b.norm),
                 tuple(Lin(pre + n, MLP, rows, h, b.mlp_width, "vision.mlp", b.mlp_bias) for n in mlp_in),
                 Lin(pre + (names.tower_mlp_out if names else "mlp.fc2"), MLP, rows, b.mlp_width, h, "vision.mlp",
                     b.mlp_bias), scale[1])
    return (attn, mlp)


def _projectors(spec: ModelSpec, stage: str, blocks: list[Block], names: _Names | None) -> StageLayout:
    if stage == MERGER and names is not None:
        laid = _named_merger(blocks, names)
        if laid is not None:
            return StageLayout(stage, 0, head=laid)
    if not all(type(b) in (MlpProjector, NormLinearProjector) for b in blocks):
        return _opaque_stage(stage, blocks, 0)
    chains = []
    for b in blocks:
        if isinstance(b, NormLinearProjector):
            if b.count != 1 or stage != MERGER:
                return _opaque_stage(stage, blocks, 0)
            lin_name = names.merger_linears[0] if names else "<merger>.linear"
            chains.append(Chain(_norm(names.merger_norm if names else "<merger>.norm", b.norm_width, b.norm)
                                if b.norm != "none" else None,
                                (Lin(lin_name, MLP, ("vision_merged_tokens",), b.in_width, b.out_width, b.component,
                                     b.bias, adaptable=bool(names and names.merger_adaptable)),)))
            continue
        assert isinstance(b, MlpProjector)
        for k in range(b.count):
            if stage == DEEPSTACK_MERGER:
                pre = names.deepstack.format(k=k) + "." if names and names.deepstack else f"<deepstack>.{k}."
                norm_name = pre + (names.deepstack_norm if names else "norm")
                lin_names = tuple(pre + n for n in (names.deepstack_linears if names else ("fc1", "fc2")))
            else:
                norm_name = names.merger_norm if names else "<merger>.norm"
                lin_names = names.merger_linears if names else ("<merger>.fc1", "<merger>.fc2")
            rows = b.rows_stats
            chains.append(Chain(_norm(norm_name, b.norm_width, b.norm) if b.norm != "none" else None,
                                (Lin(lin_names[0], MLP, rows, b.in_width, b.hidden_width, b.component, b.bias),
                                 Lin(lin_names[1], MLP, rows, b.hidden_width, b.out_width, b.component, b.bias))))
    taps: tuple[int, ...] = ()
    if stage == DEEPSTACK_MERGER:
        v = spec.vision
        assert v is not None
        taps = tuple(sorted({i for i in v.deepstack_visual_indexes if 0 <= i < v.depth}))
        if len(taps) != len(chains):
            return _opaque_stage(stage, blocks, 0)
    return StageLayout(stage, 0, head=tuple(chains), taps=taps)


def _named_merger(blocks: list[Block], names: _Names) -> tuple[Any, ...] | None:
    """The projector of the families whose merger is not a plain MLP / norm-Linear (LLaVA-NeXT's image_newline,
    Mistral 3 / Idefics3 Linear chains, LLaVA-NeXT-Video's pooled rows, GLM's downsample conv + gated merger), in
    data-flow order; ``None`` when the blocks are not one of these shapes."""
    rows = ("vision_merged_tokens",)
    ops: list[Any] = []
    for block in blocks:
        pool, b = 1, block
        if isinstance(block, PooledVideoProjector) and block.count == 1:
            b, pool = block.module, block.pool  # the wrapped MLP, on pooled video rows
        if isinstance(b, MlpProjector) and b.count == 1 and len(names.merger_linears) == 2:
            if b.norm != "none" and not names.merger_norm:
                return None
            ops.append(Chain(_norm(names.merger_norm, b.norm_width, b.norm) if b.norm != "none" else None,
                             (Lin(names.merger_linears[0], MLP, b.rows_stats, b.in_width, b.hidden_width, b.component,
                                  b.bias, pool=pool),
                              Lin(names.merger_linears[1], MLP, b.rows_stats, b.hidden_width, b.out_width, b.component,
                                  b.bias, pool=pool))))
        elif isinstance(b, LinearProjector) and b.count == 1 and len(names.merger_linears) == len(b.linears()):
            if b.norm != "none" and not names.merger_norm:
                return None
            ops.append(Chain(_norm(names.merger_norm, b.norm_width, b.norm) if b.norm != "none" else None,
                             tuple(Lin(n, MLP, rows, i, o, "vision.merger", bias)
                                   for n, (i, o, bias) in zip(names.merger_linears, b.linears()))))
        elif isinstance(b, DownsampleConv) and b.count == 1 and names.downsample:
            ops.append(Lin(names.downsample, MLP, rows, b.in_width, b.out_width, "vision.merger", b.bias, conv=True))
        elif isinstance(b, GatedMergerMLP) and b.count == 1 and names.merger_mlp[0] and len(names.merger_linears) == 1:
            d, f = b.width, b.hidden_width
            norm, gate, up, down = names.merger_mlp
            ops.append(Lin(names.merger_linears[0], MLP, rows, d, d, "vision.merger", b.bias))
            ops.append(MlpSub(Params(norm, NORMS), (Lin(gate, MLP, rows, d, f, "vision.merger", b.bias),
                                                    Lin(up, MLP, rows, d, f, "vision.merger", b.bias)),
                              Lin(down, MLP, rows, f, d, "vision.merger", b.bias)))
        elif isinstance(b, ExtraParams) and b.count == 1 and names.newline:
            ops.append(Params(names.newline, EMBEDDINGS))  # concatenated to the projected rows: an LM input
        else:
            return None
    if not any(isinstance(op, (Chain, MlpSub)) for op in ops):
        return None
    return tuple(ops)


def _lm(spec: ModelSpec, blocks: list[Block], names: _Names | None) -> StageLayout:
    lm = spec.lm
    n = lm.num_layers
    if names:
        prefix = names.lm_prefix
    elif module_names_known(spec):
        prefix = _LM_ONLY_PREFIX
    else:
        prefix = "<language_model>"
    known_names = bool(names) or module_names_known(spec)
    sliding = set(lm.sliding_layers) if lm.sliding_window else set()
    moe = set(lm.moe_layers)
    types = spec.extra.get("layer_types")
    linear_types = tuple(types) if isinstance(types, (list, tuple)) and len(types) == n and not sliding else None
    attn_for: dict[int, Block] = {}
    mlp_for: dict[int, Block] = {}
    norms: LMLayerNorms | None = None
    head: list[Any] = []
    tail: list[Any] = []
    per_layer_extra: list[Block] = []
    for b in blocks:
        if isinstance(b, (DecoderAttention,)) or b.kind in ("mla_attention", "gated_delta_net"):
            window = getattr(b, "window", None)
            if linear_types is not None:  # Qwen3.5: gated delta nets on the linear_attention layers
                layers = [i for i in range(n) if (linear_types[i] == "linear_attention") == (b.kind == "gated_delta_net")]
            elif b.kind == "gated_delta_net":
                return _opaque_stage(LANGUAGE_MODEL, blocks, n)
            else:
                layers = [i for i in range(n) if (i in sliding) == bool(window) and i not in attn_for]
                if not window and len(layers) < b.count:
                    # a full-attention block on sliding layers (PaliGemma 2: the prefix-LM mask computes the whole
                    # square there too): the layers no other attention block took, in order
                    layers = [i for i in range(n) if i not in attn_for][:b.count]
            if len(layers) != b.count:
                return _opaque_stage(LANGUAGE_MODEL, blocks, n)
            attn_for.update({i: b for i in layers})
        elif b.kind in ("dense_mlp", "moe_mlp", "shared_gate_moe_mlp", "biased_moe_mlp"):
            layers = [i for i in range(n) if (i in moe) == (b.kind != "dense_mlp")]
            if len(layers) != b.count:
                return _opaque_stage(LANGUAGE_MODEL, blocks, n)
            mlp_for.update({i: b for i in layers})
        elif isinstance(b, LMLayerNorms):
            norms = b
        elif isinstance(b, TokenEmbedding):
            head.append(Params(f"{prefix}.embed_tokens", EMBEDDINGS, b.params(), 0))
        elif isinstance(b, FinalNorm):
            tail.append(_norm(f"{prefix}.norm", b.hidden, "rmsnorm"))
        elif isinstance(b, LMHead):
            tail.append(Lin("lm_head" if known_names else "<language_model>.lm_head", HEAD, ("lm_tokens",), b.hidden,
                            b.vocab, "lm.logits", head=True, tied=b.tied))
        elif b.count == n and b.params() == 0:
            per_layer_extra.append(b)  # e.g. Gemma 3's bidirectional image-block attention (a core, no weights)
        else:
            tail.append(Opaque(b, MLP))
    if len(attn_for) != n or len(mlp_for) != n or norms is None or norms.norms_per_layer not in (2, 4):
        return _opaque_stage(LANGUAGE_MODEL, blocks, n)
    laid: list[Layer] = []
    for i in range(n):
        pre = f"{prefix}.layers.{i}."
        a, m = attn_for[i], mlp_for[i]
        subs: list[Any] = []
        in_norm = _norm(pre + "input_layernorm", norms.hidden, "rmsnorm")
        sandwich = norms.norms_per_layer == 4  # Gemma: input, post-attention, pre- and post-feedforward norms
        after_attn, before_mlp, after_mlp = names.lm_sandwich if names else _Names.lm_sandwich
        attn_post = _norm(pre + after_attn, norms.hidden, "rmsnorm") if sandwich else None
        mlp_pre = _norm(pre + (before_mlp if sandwich else "post_attention_layernorm"), norms.hidden, "rmsnorm")
        mlp_post = _norm(pre + after_mlp, norms.hidden, "rmsnorm") if sandwich else None
        if isinstance(a, DecoderAttention) and type(a) in (DecoderAttention, GatedDecoderAttention,
                                                           SinkDecoderAttention):
            # Qwen3.5's gated attention: q_proj also emits the output gate (h -> 2·H·d), an elementwise multiply
            rows = ("lm_tokens",)
            q_out = 2 * a.q_width if isinstance(a, GatedDecoderAttention) else a.q_width
            projections = (Lin(pre + "self_attn.q_proj", ATTENTION, rows, a.hidden, q_out, "lm.attn_proj",
                               a.qkv_bias),
                           Lin(pre + "self_attn.k_proj", ATTENTION, rows, a.hidden, a.kv_width, "lm.attn_proj",
                               a.qkv_bias),
                           Lin(pre + "self_attn.v_proj", ATTENTION, rows, a.hidden, a.kv_width, "lm.attn_proj",
                               a.qkv_bias))
            qk = ((_norm(pre + "self_attn.q_norm", a.head_dim, "rmsnorm"),
                   _norm(pre + "self_attn.k_norm", a.head_dim, "rmsnorm")) if a.qk_norm else ())
            sinks = (Params(pre + "self_attn.sinks", ATTENTION),) if isinstance(a, SinkDecoderAttention) else ()
            subs.append(AttnSub(in_norm, projections, (0, 1, 2), qk, replace(a, count=1),
                                Lin(pre + "self_attn.o_proj", ATTENTION, rows, a.q_width, a.hidden, "lm.attn_proj",
                                    a.o_bias), attn_post, sinks))
        else:
            if sandwich:
                return _opaque_stage(LANGUAGE_MODEL, blocks, n)
            subs.append(Opaque(replace(a, count=1), ATTENTION, in_norm, name=pre + _attn_module(a),
                               inner=_INNER.get(a.kind, ())))
        subs += [Opaque(replace(x, count=1), ATTENTION) for x in per_layer_extra]
        if isinstance(m, DenseMLP):
            rows = ("lm_tokens",)
            if names and names.lm_gate_up:
                ins: tuple[Lin, ...] = (Lin(pre + names.lm_gate_up, MLP, rows, m.hidden, 2 * m.width, "lm.dense_mlp"),)
            else:
                ins = (Lin(pre + "mlp.gate_proj", MLP, rows, m.hidden, m.width, "lm.dense_mlp"),
                       Lin(pre + "mlp.up_proj", MLP, rows, m.hidden, m.width, "lm.dense_mlp"))
            subs.append(MlpSub(mlp_pre, ins, Lin(pre + "mlp.down_proj", MLP, rows, m.width, m.hidden, "lm.dense_mlp"),
                               mlp_post))
        else:
            if sandwich:
                return _opaque_stage(LANGUAGE_MODEL, blocks, n)
            shared = _moe_shared(pre + "mlp.", m) if known_names else ()
            subs.append(Opaque(replace(m, count=1), MLP, mlp_pre, name=pre + "mlp", inner=_moe_inner(spec, m, shared),
                               params=_moe_params(m) if known_names else (), shared=shared))
        laid.append(Layer(i, tuple(subs)))
    return StageLayout(LANGUAGE_MODEL, n, tuple(head), tuple(laid), tuple(tail))


# nn.Linear / Conv modules inside the sublayers laid out as whole blocks (transformers 5 names, relative to the block)
_INNER = {"gated_delta_net": ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj", "conv1d"),
          "sink_decoder_attention": ("q_proj", "k_proj", "v_proj", "o_proj"),
          "mla_attention": ("q_a_proj", "q_b_proj", "q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")}


# transformers 5's fused MoE (Qwen3-VL-MoE, GLM-4.xV-MoE, Qwen3.5-MoE): experts.gate_up_proj (E, 2F, h),
# experts.down_proj (E, h, F), the router's gate.weight (E, h)
_MOE_PARAMS = (("experts.gate_up_proj", "gate_up"), ("experts.down_proj", "down"), ("gate.weight", "router"))


def _moe_params(m: Block) -> tuple[tuple[str, str], ...]:
    if m.kind in ("moe_mlp", "shared_gate_moe_mlp"):
        return _MOE_PARAMS
    if m.kind == "biased_moe_mlp":  # gpt-oss: experts (E, h, 2F) / (E, F, h), router.weight (E, h)
        return (("experts.gate_up_proj", "gate_up"), ("experts.down_proj", "down"), ("router.weight", "router"))
    return ()


def _attn_module(a: Block) -> str:
    return "linear_attn" if a.kind == "gated_delta_net" else "self_attn"


def _moe_shared(prefix: str, m: Block) -> tuple[Any, ...]:
    """The shared expert of an MoE MLP laid out per Linear, where transformers 5 builds it as one gated MLP module
    reading the block input: ``shared_experts`` of width n_shared x F_sh (GLM-4.xV-MoE ``Glm4vMoeTextMoE``,
    DeepSeek-V3 ``DeepseekV3MoE``), or Qwen3.5-MoE's ``shared_expert`` (one, of width F_sh) plus its
    ``shared_expert_gate`` Linear(h -> 1) whose sigmoid scales it (``Qwen3_5MoeSparseMoeBlock``); the sum with the
    routed experts and the gate's product are elementwise. () where the kind has no such layout."""
    n = getattr(m, "num_shared", 0)
    if not n or type(m) not in (MoEMLP, SharedGateMoEMLP):
        return ()
    gated = isinstance(m, SharedGateMoEMLP)
    if gated and n != 1:
        return ()
    h, w, rows = m.hidden, n * m.shared_width, ("lm_tokens",)  # type: ignore[attr-defined]
    pre = prefix + ("shared_expert." if gated else "shared_experts.")
    sub = MlpSub(None, (Lin(pre + "gate_proj", MLP, rows, h, w, "lm.shared_experts"),
                        Lin(pre + "up_proj", MLP, rows, h, w, "lm.shared_experts")),
                 Lin(pre + "down_proj", MLP, rows, w, h, "lm.shared_experts"))
    if gated:
        return (sub, Lin(prefix + "shared_expert_gate", MLP, rows, h, 1, "lm.shared_experts"))
    return (sub,)


def _moe_inner(spec: ModelSpec, m: Block, laid: tuple[Any, ...] = ()) -> tuple[str, ...]:
    """The Linears of an MoE MLP not laid out in ``laid`` (shared experts, a Linear router where the family has
    one); the routed experts are fused 3-D parameters (``experts.gate_up_proj`` / ``experts.down_proj``), not
    modules."""
    inner: tuple[str, ...] = ()
    if getattr(m, "num_shared", 0) and not laid:
        shared = "shared_expert" if m.kind == "shared_gate_moe_mlp" else "shared_experts"
        inner += tuple(f"{shared}.{x}" for x in ("gate_proj", "up_proj", "down_proj"))
        if m.kind == "shared_gate_moe_mlp":
            inner += ("shared_expert_gate",)
    if spec.family == "gpt_oss" or m.kind == "biased_moe_mlp":
        inner += ("router",)
    return inner + ("gate", "experts")


def module_names(stages: tuple[StageLayout, ...]) -> set[str]:
    """Every module name the layout knows: its Linears, parameter-only modules, blocks laid out whole and the
    Linears inside them (what an adapter config's ``target_modules`` can name)."""
    out = {lin.name for _, lin in names_of(stages)}

    def visit(op: Any) -> None:
        if isinstance(op, Params):
            out.add(op.name)
        elif isinstance(op, (AttnSub, MlpSub, Chain)):
            for x in vars(op).values():
                for y in (x if isinstance(x, tuple) else (x,)):
                    visit(y)
        elif isinstance(op, Opaque):
            visit(op.norm)
            if op.name:
                out.add(op.name)
                out.update(f"{op.name}.{inner}" for inner in op.inner)
                out.update(f"{op.name}.{p.rsplit('.', 1)[0]}" for p, _ in op.params)

    for s in stages:
        for op in s.head + s.tail + tuple(o for layer in s.layers for o in layer.subs):
            visit(op)
        for op in s.dead:
            for o in (op.subs if isinstance(op, Layer) else (op,)):
                visit(o)
    return out


def names_of(stages: tuple[StageLayout, ...]) -> list[tuple[str, Lin]]:
    """(stage, Linear) of every Linear in the layout, in order (what an adapter config can target)."""
    out: list[tuple[str, Lin]] = []

    def visit(stage: str, op: Any) -> None:
        if isinstance(op, Lin):
            out.append((stage, op))
        elif isinstance(op, AttnSub):
            for p in op.projections + (op.out,):
                out.append((stage, p))
        elif isinstance(op, MlpSub):
            for p in op.ins + (op.out,):
                out.append((stage, p))
        elif isinstance(op, Chain):
            for p in op.linears:
                out.append((stage, p))
        elif isinstance(op, Opaque):
            for x in op.shared:
                visit(stage, x)

    for s in stages:
        for op in s.head:
            visit(s.stage, op)
        for layer in s.layers:
            for op in layer.subs:
                visit(s.stage, op)
        for op in s.tail:
            visit(s.stage, op)
        for op in s.dead:
            for o in (op.subs if isinstance(op, Layer) else (op,)):
                visit(s.stage, o)
    return out
