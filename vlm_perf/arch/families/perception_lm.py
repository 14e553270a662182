"""PerceptionLM (transformers ``perception_lm``: ``PerceptionLMForConditionalGeneration``): refused.

Its ``vision_config`` is a ``TimmWrapperConfig`` (``PerceptionLMConfig``'s sub-config default ``timm_wrapper``; the
released checkpoints name a timm Perception Encoder ViT), built by ``AutoModel.from_config`` as a
``TimmWrapperModel``, which needs timm. timm cannot be installed into the verified CPU stack (see
:data:`.gemma3n.TIMM_UNAVAILABLE`), so no count of the tower could be checked against transformers' own classes.
"""

from __future__ import annotations

from . import refuse_model_type
from .gemma3n import TIMM_UNAVAILABLE

refuse_model_type("perception_lm", (
    "PerceptionLM's vision tower is a timm model (vision_config model_type timm_wrapper: a Perception Encoder ViT "
    "through TimmWrapper), which is not modelled (its parameters and FLOPs are neither counted nor guessed: "
    + TIMM_UNAVAILABLE + "); its LM is a Llama decoder: pass the config's text_config (model_type llama) to count "
    "the language model alone"))
