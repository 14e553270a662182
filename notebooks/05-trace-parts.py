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
# # 05 · Where the step time went, part by part
#
# A profiler trace says how long each op or kernel ran; the FLOPs library says how much work each part
# of the model did. This notebook joins the two for the bundled **REAL** profiled run
# `sample_logs/qwen2-vl-tiny-trace`: a tiny Qwen2-VL trained on one CPU core with the HF Trainer, two
# optimizer steps recorded by `torch.profiler` (`with_stack=True`, so `nn.Module:` events exist). Every
# part's time is measured and its FLOPs are exact (equal to torch's `FlopCounterMode` for the same
# microbatches), so the achieved GFLOP/s per part are real — for one CPU core on a shared machine.
#
# The same call reads GPU traces (one Kineto JSON per rank, or Nsight Systems SQLite exports):
# `vlm-perf trace TRACE... --run RUN_DIR`. How time is attributed: `docs/traces.md`.

# %%
# %matplotlib inline
from pathlib import Path

from IPython.display import display

from vlm_perf.analysis.trace_parts import analyze_traces, trace_parts_figure
from vlm_perf.ingest.traces import read_traces, trace_metadata
from vlm_perf.arch import load_model

run = next(p / "sample_logs" / "qwen2-vl-tiny-trace" for p in [Path.cwd(), *Path.cwd().parents]
           if (p / "sample_logs" / "qwen2-vl-tiny-trace").is_dir())
spec = load_model(str(run / "config.json"))
# eager attention computes the whole attention square: causal="full"
result = analyze_traces(read_traces(run / "trace"), spec=spec, metadata=trace_metadata([run / "metadata"], spec),
                        causal="full")
display(result.steps.to_pandas())
print(f"parts add up to each step within {100 * result.check_sums():.4f}% of its ProfilerStep time")

# %% [markdown]
# ## Time share vs FLOPs share
#
# `rate_vs_lm` is a part's achieved FLOP/s over the language model's; `excess_vs_lm_s` is the time it would
# save at the LM's rate. Parts without FLOPs (norms, glue, the optimizer, data loading, Python time of the
# training loop) are where the rest of the step goes.

# %%
cols = ["part", "time_s", "time_share", "forward_s", "backward_s", "flops_share", "flops_per_s", "rate_vs_lm",
        "excess_vs_lm_s"]
display(result.summary().select(cols).to_pandas().style.format(
    {"time_s": "{:.3f}", "time_share": "{:.1%}", "forward_s": "{:.3f}", "backward_s": "{:.3f}",
     "flops_share": "{:.1%}", "flops_per_s": "{:.3g}", "rate_vs_lm": "{:.2f}", "excess_vs_lm_s": "{:.3f}"},
    na_rep="—"))

# %% [markdown]
# ## Per step, stacked

# %%
fig = trace_parts_figure(result)

# %% [markdown]
# ## What the time is spent on instead

# %%
display(result.top.head(15).to_pandas())
