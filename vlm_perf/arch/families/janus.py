"""Janus / Janus-Pro, understanding path (transformers ``janus``: ``JanusForConditionalGeneration``).

Read from transformers ``models/janus/modeling_janus.py``, ``configuration_janus.py``, ``processing_janus.py``
and ``image_processing_pil_janus.py``. ``JanusModel.forward`` on image + text input (what training on
understanding data runs) is: ``vision_model`` -> ``aligner`` -> placeholders -> Llama ``language_model`` ->
``lm_head``. That is what is counted:

* **Tower** (``JanusVisionModel``): a SigLIP-shaped ViT: Conv2d patch embed (bias), learned position table
  (``num_patches`` entries), ``num_hidden_layers`` pre-norm layers with q/k/v (bias = ``attention_bias``),
  ``projection_layer`` (bias), MLP fc1/fc2 of hidden x ``mlp_ratio`` (bias), ``post_layernorm``; no pooling
  head (its "pooled" output is a LayerNorm of token 0: not a matmul). ``use_qk_norm`` True is refused
  (transformers applies LayerNorm(hidden) over head_dim and fails with more than one head).
* **Aligner** (``JanusVisionAlignerMLP``): Linear(hidden -> ``projection_dim``) then ``depth`` - 1 x (GELU,
  Linear(projection_dim -> projection_dim)), every bias on, on every patch token; ``projection_dim`` must be the
  LM hidden size.
* **LM**: Llama decoder, ``lm_head`` tied by default.

**Not counted (stored only)**: the image-generation path, which a forward on understanding data never runs:
the VQ-VAE (``vqmodel``: encoder, codebook, quant convs, decoder), ``generation_embeddings``,
``generation_aligner`` and ``generation_head``. Their parameters are counted (every total equals transformers'
model) in the ``vision_tower`` part, their FLOPs are 0. Training on image GENERATION data (VQ-encode the target
image, generation aligner on image tokens, generation head instead of lm_head) is not modelled: this family's
numbers describe understanding (image -> text) batches only.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import ExtraParams, LinearProjector, PatchEmbed, PositionTable, StoredOnly, TokenEmbedding, VisionLayers
from ..fields import Fields
from ..parts import MERGER, VISION_TOWER
from ..spec import ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import lm_blocks
from .deepseek_vl import DeepseekVLMedia, read_llama_text

# JanusVisionConfig / JanusVQVAEConfig class defaults (transformers 5.x configuration_janus.py)
VISION_DEFAULTS = {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "num_channels": 3,
                   "image_size": 384, "patch_size": 16, "mlp_ratio": 4.0, "attention_bias": True,
                   "projection_dim": 2048, "use_qk_norm": False, "depth": 2}
VQ_DEFAULTS = {"embed_dim": 8, "num_embeddings": 16384, "double_latent": False, "latent_channels": 256,
               "in_channels": 3, "base_channels": 128, "channel_multiplier": (1, 1, 2, 2, 4), "num_res_blocks": 2,
               "out_channels": 3, "projection_dim": 2048, "num_hidden_layers": 2, "image_token_embed_dim": 2048}


def _conv(c_in: int, c_out: int, k: int) -> int:
    return c_in * c_out * k * k + c_out  # every VQ-VAE conv has a bias


def _resnet(c_in: int, c_out: int) -> int:
    """JanusVQVAEResnetBlock: GroupNorm, conv 3x3, GroupNorm, conv 3x3 (+ 1x1 shortcut when widths differ)."""
    return 2 * c_in + _conv(c_in, c_out, 3) + 2 * c_out + _conv(c_out, c_out, 3) + (
        _conv(c_in, c_out, 1) if c_in != c_out else 0)


def _attn(c: int) -> int:
    """JanusVQVAEAttnBlock: GroupNorm + q, k, v, proj_out 1x1 convs."""
    return 2 * c + 4 * _conv(c, c, 1)


def vq_params(vq: Mapping[str, Any], source: str = "config") -> dict[str, int]:
    """Stored parameters of the generation path, by module (``JanusVQVAE`` and the generation embedding /
    aligner / head), from the ``vq_config`` fields as ``JanusVQVAEEncoder`` / ``Decoder`` build them (plus the
    codebook's ``num_embeddings`` and ``embed_dim``)."""
    g = {**VQ_DEFAULTS, **{k: v for k, v in vq.items() if v is not None}}
    for key, value in g.items():
        if key in ("double_latent", "channel_multiplier"):
            continue
        if key in VQ_DEFAULTS and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise ConfigError(f"{source}: field vq_config.{key} must be a positive integer, got {value!r}")
    mults = g["channel_multiplier"]
    if (not isinstance(mults, (list, tuple)) or not mults
            or any(isinstance(m, bool) or not isinstance(m, int) or m <= 0 for m in mults)):
        raise ConfigError(f"{source}: field vq_config.channel_multiplier must be a non-empty list of positive integers, got "
                          f"{mults!r}")
    base, mult, blocks = int(g["base_channels"]), [int(m) for m in g["channel_multiplier"]], int(g["num_res_blocks"])
    latent, embed, codes = int(g["latent_channels"]), int(g["embed_dim"]), int(g["num_embeddings"])
    n = len(mult)
    enc = _conv(int(g["in_channels"]), base, 3)
    in_mult = [1] + mult
    block_in = base
    for i in range(n):
        block_in, block_out = base * in_mult[i], base * mult[i]
        for _ in range(blocks):
            enc += _resnet(block_in, block_out)
            block_in = block_out
            if i == n - 1:
                enc += _attn(block_in)
        if i != n - 1:
            enc += _conv(block_in, block_in, 3)
    enc += 2 * _resnet(block_in, block_in) + _attn(block_in) + 2 * block_in
    enc += _conv(block_in, 2 * latent if g["double_latent"] else latent, 3)
    block_in = base * mult[-1]
    dec = _conv(latent, block_in, 3) + 2 * _resnet(block_in, block_in) + _attn(block_in)
    for i in reversed(range(n)):
        block_out = base * mult[i]
        for _ in range(blocks + 1):
            dec += _resnet(block_in, block_out)
            block_in = block_out
            if i == n - 1:
                dec += _attn(block_in)
        if i != 0:
            dec += _conv(block_in, block_in, 3)
    dec += 2 * block_in + _conv(block_in, int(g["out_channels"]), 3)
    proj, layers = int(g["projection_dim"]), int(g["num_hidden_layers"])
    return {"num_embeddings": codes, "embed_dim": embed, "vq_encoder_decoder": enc + dec + _conv(latent, embed, 1) + _conv(embed, latent, 1),
            "codebook": codes * embed, "generation_embeddings": codes * embed,
            "generation_aligner": embed * proj + proj + (layers - 1) * (proj * proj + proj),
            "generation_head": int(g["image_token_embed_dim"]) * proj + proj + proj * codes + codes}


def _positive(f: Fields, key: str) -> int:
    value = f.opt(key, VISION_DEFAULTS[key])
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{f.source}: field {f.name_of(key)} must be a positive integer, got {value!r}")
    return value


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    lm = read_llama_text(config, source, "janus")
    vc = config.get("vision_config")
    if not isinstance(vc, dict):
        raise ConfigError(f"{source}: janus config lacks required field vision_config")
    f = Fields(vc, "vision_config", source)
    width, heads, depth = _positive(f, "hidden_size"), _positive(f, "num_attention_heads"), _positive(f, "num_hidden_layers")
    if width % heads:
        raise ConfigError(f"{source}: vision_config.hidden_size {width} is not divisible by num_attention_heads {heads}")
    if f.opt("use_qk_norm", False):
        raise UnsupportedModelError(f"{source}: vision_config.use_qk_norm true: transformers' JanusVisionAttention "
                                    "applies LayerNorm(hidden_size) over head_dim, which fails; not modelled")
    image, patch, channels = _positive(f, "image_size"), _positive(f, "patch_size"), _positive(f, "num_channels")
    side = image // patch
    if side == 0:
        raise ConfigError(f"{source}: vision_config.image_size {image} is smaller than patch_size {patch}")
    mlp = int(width * float(f.opt("mlp_ratio", VISION_DEFAULTS["mlp_ratio"])))
    proj, aligner_depth = _positive(f, "projection_dim"), _positive(f, "depth")
    if proj != lm.hidden_size:
        raise ConfigError(f"{source}: vision_config.projection_dim {proj} differs from text_config.hidden_size "
                          f"{lm.hidden_size} (the aligner's output replaces LM token embeddings)")
    vq = config.get("vq_config") or {}
    if not isinstance(vq, dict):
        raise ConfigError(f"{source}: janus vq_config must be a mapping, got {type(vq).__name__}")
    stored = vq_params(vq, source)
    vision = VisionSpec(family="janus", depth=depth, hidden_size=width, num_heads=heads, head_dim=width // heads,
                        intermediate_size=mlp, mlp_gated=False, patch_size=patch, temporal_patch_size=1,
                        in_channels=channels, spatial_merge_size=1, out_hidden_size=lm.hidden_size,
                        num_position_embeddings=side * side, patch_embed_bias=True, norm="layernorm")
    tower = (PatchEmbed(part=VISION_TOWER, count=1, in_volume=channels * patch * patch, width=width, bias=True),
             PositionTable(part=VISION_TOWER, count=1, entries=side * side, width=width),
             VisionLayers(part=VISION_TOWER, count=depth, width=width, num_heads=heads, head_dim=width // heads,
                          mlp_width=mlp, mlp_gated=False, attention="frame", cls=False,
                          qkv_bias=bool(f.opt("attention_bias", True)), proj_bias=True, mlp_bias=True,
                          norm="layernorm"),
             ExtraParams(part=VISION_TOWER, count=1, label="post LayerNorm", numel=2 * width))
    codes, embed = stored["num_embeddings"], stored["embed_dim"]
    generation = (  # stored, never run on understanding data: parameters only
        StoredOnly(part=VISION_TOWER, count=1, module=ExtraParams(
            part=VISION_TOWER, count=1, label="VQ-VAE encoder, decoder and quant convs (image generation)",
            numel=stored["vq_encoder_decoder"])),
        TokenEmbedding(part=VISION_TOWER, count=2, vocab=codes, width=embed),  # VQ codebook, generation_embeddings
        StoredOnly(part=VISION_TOWER, count=1, module=ExtraParams(
            part=VISION_TOWER, count=1, label="generation_aligner + generation_head (image generation)",
            numel=stored["generation_aligner"] + stored["generation_head"])))
    aligner = LinearProjector(part=MERGER, count=1, widths=(width,) + (proj,) * aligner_depth,
                              biases=(True,) * aligner_depth, label="aligner")
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "janus"), model_type="janus", lm=lm,
                     vision=vision, source=source, family="janus", blocks=tower + generation + (aligner,)
                     + lm_blocks(lm))
    spec.extra.update(image_size=image, fixed_grid_side=side)
    return spec


class JanusMedia(DeepseekVLMedia):
    """Janus: DeepSeek-VL's rule (:class:`.deepseek_vl.DeepseekVLMedia`): every image resized (longest side to
    ``size``, 384) and padded to a square, a fixed cost per image; LM placeholders = ``num_image_tokens`` of
    processor_config.json (576), which must equal the tower's patches (the ``<begin_of_image>`` /
    ``<end_of_image>`` markers around them are text). No video input."""

    family = "janus"

    def video(self, spec, frames: int, height: int, width: int):
        raise UnsupportedModelError(f"{spec.name}: Janus has no video input")


register_family(Family(
    name="janus", model_types=("janus",), build=build, hf_class="JanusForConditionalGeneration", is_vlm=True,
    media=JanusMedia(),
    notes=("understanding path only: SigLIP-shaped tower + aligner + Llama LM; resize and square padding are not "
           "matmuls",
           "the image-generation modules (VQ-VAE, generation embeddings / aligner / head) are stored but never run on "
           "understanding data: their parameters count (in vision_tower), their FLOPs are 0; generation training "
           "is not modelled",
           "no preset: the deepseek-community Janus(-Pro) config.json files (DeepSeek-LLM LM dims) could not be read "
           "and verified offline")))
