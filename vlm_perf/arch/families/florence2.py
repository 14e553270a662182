"""Florence-2 (transformers ``florence2``: ``Florence2ForConditionalGeneration``): refused with its reason.

Read from transformers 5.24 ``models/florence2/modeling_florence2.py``: a DaViT tower (``Florence2VisionBackbone``:
per stage a strided conv embedding with LayerNorm, then blocks alternating a spatial block -- depthwise-conv position
encoding, window attention, depthwise conv, MLP -- and a channel block -- depthwise conv, attention over channels,
depthwise conv, MLP), a projector (learned 2D positions, a cosine temporal embedding, spatial / temporal pooling,
Linear + LayerNorm) and a BART encoder-decoder LM (the encoder reads the image tokens + prompt, the decoder the target
tokens with cross-attention to the encoder's output). None of it is built: no block kinds exist yet for the DaViT
stages or for an encoder-decoder LM, and the batch statistics carry one LM sequence per sample, not an encoder and a
decoder length.
"""

from __future__ import annotations

from . import refuse_model_type

refuse_model_type("florence2", (
    "Florence-2 (Florence2ForConditionalGeneration) is not built: its language model is BART, an encoder-decoder "
    "(encoder over the image tokens + prompt, decoder over the target tokens with cross-attention), whose decoder "
    "length is a second sequence the batch statistics do not carry, and its DaViT tower (strided conv embeddings, "
    "depthwise-conv position encodings, window attention alternating with channel attention) has no block kinds; "
    "its parameters and FLOPs are neither counted nor guessed"))
