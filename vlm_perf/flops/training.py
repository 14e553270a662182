"""Training FLOPs: which backward GEMMs a training step actually executes.

Rule (what autograd runs; documented in docs/conventions.md):

* every term runs forward once (x1);
* a term with weights adds a weight-gradient GEMM (x1) if its stage is trainable;
* a term adds its input-gradient work if a gradient must reach its input: x1 for a weight GEMM,
  x2 for an attention core (dQ/dK from dS, and dV plus dP). A gradient reaches a term's input
  when any parameter upstream of it requires grad: the patch embed never (its input is pixels);
  the first merger GEMM when the tower is trainable or the merger is (every Qwen merger starts
  with a norm whose weights need that input gradient); a projector whose first op is that GEMM (no norm in
  front, LLaVA-OneVision) only when the tower is trainable; other tower / merger terms when their own
  stage or an upstream stage is trainable (``arch.parts.UPSTREAM``: main and deepstack mergers both
  read the tower, neither feeds the other); LM terms when the LM (its embedding table) or any
  vision stage is trainable.

With everything trainable this is the familiar forward + 2x backward (x3) for all terms except
the patch embed (x2). A frozen vision tower is forward-only (x1); a frozen LM in front of a
trainable vision part still pays its input gradients (x2, attention core x3).
"""

from __future__ import annotations

from ..arch.parts import UPSTREAM, frozen_stages  # noqa: F401  (re-exported: flops.training.frozen_stages)
from .terms import INPUT_OWN, INPUT_PIXELS, INPUT_TOWER, INPUT_UPSTREAM, STAGES, VISION_TOWER, Term


def _gradient_reaches_input(term: Term, trainable: frozenset[str]) -> bool:
    if term.input_kind == INPUT_PIXELS:
        return False
    upstream = UPSTREAM[term.stage]
    if term.input_kind == INPUT_OWN:
        return term.stage in trainable
    if term.input_kind == INPUT_TOWER:
        # the merger's pre-GEMM norm has weights: a trainable merger needs fc1's input gradient
        return VISION_TOWER in trainable or term.stage in trainable
    if term.input_kind == INPUT_UPSTREAM:
        # nothing trainable before it inside its own stage: only an upstream stage needs the gradient
        return any(stage in trainable for stage in upstream)
    return term.stage in trainable or any(stage in trainable for stage in upstream)


def training_multiplier(term: Term, frozen: frozenset[str]) -> int:
    """Forward + backward cost of ``term`` in units of its forward FLOPs."""
    trainable = frozenset(STAGES) - frozen
    weight_grad = 1 if term.weights and term.stage in trainable else 0
    input_grad = (1 if term.weights else 2) if _gradient_reaches_input(term, trainable) else 0
    return 1 + weight_grad + input_grad


def training_flops(term: Term, frozen: frozenset[str]):
    """Forward + backward FLOPs of ``term``: ``training_multiplier`` x forward, except that a term with an
    explicit ``input_grad`` adds exactly that (instead of 1x / 2x forward) when a gradient reaches its input."""
    if term.input_grad is None:
        return training_multiplier(term, frozen) * term.forward
    trainable = frozenset(STAGES) - frozen
    weight_grad = term.forward if term.weights and term.stage in trainable else 0
    input_grad = term.input_grad if _gradient_reaches_input(term, trainable) else 0
    return term.forward + weight_grad + input_grad
