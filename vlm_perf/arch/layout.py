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
  delta nets, ...); fine-grained trainability or adapters inside one are refused by the FLOPs side.

Names follow transformers 5 (``model.visual.blocks.N.attn.qkv``, ``model.language_model.layers.N.self_attn
.q_proj``, ``lm_head``). Families without a name table get ``names=False``: selectors still work, adapter
configs (which name modules) are refused.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .blocks import (Block, ClsToken, DecoderAttention, DenseMLP, ExtraParams, FinalNorm, LMHead, LMLayerNorms,
                     MlpProjector, NormLinearProjector, PatchEmbed, PositionTable, TokenEmbedding, VisionLayers)
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


@dataclass(frozen=True)
class Params:
    """Weights without a matmul (a norm, an embedding / position table, a CLS token)."""

    name: str
    kind: str


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
    tower_tail_norm="model.vision_tower.post_layernorm")
_LM_ONLY_PREFIX = "model"


def module_names_known(spec: ModelSpec) -> bool:
    """Whether :func:`layout` gives this model its real Hugging Face module names."""
    return spec.model_type in _NAMES or (not spec.is_vlm and spec.family in ("qwen2", "qwen3", "llama", "mistral"))


# --------------------------------------------------------------------------- layout
def layout(spec: ModelSpec) -> tuple[StageLayout, ...]:
    """Every stage the model has, in data-flow order (see the module docstring)."""
    names = _NAMES.get(spec.model_type)
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
    head: list[Any] = []
    tail: list[Any] = []
    per_layer: dict[int, VisionLayers] = {}
    if len(layers_blocks) == 1 and layers_blocks[0].count == depth:
        per_layer = {i: layers_blocks[0] for i in range(depth)}
    elif (len(layers_blocks) == 2 and {b.attention for b in layers_blocks} == {"frame", "window"}
          and sum(b.count for b in layers_blocks) == depth):
        full = set(v.full_attention_layers)
        frame = next(b for b in layers_blocks if b.attention == "frame")
        window = next(b for b in layers_blocks if b.attention == "window")
        per_layer = {i: frame if i in full else window for i in range(depth)}
    else:
        return _opaque_stage(VISION_TOWER, blocks, depth)
    for b in blocks:
        if isinstance(b, PatchEmbed):
            head.append(Lin(names.patch if names else _generic("vision_tower", "patch_embed"), EMBEDDINGS,
                            ("vision_patches",), b.in_volume, b.width, "vision.patch_embed", b.bias, pixels=True))
        elif isinstance(b, PositionTable):
            head.append(Params(names.pos if names else _generic("vision_tower", b.kind), EMBEDDINGS))
        elif isinstance(b, ClsToken):
            head.append(Params(names.cls if names and names.cls else _generic("vision_tower", b.kind), EMBEDDINGS))
        elif type(b) is VisionLayers:
            continue
        elif isinstance(b, ExtraParams) or type(b).__name__ == "ExtraNorms":
            tail.append(Params(names.tower_tail_norm if names and names.tower_tail_norm
                               else _generic("vision_tower", b.kind), NORMS))
        else:
            tail.append(Opaque(b, MLP))
    layers = tuple(Layer(i, _vision_layer(per_layer[i], i, names)) for i in range(depth))
    return StageLayout(VISION_TOWER, depth, tuple(head), layers, tuple(tail))


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
    qk = tuple(Params(pre + n, NORMS) for n in qk_names) if b.qk_norm != "none" else ()
    # InternViT layer scale: lambda_1 / lambda_2 scale each sublayer's output before the residual add
    scale = (Params(pre + "lambda_1", NORMS), Params(pre + "lambda_2", NORMS)) if b.layer_scale else (None, None)
    attn = AttnSub(Params(pre + norms[0], NORMS), projections, sources, qk, replace(b, count=1),
                   Lin(pre + (names.tower_out if names else "attn.proj"), ATTENTION, rows, q, h, "vision.attn_proj",
                       b.proj_bias), scale[0])
    mlp_in = (names.tower_mlp_in if names else (("mlp.gate_proj", "mlp.up_proj") if b.mlp_gated else ("mlp.fc1",)))
    if len(mlp_in) != b.mlp_matrices - 1:
        raise ValueError(f"layout: {len(mlp_in)} MLP input names for a {b.mlp_matrices}-matrix MLP")
    mlp = MlpSub(Params(pre + norms[1], NORMS),
                 tuple(Lin(pre + n, MLP, rows, h, b.mlp_width, "vision.mlp", b.mlp_bias) for n in mlp_in),
                 Lin(pre + (names.tower_mlp_out if names else "mlp.fc2"), MLP, rows, b.mlp_width, h, "vision.mlp",
                     b.mlp_bias), scale[1])
    return (attn, mlp)


def _projectors(spec: ModelSpec, stage: str, blocks: list[Block], names: _Names | None) -> StageLayout:
    if not all(type(b) in (MlpProjector, NormLinearProjector) for b in blocks):
        return _opaque_stage(stage, blocks, 0)
    chains = []
    for b in blocks:
        if isinstance(b, NormLinearProjector):
            if b.count != 1 or stage != MERGER:
                return _opaque_stage(stage, blocks, 0)
            lin_name = names.merger_linears[0] if names else "<merger>.linear"
            chains.append(Chain(Params(names.merger_norm if names else "<merger>.norm", NORMS)
                                if b.norm != "none" else None,
                                (Lin(lin_name, MLP, ("vision_merged_tokens",), b.in_width, b.out_width, b.component,
                                     b.bias, adaptable=False),)))
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
            rows = ("vision_merged_tokens",)
            chains.append(Chain(Params(norm_name, NORMS) if b.norm != "none" else None,
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
    attn_for: dict[int, Block] = {}
    mlp_for: dict[int, Block] = {}
    norms: LMLayerNorms | None = None
    head: list[Any] = []
    tail: list[Any] = []
    per_layer_extra: list[Block] = []
    for b in blocks:
        if isinstance(b, (DecoderAttention,)) or b.kind in ("mla_attention", "gated_delta_net"):
            if b.kind == "gated_delta_net":
                return _opaque_stage(LANGUAGE_MODEL, blocks, n)
            window = getattr(b, "window", None)
            layers = [i for i in range(n) if (i in sliding) == bool(window)]
            if len(layers) != b.count:
                return _opaque_stage(LANGUAGE_MODEL, blocks, n)
            attn_for.update({i: b for i in layers})
        elif b.kind in ("dense_mlp", "moe_mlp", "shared_gate_moe_mlp"):
            layers = [i for i in range(n) if (i in moe) == (b.kind != "dense_mlp")]
            if len(layers) != b.count:
                return _opaque_stage(LANGUAGE_MODEL, blocks, n)
            mlp_for.update({i: b for i in layers})
        elif isinstance(b, LMLayerNorms):
            norms = b
        elif isinstance(b, TokenEmbedding):
            head.append(Params(f"{prefix}.embed_tokens", EMBEDDINGS))
        elif isinstance(b, FinalNorm):
            tail.append(Params(f"{prefix}.norm", NORMS))
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
        in_norm = Params(pre + "input_layernorm", NORMS)
        sandwich = norms.norms_per_layer == 4  # Gemma: input, post-attention, pre- and post-feedforward norms
        attn_post = Params(pre + "post_attention_layernorm", NORMS) if sandwich else None
        mlp_pre = Params(pre + ("pre_feedforward_layernorm" if sandwich else "post_attention_layernorm"), NORMS)
        mlp_post = Params(pre + "post_feedforward_layernorm", NORMS) if sandwich else None
        if type(a) is DecoderAttention:
            rows = ("lm_tokens",)
            projections = (Lin(pre + "self_attn.q_proj", ATTENTION, rows, a.hidden, a.q_width, "lm.attn_proj",
                               a.qkv_bias),
                           Lin(pre + "self_attn.k_proj", ATTENTION, rows, a.hidden, a.kv_width, "lm.attn_proj",
                               a.qkv_bias),
                           Lin(pre + "self_attn.v_proj", ATTENTION, rows, a.hidden, a.kv_width, "lm.attn_proj",
                               a.qkv_bias))
            qk = ((Params(pre + "self_attn.q_norm", NORMS), Params(pre + "self_attn.k_norm", NORMS)) if a.qk_norm
                  else ())
            subs.append(AttnSub(in_norm, projections, (0, 1, 2), qk, replace(a, count=1),
                                Lin(pre + "self_attn.o_proj", ATTENTION, rows, a.q_width, a.hidden, "lm.attn_proj",
                                    a.o_bias), attn_post))
        else:
            if sandwich:
                return _opaque_stage(LANGUAGE_MODEL, blocks, n)
            subs.append(Opaque(replace(a, count=1), ATTENTION, in_norm, name=pre + "self_attn"))
        subs += [Opaque(replace(x, count=1), ATTENTION) for x in per_layer_extra]
        if isinstance(m, DenseMLP):
            rows = ("lm_tokens",)
            subs.append(MlpSub(mlp_pre, (Lin(pre + "mlp.gate_proj", MLP, rows, m.hidden, m.width, "lm.dense_mlp"),
                                         Lin(pre + "mlp.up_proj", MLP, rows, m.hidden, m.width, "lm.dense_mlp")),
                               Lin(pre + "mlp.down_proj", MLP, rows, m.width, m.hidden, "lm.dense_mlp"), mlp_post))
        else:
            if sandwich:
                return _opaque_stage(LANGUAGE_MODEL, blocks, n)
            subs.append(Opaque(replace(m, count=1), MLP, mlp_pre, name=pre + "mlp"))
        laid.append(Layer(i, tuple(subs)))
    return StageLayout(LANGUAGE_MODEL, n, tuple(head), tuple(laid), tuple(tail))


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

    for s in stages:
        for op in s.head:
            visit(s.stage, op)
        for layer in s.layers:
            for op in layer.subs:
                visit(s.stage, op)
        for op in s.tail:
            visit(s.stage, op)
    return out
