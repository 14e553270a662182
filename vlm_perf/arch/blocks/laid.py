"""How a block kind lays itself out per Linear: the layout vocabulary and the ``@block_layout`` registry (pure).

The block inventory is the one description of a model. Whole-part regimes need nothing more; finer ones
(layer ranges, one kind of sublayer, LoRA/DoRA on named modules) need each block's Linears, in data-flow order,
with their Hugging Face module names. Each block kind says so itself, beside its parameter count: a function
registered with ``@block_layout(Kind)`` in the kind's own module (as ``vlm_perf.flops.blocks`` files its
FLOPs), which :func:`vlm_perf.arch.layout.layout` calls for every block of a stage, in inventory order.

The vocabulary (what a hook returns, what :mod:`vlm_perf.flops.regime` walks):

* :class:`Lin`: one Linear (or a kernel = stride convolution, the patch embed) with its rows statistic,
  widths, module name and kind;
* :class:`Params`: weights with no matmul (norms, embedding tables, position tables, CLS tokens);
* :class:`AttnSub` / :class:`MlpSub`: a pre-norm attention / MLP sublayer;
* :class:`Chain`: a projector (optional norm, then Linears in sequence);
* :class:`Opaque`: a block laid out as a whole (kinds without a per-Linear layout: MoE MLPs, MLA, gated
  delta nets, ...); fine-grained trainability or adapters inside one are refused by the FLOPs side, except on
  the Linears laid out inside it (``shared``: an MoE MLP's shared expert).

A hook gets the block and a :class:`LayoutContext` (the model, the stage, the family's
:class:`ModuleNames` table, which layers earlier blocks filled) and returns a :class:`Placed`: ops before the
stage's layers (``head``), after them (``tail``), after the stage's output is taken (``dead``), and/or the
layers it fills in one per-layer ``slot`` with a ``build(frame)`` giving its sublayers in layer
``frame.index``; ``taps``: the tower layer each of its ``head`` chains reads. ``None`` (from the hook or from
``build``) means "no per-Linear layout here": the whole stage is then laid out as :class:`Opaque` blocks, which
trains or freezes as a whole. A kind with no hook gets :func:`default_placement` (an :class:`Opaque` block after
the layers; in a projector stage, no layout).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..parts import DEEPSTACK_MERGER, LANGUAGE_MODEL, MERGER
from ..trainability import ATTENTION, MLP, NORMS
from .base import Block, norm_params

__all__ = ["AttnSub", "BLOCK_LAYOUT", "Chain", "LayerFrame", "LayoutContext", "Layer", "Lin", "MlpSub",
           "ModuleNames", "Opaque", "Params", "Placed", "StageLayout", "block_layout", "decoder_layers",
           "default_placement", "extra_norm", "norm", "opaque_sublayer", "place"]


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


def norm(name: str, width: int, kind: str) -> Params:
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

    def members(self) -> tuple[Lin | Params, ...]:
        """Its weights in data-flow order (norm, projections, q/k norms, core weights, out, post norm)."""
        return _present(self.norm, *self.projections, *self.qk_norms, *self.core_params, self.out, self.post_norm)


@dataclass(frozen=True)
class MlpSub:
    """norm -> ``ins`` (gate/up or fc1) -> activation -> ``out`` (down / fc2)."""

    norm: Params | None
    ins: tuple[Lin, ...]
    out: Lin
    post_norm: Params | None = None

    def members(self) -> tuple[Lin | Params, ...]:
        """Its weights in data-flow order (norm, ins, out, post norm)."""
        return _present(self.norm, *self.ins, self.out, self.post_norm)


@dataclass(frozen=True)
class Chain:
    """A projector: optional norm, then Linears applied one after the other."""

    norm: Params | None
    linears: tuple[Lin, ...]

    def members(self) -> tuple[Lin | Params, ...]:
        """Its weights in data-flow order (norm, Linears)."""
        return _present(self.norm, *self.linears)


def _present(*ops: Lin | Params | None) -> tuple[Lin | Params, ...]:
    return tuple(op for op in ops if op is not None)


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
class ModuleNames:
    """A family's Hugging Face module names (transformers 5), as the hooks of its block kinds read them.
    The tables themselves are in :mod:`vlm_perf.arch.hf_names`."""

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


# --------------------------------------------------------------------------- what a hook sees and returns
@dataclass
class LayoutContext:
    """One stage being laid out. ``names``: the family's table (None: generic ``<stage>.…`` names);
    ``known``: module names are the real ones (a table, or an LM-only family's standard names); ``taken``:
    per slot, the layers earlier blocks filled; ``seen_layers``: a per-layer block came earlier in the
    inventory; ``head_norms``: the family's standalone norm names before the layers, not placed yet."""

    spec: Any
    stage: str
    names: ModuleNames | None
    known: bool
    num_layers: int
    taken: dict[str, list[int]] = field(default_factory=dict)
    seen_layers: bool = False
    head_norms: list[str] = field(default_factory=list)

    @property
    def lm_prefix(self) -> str:
        """The LM's module prefix (``model.language_model``, ``model``, or ``<language_model>``)."""
        if self.names:
            return self.names.lm_prefix
        return "model" if self.known else "<language_model>"

    def free(self, slot: str) -> list[int]:
        """The layers no earlier block filled in ``slot``, in order."""
        taken = set(self.taken.get(slot, ()))
        return [i for i in range(self.num_layers) if i not in taken]


@dataclass(frozen=True)
class LayerFrame:
    """One layer being built: its index, the stage's context, and its norms by role (``attention_in``,
    ``attention_out``, ``mlp_in``, ``mlp_out``; an absent role is None) from the stage's per-layer norm block,
    or None when the stage has none."""

    index: int
    ctx: LayoutContext
    norms: dict[str, Params | None] | None = None

    def norm(self, role: str) -> Params | None:
        return self.norms.get(role) if self.norms else None


@dataclass(frozen=True)
class Placed:
    """Where one block goes in its stage. ``slot``/``layers``/``build``: it fills ``slot`` in ``layers`` and
    ``build(frame)`` gives its sublayers there (None: no layout); ``forward_only``: those layers run after the
    stage output is taken (:attr:`StageLayout.dead`); ``norms(i)``: the block is the stage's per-layer norms, those
    of layer ``i`` by role (see :class:`LayerFrame`); ``taps``: the tower layer each ``head`` chain reads."""

    head: tuple[Any, ...] = ()
    tail: tuple[Any, ...] = ()
    dead: tuple[Any, ...] = ()
    slot: str = ""
    layers: tuple[int, ...] = ()
    build: Callable[[LayerFrame], tuple[Any, ...] | None] | None = None
    forward_only: bool = False
    norms: Callable[[int], dict[str, Params | None]] | None = None
    taps: tuple[int, ...] = ()  # deepstack mergers


LayoutFn = Callable[[Any, LayoutContext], "Placed | None"]
BLOCK_LAYOUT: dict[type, tuple[LayoutFn, tuple[str, ...]]] = {}


def block_layout(*kinds: type, stages: tuple[str, ...] = ()) -> Callable[[LayoutFn], LayoutFn]:
    """Register the layout hook of block kinds (exact types, duplicates rejected); ``stages``: only there
    (elsewhere the kind gets :func:`default_placement`)."""
    def register(fn: LayoutFn) -> LayoutFn:
        for kind in kinds:
            if kind in BLOCK_LAYOUT:
                raise ValueError(f"layout of block kind {kind.__name__} already registered "
                                 f"({BLOCK_LAYOUT[kind][0].__name__})")
            BLOCK_LAYOUT[kind] = (fn, stages)
        return fn
    return register


def place(block: Block, ctx: LayoutContext) -> Placed | None:
    """The placement of ``block`` by its kind's hook, else :func:`default_placement`."""
    fn, stages = BLOCK_LAYOUT.get(type(block), (None, ()))
    if fn is None or (stages and ctx.stage not in stages):
        return default_placement(block, ctx)
    return fn(block, ctx)


def default_placement(block: Block, ctx: LayoutContext) -> Placed | None:
    """A block without a per-Linear layout: in a projector stage, none for the stage (it is opaque); in the LM,
    a weightless block repeated once per layer sits in every layer (Gemma 3's image-block attention core);
    otherwise an :class:`Opaque` block after the layers."""
    if ctx.stage in (MERGER, DEEPSTACK_MERGER):
        return None
    if ctx.stage == LANGUAGE_MODEL and block.count == ctx.num_layers and block.params() == 0:
        return Placed(slot="extra", layers=tuple(range(ctx.num_layers)),
                      build=lambda frame: (Opaque(replace(block, count=1), ATTENTION),))
    return Placed(tail=(Opaque(block, MLP),))


# --------------------------------------------------------------------------- helpers hooks share
def extra_norm(name: str, width: int | None, kind: str, block: Block) -> Params:
    """A tower norm outside the layers: sized from its block when it is one norm (``width``/``kind`` known),
    else by its parameters when one copy (a bias share is not known), else unsized."""
    if width is not None and block.count == 1:
        return norm(name, width, kind)
    return Params(name, NORMS, block.params() if block.count == 1 else None)


def decoder_layers(block: Block, ctx: LayoutContext, linear: bool = False, window: int | None = None
                   ) -> tuple[int, ...] | None:
    """The decoder layers an attention-like block fills (``linear``: a linear-attention kind, a gated delta net):
    with the config's ``layer_types`` (Qwen3.5: ``linear_attention`` / ``full_attention``, no sliding layers), the
    layers of its type; else a linear-attention kind has no known place (None); else the sliding layers for a
    windowed block and the others for a full one (a full block on sliding layers, PaliGemma 2's prefix-LM square:
    the layers no other attention block took, in order). None when the count does not match."""
    spec, n = ctx.spec, ctx.num_layers
    lm = spec.lm
    sliding = set(lm.sliding_layers) if lm.sliding_window else set()
    types = spec.extra.get("layer_types")
    if isinstance(types, (list, tuple)) and len(types) == n and not sliding:
        layers = [i for i in range(n) if (types[i] == "linear_attention") == linear]
    elif linear:
        return None
    else:
        free = ctx.free("attention")
        layers = [i for i in free if (i in sliding) == bool(window)]
        if not window and len(layers) < block.count:
            layers = free[:block.count]
    return tuple(layers) if len(layers) == block.count else None


def opaque_sublayer(block: Block, module: str, inner: tuple[str, ...] = ()
                    ) -> Callable[[LayerFrame], tuple[Any, ...] | None]:
    """The build of a decoder attention-like sublayer laid out whole (``module``: its name under the layer, ``inner``:
    the Linears inside it), behind the layer's input norm; none when the layer has no norms or norms after its
    sublayers (an :class:`Opaque` has no place for those)."""
    def build(frame: LayerFrame) -> tuple[Any, ...] | None:
        if frame.norms is None or frame.norm("attention_out") is not None:
            return None
        pre = f"{frame.ctx.lm_prefix}.layers.{frame.index}."
        return (Opaque(replace(block, count=1), ATTENTION, frame.norm("attention_in"), name=pre + module, inner=inner),)
    return build
