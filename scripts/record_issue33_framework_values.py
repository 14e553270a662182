#!/usr/bin/env python3
"""Re-derive the framework values that tests/flops/test_framework_conventions.py records for issue 33.

Two framework functions outside the 21-case record of ``scripts/compare_frameworks.py``, each loaded from a git
mirror at its pinned commit with ``compare_frameworks.extract`` (the named function and the module-level names it
uses; imports dropped, no third-party source copied here) and called as the framework calls it:

* Megatron-Bridge PR #2575 head ``efc3be64783e``: ``num_floating_point_operations`` on GLM-4.5V, ``cfg.model``
  filled as ``GLM45VBridge.provider_bridge`` maps the HF config (src/megatron/bridge/models/glm_vl/
  glm_45v_bridge.py), ``vision_config`` = transformers' ``Glm4vMoeVisionConfig`` fields, ``vlm_step``'s packed
  runtime averages for documents [3000, 1096] and one 32 x 32 image (``TEST_PR2575_GLM45V``);
* torchtitan ``get_moe_model_nparams_and_flops`` at ``adf340d3f9fa`` and ``12979c663698`` on transformers'
  Qwen3-VL-2B / 8B / 30B-A3B built on the meta device, parameter names mapped as torchtitan's Qwen3-VL
  ``state_dict_adapter`` maps them, ``enable_weight_tying`` as its config registry sets it (2B only), n_heads and
  2 * head_dim as ``Qwen3VLModel.Config.get_nparams_and_flops`` passes them, seq_len 4096, x 2 rows x 4096
  tokens (``TITAN_QWEN3_VL_RECORDED``).

    PYTHONPATH=. python scripts/record_issue33_framework_values.py --mirror /work/.mirror
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import math
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TITAN_PINS = {"torchtitan@qwen3-vl": "adf340d3f9fa78a8b95c575213e7a632901a6c9e",
              "torchtitan@qwen3-vl-pre3225": "12979c663698ffb6e46b6f5ce75d948189a13598"}


def _cf():
    spec = importlib.util.spec_from_file_location("_compare_frameworks", ROOT / "scripts" / "compare_frameworks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def pr2575_glm45v(cf, mirror: Path) -> float:
    import functools

    import torch.nn.functional as F

    src = cf.SOURCES["mbridge-pr2575"]
    ns = {"LoRA": type("LoRA", (), {}), "Path": Path, "dataclass": dataclass, "F": F}
    base = {"math": math, "lru_cache": functools.lru_cache, "print_rank_0": print, "logging": logging,
            "logger": logging.getLogger("megatron.bridge")}
    for path, names in src["helpers"].items():
        got = cf.extract(cf.git_show(mirror, src["repo"], src["commit"], path), names, dict(base))
        ns.update({n: got[n] for n in names})
    cf.extract(cf.git_show(mirror, src["repo"], src["commit"], src["file"]), ["num_floating_point_operations"], ns)
    config = cf.hf_config("glm-4.5v")
    t, v = config.text_config, config.vision_config
    model = cf.NS(num_layers=t.num_hidden_layers, hidden_size=t.hidden_size, num_attention_heads=t.num_attention_heads,
                  num_query_groups=t.num_key_value_heads, kv_channels=t.head_dim, ffn_hidden_size=t.intermediate_size,
                  moe_ffn_hidden_size=t.moe_intermediate_size, num_moe_experts=t.n_routed_experts,
                  moe_shared_expert_intermediate_size=t.moe_intermediate_size, moe_router_topk=t.num_experts_per_tok,
                  moe_layer_freq=[0] * t.first_k_dense_replace + [1] * (t.num_hidden_layers - t.first_k_dense_replace),
                  mtp_num_layers=0, vocab_size=t.vocab_size, make_vocab_size_divisible_by=128,
                  tensor_model_parallel_size=1, gated_linear_unit=True, activation_func=F.silu,
                  multi_latent_attention=False, seq_length=t.max_position_embeddings, is_hybrid_model=False,
                  vision_config=cf.NS(**{k: getattr(v, k) for k in (
                      "depth", "hidden_size", "intermediate_size", "num_heads", "spatial_merge_size",
                      "out_hidden_size", "in_channels", "patch_size", "temporal_patch_size") if hasattr(v, k)}))
    docs, grids = [3000, 1096], [(1, 32, 32)]
    n = len(docs)
    cfg = cf.NS(model=model, peft=None, dataset=None)
    cfg._runtime_lm_total_tokens_padded_per_sample = sum(docs) / n
    cfg._runtime_lm_sum_seqlen_sq_padded_per_sample = sum(d * d for d in docs) / n
    patches = sum(a * b * c for a, b, c in grids)
    cfg._runtime_vision_tokens_pre_per_sample = patches / n
    cfg._runtime_vision_tokens_post_per_sample = patches / n / v.spatial_merge_size ** 2
    cfg._runtime_vision_sum_seqlen_sq_pre_per_sample = sum(a * (b * c) ** 2 for a, b, c in grids) / n
    return float(ns["num_floating_point_operations"](cfg, batch_size=n))


def _titan_name(name: str) -> str:
    for a, b in (("embed_tokens", "tok_embeddings"), (".mlp.experts.", ".moe.experts."),
                 (".mlp.gate.", ".moe.router.gate."), ("model.visual.", "vision_encoder."), ("lm_head.", "output.")):
        name = name.replace(a, b)
    return name


def titan_qwen3_vl(cf, mirror: Path) -> dict[tuple[str, str], int]:
    import torch
    import transformers
    from torch import nn

    git_dir = mirror / cf.MIRRORS["pytorch/torchtitan"] / "repo"
    out = {}
    for preset in ("qwen3-vl-2b", "qwen3-vl-8b", "qwen3-vl-30b-a3b"):
        config = cf.hf_config(preset)
        with torch.device("meta"):
            hf = getattr(transformers, config.architectures[0])(config)

        class Renamed(nn.Module):  # named_parameters() in torchtitan's names (a tied table once, as tok_embeddings)
            def __init__(self, inner: nn.Module):
                super().__init__()
                self.inner = inner

            def named_parameters(self, *a, **k):  # type: ignore[override]
                for name, p in self.inner.named_parameters():
                    yield _titan_name(name), p

        t = config.text_config
        moe = None
        if getattr(t, "num_experts", None):
            moe = types.SimpleNamespace(router=types.SimpleNamespace(top_k=t.num_experts_per_tok),
                                        num_experts=t.num_experts)
        model_config = types.SimpleNamespace(layers=[types.SimpleNamespace(moe=moe)] * t.num_hidden_layers,
                                             enable_weight_tying=bool(config.tie_word_embeddings))
        for convention, commit in TITAN_PINS.items():
            source = subprocess.run(["git", "-C", str(git_dir), "show", f"{commit}:torchtitan/models/utils.py"],
                                    capture_output=True, text=True, check=True).stdout
            ns = {"nn": nn, "torch": torch, "logger": logging.getLogger("torchtitan")}
            cf.extract(source, ["get_moe_model_nparams_and_flops"], ns)
            _, per_token = ns["get_moe_model_nparams_and_flops"](model_config, Renamed(hf), t.num_attention_heads,
                                                                 2 * t.head_dim, 4096)
            out[(preset, convention)] = per_token * 2 * 4096
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, required=True, help="folder of <owner>+<name>/repo git directories")
    args = parser.parse_args()
    cf = _cf()
    print(f"mbridge-pr2575 glm-4.5v: {pr2575_glm45v(cf, args.mirror)!r}")
    for (preset, convention), value in titan_qwen3_vl(cf, args.mirror).items():
        print(f"{convention} {preset}: {value}")


if __name__ == "__main__":
    main()
