#!/usr/bin/env python3
"""vlm-perf's named conventions side by side with the frameworks' OWN FLOPs functions, on 21 model/batch cases.

Two halves:

* ``record`` (needs the frameworks' git repositories, e.g. the ``fetch`` tool's mirrors under /work/.mirror):
  for each pinned source below, read the file at the pinned commit with ``git show``, load just the FLOPs
  function(s) from it (``ast``: the named top-level functions and the module-level helpers they reference,
  every import dropped and replaced by the stubs listed in ``SOURCES[...]["stubs"]``), call them on every case
  with the inputs the framework's training loop passes, and write the outputs with their provenance to
  ``tests/flops/data/framework_flops.json``. No third-party source is copied into this repository. ``--mirror``
  is a folder of ``<owner>+<name>/repo`` git directories (or clones) holding the pinned commits; ``hf-trainer``
  (and ms-swift's numerator) call the installed transformers 5.24.0 instead.
  Frameworks: Megatron-LM main and PR #6173's head (dev), Megatron-Bridge main and PR #2575's head, torchtitan
  main, veRL main and v0.7.1, transformers' Trainer.floating_point_ops, ms-swift's perf_log MFU, LLaMA-Factory's
  cal_mfu.py.
* ``compare`` / ``markdown`` (no network, no third-party code): the recorded outputs against
  ``vlm_perf.flops.compute_flops(spec, stats, <convention>)`` for the convention of the same name; a row agrees
  when both give a number within 0.1 %, or both refuse (the framework raises / has no provider / no formula,
  and the convention raises ConventionNotDefined). ``docs/conventions.md`` carries the generated table;
  tests/flops/test_framework_record.py keeps it in sync and checks every row.

    PYTHONPATH=. python scripts/compare_frameworks.py record --mirror /work/.mirror
    PYTHONPATH=. python scripts/compare_frameworks.py markdown     # the docs section
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "flops" / "data" / "framework_flops.json"
TOLERANCE = 1e-3  # 0.1 %
START, END = "<!-- framework-comparison:start -->", "<!-- framework-comparison:end -->"


# ------------------------------------------------------------------------------------------------ cases


@dataclass(frozen=True)
class Case:
    """One global batch: documents (real lengths), rows x padded row length, image grids (t, h, w)."""

    id: str
    preset: str
    docs: tuple[int, ...]
    rows: int
    row_len: int
    grids: tuple[tuple[int, int, int], ...] = ()
    note: str = ""

    @property
    def packed(self) -> bool:
        return len(self.docs) != self.rows or any(d != self.row_len for d in self.docs)


CASES: tuple[Case, ...] = (
    # dense LMs
    Case("llama3-8b/2x4096", "llama3-8b", (4096, 4096), 2, 4096, note="dense, unpacked"),
    Case("llama3-8b/packed", "llama3-8b", (1000, 3096, 2000, 2096), 2, 4096, note="dense, 4 documents packed in 2 rows"),
    Case("llama3-70b/1x8192", "llama3-70b", (8192,), 1, 8192, note="dense, GQA 64/8"),
    # MoE LMs
    Case("qwen3-30b-a3b/2x4096", "qwen3-30b-a3b", (4096, 4096), 2, 4096, note="MoE, unpacked"),
    Case("qwen3-30b-a3b/packed", "qwen3-30b-a3b", (1000, 3096, 2000, 2096), 2, 4096, note="MoE, packed text-only"),
    Case("qwen3-235b-a22b/1x4096", "qwen3-235b-a22b", (4096,), 1, 4096, note="MoE"),
    Case("deepseek-v3/2x4096", "deepseek-v3", (4096, 4096), 2, 4096, note="MLA + MoE + MTP"),
    Case("deepseek-v3/packed", "deepseek-v3", (3000, 1096, 4096), 2, 4096, note="MLA, packed text-only"),
    # Qwen2 / Qwen2.5-VL
    Case("qwen2-vl-7b/1img", "qwen2-vl-7b", (3000,), 1, 3000, ((1, 36, 64),), "VLM without a Bridge provider"),
    Case("qwen2.5-vl-3b/2img", "qwen2.5-vl-3b", (1024, 1024), 2, 1024, ((1, 32, 32), (1, 32, 32)), "window ViT"),
    Case("qwen2.5-vl-7b/2img", "qwen2.5-vl-7b", (2048, 2048), 2, 2048, ((1, 28, 40), (1, 16, 16)), "window ViT"),
    Case("qwen2.5-vl-72b/1img", "qwen2.5-vl-72b", (4096,), 1, 4096, ((1, 64, 64),), "window ViT"),
    # Qwen3-VL
    Case("qwen3-vl-4b/3img", "qwen3-vl-4b", (512, 1024, 2048), 3, 2048, ((1, 16, 32), (1, 32, 32), (1, 32, 64)),
         "head_dim 128 != hidden/heads 80"),
    Case("qwen3-vl-8b/3img", "qwen3-vl-8b", (4096, 4096, 4096), 3, 4096, ((1, 64, 64),) * 3, "deepstack"),
    Case("qwen3-vl-8b/text-only", "qwen3-vl-8b", (1000, 3096), 1, 4096, (), "VLM on a packed text-only batch"),
    Case("qwen3-vl-32b/2frames", "qwen3-vl-32b", (3000, 1096), 2, 3000, ((2, 36, 64),), "t = 2 grid"),
    Case("qwen3-vl-30b-a3b/1img", "qwen3-vl-30b-a3b", (4096, 777), 2, 4096, ((1, 32, 48),), "MoE VLM"),
    Case("qwen3-vl-235b-a22b/1img", "qwen3-vl-235b-a22b", (8192,), 1, 8192, ((1, 64, 64),), "MoE VLM"),
    # Qwen3.5 (hybrid gated-delta-net LM, Qwen3-VL-style tower)
    Case("qwen3.5-35b-a3b/1img", "qwen3.5-35b-a3b", (4096, 1000), 2, 4096, ((1, 32, 32),), "hybrid MoE VLM"),
    Case("qwen3.5-35b-a3b/text-only", "qwen3.5-35b-a3b", (1000, 3096), 1, 4096, (), "hybrid, packed text-only"),
    Case("qwen3.5-397b-a17b/1img", "qwen3.5-397b-a17b", (4096,), 1, 4096, ((1, 48, 48),), "hybrid MoE VLM"),
)


# ------------------------------------------------------------------------------------------------ sources


SOURCES: dict[str, dict[str, Any]] = {
    "megatron-lm": {
        "repo": "NVIDIA/Megatron-LM", "commit": "d98e8a64ddf34856e74b24714e3bedb2f5a39553", "ref": "main",
        "file": "megatron/training/training.py", "function": "num_floating_point_operations",
        "helpers": {"megatron/core/models/gpt/experimental_attention_variant_module_specs.py":
                    ["is_linear_attention_variant", "is_gated_delta_net_variant"],
                    "megatron/training/utils/common_utils.py": ["is_hybrid_model"]},
        "stubs": "every import of training.py dropped; is_linear_attention_variant / is_gated_delta_net_variant / "
                 "is_hybrid_model loaded from their own files at the same commit",
        "inputs": "args from the HF (text) config as Megatron-Bridge's bridges map it; batch_size = rows; THD path: "
                  "total_real_tokens = sum of document lengths, seqlen_squared_sum = sum of their squares",
    },
    "megatron-lm@dev-qwen35_vl_v2": {
        "repo": "NVIDIA/Megatron-LM", "commit": "14a558e4e0adeac428cf1fec4ad3c33bfcd4cc42",
        "ref": "PR #6173 head (into dev d48bd6be0a85)",
        "file": "megatron/training/training.py", "function": "num_floating_point_operations",
        "helpers": {"megatron/core/models/gpt/experimental_attention_variant_module_specs.py":
                    ["is_linear_attention_variant", "is_gated_delta_net_variant"],
                    "megatron/training/utils/common_utils.py": ["is_hybrid_model"]},
        "stubs": "as megatron-lm; _num_multimodal_extra_floating_point_operations loaded with it",
        "inputs": "as megatron-lm, plus for Qwen3.5-VL the factory's set_vision_flops_metadata (vision dims from "
                  "vision_config, vision_out_hidden_size = LM hidden) and image-grid statistics (P, sum t(hw)^2, M)",
    },
    "megatron-bridge": {
        "repo": "NVIDIA-NeMo/Megatron-Bridge", "commit": "067f987df03b8355b03192d88d70f1709fedf51a", "ref": "main",
        "file": "src/megatron/bridge/training/utils/flop_utils.py",
        "function": "num_floating_point_operations + vit_flops_from_patch_stats (train.py's call)",
        "helpers": {"megatron/core/models/gpt/experimental_attention_variant_module_specs.py@mlm":
                    ["is_linear_attention_variant", "is_gated_delta_net_variant"],
                    "megatron/training/vocab_utils.py@mlm": ["calculate_padded_vocab_size"]},
        "stubs": "LoRA = an empty class (no PEFT); ConfigContainer / torch only in annotations; get_hybrid_layer_counts, "
                 "parse_hybrid_pattern, Symbols unused (no hybrid_layer_pattern); calculate_padded_vocab_size (which "
                 "bridge/utils/vocab_utils.py re-exports) from Megatron-LM main's megatron/training/vocab_utils.py",
        "inputs": "cfg.model = the provider fields from the HF config; seqlen_sum = rows x padded length, "
                  "seqlen_squared_sum = sum of document lengths squared (cu_seqlens), exact vision patch stats from "
                  "image grids; qwen2_vl: no bridge for Qwen2VLForConditionalGeneration in src/megatron/bridge/models",
    },
    "mbridge-pr2575": {
        "repo": "NVIDIA-NeMo/Megatron-Bridge", "commit": "efc3be64783ea8f6b7919780b65a5864a0125c0d",
        "ref": "PR #2575 head (closed unmerged)",
        "file": "src/megatron/bridge/training/utils/flop_utils.py", "function": "num_floating_point_operations",
        "helpers": {"src/megatron/bridge/utils/vocab_utils.py": ["calculate_padded_vocab_size"]},  # PR-era file
        "stubs": "LoRA = an empty class; F = torch.nn.functional (activation_func = F.silu); importlib / "
                 "calculate_avg_seqlen unused on these paths",
        "inputs": "VLMs through vlm_step (packed: per-sample averages over the documents, batch_size = documents, "
                  "_runtime_vision_* from the image grids); text-only models through gpt_step (no runtime "
                  "attributes: batch_size = rows, cfg.model.seq_length = padded length)",
    },
    "torchtitan": {
        "repo": "pytorch/torchtitan", "commit": "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a", "ref": "main",
        "file": "torchtitan/models/utils.py",
        "function": "get_dense_model_nparams_and_flops / get_moe_model_nparams_and_flops",
        "helpers": {},
        "stubs": "logger = logging; Decoder / DTensor / DeviceMesh only in annotations",
        "inputs": "model = transformers' model for the preset on the meta device, parameters renamed to torchtitan's "
                  "module names (embed_tokens -> tok_embeddings, mlp.experts -> moe.routed_experts, mlp.gate -> "
                  "moe.router, shared_expert(_gate) -> moe.shared_experts, visual -> vision_encoder); head_dims "
                  "and n_heads as each model's get_nparams_and_flops passes them; FLOPs = per token x rows x "
                  "padded length (labels.numel()); models without a torchtitan/models/<name> are refused",
    },
    "verl": {
        "repo": "verl-project/verl", "commit": "1dda039b9c6311889a9c9a26040677e1254814f9", "ref": "main",
        "file": "verl/utils/flops_counter.py", "function": "FlopsCounter.estimate_flops",
        "helpers": {},
        "stubs": "verl.utils.device.get_torch_device -> torch.cpu (the whole module is executed)",
        "inputs": "transformers' AutoConfig for the preset; batch_seqlens = document lengths; images_seqlens = "
                  "h*w per frame of every image grid; delta_time 1 s, result x 1e12",
    },
    "verl@v0.7.1": {
        "repo": "verl-project/verl", "commit": "bec9ef74768dd201881cd4e54cd0385e87caae27", "ref": "release v0.7.1",
        "file": "verl/utils/flops_counter.py", "function": "FlopsCounter.estimate_flops",
        "helpers": {}, "stubs": "as verl",
        "inputs": "as verl; Qwen2/2.5-VL configs given the text fields at the top level as transformers 4.x built them "
                  "(the release predates transformers 5, whose composite config keeps them in text_config only)",
    },
    "hf-trainer": {
        "repo": "huggingface/transformers", "commit": "release v5.24.0 (installed package)", "ref": "release v5.24.0",
        "file": "src/transformers/trainer.py + modeling_utils.py",
        "function": "Trainer.floating_point_ops -> ModuleUtilsMixin.floating_point_ops",
        "helpers": {},
        "stubs": "none: the installed transformers (version checked), model built on the meta device",
        "inputs": "the preset's transformers model class on the meta device; inputs = {'input_ids': rows x padded "
                  "length} (what the Trainer adds to total_flos for the step)",
    },
    "ms-swift": {
        "repo": "modelscope/ms-swift", "commit": "3602360a562313afbf2ef6065fdf61f271a2c5b9", "ref": "main",
        "file": "swift/callbacks/perf_log.py", "function": "PerfMetricsLogCallback.on_log (MFU)",
        "helpers": {},
        "stubs": "TrainerCallback base = object, logger = logging; the instance is built without __init__ "
                 "(max_tflops, elapsed set as on_init_end / on_step_end would)",
        "inputs": "state.total_flos = transformers' floating_point_ops for the step (as hf-trainer), elapsed = 1 s, "
                  "max_tflops = DEVICE_TFLOPS 989 x 8 devices; compared as MFU (printed to 6 decimals)",
    },
    "llamafactory": {
        "repo": "hiyouga/LLaMA-Factory", "commit": "ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30", "ref": "main",
        "file": "scripts/stat_utils/cal_mfu.py", "function": "compute_model_flops",
        "helpers": {},
        "stubs": "AutoConfig.from_pretrained -> the preset's transformers config; BASE loaded from the file",
        "inputs": "total_batch_size = rows, seq_length = padded row length (cutoff_len); include_backward=True",
    },
}

MS_SWIFT_ELAPSED, MS_SWIFT_TFLOPS, MS_SWIFT_DEVICES = 1.0, 989.0, 8

MIRRORS = {"modelscope/ms-swift": "modelscope+ms-swift", "hiyouga/LLaMA-Factory": "hiyouga+LLaMA-Factory", "NVIDIA/Megatron-LM": "NVIDIA+Megatron-LM", "NVIDIA-NeMo/Megatron-Bridge": "NVIDIA-NeMo+Megatron-Bridge",
           "pytorch/torchtitan": "pytorch+torchtitan", "verl-project/verl": "verl-project+verl"}


# ------------------------------------------------------------------------------------------------ loading


def git_show(mirror: Path, repo: str, commit: str, path: str) -> str:
    git_dir = mirror / MIRRORS[repo] / "repo"
    proc = subprocess.run(["git", "-C", str(git_dir), "show", f"{commit}:{path}"], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"compare_frameworks: {repo} {commit[:12]}:{path} not readable from {git_dir} "
                         f"({proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'git failed'})")
    return proc.stdout


def extract(source: str, names: list[str], namespace: dict[str, Any], strict: bool = True) -> dict[str, Any]:
    """Execute the named top-level functions of ``source`` and every module-level definition (function, class,
    assignment) they reference, transitively, except names ``namespace`` already supplies (stubs); every import
    statement is dropped (``namespace`` supplies what is needed instead). Returns the namespace."""
    tree = ast.parse(source)
    defs: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    defs[t.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defs[node.target.id] = node
    keep: list[str] = []
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in keep or name not in defs or (name in namespace and name not in names):
            continue  # a name the caller supplies (a stub) is not taken from the source
        keep.append(name)
        for sub in ast.walk(defs[name]):
            if isinstance(sub, ast.Name) and sub.id in defs and sub.id not in keep:
                todo.append(sub.id)
    nodes = [n for n in tree.body if n in {id_ for id_ in (defs[k] for k in keep)}]
    module = ast.Module(body=nodes, type_ignores=[])
    namespace.setdefault("__name__", "_extracted")
    exec(compile(module, "<framework source>", "exec"), namespace)  # noqa: S102 (pinned third-party source)
    missing = [n for n in names if n not in namespace]
    if missing and strict:
        raise KeyError(f"not found in the source: {missing}")
    return namespace


class NS(types.SimpleNamespace):
    """An args / cfg.model namespace: reading a field nobody set is an AttributeError (so ``getattr(x, f, d)`` takes
    the framework's own default, and a direct read the adapter forgot fails loudly)."""


# ------------------------------------------------------------------------------------------------ HF configs


def hf_config(preset: str):
    import transformers

    from vlm_perf.arch.presets_loader import preset_config

    cfg = {k: v for k, v in preset_config(preset).items() if not k.startswith("_")}
    return transformers.AutoConfig.for_model(**cfg)


def text_of(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def megatron_model_fields(config) -> dict[str, Any]:
    """Megatron TransformerConfig / args fields for the LM of an HF config (what Megatron-Bridge's bridges set)."""
    t = text_of(config)
    mt = t.model_type
    h, H = t.hidden_size, t.num_attention_heads
    head_dim = getattr(t, "head_dim", None) or h // H
    f: dict[str, Any] = dict(
        num_layers=t.num_hidden_layers, hidden_size=h, num_attention_heads=H,
        group_query_attention=True, num_query_groups=getattr(t, "num_key_value_heads", H) or H,
        kv_channels=head_dim, swiglu=True, gated_linear_unit=True, vocab_size=t.vocab_size,
        make_vocab_size_divisible_by=128, tensor_model_parallel_size=1,
        ffn_hidden_size=getattr(t, "intermediate_size", None) or t.moe_intermediate_size,
        num_experts=None, num_moe_experts=None, moe_router_topk=1, moe_ffn_hidden_size=None, moe_layer_freq=1,
        moe_shared_expert_intermediate_size=None, moe_latent_size=None, mtp_num_layers=None,
        multi_latent_attention=False, attention_output_gate=False, experimental_attention_variant=None,
        linear_attention_freq=None, is_hybrid_model=False, hybrid_layer_pattern=None, window_size=None,
    )
    experts = getattr(t, "num_experts", None) or getattr(t, "n_routed_experts", None)
    if experts:
        f.update(num_experts=experts, num_moe_experts=experts, moe_router_topk=t.num_experts_per_tok,
                 moe_ffn_hidden_size=t.moe_intermediate_size)
        if mt == "deepseek_v3":
            f["moe_layer_freq"] = [0] * t.first_k_dense_replace + [1] * (t.num_hidden_layers - t.first_k_dense_replace)
            f["moe_shared_expert_intermediate_size"] = t.n_shared_experts * t.moe_intermediate_size
        elif getattr(t, "shared_expert_intermediate_size", None):
            f["moe_shared_expert_intermediate_size"] = t.shared_expert_intermediate_size
    if mt == "deepseek_v3":
        f.update(multi_latent_attention=True, group_query_attention=False, q_lora_rank=t.q_lora_rank,
                 kv_lora_rank=t.kv_lora_rank, qk_head_dim=t.qk_nope_head_dim, qk_pos_emb_head_dim=t.qk_rope_head_dim,
                 v_head_dim=t.v_head_dim, mtp_num_layers=getattr(t, "num_nextn_predict_layers", None) or None)
    if mt in ("qwen3_5_text", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe"):
        # qwen35_bridge.py: attention_output_gate, experimental_attention_variant "gated_delta_net",
        # linear_attention_freq = full_attention_interval; qwen35_vl_bridge.py: mtp_num_layers = 0
        f.update(attention_output_gate=True, experimental_attention_variant="gated_delta_net",
                 # transformers_compat.full_attention_interval_from_hf: layer_types -> 1 linear / 0 full per layer
                 linear_attention_freq=[int(lt == "linear_attention") for lt in t.layer_types],
                 linear_key_head_dim=t.linear_key_head_dim,
                 linear_value_head_dim=t.linear_value_head_dim, linear_num_key_heads=t.linear_num_key_heads,
                 linear_num_value_heads=t.linear_num_value_heads, linear_conv_kernel_dim=t.linear_conv_kernel_dim,
                 mtp_num_layers=0)
    return f


def padded(v: int, m: int = 128) -> int:
    return -(-v // m) * m


def grid_stats(case: Case, merge: int) -> tuple[int, int, int]:
    P = sum(t * h * w for t, h, w in case.grids)
    P2 = sum(t * (h * w) ** 2 for t, h, w in case.grids)
    M = sum(t * h * w // (merge * merge) for t, h, w in case.grids)
    return P, P2, M


class Refused(Exception):
    """The framework gives no number for this case (the reason is recorded)."""


# ------------------------------------------------------------------------------------------------ callers


def _megatron_lm(mirror: Path, key: str) -> Callable[[Case], float]:
    src = SOURCES[key]
    repo, commit = src["repo"], src["commit"]
    ns: dict[str, Any] = {"math": math}
    helpers: dict[str, Any] = {}
    for path, names in src["helpers"].items():
        # the helpers this version of the file imports (dev has no is_gated_delta_net_variant)
        helpers.update({n: v for n, v in extract(git_show(mirror, repo, commit, path), names, {}, strict=False).items()
                        if n in names})
    ns.update(helpers)
    extract(git_show(mirror, repo, commit, src["file"]), ["num_floating_point_operations"], ns)
    fn = ns["num_floating_point_operations"]
    dev = key != "megatron-lm"

    def call(case: Case) -> float:
        config = hf_config(case.preset)
        f = megatron_model_fields(config)
        args = NS(**f, seq_length=case.row_len, padded_vocab_size=padded(f["vocab_size"]),
                  mamba_state_dim=None, spec=None)
        kwargs: dict[str, Any] = dict(seqlen_squared_sum_in_batch=sum(d * d for d in case.docs),
                                      total_real_tokens_in_batch=sum(case.docs))
        if dev and config.model_type in ("qwen3_5", "qwen3_5_moe"):
            v = config.vision_config  # examples/multimodal_dev/models/qwen35_vl/factory.py set_vision_flops_metadata
            args.count_vision_model_flops = True
            args.vision_flops_variant = "qwen35_vl_v2"
            args.vision_num_layers, args.vision_hidden_size = v.depth, v.hidden_size
            args.vision_ffn_hidden_size, args.vision_num_attention_heads = v.intermediate_size, v.num_heads
            args.vision_kv_channels = v.hidden_size // v.num_heads
            args.vision_in_channels, args.vision_patch_size = v.in_channels, v.patch_size
            args.vision_temporal_patch_size, args.vision_spatial_merge_size = v.temporal_patch_size, v.spatial_merge_size
            args.vision_out_hidden_size = f["hidden_size"]
            if case.grids:
                P, P2, M = grid_stats(case, v.spatial_merge_size)
                kwargs.update(vision_total_tokens_in_batch=P, vision_seqlen_squared_sum_in_batch=P2,
                              vision_merged_tokens_in_batch=M)
            else:
                kwargs.update(vision_total_tokens_in_batch=0, vision_seqlen_squared_sum_in_batch=0,
                              vision_merged_tokens_in_batch=0)
        return float(fn(args, case.rows, **kwargs))

    return call


_BRIDGE_ARCHS = {"qwen2_vl": "Qwen2VLForConditionalGeneration", "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
                 "qwen3_vl": "Qwen3VLForConditionalGeneration", "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration",
                 "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration", "qwen3_5": "Qwen3_5ForConditionalGeneration",
                 "llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                 "deepseek_v3": "DeepseekV3ForCausalLM"}


def _bridge_has_provider(mirror: Path, repo: str, commit: str, model_type: str) -> bool:
    """Whether a bridge in src/megatron/bridge/models registers the HF architecture (``source=<arch>``)."""
    git_dir = mirror / MIRRORS[repo] / "repo"
    arch = _BRIDGE_ARCHS[model_type]
    out = subprocess.run(["git", "-C", str(git_dir), "grep", "-l", "-E", rf"source=\"?{arch}\b|\b{arch}\b", commit,
                          "--", "src/megatron/bridge/models"], capture_output=True, text=True).stdout
    return bool(out.strip())


def _bridge_vision(config) -> Any:
    v = getattr(config, "vision_config", None)
    if v is None:
        return None
    fields = {k: getattr(v, k) for k in ("depth", "hidden_size", "intermediate_size", "num_heads", "spatial_merge_size",
                                         "out_hidden_size", "in_channels", "patch_size", "temporal_patch_size",
                                         "deepstack_visual_indexes", "num_position_embeddings") if hasattr(v, k)}
    if getattr(v, "num_position_embeddings", None) is None:
        fields.pop("num_position_embeddings", None)
    return NS(**fields)


def _megatron_bridge(mirror: Path, key: str) -> Callable[[Case], float]:
    src = SOURCES[key]
    repo, commit = src["repo"], src["commit"]
    mlm = SOURCES["megatron-lm"]
    import torch.nn.functional as F

    ns: dict[str, Any] = {"LoRA": type("LoRA", (), {}), "Path": Path, "dataclass": dataclass, "F": F}
    import functools
    import logging

    base = {"math": math, "lru_cache": functools.lru_cache, "print_rank_0": print, "logging": logging,
            "logger": logging.getLogger("megatron.bridge")}
    for path, names in src["helpers"].items():
        if path.endswith("@mlm"):
            got = extract(git_show(mirror, mlm["repo"], mlm["commit"], path[:-4]), names, dict(base))
        else:
            got = extract(git_show(mirror, repo, commit, path), names, dict(base))
        ns.update({n: got[n] for n in names})
    main = key == "megatron-bridge"
    wanted = ["num_floating_point_operations"] + (["vit_flops_from_patch_stats"] if main else [])
    extract(git_show(mirror, repo, commit, src["file"]), wanted, ns)

    def call(case: Case) -> float:
        config = hf_config(case.preset)
        if config.model_type in _BRIDGE_ARCHS and not _bridge_has_provider(mirror, repo, commit, config.model_type):
            raise Refused(f"no bridge for {_BRIDGE_ARCHS[config.model_type]} at {commit[:12]}")
        f = megatron_model_fields(config)
        model = NS(**f, seq_length=case.row_len, virtual_pipeline_model_parallel_size=None, activation_func=F.silu)
        vision = _bridge_vision(config)
        if vision is not None:
            model.vision_config = vision
        cfg = NS(model=model, peft=None, dataset=None)
        S2 = sum(d * d for d in case.docs)
        if main:
            total = ns["num_floating_point_operations"](cfg, batch_size=case.rows, seqlen_sum=case.rows * case.row_len,
                                                        seqlen_squared_sum=S2, num_vision_patches=0)
            if vision is not None and case.grids:
                P, P2, M = grid_stats(case, vision.spatial_merge_size)
                total += ns["vit_flops_from_patch_stats"](cfg, patch_sum=P, patch_squared_sum=P2, merged_token_sum=M)
            return float(total)
        if vision is None:  # gpt_step: no runtime attributes, configured length
            return float(ns["num_floating_point_operations"](cfg, batch_size=case.rows))
        n = len(case.docs)  # vlm_step, packed: per-sample averages over the sub-sequences, batch_size = samples
        cfg._runtime_lm_total_tokens_padded_per_sample = sum(case.docs) / n
        cfg._runtime_lm_sum_seqlen_sq_padded_per_sample = S2 / n
        P, P2, _ = grid_stats(case, vision.spatial_merge_size)
        cfg._runtime_vision_tokens_pre_per_sample = P / n
        cfg._runtime_vision_tokens_post_per_sample = P / n / vision.spatial_merge_size ** 2
        cfg._runtime_vision_sum_seqlen_sq_pre_per_sample = P2 / n
        return float(ns["num_floating_point_operations"](cfg, batch_size=n))

    return call


_TITAN_MODELS = {"llama": ("llama3", "dense"), "qwen3": ("qwen3", "moe"), "qwen3_moe": ("qwen3", "moe"),
                 "deepseek_v3": ("deepseek_v3", "moe"), "qwen3_5_moe": ("qwen3_5", "moe"), "qwen3_5": ("qwen3_5", "moe")}


def _titan_name(name: str) -> str:
    for a, b in ((".visual.", ".vision_encoder."), ("model.visual.", "vision_encoder."), ("embed_tokens", "tok_embeddings"),
                 (".mlp.experts.", ".moe.routed_experts."), (".mlp.gate.", ".moe.router."),
                 (".mlp.shared_expert_gate.", ".moe.shared_experts.gate."),
                 (".mlp.shared_expert.", ".moe.shared_experts."), (".mlp.shared_experts.", ".moe.shared_experts.")):
        name = name.replace(a, b)
    if name.startswith("visual."):
        name = "vision_encoder." + name[len("visual."):]
    return name


def _torchtitan(mirror: Path, key: str) -> Callable[[Case], float]:
    import logging

    import torch
    import transformers
    from torch import nn

    src = SOURCES[key]
    repo, commit = src["repo"], src["commit"]
    ns: dict[str, Any] = {"nn": nn, "torch": torch, "logger": logging.getLogger("torchtitan")}
    extract(git_show(mirror, repo, commit, src["file"]),
            ["get_dense_model_nparams_and_flops", "get_moe_model_nparams_and_flops"], ns)
    git_dir = mirror / MIRRORS[repo] / "repo"
    model_dirs = set(subprocess.run(["git", "-C", str(git_dir), "ls-tree", "--name-only", commit, "torchtitan/models/"],
                                    capture_output=True, text=True, check=True).stdout.split())

    def call(case: Case) -> float:
        config = hf_config(case.preset)
        entry = _TITAN_MODELS.get(config.model_type)
        if entry is None or f"torchtitan/models/{entry[0]}" not in model_dirs:
            raise Refused(f"no torchtitan/models/ entry for {config.model_type} at {commit[:12]}")
        t = text_of(config)
        with torch.device("meta"):
            hf = getattr(transformers, config.architectures[0])(config)
        shell = nn.Module()
        params = {}
        for name, p in hf.named_parameters():
            tn = _titan_name(name)
            params[tn] = p
        # dense helper: model.children() that are nn.Embedding -> the token embedding as a direct child
        emb = next(v for k, v in params.items() if "tok_embeddings" in k)
        shell.tok_embeddings = nn.Embedding(emb.shape[0], emb.shape[1], device="meta")
        rest = nn.ParameterDict({k.replace(".", "__"): nn.Parameter(v, requires_grad=False)
                                 for k, v in params.items() if "tok_embeddings" not in k})
        shell.add_module("body", rest)

        class Named(nn.Module):  # named_parameters() in torchtitan's names
            def named_parameters(self, *a, **k):  # type: ignore[override]
                yield "tok_embeddings.weight", shell.tok_embeddings.weight
                for k2, v in rest.items():
                    yield k2.replace("__", "."), v

            def parameters(self, *a, **k):  # type: ignore[override]
                for _, v in self.named_parameters():
                    yield v

            def children(self):  # type: ignore[override]
                yield shell.tok_embeddings
        model = Named()
        tied = bool(getattr(t, "tie_word_embeddings", False) or getattr(config, "tie_word_embeddings", False))
        H = t.num_attention_heads
        if entry[0] == "llama3":
            _, per_token = ns["get_dense_model_nparams_and_flops"](
                model, n_layers=t.num_hidden_layers, n_heads=H, head_dims=2 * (t.hidden_size // H),
                seq_len=case.row_len, enable_weight_tying=tied)
        else:
            if entry[0] == "deepseek_v3":
                head_dims = t.qk_nope_head_dim + t.qk_rope_head_dim + t.v_head_dim
            else:
                head_dims = 2 * t.head_dim
            experts = getattr(t, "num_experts", None) or getattr(t, "n_routed_experts", None)
            moe = NS(router=NS(top_k=t.num_experts_per_tok), num_experts=experts) if experts else None
            types_ = getattr(t, "layer_types", None) or ["full_attention"] * t.num_hidden_layers
            layers = [NS(moe=moe, attention=(object() if lt == "full_attention" else None)) for lt in types_]
            mc = NS(layers=layers, enable_weight_tying=tied)
            _, per_token = ns["get_moe_model_nparams_and_flops"](mc, model, H, head_dims, case.row_len)
        return float(per_token * case.rows * case.row_len)

    return call


def _flat(config):
    """The composite Qwen2/2.5-VL config as transformers 4.x built it (text fields at the top level), which is what
    veRL v0.7.1 (transformers < 5) received; transformers 5 moved them under text_config only."""
    flat = type(config).from_dict(config.to_dict())
    for k, v in config.get_text_config().to_dict().items():
        if not hasattr(flat, k) or k in ("hidden_size", "vocab_size"):
            try:
                setattr(flat, k, v)
            except (AttributeError, TypeError):
                pass
    return flat


def _verl(mirror: Path, key: str) -> Callable[[Case], float]:
    import torch

    old = key != "verl"
    src = SOURCES[key]
    text = git_show(mirror, src["repo"], src["commit"], src["file"])
    stubs = {"verl": types.ModuleType("verl"), "verl.utils": types.ModuleType("verl.utils"),
             "verl.utils.device": types.ModuleType("verl.utils.device")}
    stubs["verl.utils.device"].get_torch_device = lambda: torch.cpu  # type: ignore[attr-defined]
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    try:
        module = types.ModuleType(f"_verl_flops_{key}")
        exec(compile(text, f"verl@{src['commit'][:12]}:{src['file']}", "exec"), module.__dict__)  # noqa: S102
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v

    def call(case: Case) -> float:
        config = hf_config(case.preset)
        if old and config.model_type in ("qwen2_vl", "qwen2_5_vl"):
            config = _flat(config)
        if config.model_type not in module.ESTIMATE_FUNC:
            raise Refused(f"{config.model_type} not in ESTIMATE_FUNC (MFU 0)")
        images = [h * w for t, h, w in case.grids for _ in range(t)] or None
        kwargs = {"images_seqlens": images} if images else {}
        return float(module.FlopsCounter(config).estimate_flops(list(case.docs), 1.0, **kwargs)[0]) * 1e12

    return call


def _hf_flops(case: Case) -> float:
    import importlib.metadata

    import torch
    import transformers

    if importlib.metadata.version("transformers") != "5.24.0":
        raise RuntimeError("record with transformers 5.24.0 (the pinned release)")
    config = hf_config(case.preset)
    with torch.device("meta"):
        model = getattr(transformers, config.architectures[0])(config)
    inputs = {"input_ids": torch.empty(case.rows, case.row_len, dtype=torch.long, device="meta")}
    return float(transformers.Trainer.floating_point_ops(types.SimpleNamespace(model=model), inputs))


def _hf_trainer(mirror: Path, key: str) -> Callable[[Case], float]:
    return _hf_flops


def _ms_swift(mirror: Path, key: str) -> Callable[[Case], float]:
    import logging

    src = SOURCES[key]
    ns: dict[str, Any] = {"TrainerCallback": object, "logger": logging.getLogger("swift"), "TrainerState": object,
                          "TrainerControl": object}
    extract(git_show(mirror, src["repo"], src["commit"], src["file"]), ["PerfMetricsLogCallback"], ns)
    cls = ns["PerfMetricsLogCallback"]

    def call(case: Case) -> float:
        cb = object.__new__(cls)
        cb.max_tflops, cb.elapsed = MS_SWIFT_TFLOPS * MS_SWIFT_DEVICES, MS_SWIFT_ELAPSED
        logs: dict[str, float] = {}
        cb.on_log(None, types.SimpleNamespace(total_flos=_hf_flops(case)), None, logs=logs)
        return float(logs["MFU"])

    return call


def _llamafactory(mirror: Path, key: str) -> Callable[[Case], float]:
    src = SOURCES[key]
    ns: dict[str, Any] = {}
    extract(git_show(mirror, src["repo"], src["commit"], src["file"]), ["compute_model_flops", "BASE"], ns)

    def call(case: Case) -> float:
        config = hf_config(case.preset)
        ns["AutoConfig"] = types.SimpleNamespace(from_pretrained=lambda name: config)
        return float(ns["compute_model_flops"](case.preset, case.rows, case.row_len))

    return call


CALLERS = {"hf-trainer": _hf_trainer, "ms-swift": _ms_swift, "llamafactory": _llamafactory, "megatron-lm": _megatron_lm, "megatron-lm@dev-qwen35_vl_v2": _megatron_lm,
           "megatron-bridge": _megatron_bridge, "mbridge-pr2575": _megatron_bridge,
           "torchtitan": _torchtitan, "verl": _verl, "verl@v0.7.1": _verl}


def record(mirror: Path, out: Path = RECORD) -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    for key, src in SOURCES.items():
        call = CALLERS[key](mirror, key)
        rows: dict[str, Any] = {}
        for case in CASES:
            try:
                rows[case.id] = {"flops": call(case)}
            except Refused as exc:
                rows[case.id] = {"refused": str(exc)}
            except Exception as exc:  # the framework's own function fails on this input: a refusal, recorded
                rows[case.id] = {"refused": f"{type(exc).__name__}: {str(exc)[:160]}"}
        results[key] = {"provenance": {k: src[k] for k in ("repo", "ref", "commit", "file", "function", "stubs",
                                                          "inputs")}, "cases": rows}
    data = {"command": "PYTHONPATH=. python scripts/compare_frameworks.py record --mirror /work/.mirror",
            "cases": [{"id": c.id, "preset": c.preset, "docs": list(c.docs), "rows": c.rows, "row_len": c.row_len,
                       "grids": [list(g) for g in c.grids], "note": c.note} for c in CASES],
            "frameworks": results}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return data


# ------------------------------------------------------------------------------------------------ compare


@dataclass
class Row:
    convention: str
    case: str
    framework: float | None
    ours: float | None
    framework_refusal: str = ""
    our_refusal: str = ""
    agree: bool = field(default=False)

    @property
    def ratio(self) -> float | None:
        if self.framework and self.ours is not None:
            return self.ours / self.framework
        return None


def load_record(path: Path = RECORD) -> dict[str, Any]:
    if not path.is_file():
        raise SystemExit(f"compare_frameworks: no recorded outputs at {path}; run `record --mirror DIR` first")
    return json.loads(path.read_text(encoding="utf-8"))


def case_from_record(c: dict[str, Any]) -> Case:
    return Case(c["id"], c["preset"], tuple(c["docs"]), c["rows"], c["row_len"],
                tuple(tuple(g) for g in c["grids"]), c.get("note", ""))


def ours(case: Case, convention: str) -> float:
    from vlm_perf.arch import load_model
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = load_model(case.preset)
    stats = BatchStats.from_batch(seq_lens=list(case.docs), padded_tokens=case.rows * case.row_len, samples=case.rows,
                                  image_grids=[list(g) for g in case.grids], spec=spec)
    return float(compute_flops(spec, stats, convention).total)


def compare(data: dict[str, Any] | None = None) -> list[Row]:
    from vlm_perf.errors import ConventionNotDefined

    data = data or load_record()
    cases = {c["id"]: case_from_record(c) for c in data["cases"]}
    rows = []
    for convention, fw in data["frameworks"].items():
        for case_id, got in fw["cases"].items():
            case = cases[case_id]
            row = Row(convention, case_id, got.get("flops"), None, framework_refusal=got.get("refused", ""))
            try:
                row.ours = ours(case, convention)
                if convention == "ms-swift":  # the framework's number is the MFU it prints
                    from vlm_perf.flops.conventions.hf import ms_swift_mfu

                    row.ours = ms_swift_mfu(row.ours, MS_SWIFT_ELAPSED, MS_SWIFT_TFLOPS, MS_SWIFT_DEVICES)
            except ConventionNotDefined as exc:
                row.our_refusal = str(exc)
            if row.framework is None or row.framework == 0:
                row.agree = row.ours is None
            elif row.ours is not None:
                row.agree = abs(row.ours / row.framework - 1) <= TOLERANCE
            rows.append(row)
    return rows


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x / 1e15:,.4f}"


def markdown(rows: list[Row] | None = None, data: dict[str, Any] | None = None) -> str:
    data = data or load_record()
    rows = rows if rows is not None else compare(data)
    n_agree = sum(r.agree for r in rows)
    lines = [START, "",
             f"**{n_agree} of {len(rows)} rows agree** (within 0.1 %, or both refuse). PFLOP per global batch "
             "(training; `ms-swift` rows: the MFU it prints); *framework* = the framework's own function at the pinned commit, called by "
             "`scripts/compare_frameworks.py record` (outputs with provenance in "
             "`tests/flops/data/framework_flops.json`); *vlm-perf* = `compute_flops(..., <convention>)`.", "",
             "| framework (convention) | source @ commit | function | stubbed / inputs |", "|---|---|---|---|"]
    for key, fw in data["frameworks"].items():
        p = fw["provenance"]
        lines.append(f"| `{key}` | `{p['repo']}` {p['ref']} `{p['commit'][:12]}` `{p['file']}` | {p['function']} | "
                     f"{p['stubs']}; {p['inputs']} |".replace("\n", " "))
    lines += ["", "| case | batch | convention | framework | vlm-perf | ratio | agrees |", "|---|---|---|---|---|---|---|"]
    cases = {c["id"]: c for c in data["cases"]}
    for r in rows:
        c = cases[r.case]
        batch = f"{len(c['docs'])} docs / {c['rows']}x{c['row_len']}" + (f", {len(c['grids'])} grids" if c["grids"] else "")
        fmt = (lambda x: f"MFU {x:.6f}") if r.convention == "ms-swift" else _fmt
        fw = fmt(r.framework) if r.framework else f"refuses ({r.framework_refusal})"
        us = fmt(r.ours) if r.ours is not None else "refuses"
        ratio = f"{r.ratio:.4f}" if r.ratio is not None else "—"
        verdict = "yes" if r.agree else "**no**"
        lines.append(f"| `{r.case}` | {batch} | `{r.convention}` | {fw} | {us} | {ratio} | {verdict} |"
                     .replace("\n", " "))
    lines += ["", END]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="call the frameworks' functions (needs the git mirrors)")
    rec.add_argument("--mirror", type=Path, default=Path("/work/.mirror"))
    sub.add_parser("compare", help="print disagreeing rows and the count")
    sub.add_parser("markdown", help="print the docs/conventions.md section")
    args = parser.parse_args(argv)
    if args.cmd == "record":
        record(args.mirror)
    rows = compare()
    if args.cmd == "markdown":
        print(markdown(rows), end="")
        return 0
    for r in rows:
        if not r.agree:
            print(f"{r.case:28s} {r.convention:30s} fw={_fmt(r.framework)} {r.framework_refusal[:60]} "
                  f"ours={_fmt(r.ours)} {r.our_refusal[:60]} ratio={r.ratio}")
    print(f"{sum(r.agree for r in rows)} of {len(rows)} rows agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
