"""RL steps: where the step's time and FLOPs went, per phase (summary.json ``rl``, `vlm_perf.analysis.rl`)."""

from __future__ import annotations

from ..content import B, Bullets, SectionContent, T, Table, fmt
from ..units import run_rate_unit
from . import SectionInputs, register_section

PHASE_TITLES = {"generation": "generation (prefill + KV-cache decode)", "old_log_prob": "old-policy log-probs",
                "ref": "reference log-probs", "values": "critic values", "update_actor": "actor update (fwd + bwd)",
                "update_critic": "critic update", "other": "other (rewards, advantages, data, optimizer rest)"}


@register_section("rl", order=11)
def rl_section(inputs: SectionInputs) -> SectionContent | None:
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
             T(unit.fmt(p["tflops_per_gpu"], 1)), T(fmt(p["time_share"], 1, True)), T(fmt(p["flops_share"], 1, True))]
            for name, p in phases.items()]
    rows.append([T(B("step")), T(fmt(rl["step_seconds"], 3)), T(f"{rl['flops_total']:,.0f}"),
                 T(unit.fmt(rl["tflops_per_gpu"], 1)), T("100.0%"), T("100.0%")])
    table = Table(["phase", "seconds", "FLOPs", unit.per_gpu, "share of time", "share of FLOPs"], rows)
    parts = rl["parts"]
    part_rows = [[T(name)] + [T(f"{p['parts'].get(k, 0):,.0f}") for k in parts] for name, p in phases.items()
                 if p["flops"]]
    part_rows.append([T(B("step"))] + [T(f"{v:,.0f}") for v in parts.values()])
    part_table = Table(["phase"] + [k.replace("_", " ") for k in parts], part_rows)
    return SectionContent("RL steps: time and FLOPs per phase", [Bullets(lines), table, part_table])
