"""Mixture-of-experts MLPs: router, top-k routed experts, shared experts (gated or not), biased routers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ..parts import LANGUAGE_MODEL
from ..trainability import MLP
from .base import Block, linear_params
from .laid import LayerFrame, LayoutContext, Lin, MlpSub, Opaque, Placed, block_layout


@dataclass(frozen=True)
class MoEMLP(Block):
    """``count`` MoE MLPs: router h -> E (+ DeepSeek correction bias), top-k routed experts of width F_e,
    ``num_shared`` shared experts of width F_sh (all gated, no bias)."""

    kind: ClassVar[str] = "moe_mlp"
    hidden: int
    num_experts: int
    top_k: int
    expert_width: int
    num_shared: int = 0
    shared_width: int = 0
    router_bias: bool = False

    def per_token(self) -> dict[str, int]:
        h = self.hidden
        return {"routed": 2 * 3 * h * self.expert_width * self.top_k,
                "shared": 2 * 3 * h * self.shared_width * self.num_shared,
                "router": 2 * h * self.num_experts}

    def params(self) -> int:
        h = self.hidden
        routed = self.num_experts * 3 * h * self.expert_width
        shared = self.num_shared * 3 * h * self.shared_width
        router = self.num_experts * h + (self.num_experts if self.router_bias else 0)
        return routed + shared + router

    def active_params(self) -> int:
        """What one token touches: top-k routed + shared experts + router."""
        h = self.hidden
        router = self.num_experts * h + (self.num_experts if self.router_bias else 0)
        return self.top_k * 3 * h * self.expert_width + self.num_shared * 3 * h * self.shared_width + router

    def weight_shapes(self) -> dict[str, tuple[int, int, int]]:
        """(stacks, n_out, n_in) of the weights PEFT ``target_parameters`` can wrap, by role: the fused expert
        stacks ``gate_up`` (E, 2F, h) and ``down`` (E, h, F), and the ``router`` weight (E, h)."""
        h, f, e = self.hidden, self.expert_width, self.num_experts
        return {"gate_up": (e, 2 * f, h), "down": (e, h, f), "router": (1, e, h)}

    def describe(self) -> str:
        shared = f" + {self.num_shared} shared ({self.shared_width})" if self.num_shared else ""
        return (f"{self.count} MoE MLP: {self.num_experts} experts top-{self.top_k} of width {self.expert_width}"
                f"{shared}, router {self.hidden} -> {self.num_experts}")


@dataclass(frozen=True)
class SharedGateMoEMLP(MoEMLP):
    """MoE MLP whose shared expert output is scaled by ``sigmoid(shared_expert_gate(x))``, a Linear(h -> 1)
    (Qwen2-MoE / Qwen3.5-MoE); the gate is counted with the shared experts."""

    kind: ClassVar[str] = "shared_gate_moe_mlp"

    def per_token(self) -> dict[str, int]:
        out = super().per_token()
        out["shared"] += 2 * self.hidden * self.num_shared
        return out

    def params(self) -> int:
        return super().params() + self.num_shared * self.hidden

    def active_params(self) -> int:
        return super().active_params() + self.num_shared * self.hidden

    def describe(self) -> str:
        return super().describe() + ", sigmoid shared-expert gate h -> 1"


@dataclass(frozen=True)
class BiasedMoEMLP(MoEMLP):
    """gpt-oss MoE MLP: a biased router h -> E (top-k, softmax over the k chosen logits) and E experts whose
    fused gate/up projection (h -> 2·F) and down projection (F -> h) carry biases; the clamped SwiGLU is
    elementwise. FLOPs are :class:`MoEMLP`'s (biases add no matmul)."""

    kind: ClassVar[str] = "biased_moe_mlp"

    def _expert_bias(self) -> int:
        return 2 * self.expert_width + self.hidden

    def params(self) -> int:
        return super().params() + self.num_experts * self._expert_bias()

    def active_params(self) -> int:
        return super().active_params() + self.top_k * self._expert_bias()

    def describe(self) -> str:
        return super().describe() + " (biased experts and router)"


@dataclass(frozen=True)
class PlainMoEMLP(Block):
    """``count`` Nemotron-H MoE layers (transformers ``NemotronHMoE``): router h -> E (no bias; the sigmoid /
    group-limited top-k and the correction-bias buffer are not matmuls), optional latent projections
    h -> L -> ... -> h around the experts (``latent`` 0: none), E **non-gated** experts in -> F -> in (up/down, no
    bias, relu²; in = L or h) of which top-k run per token, and ONE non-gated shared MLP h -> F_sh -> h
    (``bias``: the latent projections' and the shared MLP's biases, ``mlp_bias``)."""

    kind: ClassVar[str] = "plain_moe_mlp"
    hidden: int
    num_experts: int
    top_k: int
    expert_width: int
    shared_width: int
    latent: int = 0
    bias: bool = False

    @property
    def expert_in(self) -> int:
        return self.latent or self.hidden

    def per_token(self) -> dict[str, int]:
        h, latent = self.hidden, 2 * 2 * self.hidden * self.latent
        return {"routed": 2 * 2 * self.expert_in * self.expert_width * self.top_k + latent,
                "shared": 2 * 2 * h * self.shared_width, "router": 2 * h * self.num_experts}

    def _dense(self) -> int:
        h = self.hidden
        latent = linear_params(h, self.latent, self.bias) + linear_params(self.latent, h, self.bias) \
            if self.latent else 0
        shared = linear_params(h, self.shared_width, self.bias) + linear_params(self.shared_width, h, self.bias)
        return latent + shared + self.num_experts * h

    def params(self) -> int:
        return self.num_experts * 2 * self.expert_in * self.expert_width + self._dense()

    def active_params(self) -> int:
        """What one token touches: top-k routed experts + latent projections + shared MLP + router."""
        return self.top_k * 2 * self.expert_in * self.expert_width + self._dense()

    def describe(self) -> str:
        latent = f", latent {self.latent}" if self.latent else ""
        return (f"{self.count} MoE MLP: {self.num_experts} plain experts top-{self.top_k} of width "
                f"{self.expert_width}{latent} + 1 shared ({self.shared_width}), router {self.hidden} -> "
                f"{self.num_experts}")


@dataclass(frozen=True)
class ModalityMoEMLP(MoEMLP):
    """ERNIE-4.5-VL's modality-isolated MoE MLP (``Ernie4_5_VLMoeMoeBlock``): one shared gated MLP of width
    ``shared_width`` (= n_shared x F_text: ``num_shared`` is 1) on every LM token; the text pool (router h -> E with
    a per-expert correction bias, E experts of width ``expert_width``, top-k) on text tokens; the vision pool (its
    own router and bias, E experts of width ``vision_width``, top-k) on vision tokens: the visual placeholders plus
    ``markers_per_item`` start / end tokens per image or video (the processor's ``moe_mm_token_type_ids``).
    ``per_token`` / ``active_params`` are a TEXT token's (what a rule of thumb over active parameters reads)."""

    kind: ClassVar[str] = "modality_moe_mlp"
    vision_width: int = 0
    markers_per_item: int = 2

    def params(self) -> int:
        h, e = self.hidden, self.num_experts
        return super().params() + e * h + (e if self.router_bias else 0) + e * 3 * h * self.vision_width

    def describe(self) -> str:
        return (f"{self.count} modality-isolated MoE MLP: text {self.num_experts} experts top-{self.top_k} of width "
                f"{self.expert_width}, vision {self.num_experts} experts top-{self.top_k} of width {self.vision_width}, "
                f"each with its router {self.hidden} -> {self.num_experts}; shared MLP {self.shared_width} on every "
                "token")


# --------------------------------------------------------------------------- per-Linear layout (vlm_perf.arch.layout)
# transformers 5's fused MoE (Qwen3-VL-MoE, GLM-4.xV-MoE, Qwen3.5-MoE): experts.gate_up_proj (E, 2F, h),
# experts.down_proj (E, h, F), the router's gate.weight (E, h); gpt-oss: experts (E, h, 2F) / (E, F, h) and
# router.weight (E, h)
_FUSED = (("experts.gate_up_proj", "gate_up"), ("experts.down_proj", "down"))
_WRAPPABLE = {MoEMLP: _FUSED + (("gate.weight", "router"),), SharedGateMoEMLP: _FUSED + (("gate.weight", "router"),),
              BiasedMoEMLP: _FUSED + (("router.weight", "router"),)}


@block_layout(MoEMLP, SharedGateMoEMLP, BiasedMoEMLP, stages=(LANGUAGE_MODEL,))
def _moe_layout(m: MoEMLP, ctx: LayoutContext) -> Placed | None:
    """In the MoE layers, laid out whole under ``mlp`` (its wrappable parameters and its inner modules named
    where the module names are known), its shared expert per Linear where transformers builds one."""
    moe = set(ctx.spec.lm.moe_layers)
    layers = tuple(i for i in range(ctx.num_layers) if i in moe)
    if len(layers) != m.count:
        return None
    return Placed(slot="mlp", layers=layers, build=lambda frame: _moe_sub(m, frame))


def _moe_sub(m: MoEMLP, frame: LayerFrame) -> tuple[Any, ...] | None:
    if frame.norms is None or frame.norm("attention_out") is not None:
        return None  # an Opaque has no place for norms after its sublayers
    pre = f"{frame.ctx.lm_prefix}.layers.{frame.index}.mlp"
    known = frame.ctx.known
    shared = _moe_shared(pre + ".", m) if known else ()
    return (Opaque(replace(m, count=1), MLP, frame.norm("mlp_in"), name=pre, inner=_moe_inner(m, shared),
                   params=_WRAPPABLE[type(m)] if known else (), shared=shared),)


def _moe_shared(prefix: str, m: MoEMLP) -> tuple[Any, ...]:
    """The shared expert of an MoE MLP laid out per Linear, where transformers 5 builds it as one gated MLP module
    reading the block input: ``shared_experts`` of width n_shared x F_sh (GLM-4.xV-MoE ``Glm4vMoeTextMoE``,
    DeepSeek-V3 ``DeepseekV3MoE``), or Qwen3.5-MoE's ``shared_expert`` (one, of width F_sh) plus its
    ``shared_expert_gate`` Linear(h -> 1) whose sigmoid scales it (``Qwen3_5MoeSparseMoeBlock``); the sum with the
    routed experts and the gate's product are elementwise. () where the kind has no such layout."""
    n = m.num_shared
    if not n or type(m) not in (MoEMLP, SharedGateMoEMLP):
        return ()
    gated = isinstance(m, SharedGateMoEMLP)
    if gated and n != 1:
        return ()
    h, w, rows = m.hidden, n * m.shared_width, ("lm_tokens",)
    pre = prefix + ("shared_expert." if gated else "shared_experts.")
    sub = MlpSub(None, (Lin(pre + "gate_proj", MLP, rows, h, w, "lm.shared_experts"),
                        Lin(pre + "up_proj", MLP, rows, h, w, "lm.shared_experts")),
                 Lin(pre + "down_proj", MLP, rows, w, h, "lm.shared_experts"))
    if gated:
        return (sub, Lin(prefix + "shared_expert_gate", MLP, rows, h, 1, "lm.shared_experts"))
    return (sub,)


def _moe_inner(m: MoEMLP, laid: tuple[Any, ...] = ()) -> tuple[str, ...]:
    """The Linears of an MoE MLP not laid out in ``laid`` (shared experts, gpt-oss's Linear router); the routed
    experts are fused 3-D parameters (``experts.gate_up_proj`` / ``experts.down_proj``), not modules."""
    inner: tuple[str, ...] = ()
    if m.num_shared and not laid:
        shared = "shared_expert" if isinstance(m, SharedGateMoEMLP) else "shared_experts"
        inner += tuple(f"{shared}.{x}" for x in ("gate_proj", "up_proj", "down_proj"))
        if isinstance(m, SharedGateMoEMLP):
            inner += ("shared_expert_gate",)
    if isinstance(m, BiasedMoEMLP):
        inner += ("router",)
    return inner + ("gate", "experts")
