# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Vision vs language-model FLOPs explorer
#
# How much of a VLM training step is vision? How much does counting it change the reported
# TFLOP/s/GPU and MFU? This notebook needs no run. It builds one training sample from a few
# settings and recomputes its FLOPs from the model config:
#
# - **model**: a shipped VLM preset;
# - **image side**: a square image in pixels. The processor resizes it (Qwen smart-resize) to a
#   multiple of patch × merge pixels, within the processor's min/max pixel bounds;
# - **images per sample** and **text tokens**. The sample is one causal sequence of text tokens plus
#   the images' visual (merged) tokens;
# - **frozen vision tower**: the ViT runs forward only. Only `exact` reflects this; the named
#   conventions bill every part as trainable;
# - **training regime**: full training, a frozen tower, LoRA of rank r on the LM, ... (see "Training
#   regimes" below). It changes the vision/LM compute ratio: a frozen part runs forward only, LoRA runs
#   input gradients but no base weight gradients;
# - **GPU**: sets the dense bf16 peak used for MFU;
# - **logged TFLOP/s/GPU**: the LM-only number a log printed. At an unchanged step time, every other
#   convention's number is that value × its FLOPs ÷ the LM-only FLOPs.
#
# Each figure has four panels:
# - (a) FLOPs of the sample per convention, split into vision and LM;
# - (b) the `exact` vision share against image size;
# - (c) the reported throughput and MFU under each convention;
# - (d) the vision share against text length.
#
# With a live Jupyter front end, the controls at the end redraw the figure. Without one (headless
# execution, CI, a static viewer), the **static grid** below shows a few fixed settings instead. The
# static grid always runs.

# %%
# %matplotlib inline
import os

import polars as pl

from IPython.display import display

from vlm_perf.analysis.explore import REGIMES, image_grid, pixel_bounds, regime_split, sample_split, sweep
from vlm_perf.arch import load_model, preset_names
from vlm_perf.errors import VlmPerfError
from vlm_perf.hardware import GPU_TYPES
from vlm_perf.report.explore_plots import explorer_figure

VLMS = [name for name in preset_names() if load_model(name).is_vlm]
print("VLM presets:", ", ".join(VLMS))

# %% [markdown]
# ## How an image becomes tokens
#
# Smart-resize rounds each side to a multiple of patch × merge pixels (28 for Qwen2/2.5-VL, 32 for
# Qwen3-VL). If the pixel count falls outside [min_pixels, max_pixels], it rescales both sides
# first. The grid is (1, h/patch, w/patch) ViT patches. Each 2×2 block of patches becomes one LM token.

# %%
for name in ("qwen2.5-vl-7b", "qwen3-vl-30b-a3b"):
    spec = load_model(name)
    lo, hi = pixel_bounds(spec)
    for side in (100, 448, 1000, 5000):
        grid = image_grid(side, side, spec)
        print(f"{name:18s} {side:5d}px -> grid {grid}  ({grid[1] * grid[2]} patches, "
              f"{grid[1] * grid[2] // 4} LM tokens)   bounds [{lo}, {hi}] px")

# %% [markdown]
# ## Static grid
#
# Three fixed settings:
# 1. Qwen3-VL-30B-A3B at the PR #2575 operating point: 494 TFLOP/s/GPU logged on GB200.
# 2. Qwen2.5-VL-7B with large images and a frozen vision tower, on H100.
# 3. A small Qwen3-VL-8B with several images per sample.

# %%
STATIC = [
    dict(model="qwen3-vl-30b-a3b", image_px=448, images_per_sample=2, text_tokens=1024, frozen_vision=False,
         gpu="GB200", before_tflops_per_gpu=494.0),
    dict(model="qwen2.5-vl-7b", image_px=1344, images_per_sample=1, text_tokens=512, frozen_vision=True,
         gpu="H100 SXM", before_tflops_per_gpu=380.0),
    dict(model="qwen3-vl-8b", image_px=672, images_per_sample=4, text_tokens=2048, frozen_vision=False,
         gpu="H100 SXM", before_tflops_per_gpu=400.0),
]
for setting in STATIC:
    kw = dict(setting)
    display(explorer_figure(load_model(kw.pop("model")), **kw))

# %% [markdown]
# The same in numbers: the `exact` vision share of one image plus 1024 text tokens, by model and
# image side.

# %%
rows = [sweep(load_model(name), resolutions=(224, 448, 896, 1344), text_tokens=(1024,)) for name in VLMS]
table = pl.concat(rows)
display(table.select("model", "image_h_px", "grid_h", "visual_tokens", "vision_share")
        .pivot(on="image_h_px", index="model", values="vision_share").to_pandas()
        .set_index("model").style.format("{:.1%}").set_caption("exact vision share of training FLOPs, by image side (px)"))

# %% [markdown]
# ## Training regimes
#
# The vision/LM split depends on what trains. `regime_split` counts the same sample under several regimes
# (exact FLOPs, what autograd runs; see docs/training-regimes.md): `full`, `frozen_tower` (projector and LM
# train), `frozen_vision` (only the LM trains), `lora_lm` (LoRA of rank r on every LM Linear, base frozen),
# `lora_lm_experts` (plus LoRA on the fused MoE experts, MoE LMs only), `lora_all` (PEFT `all-linear`) and
# `lora_lm_tower_last4` (LoRA on the LM, last four tower layers and the projector unfrozen). `vs_full` is
# the step's FLOPs over full training of the same sample.

# %%
for name, regimes in (("qwen2.5-vl-7b", [r for r in REGIMES if r != "lora_lm_experts"]),
                      ("qwen3-vl-30b-a3b", list(REGIMES))):
    table = regime_split(load_model(name), 896, 1, 1024, regimes=regimes, rank=16)
    display(table.select("regime", "vision_flops", "lm_flops", "vision_share", "vision_lm_ratio", "vs_full")
            .to_pandas().set_index("regime").style
            .format({"vision_flops": "{:.3g}", "lm_flops": "{:.3g}", "vision_share": "{:.1%}",
                     "vision_lm_ratio": "{:.3f}", "vs_full": "{:.2f}x"})
            .set_caption(f"{name}: one 896 px image + 1024 text tokens, LoRA r=16"))

# %% [markdown]
# ## Interactive controls
#
# These need a live widget front end (JupyterLab with ipywidgets). With `VLM_PERF_NO_WIDGETS=1` (headless runs,
# the tests) the explorer runs once at the controls' default values instead. If `ipywidgets` is missing, the cell
# says so and the static grid above stands in.

# %%
def explore(model, image_px, images_per_sample, text_tokens, frozen_vision, gpu, before_tflops_per_gpu, regime,
            lora_rank):
    spec = load_model(model)
    split = sample_split(spec, image_px, images_per_sample, text_tokens, conventions=("exact",),
                         frozen=("vision_tower",) if frozen_vision else ())
    print(f"grid {split.image_grid}, {split.visual_tokens} visual tokens, exact vision share "
          f"{split.vision_share:.1%}")
    try:
        row = regime_split(spec, image_px, images_per_sample, text_tokens, regimes=(regime,), rank=lora_rank).row(
            0, named=True)
        print(f"regime {regime} ({row['description']}): vision {row['vision_flops']:.3g} FLOPs, LM "
              f"{row['lm_flops']:.3g} FLOPs, vision/LM {row['vision_lm_ratio']:.3f}, vision share "
              f"{row['vision_share']:.1%}, {row['vs_full']:.2f}x full training")
    except VlmPerfError as err:  # a regime the model cannot take (lora_lm_experts on a dense LM, unlaid names)
        print(f"regime {regime}: {err}")
    display(explorer_figure(spec, image_px, images_per_sample, text_tokens, frozen_vision, gpu,
                            before_tflops_per_gpu))


try:
    import ipywidgets as w

    controls = dict(
        model=w.Dropdown(options=VLMS, value="qwen3-vl-30b-a3b", description="model"),
        image_px=w.IntSlider(value=448, min=112, max=2048, step=32, description="image px"),
        images_per_sample=w.IntSlider(value=1, min=1, max=8, description="images"),
        text_tokens=w.IntSlider(value=1024, min=0, max=16384, step=128, description="text tokens"),
        frozen_vision=w.Checkbox(value=False, description="frozen vision tower"),
        gpu=w.Dropdown(options=list(GPU_TYPES), value="H100 SXM", description="GPU"),
        before_tflops_per_gpu=w.FloatSlider(value=400.0, min=50.0, max=1500.0, step=10.0,
                                            description="logged TFLOP/s"),
        regime=w.Dropdown(options=list(REGIMES), value="full", description="regime"),
        lora_rank=w.IntSlider(value=16, min=1, max=256, description="LoRA rank"),
    )
    if os.environ.get("VLM_PERF_NO_WIDGETS"):  # headless (the tests): one static run at the controls' values
        print("VLM_PERF_NO_WIDGETS is set: the explorer runs once at the controls' default values")
        explore(**{name: control.value for name, control in controls.items()})
    else:
        ui = w.VBox([w.HBox(list(controls.values())[:4]), w.HBox(list(controls.values())[4:7]),
                     w.HBox(list(controls.values())[7:])])
        display(ui, w.interactive_output(explore, controls))
except ImportError as err:  # no widget library: the static grid above is the view
    print(f"ipywidgets unavailable ({err}); use the static grid above")
