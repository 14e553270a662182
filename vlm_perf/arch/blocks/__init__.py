"""Block kinds: the typed inventory a model family's description is made of (pure, no I/O), filed by kind.

A family (``vlm_perf.arch.families``) turns a config into a tuple of blocks; each block says which
trainable part it belongs to (``part``: one of :data:`vlm_perf.arch.parts.STAGES`), how many identical
copies the model has (``count``) and the shapes of its weights. Three things derive from the same
inventory:

* **parameters**: every block's :meth:`Block.params` (stored tensors of ONE copy, times ``count`` in
  :func:`inventory_params`);
* **FLOPs**: ``vlm_perf.flops.blocks`` registers one FLOPs function per block kind (a block kind without
  one is an error, not a silent 0), in a module of the same name as the kind's module here;
* **per-Linear layout** (what finer regimes and adapters walk, :func:`vlm_perf.arch.layout.layout`): each kind's
  ``@block_layout`` hook, in the kind's own module here (the vocabulary and registry are in ``laid``; a kind
  without a hook is laid out whole).

Modules, one per kind of block (not per family): ``base`` (the Block class and parameter arithmetic),
``stored`` (tables and norms: parameters, no matmul), ``wrappers`` (billing modifiers), ``vision``, ``conv``,
``projectors``, ``query_transformer``, ``hierarchical`` (DaViT stages), ``encoder_decoder`` (encoder-decoder LMs), ``attention``, ``mlp``, ``moe``, ``recurrent`` (linear attention, state space), ``heads``,
``residual_streams`` and ``audio``. A new family reuses kinds; a new kind goes in the module of its kind, with its
FLOPs function in the matching ``vlm_perf.flops.blocks`` module.

Parameter conventions (they match how released Hugging Face checkpoints store tensors): every weight,
bias and norm scale is counted; ``LayerNorm`` = weight + bias (2 x width), ``RMSNorm`` = weight only;
rotary embeddings have none; a tied ``lm_head`` is the embedding matrix, stored once (0 here).

Widths are in elements, counts in layers or modules. A block never reads a config dict: the family does.
"""

from __future__ import annotations

from .attention import (  # noqa: F401
    ChunkedDecoderAttention,
    CrossAttention,
    DecoderAttention,
    GatedDecoderAttention,
    ImageBlockAttention,
    MLAttention,
    PrefixLMSquare,
    SharedKVDecoderAttention,
    SinkDecoderAttention,
)
from .audio import (  # noqa: F401
    AudioConvFrontEnd,
    AudioEmbedder,
    AudioHead,
    AudioLayers,
    AudioMlpProjector,
    AudioProjection,
    ChunkedConformerLayers,
    ConformerFrontEnd,
    ConformerLayers,
    NemoConformerLayers,
    ParakeetSubsampling,
    SSCPFrontEnd,
    halve,
    sscp_out,
)
from .base import PARTS, Block, linear_params, norm_params  # noqa: F401
from .conv import DownsampleConv, SamNeck, StridedConvs, strided_side  # noqa: F401
from .encoder_decoder import DecoderLMHead, EncoderDecoderLayers  # noqa: F401
from .heads import LMHead, MTPModules  # noqa: F401
from .hierarchical import DaViTStage  # noqa: F401
from .inventory import inventory_params  # noqa: F401
from .mlp import CrossLayerMLP, DenseMLP, PlainMLP  # noqa: F401
from .moe import BiasedMoEMLP, ModalityMoEMLP, MoEMLP, PlainMoEMLP, SharedGateMoEMLP  # noqa: F401
from .projectors import (  # noqa: F401
    GatedMergerMLP,
    HybridAligner,
    LinearProjector,
    MlpProjector,
    NormLinearProjector,
    PooledTokenProjector,
    PooledVideoProjector,
    SeparatorProjector,
    SwiGLUProjector,
    TemporalResampler,
    TowerTokenLinear,
    WindowAttentionMerger,
)
from .query_transformer import QueryTransformer  # noqa: F401
from .recurrent import GatedDeltaNet, Mamba2Mixer  # noqa: F401
from .residual_streams import AltUpLayer, AltUpStreams, LaurelBlock, PerLayerInputGate  # noqa: F401
from .stored import (  # noqa: F401
    ClsToken,
    ExtraNorms,
    ExtraParams,
    FinalNorm,
    LMLayerNorms,
    PositionTable,
    StoredOnly,
    TokenEmbedding,
)
from .vision import (  # noqa: F401
    ImageVideoPatchEmbed,
    PatchEmbed,
    SamEmbed,
    SamVisionLayers,
    SiglipPoolingHead,
    TileMaskProduct,
    VisionLayers,
    VisualVocabularyHead,
)
from .wrappers import FoldedTokens, ForwardOnly, TextOnly  # noqa: F401

__all__ = ['AltUpLayer', 'AltUpStreams', 'AudioConvFrontEnd', 'AudioEmbedder', 'AudioHead', 'AudioLayers', 'AudioMlpProjector', 'AudioProjection', 'BiasedMoEMLP', 'Block', 'ChunkedConformerLayers', 'ChunkedDecoderAttention', 'ClsToken', 'ConformerFrontEnd', 'ConformerLayers', 'CrossAttention', 'CrossLayerMLP', 'DaViTStage', 'DecoderAttention', 'DecoderLMHead', 'DenseMLP', 'DownsampleConv', 'EncoderDecoderLayers', 'ExtraNorms', 'ExtraParams', 'FinalNorm', 'FoldedTokens', 'ForwardOnly', 'GatedDecoderAttention', 'GatedDeltaNet', 'GatedMergerMLP', 'HybridAligner', 'ImageBlockAttention', 'ImageVideoPatchEmbed', 'LMHead', 'LMLayerNorms', 'LaurelBlock', 'LinearProjector', 'MLAttention', 'MTPModules', 'Mamba2Mixer', 'MlpProjector', 'MoEMLP', 'ModalityMoEMLP', 'NemoConformerLayers', 'NormLinearProjector', 'PARTS', 'ParakeetSubsampling', 'PatchEmbed', 'PerLayerInputGate', 'PlainMLP', 'PlainMoEMLP', 'PooledTokenProjector', 'PooledVideoProjector', 'PositionTable', 'PrefixLMSquare', 'QueryTransformer', 'SSCPFrontEnd', 'SamEmbed', 'SamNeck', 'SamVisionLayers', 'SeparatorProjector', 'SharedGateMoEMLP', 'SharedKVDecoderAttention', 'SiglipPoolingHead', 'SinkDecoderAttention', 'StoredOnly', 'StridedConvs', 'SwiGLUProjector', 'TemporalResampler', 'TextOnly', 'TileMaskProduct', 'TokenEmbedding', 'TowerTokenLinear', 'VisionLayers', 'VisualVocabularyHead', 'WindowAttentionMerger', 'halve', 'inventory_params', 'linear_params', 'norm_params', 'sscp_out', 'strided_side']
