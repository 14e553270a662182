"""The RL part of the report: where an RL step's time and FLOPs went, per phase (`vlm_perf.analysis.rl`).

One declaration (`vlm_perf.report.parts`): computed from the run folder's ``rl/`` records
(`vlm_perf.ingest.rl_metadata`) with the run's regime and attention rule; summary.json ``rl``; the section
"RL steps: time and FLOPs per phase"; a terminal line. The headline (`sections.headline`) states the regime from
the same block. Runs without ``rl/`` have ``rl: null`` and no section.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..content import B, Bullets, FigureRef, SectionContent, T, Table, fmt
from ..parts import Figure, ReportPart, register_part
from ..schema import NUMBER, key
from ..units import run_rate_unit

from ...analysis.rl import RLResult  # noqa: F401 (its old home)

if TYPE_CHECKING:
    from . import SectionInputs

PHASE_TITLES = {"generation": "generation (prefill + KV-cache decode)", "old_log_prob": "old-policy log-probs",
                "ref": "reference log-probs", "values": "critic values", "update_actor": "actor update (fwd + bwd)",
                "update_critic": "critic update", "other": "other (rewards, advantages, data, optimizer rest)"}


def section(inputs: "SectionInputs") -> SectionContent | None:
    rl = inputs.summary.get("rl")
    if not rl:
        return None
    phases = rl["phases"]
    unit = run_rate_unit(inputs.summary)  # one display unit per report (the conventions' unit)
    st = rl["settings"]
    lines = [T(B(rl["headline"]), f" ({rl['framework']}, {rl['iterations']} steps)."),
             T(f"Settings: {st['num_generations']} responses per prompt, beta {st['beta']:g} (reference forward "
               f"{'yes' if st['reference'] else 'no'}), {st['num_iterations']} update(s) per rollout (old log-probs "
               f"{'yes' if st['old_log_prob'] else 'no'}), critic {'yes' if st['critic'] else 'no'}; the log-prob "
               f"head projects {st['logprob_head']['positions'].replace('_', ' ')} positions"
               f"{', recomputed in backward' if st['logprob_head']['backward_recompute'] else ''}."),
             T("Whole RL steps: ", B(f"{rl['flops_total']:,.0f}"), " FLOPs in ", fmt(rl["step_seconds"], 2), " s = ",
               B(unit.text(rl["tflops_per_gpu"], 1)), ".")]
    if rl.get("training_only_flops"):
        lines.append(T("Training-only accounting (the update's microbatches counted as plain training steps): ",
                       f"{rl['training_only_flops']:,.0f} FLOPs = {fmt(rl['training_only_share'], 1, True)} of the RL "
                       "steps' FLOPs — generation and the log-prob forwards are the rest."))
    lines += [T("Note: ", n) for n in rl.get("notes", [])]
    rows = [[T(PHASE_TITLES.get(name, name)), T(fmt(p["seconds"], 3)), T(f"{p['flops']:,.0f}"),
             T(unit.fmt(p["tflops_per_gpu"], 1)), T(fmt(p["mfu"], 1, True)), T(fmt(p["time_share"], 1, True)),
             T(fmt(p["flops_share"], 1, True))] for name, p in phases.items()]
    rows.append([T(B("step")), T(fmt(rl["step_seconds"], 3)), T(f"{rl['flops_total']:,.0f}"),
                 T(unit.fmt(rl["tflops_per_gpu"], 1)), T(fmt(rl["mfu"], 1, True)), T("100.0%"), T("100.0%")])
    table = Table(["phase", "seconds", "FLOPs", unit.per_gpu, "MFU", "share of time", "share of FLOPs"], rows)
    if rl["mfu"] is None:
        lines.append(T("MFU per phase: no GPU peak for this run (state the GPU type or its peak)."))
    parts = rl["parts"]
    part_rows = [[T(name)] + [T(f"{p['parts'].get(k, 0):,.0f}") for k in parts] for name, p in phases.items()
                 if p["flops"]]
    part_rows.append([T(B("step"))] + [T(f"{v:,.0f}") for v in parts.values()])
    part_table = Table(["phase"] + [k.replace("_", " ") for k in parts], part_rows)
    blocks: list = [Bullets(lines), table, part_table]
    if inputs.figures.get(FIGURE) is None and inputs.out_dir is not None and (inputs.out_dir / FIGURE).exists():
        blocks.append(FigureRef(FIGURE, CAPTION))
    return SectionContent("RL steps: time and FLOPs per phase", blocks)


FIGURE = "rl_phases.png"
CAPTION = "RL steps: each phase's share of the step time and of the FLOPs"


def draw(run: Any, ctx: Any, path: Any) -> None:
    """Two stacked bars, share of time and share of FLOPs, one segment per phase."""
    from .. import figures as drawing

    result = ctx.results.get("rl") if ctx is not None else None
    if result is None:
        raise drawing.Skip("no RL metadata (rl/) in the run folder")
    phases = result.accounting.phases()
    plt = drawing.plt
    fig, ax = plt.subplots(figsize=(9, 2.8))
    rows = (("time", [p.time_share or 0.0 for p in phases]), ("FLOPs", [p.flops_share for p in phases]))
    colors = plt.get_cmap("tab10").colors
    for y, (_, shares) in enumerate(rows):
        left = 0.0
        for i, (phase, share) in enumerate(zip(phases, shares)):
            ax.barh(y, 100 * share, left=100 * left, color=colors[i % len(colors)],
                    label=drawing.safe(phase.name) if y == 0 else None)
            if share >= 0.06:
                ax.text(100 * (left + share / 2), y, f"{100 * share:.0f}%", ha="center", va="center", fontsize=8)
            left += share
    ax.set_yticks([0, 1], [label for label, _ in rows])
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of the RL steps")
    ax.set_title(drawing.safe(result.accounting.headline()))
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    drawing._save(fig, path)


def terminal(summary: dict) -> list[str]:
    rl = summary.get("rl")
    if not rl:
        return []
    unit = run_rate_unit(summary)
    return [f"  {rl['headline']}; every phase {unit.fmt(rl['tflops_per_gpu'])} {unit.per_gpu}"
            + (f"; training-only accounting {fmt(rl['training_only_share'], 1, True)} of the RL FLOPs"
               if rl.get("training_only_share") is not None else "")]


_P = "analysis.rl"
PHASE_KEYS = (
    key("seconds", "s", NUMBER, "recorded seconds of the phase over the RL steps (null: not timed)", _P, nullable=True),
    key("flops", "FLOPs", NUMBER, "exact FLOPs of the phase over the RL steps", _P),
    key("parts", "block", dict, "FLOPs by part (vision_tower, projector, language_model)", _P),
    key("tflops_per_gpu", "TFLOP/s/GPU", NUMBER, "flops / seconds / GPUs", _P, nullable=True),
    key("mfu", "fraction", NUMBER, "tflops_per_gpu / the GPU's peak (null: no peak, or not timed)", _P, nullable=True),
    key("time_share", "fraction", NUMBER, "seconds / the steps' seconds", _P, nullable=True),
    key("flops_share", "fraction", NUMBER, "flops / the steps' FLOPs", _P),
)
RL_KEYS = (
    key("algorithm", "text", str, "RL algorithm (grpo, ppo, ...)", "ingest.rl_metadata"),
    key("framework", "text", str, "the RL framework that ran it (trl, verl, ...)", "ingest.rl_metadata"),
    key("headline", "text", str, "the regime in one line ('GRPO: generation N% of the step time')", _P),
    key("settings", "block", dict, "num_generations, beta, reference, num_iterations, old_log_prob, critic, "
        "logprob_head", _P),
    key("iterations", "count", int, "RL steps recorded", _P),
    key("step_seconds", "s", NUMBER, "Σ recorded step seconds", _P),
    key("flops_total", "FLOPs", NUMBER, "exact FLOPs of every phase of every RL step", _P),
    key("tflops_per_gpu", "TFLOP/s/GPU", NUMBER, "flops_total / step_seconds / GPUs", _P, nullable=True),
    key("mfu", "fraction", NUMBER, "tflops_per_gpu / the GPU's peak (null without a peak)", _P, nullable=True),
    key("parts", "block", dict, "flops_total by part", _P),
    key("phases", "block", dict, "per phase (generation, old_log_prob, ref, values, update_actor, update_critic, "
        "other)", _P, each=PHASE_KEYS),
    key("per_iteration", "block", list, "per RL step: iteration, step_s, flops, parts, phases (FLOPs), seconds", _P),
    key("update_flops", "FLOPs", NUMBER, "the actor update's FLOPs (forward + backward, as the RL step ran it)", _P),
    key("training_only_flops", "FLOPs", NUMBER, "exact FLOPs the training metadata counts (the update's microbatches "
        "as plain training steps: no generation, no log-prob forwards)", "report.sections.rl", nullable=True),
    key("training_only_share", "fraction", NUMBER, "training_only_flops / flops_total", "report.sections.rl",
        nullable=True),
    key("notes", "text", list, "what the per-sample counting leaves out (padding of batched generation)", _P),
    key("log_response_lengths_checked", "count", int, "iterations whose logged mean response length was compared "
        "with the recorded rollout's (a disagreement is a message)", "analysis.rl.log_response_check"),
)

register_part(ReportPart(
    "rl", order=11, compute=lambda c: c.run.rl, summary=lambda r: r.to_dict() if r is not None else None,
    keys=(key("rl", "block", dict, "RL steps (run folder rl/): per phase exact FLOPs, seconds, rates and shares, "
              "the training-only accounting beside them; null without RL metadata", "report.sections.rl",
              nullable=True, fields=RL_KEYS),),
    section=section, terminal=terminal, figures=(Figure(FIGURE, CAPTION, draw),)))
