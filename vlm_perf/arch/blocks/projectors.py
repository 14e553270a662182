"""Projectors / mergers between a tower and the LM, on ``vision_merged_tokens`` rows (MLP, gated, linear, SwiGLU,
window-merging and two-tower aligners).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ...errors import ConfigError
from ..parts import DEEPSTACK_MERGER, MERGER
from ..trainability import MLP, NORMS
from .base import Block, linear_params, norm_params
from .laid import Chain, LayoutContext, Lin, MlpSub, Params, Placed, block_layout, norm


@dataclass(frozen=True)
class MlpProjector(Block):
    """Norm -> Linear(in -> hidden) -> act -> Linear(hidden -> out) on ``vision_merged_tokens`` rows.

    Covers the Qwen patch merger (``in`` = m^2 h_v after the 2x2 fold; ``norm_width`` h_v pre-fold or
    m^2 h_v post-fold for deepstack mergers) and InternVL's pixel-shuffle MLP (LayerNorm(4d) -> Linear ->
    GELU -> Linear). The first GEMM's input is the tower output; the norm in front of it has weights,
    so a trainable projector needs that GEMM's input gradient even when the tower is frozen.
    ``component``: the FLOPs component it is reported under. ``cls_rows``: the tower's CLS positions are fed too
    (LLaVA ``vision_feature_select_strategy`` "full" on a CLIP tower): rows ``vision_merged_tokens +
    vision_cls_tokens``.
    """

    kind: ClassVar[str] = "mlp_projector"
    in_width: int
    hidden_width: int
    out_width: int
    norm_width: int
    norm: str = "layernorm"
    bias: bool = True
    component: str = "vision.merger"
    cls_rows: bool = False
    taps: tuple[int, ...] = ()  # deepstack mergers: the tower layer each copy reads, in order (per-Linear layout)

    @property
    def rows_stats(self) -> tuple[str, ...]:
        """The statistics whose sum is its row count."""
        return ("vision_merged_tokens", "vision_cls_tokens") if self.cls_rows else ("vision_merged_tokens",)

    def params(self) -> int:
        return (norm_params(self.norm_width, self.norm) + linear_params(self.in_width, self.hidden_width, self.bias)
                + linear_params(self.hidden_width, self.out_width, self.bias))

    def describe(self) -> str:
        name = "deepstack merger" if self.component == "vision.deepstack_merger" else "projector"
        return (f"{self.count} {name}: {self.norm}({self.norm_width}) -> {self.in_width} -> {self.hidden_width} "
                f"-> {self.out_width} on merged tokens")


@dataclass(frozen=True)
class GatedMergerMLP(Block):
    """GLM's ``visual.merger`` on ``vision_merged_tokens`` rows: Linear(d -> d) -> ``norm``(d) -> GELU ->
    gated MLP (gate/up d -> ``hidden_width``, down ``hidden_width`` -> d)."""

    kind: ClassVar[str] = "gated_merger_mlp"
    width: int
    hidden_width: int
    norm: str = "layernorm"
    bias: bool = False

    def params(self) -> int:
        d, f = self.width, self.hidden_width
        return (linear_params(d, d, self.bias) + norm_params(d, self.norm) + 2 * linear_params(d, f, self.bias)
                + linear_params(f, d, self.bias))

    def describe(self) -> str:
        return (f"merger: Linear {self.width} -> {self.width}, {self.norm}, GELU, gated MLP "
                f"{self.width} -> {self.hidden_width} -> {self.width} on merged tokens")


@dataclass(frozen=True)
class NormLinearProjector(Block):
    """Norm -> one Linear(in -> out) on ``vision_merged_tokens`` rows (Gemma 3: average pool 4x4 (no FLOPs)
    -> RMSNorm(h_v) -> ``matmul(x, mm_input_projection_weight)``, no bias). With a weighted norm in front,
    a trainable projector needs the GEMM's input gradient even when the tower is frozen."""

    kind: ClassVar[str] = "norm_linear_projector"
    in_width: int
    out_width: int
    norm_width: int
    norm: str = "rmsnorm"
    bias: bool = False
    component: str = "vision.merger"

    def params(self) -> int:
        return norm_params(self.norm_width, self.norm) + linear_params(self.in_width, self.out_width, self.bias)

    def describe(self) -> str:
        return (f"{self.count} projector: {self.norm}({self.norm_width}) -> Linear {self.in_width} -> "
                f"{self.out_width}{' (+bias)' if self.bias else ''} on pooled tokens")


@dataclass(frozen=True)
class LinearProjector(Block):
    """A projector that is a chain of Linears on ``vision_merged_tokens`` rows, with an optional norm over
    the tower output in front (``norm_width`` wide, before any fold).

    ``widths`` = (in, w_1, ..., out): Linear i maps widths[i] -> widths[i+1] with bias ``biases[i]``;
    activations, unfold and pixel shuffle between them are not matmuls. Mistral 3: RMSNorm(h_v) -> patch
    merger Linear(4 h_v -> h_v) -> Linear(h_v -> h_text) -> GELU -> Linear(h_text -> h_text); Idefics3 /
    SmolVLM: pixel shuffle -> Linear(h_v s^2 -> h_text) with no norm. With a weighted norm in front the
    first GEMM needs its input gradient whenever the projector trains; without one, only when the tower does.
    """

    kind: ClassVar[str] = "linear_projector"
    widths: tuple[int, ...]
    biases: tuple[bool, ...]
    norm_width: int = 0
    norm: str = "none"
    label: str = "projector"

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.widths) < 2 or len(self.biases) != len(self.widths) - 1:
            raise ValueError(f"LinearProjector: {len(self.widths)} widths need {len(self.widths) - 1} bias flags, "
                             f"got {len(self.biases)}")

    def linears(self) -> tuple[tuple[int, int, bool], ...]:
        """(in, out, bias) of each Linear, in order."""
        return tuple(zip(self.widths[:-1], self.widths[1:], self.biases))

    def params(self) -> int:
        return norm_params(self.norm_width, self.norm) + sum(linear_params(i, o, b) for i, o, b in self.linears())

    def describe(self) -> str:
        chain = " -> ".join(str(w) for w in self.widths)
        norm = f"{self.norm}({self.norm_width}) -> " if self.norm != "none" else ""
        return f"{self.count} {self.label}: {norm}Linear chain {chain} on merged tokens"


@dataclass(frozen=True)
class PooledVideoProjector(Block):
    """LLaVA-NeXT-Video's projector: ``module`` (the LLaVA 2-layer MLP) on every image row, but on video frames only
    after the ``vision_resampler`` (average / max pool, stride ``pool``: no FLOPs, no parameters), i.e. on
    1/pool^2 of each frame's rows. Parameters: the wrapped projector's."""

    kind: ClassVar[str] = "pooled_video_projector"
    module: Block
    pool: int

    def params(self) -> int:
        return self.module.count * self.module.params()

    def describe(self) -> str:
        return f"{self.module.describe()}; video frames pooled {self.pool}x{self.pool} first (rows / {self.pool ** 2})"


@dataclass(frozen=True)
class TowerTokenLinear(Block):
    """One Linear(``in_width`` -> ``out_width``) on every token the tower outputs: ``vision_patches`` +
    ``tokens_per_frame`` x ``vision_frames`` rows (Mllama: the CLS token of each of the T tiles of an image, whose
    grid is one frame of T stacked tiles, so ``tokens_per_frame`` = T). Its input is the tower output and nothing
    trainable sits before it in its stage: its input gradient is due only when the tower trains."""

    kind: ClassVar[str] = "tower_token_linear"
    in_width: int
    out_width: int
    bias: bool
    tokens_per_frame: int

    def params(self) -> int:
        return linear_params(self.in_width, self.out_width, self.bias)

    def describe(self) -> str:
        return (f"{self.count} projector: Linear {self.in_width} -> {self.out_width}{' (+bias)' if self.bias else ''} "
                f"on every tower output token (patches + {self.tokens_per_frame} CLS per image)")


@dataclass(frozen=True)
class SwiGLUProjector(Block):
    """Aya Vision / Command A Vision projector on ``vision_merged_tokens`` rows (after the pixel shuffle, no
    FLOPs): optional ``norm``(in) -> Linear(in -> ``hidden_width``, bias) -> split in halves, SiLU(gate) * x
    (elementwise) -> Linear(``hidden_width``/2 -> out, bias). With a weighted norm in front the first GEMM
    needs its input gradient whenever the projector trains; without one, only when the tower does."""

    kind: ClassVar[str] = "swiglu_projector"
    in_width: int
    hidden_width: int
    out_width: int
    norm: str = "layernorm"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.hidden_width % 2:
            raise ConfigError(f"SwiGLUProjector: hidden width {self.hidden_width} must be even (split in halves)")

    def params(self) -> int:
        return (norm_params(self.in_width, self.norm) + linear_params(self.in_width, self.hidden_width, True)
                + linear_params(self.hidden_width // 2, self.out_width, True))

    def describe(self) -> str:
        norm = f"{self.norm}({self.in_width}) -> " if self.norm != "none" else ""
        return (f"{self.count} projector: {norm}Linear {self.in_width} -> {self.hidden_width}, SwiGLU halves, "
                f"Linear {self.hidden_width // 2} -> {self.out_width} on pixel-shuffled tokens")


@dataclass(frozen=True)
class WindowAttentionMerger(Block):
    """A ViT layer that merges ``window`` x ``window`` patches into one token (MiniCPM-V 4.6's
    ``vit_merger``): LayerNorm(h) -> q/k/v/o Linear(h -> h, bias) with attention inside each window of
    window² patches (Σ_windows (window²)² = patches · window²) -> residual; then the window's patches
    concatenated (window²·h) -> LayerNorm -> Linear(window²·h -> window²·i) -> act -> Linear(window²·i -> h), plus
    the window's mean (not a matmul), on patches / window² rows."""

    kind: ClassVar[str] = "window_attention_merger"
    width: int
    num_heads: int
    head_dim: int
    mlp_width: int  # per patch: the MLP is window²·width -> window²·mlp_width -> width
    window: int

    @property
    def attn_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def unit(self) -> int:
        return self.window * self.window

    def params(self) -> int:
        h, q, u = self.width, self.attn_width, self.unit
        attn = linear_params(h, 3 * q, True) + linear_params(q, h, True)
        mlp = linear_params(u * h, u * self.mlp_width, True) + linear_params(u * self.mlp_width, h, True)
        return norm_params(h, "layernorm") + attn + norm_params(u * h, "layernorm") + mlp

    def describe(self) -> str:
        u = self.unit
        return (f"window-attention merger: {self.num_heads}x{self.head_dim} heads within {self.window}x{self.window} "
                f"windows, MLP {u * self.width} -> {u * self.mlp_width} -> {self.width} per window (1/{u} of the rows)")


@dataclass(frozen=True)
class HybridAligner(Block):
    """DeepSeek-VL-hybrid's aligner on ``vision_merged_tokens`` rows: Linear(low -> out/2) on the SigLIP tokens
    and Linear(high -> out/2) on the SAM tokens (both biased, each the first op after its tower), concatenated,
    GELU, Linear(out -> out, bias)."""

    kind: ClassVar[str] = "hybrid_aligner"
    low_width: int
    high_width: int
    out_width: int

    def params(self) -> int:
        half = self.out_width // 2
        return (linear_params(self.low_width, half, True) + linear_params(self.high_width, half, True)
                + linear_params(self.out_width, self.out_width, True))

    def describe(self) -> str:
        half = self.out_width // 2
        return (f"aligner: Linear {self.low_width} -> {half} (low-res) ‖ Linear {self.high_width} -> {half} "
                f"(high-res), GELU, Linear {self.out_width} -> {self.out_width}")


@dataclass(frozen=True)
class SeparatorProjector(LinearProjector):
    """Phi-4-multimodal's image projection (``img_projection_up`` -> GELU -> ``img_projection_down``) on every
    LM image placeholder, whose input rows include learned separators (``sub_img_feature_extensor`` after each
    row of crop tokens, ``global_img_feature_extensor`` between the crops and the global view: ``separators``
    vectors of ``widths[0]`` parameters, part of the projector). Those parameters sit in front of the first
    Linear, so a trainable projector needs that GEMM's input gradient even with a frozen tower."""

    kind: ClassVar[str] = "separator_projector"
    separators: int = 2

    def params(self) -> int:
        return super().params() + self.separators * self.widths[0]

    def describe(self) -> str:
        chain = " -> ".join(str(w) for w in self.widths)
        return (f"{self.count} {self.label}: Linear chain {chain} on every image placeholder (learned row / "
                f"global separators: {self.separators} x {self.widths[0]})")


@dataclass(frozen=True)
class TemporalResampler(Block):
    """ERNIE-4.5-VL's ``Ernie4_5_VLMoeVariableResolutionResamplerModel``: the m x m fold of the tower output
    (D = m²·h_v wide), ``spatial_linear`` Linear(D -> D) -> GELU -> Linear(D -> D) -> LayerNorm on every folded token,
    then frames paired (an image's one frame with itself, a video's even frames with its odd ones: 2D wide),
    ``temporal_linear`` Linear(2D -> D) -> GELU -> Linear(D -> D) -> LayerNorm, ``mlp`` Linear(D -> h_text) and an
    RMSNorm on every pair (the LM's visual tokens). All Linears with bias."""

    kind: ClassVar[str] = "temporal_resampler"
    in_width: int  # the tower width h_v
    merge: int
    out_width: int

    @property
    def folded(self) -> int:
        return self.in_width * self.merge * self.merge

    def params(self) -> int:
        d, o = self.folded, self.out_width
        spatial = 2 * linear_params(d, d, True) + norm_params(d, "layernorm")
        temporal = linear_params(2 * d, d, True) + linear_params(d, d, True) + norm_params(d, "layernorm")
        return spatial + temporal + linear_params(d, o, True) + norm_params(o, "rmsnorm")

    def describe(self) -> str:
        d = self.folded
        return (f"temporal resampler: {self.merge}x{self.merge} fold -> Linear {d} -> {d} -> {d} + LayerNorm per folded "
                f"token; frame pairs -> Linear {2 * d} -> {d} -> {d} + LayerNorm -> Linear {d} -> {self.out_width} + "
                "RMSNorm per pair")


@dataclass(frozen=True)
class PooledTokenProjector(Block):
    """Florence-2's ``multi_modal_projector``: learned 2D positions added to the tower's s x s output (row and
    column tables of ``position_entries`` entries, w//2 and w - w//2 wide, concatenated), a fixed cosine temporal
    embedding (a buffer), then per image the spatial mean as one extra token in front of its s² tokens (means are not
    matmuls), Linear(``in_width`` -> ``out_width``, no bias) and LayerNorm(``out_width``) on those s² + 1 rows:
    ``vision_merged_tokens`` + ``vision_frames`` rows. The learned positions in front of the GEMM make its input
    gradient due whenever the projector trains."""

    kind: ClassVar[str] = "pooled_token_projector"
    in_width: int
    out_width: int
    position_entries: int

    def params(self) -> int:
        return (linear_params(self.in_width, self.out_width, False) + norm_params(self.out_width, "layernorm")
                + self.position_entries * self.in_width)

    def describe(self) -> str:
        return (f"{self.count} projector: learned 2D positions ({self.position_entries} rows / columns), mean-pooled "
                f"token + every position -> Linear {self.in_width} -> {self.out_width} -> LayerNorm")


# --------------------------------------------------------------------------- per-Linear layout (vlm_perf.arch.layout)
# Without the family's module names only the plain kinds (MLP, norm + Linear) are laid out, with generic names.
_ROWS = ("vision_merged_tokens",)


@block_layout(MlpProjector, stages=(MERGER, DEEPSTACK_MERGER))
def _mlp_projector_layout(b: MlpProjector, ctx: LayoutContext) -> Placed | None:
    chains = _mlp_chains(b, ctx)
    if chains is None or (ctx.stage == DEEPSTACK_MERGER and len(b.taps) != b.count):
        return None
    return Placed(head=chains, taps=b.taps if ctx.stage == DEEPSTACK_MERGER else ())


def _mlp_chains(b: MlpProjector, ctx: LayoutContext, pool: int = 1) -> tuple[Any, ...] | None:
    """One chain (norm, fc1, fc2) per copy: deepstack merger k under the family's ``deepstack`` prefix, the main
    projector under its ``merger_linears`` (two needed; a norm needs its name)."""
    names, chains = ctx.names, []
    for k in range(b.count):
        if ctx.stage == DEEPSTACK_MERGER:
            pre = names.deepstack.format(k=k) + "." if names and names.deepstack else f"<deepstack>.{k}."
            norm_name = pre + (names.deepstack_norm if names else "norm")
            lin_names = tuple(pre + n for n in (names.deepstack_linears if names else ("fc1", "fc2")))
        elif names:
            if len(names.merger_linears) != 2 or (b.norm != "none" and not names.merger_norm):
                return None
            norm_name, lin_names = names.merger_norm, names.merger_linears
        else:
            norm_name, lin_names = "<merger>.norm", ("<merger>.fc1", "<merger>.fc2")
        rows = b.rows_stats
        chains.append(Chain(norm(norm_name, b.norm_width, b.norm) if b.norm != "none" else None,
                            (Lin(lin_names[0], MLP, rows, b.in_width, b.hidden_width, b.component, b.bias, pool=pool),
                             Lin(lin_names[1], MLP, rows, b.hidden_width, b.out_width, b.component, b.bias,
                                 pool=pool))))
    return tuple(chains)


@block_layout(PooledVideoProjector, stages=(MERGER,))
def _pooled_video_projector_layout(b: PooledVideoProjector, ctx: LayoutContext) -> Placed | None:
    """The wrapped MLP, on video rows pooled ``pool`` x ``pool`` (LLaVA-NeXT-Video; named families)."""
    if b.count != 1 or not ctx.names or type(b.module) is not MlpProjector or b.module.count != 1:
        return None
    chains = _mlp_chains(b.module, ctx, b.pool)
    return None if chains is None else Placed(head=chains)


@block_layout(NormLinearProjector, stages=(MERGER,))
def _norm_linear_projector_layout(b: NormLinearProjector, ctx: LayoutContext) -> Placed | None:
    """Gemma 3's projector: a bare weight matmul (``merger_adaptable`` False: PEFT cannot wrap it)."""
    names = ctx.names
    if b.count != 1 or (names and not names.merger_linears):
        return None
    lin_name = names.merger_linears[0] if names else "<merger>.linear"
    return Placed(head=(Chain(norm(names.merger_norm if names else "<merger>.norm", b.norm_width, b.norm)
                              if b.norm != "none" else None,
                              (Lin(lin_name, MLP, _ROWS, b.in_width, b.out_width, b.component, b.bias,
                                   adaptable=bool(names and names.merger_adaptable)),)),))


@block_layout(LinearProjector, stages=(MERGER,))
def _linear_projector_layout(b: LinearProjector, ctx: LayoutContext) -> Placed | None:
    """Mistral 3 / Idefics3: a chain of Linears, one name each (named families)."""
    names = ctx.names
    if b.count != 1 or not names or len(names.merger_linears) != len(b.linears()):
        return None
    if b.norm != "none" and not names.merger_norm:
        return None
    return Placed(head=(Chain(norm(names.merger_norm, b.norm_width, b.norm) if b.norm != "none" else None,
                              tuple(Lin(n, MLP, _ROWS, i, o, "vision.merger", bias)
                                    for n, (i, o, bias) in zip(names.merger_linears, b.linears()))),))


@block_layout(GatedMergerMLP, stages=(MERGER,))
def _gated_merger_layout(b: GatedMergerMLP, ctx: LayoutContext) -> Placed | None:
    """GLM's merger: ``proj`` (d -> d), then its post-projection norm and a gated MLP (named families)."""
    names = ctx.names
    if b.count != 1 or not names or not names.merger_mlp[0] or len(names.merger_linears) != 1:
        return None
    d, f = b.width, b.hidden_width
    norm_name, gate, up, down = names.merger_mlp
    return Placed(head=(Lin(names.merger_linears[0], MLP, _ROWS, d, d, "vision.merger", b.bias),
                        MlpSub(Params(norm_name, NORMS), (Lin(gate, MLP, _ROWS, d, f, "vision.merger", b.bias),
                                                          Lin(up, MLP, _ROWS, d, f, "vision.merger", b.bias)),
                               Lin(down, MLP, _ROWS, f, d, "vision.merger", b.bias))))
