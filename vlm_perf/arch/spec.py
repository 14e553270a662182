"""Typed architecture description: vision tower, merger/projector, language model.

Everything here is a plain frozen dataclass of integers and flags, built from a Hugging Face ``config.json`` by
the model's family (`vlm_perf.arch.families`). The one description of what a model computes is its block
inventory (``ModelSpec.blocks``): parameters, exact FLOPs and the per-Linear layout of every regime derive from
it. The part specs here are summaries that other readers need: the media statistics (patch and merge sizes, CLS
tokens, temporal patches, window geometry), the named conventions (frameworks' own formulas), and families that
build an inventory from them. No FLOPs formula reads a raw config dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class VisionSpec:
    """A vision tower's summary, in the terms of the Qwen-VL towers (the first family described).

    Every VLM family fills one; what it means depends on the reader:

    * the **media statistics** and processors read the geometry (``patch_size``, ``temporal_patch_size``,
      ``spatial_merge_size``, ``cls_per_frame``, ``temporal_chunk``, the window side of Qwen2.5-VL's windowed
      layers) for every family;
    * the **named conventions** (`vlm_perf.flops.conventions`) read the widths and depth exactly as a framework
      that applies its Qwen formula to the family reads them (e.g. Megatron-Bridge on GLM-4.5V takes
      ``intermediate_size`` as the block MLP width although the real block is gated and wider); for a non-Qwen
      family these are the config's fields in Qwen terms, not necessarily the real module shapes;
    * the **inventory** holds the real shapes: parameters, exact FLOPs and the regime layout read the blocks, not
      these fields (the Qwen-VL family builds its blocks from this spec, `families.qwen_vl.vision_blocks`; the
      per-module helpers in `vlm_perf.arch.params` rebuild a tower from a VisionSpec only for those towers).

    The Qwen-only fields (``window_size`` and ``fullatt_block_indexes`` of Qwen2.5-VL, ``deepstack_visual_indexes``
    of Qwen3-VL) stay at their defaults in every other family; ``num_position_embeddings`` and ``patch_embed_bias``
    are filled by most families (the conventions read them). In the Qwen towers, attention sequences are per
    temporal slice (frame pair) of one image/video, as transformers builds ``cu_seqlens``; layers outside
    ``fullatt_block_indexes`` use windows when ``window_size`` is set.
    """

    family: str  # the tower's family ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "internvl", "gemma3", ...)
    depth: int
    hidden_size: int  # ViT width h_v (Qwen2-VL calls it embed_dim)
    num_heads: int
    head_dim: int
    intermediate_size: int  # ViT MLP width i_v
    mlp_gated: bool  # True: gate/up/down (3 matrices); False: fc1/fc2 (2 matrices)
    patch_size: int
    temporal_patch_size: int
    in_channels: int
    spatial_merge_size: int
    out_hidden_size: int  # merger output width d_out (the LM hidden size)
    window_size: int | None = None  # pixels (Qwen2.5-VL: 112)
    fullatt_block_indexes: tuple[int, ...] = ()
    deepstack_visual_indexes: tuple[int, ...] = ()  # as configured (one merger module stored per entry)
    num_position_embeddings: int = 0  # learned absolute table (Qwen3-VL); looked up, not a matmul
    patch_embed_bias: bool = False
    norm: str = "layernorm"  # "layernorm" | "rmsnorm"
    cls_per_frame: int = 0  # CLS tokens prepended to each tile/frame's tower sequence (InternViT: 1)
    # Kimi K2.5 (MoonViT3d): a grid row's frames form ONE attention sequence and are averaged into one frame's
    # merged tokens, in chunks of this many frames (the video processor's temporal_patch_size; 0 = not so)
    temporal_chunk: int = 0

    @property
    def attn_width(self) -> int:
        """q_v = heads x head_dim (equals hidden_size for all supported towers)."""
        return self.num_heads * self.head_dim

    @property
    def patch_volume(self) -> int:
        """Input values per patch: C x T_p x P_s^2 (the patch-embed GEMM's inner dimension)."""
        return self.in_channels * self.temporal_patch_size * self.patch_size**2

    @property
    def merge_unit(self) -> int:
        """Patches folded into one merged (LM) token: spatial_merge_size^2."""
        return self.spatial_merge_size**2

    @property
    def merger_width(self) -> int:
        """Merger input/hidden width m^2 * h_v."""
        return self.merge_unit * self.hidden_size

    @property
    def window_side_merged(self) -> int | None:
        """Window side in merged tokens (Qwen2.5-VL: 112 // 2 // 14 = 4), None without windows."""
        if not self.window_size:
            return None
        return self.window_size // self.spatial_merge_size // self.patch_size

    @property
    def full_attention_layers(self) -> tuple[int, ...]:
        """Distinct ``fullatt_block_indexes`` inside the tower: transformers tests ``layer_num in
        fullatt_block_indexes`` for each layer, so duplicates and indexes >= depth change nothing."""
        return tuple(sorted({i for i in self.fullatt_block_indexes if 0 <= i < self.depth}))

    @property
    def num_window_layers(self) -> int:
        return self.depth - len(self.full_attention_layers) if self.window_size else 0

    @property
    def num_full_layers(self) -> int:
        return self.depth - self.num_window_layers

    @property
    def num_deepstack(self) -> int:
        """Deepstack mergers that RUN: distinct indexes inside the tower (transformers calls
        ``deepstack_merger_list[indexes.index(layer)]`` only when ``layer in indexes``)."""
        return len({i for i in self.deepstack_visual_indexes if 0 <= i < self.depth})

    @property
    def num_deepstack_stored(self) -> int:
        """Deepstack merger modules stored: one per configured entry (``len(deepstack_visual_indexes)``)."""
        return len(self.deepstack_visual_indexes)



@dataclass(frozen=True)
class MLASpec:
    """DeepSeek multi-head latent attention widths."""

    q_lora_rank: int | None  # None: plain q_proj h -> H*(nope+rope)
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class MoESpec:
    """Routed experts (+ optional shared experts); every MoE layer has a linear router h -> E."""

    num_experts: int
    top_k: int
    expert_intermediate_size: int
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0  # width of ONE shared expert
    router_bias: bool = False  # DeepSeek-V3 e_score_correction_bias (E params, not a matmul)


@dataclass(frozen=True)
class LMSpec:
    """A decoder-only transformer LM with gated (SwiGLU) MLPs."""

    family: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width (unused when every layer is MoE)
    vocab_size: int
    tie_word_embeddings: bool
    moe: MoESpec | None = None
    moe_layers: tuple[int, ...] = ()  # indexes of layers whose MLP is MoE
    mla: MLASpec | None = None
    num_mtp_layers: int = 0  # DeepSeek-V3 num_nextn_predict_layers
    qkv_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None  # tokens a sliding-window layer attends (query included)
    sliding_layers: tuple[int, ...] = ()  # indexes of sliding-window layers (the rest are full causal)
    attention_chunk: int | None = None  # Llama 4: chunked layers attend causally within chunks of this many tokens

    @property
    def q_width(self) -> int:
        """Query projection width q = H x d (MLA: H x (nope + rope))."""
        if self.mla:
            return self.num_heads * self.mla.qk_head_dim
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of K (and of V) projections for GQA: G x d."""
        return self.num_kv_heads * self.head_dim

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - len(self.moe_layers)

    @property
    def num_moe_layers(self) -> int:
        return len(self.moe_layers)


@dataclass(frozen=True)
class AudioSpec:
    """An audio encoder (Qwen2.5-Omni / Qwen3-Omni thinkers' ``audio_config``): what the audio statistics
    (:mod:`vlm_perf.stats.audio`) read to turn mel lengths into encoder rows.

    ``frontend``: ``"conv1d"`` (Qwen2.5-Omni: Conv1d k3 then Conv1d k3 stride 2; tokens = frames halved once,
    attention per chunk, stride-2 average pool before the output head) or ``"conv2d"`` (Qwen3-Omni: three Conv2d
    stride 2; tokens = frames halved three times per chunk, attention in windows of ``n_window_infer`` frames).
    ``n_window``: chunks are ``2 * n_window`` mel frames.
    """

    family: str
    frontend: str
    num_mel_bins: int
    d_model: int
    num_layers: int
    num_heads: int
    ffn_dim: int
    output_dim: int
    n_window: int
    n_window_infer: int = 0  # conv2d: attention window in mel frames (a multiple of the chunk)
    downsample_hidden_size: int = 0  # conv2d channels
    # sscp (Gemma 3n): the two sub-sampling convs' (time, freq) kernels and strides, the output stride; n_window is
    # the attention chunk there
    sscp_kernels: tuple = ()
    sscp_strides: tuple = ()
    reduction: int = 1

    @property
    def chunk_frames(self) -> int:
        return 2 * self.n_window


@dataclass(frozen=True)
class ModelSpec:
    """A whole model: optional vision tower + merger, and a language model."""

    name: str
    model_type: str
    lm: LMSpec
    vision: VisionSpec | None = None
    source: str = ""  # where the config came from (preset name or path)
    extra: dict = field(default_factory=dict, compare=False, hash=False)
    family: str = ""  # the registered family (vlm_perf.arch.families) that built it
    blocks: tuple = ()  # the typed block inventory (vlm_perf.arch.blocks): params and FLOPs derive from it
    processor: dict = field(default_factory=dict, compare=False, hash=False)  # processor files' settings
    audio: AudioSpec | None = None  # an audio encoder (Omni thinkers), None otherwise

    @property
    def is_vlm(self) -> bool:
        return self.vision is not None
