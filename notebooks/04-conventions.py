# ---
# jupyter:
#   jupytext:
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
# # 04 · One run under every FLOPs convention
#
# Tools disagree about how many FLOPs a training step has. Some count the vision tower and some do not.
# Some bill padding, some use the configured sequence length instead of the real documents. Some
# assume everything trains even when the ViT is frozen. This notebook takes one run and computes its
# FLOPs, TFLOP/s/GPU and MFU under every convention vlm-perf implements. It then shows, component by
# component, where each convention departs from `exact` and why.
#
# The run is the **synthetic** sample `sample_logs/qwen2.5-vl-7b-video`: Qwen2.5-VL-7B on 64 H100,
# 8192-token packs of video clips and high-resolution documents, with the vision tower **frozen**. It
# exercises most deviations at once:
# - window attention in the ViT;
# - the gated ViT MLP;
# - video grids;
# - a frozen tower (forward-only ViT).
#
# **Assumptions:** all conventions share the run's step times, world size and GPU peak. Only the
# FLOPs credited to each iteration differ. `exact` honours the frozen tower; the named conventions
# bill every component as trainable, as the tools themselves do.

# %%
# %matplotlib inline
from IPython.display import display

from vlm_perf.analysis.explore import (components_by_convention, components_vs_reference, convention_summary_frame,
                                       deviation_table, sample_run_dir)
from vlm_perf.flops import CONVENTIONS
from vlm_perf.pipeline import load_run
from vlm_perf.report.explore_plots import components_figure, convention_summary_figure

ALL = [name for name, c in CONVENTIONS.items() if c.covers("qwen2_5_vl")]  # the ones defined for this model
loaded = load_run(sample_run_dir("qwen2.5-vl-7b-video"), convention=ALL)
run, spec = loaded.analysis, loaded.spec
frozen = tuple(loaded.context.run_config.get("frozen") or ())
print(f"{run.model}: {run.world_size} GPUs, peak {run.peak_tflops} TFLOP/s/GPU, frozen: {frozen or 'nothing'}")

# %% [markdown]
# ## The headline number under each convention
#
# Same step times; only the FLOPs change. `vs_megatron_lm` is each rate divided by the LM-only rate
# the log printed.

# %%
display(convention_summary_frame(run).to_pandas().style.format(
    {"tflops_per_gpu_mean": "{:.1f}", "mfu_mean": "{:.1%}", "flops_total": "{:.3e}", "vs_megatron_lm": "{:.3f}"}))
display(convention_summary_figure(run))

# %% [markdown]
# ## Where the FLOPs go, per convention
#
# Each bar is the run's total training FLOPs under one convention, split by component. Warm colours
# are vision, cool colours the language model. `exact` is evaluated with the run's frozen parts.

# %%
components = components_by_convention(spec, run.per_iteration, ALL, frozen=frozen)
display(components_figure(components, title=f"{run.model}: FLOPs by component and convention (whole run)"))

# %% [markdown]
# ## Difference from `exact`, component by component
#
# `delta` is the convention's FLOPs minus `exact`'s for that component, in EFLOP over the run. `ratio`
# is convention / `exact`. Below, the four largest differences per convention. Next to it
# are the deviations each convention states about itself (`Convention.deviations`). Together they show
# where a number departs from `exact` and why.

# %%
vs_exact = components_vs_reference(components, "exact")
for conv in ALL:
    if conv == "exact":
        continue
    part = vs_exact.filter(vs_exact["convention"] == conv).head(4)
    print(f"\n=== {conv}: total {components.filter(components['convention'] == conv)['flops'].sum() / 1e18:.3f} EFLOP")
    for row in part.iter_rows(named=True):
        ratio = "n/a (exact: 0)" if row["ratio"] is None else f"{row['ratio']:.3f}"
        print(f"   {row['component']:24s} delta {row['delta'] / 1e18:+9.4f} EFLOP   ratio {ratio}")
    for item in CONVENTIONS[conv].deviations:
        print(f"   - {item}")

# %% [markdown]
# ## The conventions' own descriptions
#
# The formula, source and stated deviations of every convention, straight from the registry
# (`vlm_perf.flops.CONVENTIONS`).

# %%
display(deviation_table(ALL).to_pandas().set_index("convention"))
