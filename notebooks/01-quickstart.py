# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: -all
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Quickstart: one run, before and after counting vision
#
# This notebook loads one finished training run: a log, per-microbatch metadata and a `run.yaml`
# manifest. It recomputes the FLOPs of every iteration from the model config and shows the
# throughput the run really reached.
#
# The run is the bundled **synthetic** sample `sample_logs/qwen3-vl-30b-a3b-sft`. It is Qwen3-VL-30B-A3B
# image SFT on 64 GB200, modelled on the Megatron-Bridge PR #2575 discussion. The numbers are generated,
# not measured (see `sample_logs/README.md`). To look at your own run, point `RUN` at its directory.
#
# **Assumptions**
# - "Before" is the `megatron-lm` convention. It counts the language model only, which is what the
#   framework printed.
# - "After" is `exact`. It counts every matmul of the vision tower, the mergers and the language model,
#   and the backward passes that autograd actually runs.
# - TFLOP/s/GPU = FLOPs of the iterations in a logging window / (window seconds × GPUs × 10¹²).
# - MFU = TFLOP/s/GPU / the GPU's dense bf16 peak.

# %%
# %matplotlib inline
from IPython.display import display

from vlm_perf.analysis.explore import convention_summary_frame, run_vision_profile, sample_run_dir
from vlm_perf.pipeline import load_run
from vlm_perf.report.explore_plots import convention_summary_figure, run_components_figure, run_rates_figure

RUN = sample_run_dir("qwen3-vl-30b-a3b-sft")  # found from notebooks/ or the repo root
loaded = load_run(RUN)
run = loaded.analysis
print(f"run: {RUN.name}  model: {run.model}  GPUs: {run.world_size}  peak: {run.peak_tflops} TFLOP/s/GPU")
print(f"iterations with metadata: {run.per_iteration.height}, logging windows: {run.windows.height}")
for message in run.messages:
    print("note:", message)

# %% [markdown]
# ## Throughput per logging window
#
# - Black dots: what the log printed.
# - Grey line: the same number recomputed with the LM-only formula. The two should agree; the
#   cross-check below tests that.
# - Red line: `exact`, with the vision tower counted.
# - Dashed lines: the other conventions.
#
# The step time is the same in every case. Only the FLOPs credited to each step change.

# %%
display(run_rates_figure(run))

# %% [markdown]
# ## Convention summary
#
# Means over the complete logging windows, weighted by time. The first window after each (re)start
# is left out. `vs_megatron_lm` is each rate divided by the LM-only rate: how much counting
# (or miscounting) moves the reported number.

# %%
summary = convention_summary_frame(run)
display(summary.to_pandas().style.format(
    {"tflops_per_gpu_mean": "{:.1f}", "mfu_mean": "{:.1%}", "flops_total": "{:.3e}", "vs_megatron_lm": "{:.3f}"}))
display(convention_summary_figure(run))

# %% [markdown]
# ## Does our recomputation match the log?
#
# The log's own number is recomputed with the `megatron-lm` formula from the metadata. `status: ok`
# means the two agree within 2 %, so the world size and token counts behind both are the same.

# %%
loaded.analysis.crosscheck

# %% [markdown]
# ## Where the FLOPs go
#
# The run's total FLOPs, split by component, under each convention. Warm colours are vision
# (ViT blocks, attention, mergers); cool colours are the language model. `vision share` is the
# `exact` vision FLOPs divided by all `exact` FLOPs. The visual-token share is the fraction of
# LM sequence positions that hold image tokens.

# %%
profile = run_vision_profile(run.per_iteration)
print(f"visual tokens: {profile['visual_token_share']:.1%} of LM tokens; "
      f"{profile['patches_per_lm_token']:.2f} ViT patches per LM token; "
      f"exact vision share of FLOPs: {profile['exact_vision_share']:.1%}")
display(run_components_figure(loaded.spec, run))
