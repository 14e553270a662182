"""RL trainers whose console prints one step over several lines: NeMo-RL's bulleted step blocks and
DeepSpeed-Chat step 3's timing / loss lines. Their phase timers become the canonical ``phase_s_<phase>``
columns (the RL phase table of ``vlm_perf.flops.rl_step``), other timers ``timer_s_<name>`` (kept, not summed).

**NeMo-RL** (NVIDIA-NeMo/RL ``nemo_rl/algorithms/grpo.py`` / ``ppo.py``): a header
``========================= Step 3/100 =========================`` opens the step; its results follow as
``  • Key: value`` bullets (``• Loss: 0.1032``, ``• Avg Reward: 0.35``) and, after ``⏱️  Timing:``, one bullet per
timer, largest first: ``• Total step time: 66.55s`` (the step) then ``• exposed_generation: 32.52s (48.9%)``. Other
lines (vLLM logs, ``▶ Preparing batch...``) may sit between. The step's record is emitted at the next header
(or the end of the file). Timer -> phase: ``NEMO_RL_TIMERS``. Bullets under ``Validation`` are evaluation extras.

**DeepSpeed-Chat step 3** (deepspeedai/DeepSpeedExamples ``applications/DeepSpeed-Chat/.../step3_rlhf_finetuning``):
the older hybrid-engine print ``|E2E latency=2.12s |Gather latency=0.00s (0.00%) |Generate time=1.59s (75.13%)
|Training time=0.42s (19.78%) |Others=0.11 (5.09%)|CurSamplesPerSec=1.89 |AvgSamplesPerSec=1.95`` before
``epoch: 0|step: 3183|ppo_ep: 1|act_loss: 30.92|cri_loss: 30.51|unsuper_loss: 0.0``; the newer
``Epoch: 0 | Step: 3 | PPO Epoch: 1 | Actor Loss: ... | Critic Loss: ... | Unsupervised Loss: ...`` before
``End-to-End => Latency: 10.75s, TFLOPs: ...``, ``Generation => Latency: 9.21s, ...`` and ``Training   =>
Latency: 1.54s, TFLOPs: ...``. Consecutive DeepSpeed-Chat lines make one record (a second step line or a second
end-to-end timing line starts the next). ``Generate time`` is the rollout alone (``generation``);
``Generation => Latency`` times ``generate_experience`` (the rollout and the actor / reference / critic / reward
forward passes: phase ``generate_experience``); ``Training`` is the actor and critic updates (``ppo_train``); the
end-to-end latency is the step (``elapsed_s``); ``Gather latency`` (ZeRO-3 parameter gather for the hybrid
engine's generation) is a kept timer; ``act_loss`` / ``Actor Loss`` is the loss (the actor's PPO loss, as veRL's
``pg_loss``). ``step`` counts within an epoch (DeepSpeed-Chat prints no global step): the iteration is that count.
"""

from __future__ import annotations

import re

from .formats import LogFormat, register
from .schema import snake_case
from .vocab import TIMER_PREFIX, phase_column

# ---- NeMo-RL -------------------------------------------------------------------------------------------

#: NeMo-RL timer names (``timer.time(...)`` in its GRPO / PPO loops) -> canonical phase; any other timer in the
#: ``Timing`` block is kept as ``timer_s_<name>`` (data preparation, buffer sampling, ...: not summed)
NEMO_RL_TIMERS: dict[str, str] = {
    "generation": "generation", "exposed_generation": "generation",
    "policy_training": "update_actor",
    "policy_and_reference_logprobs": "logprobs",
    "reward_calculation": "reward",
    "weight_sync": "update_weights", "refit": "update_weights",
    "checkpointing": "save_checkpoint", "save_checkpoint": "save_checkpoint",
    "validation": "testing",
}
#: Result bullets with a canonical column (others are extras, snake_case)
_NEMO_RESULTS = {"loss": "loss", "mean generation length": "response_len_mean", "grad norm": "grad_norm",
                 "learning rate": "lr"}
NEMO_HEADER_RE = re.compile(r"^={5,}\s*Step (\d{1,19})/(\d{1,19})\s*={5,}$")
BULLET_RE = re.compile(r"^•\s{0,8}(?P<key>[^:]{1,160}?):\s{0,8}(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
                        r"|nan|inf)\s{0,4}(?P<unit>ms|s)?\b")


class _NemoState:
    def __init__(self) -> None:
        self.rec: dict | None = None
        self.at: tuple[int, int, str | None] = (0, 0, None)
        self.section = ""


def _nemo_flush(router, st: _NemoState) -> None:
    rec, st.rec = st.rec, None
    if rec is None:
        return
    if len([k for k in rec if k not in ("iteration", "train_iters")]) == 0:
        router.ignored["no_metrics"] += 1
        return
    if router.allowed("nemo-rl"):
        line, sub, label = st.at
        router.emit("nemo-rl", line, sub, label, rec)


def _nemo_handle(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    st: _NemoState | None = router.states.get("nemo-rl")
    if s[:1] != "=" and (st is None or st.rec is None):  # neither a step header nor inside a step block
        return False
    m = NEMO_HEADER_RE.match(s)
    st = router.state("nemo-rl", _NemoState)
    if m:
        _nemo_flush(router, st)
        st.rec = {"iteration": int(m.group(1)), "train_iters": float(m.group(2))}
        st.at = (line, sub, label)
        st.section = ""
        return True
    if st.rec is None:
        return False
    if s.endswith(":") and not s.startswith("•") and len(s) < 80:  # a section title: `📊 Training Results:`
        low = s.lower()
        st.section = "timing" if "timing" in low else ("eval" if "validation" in low else "results")
        return s.isascii() is False  # emoji titles are NeMo-RL's; an ASCII `key:` line is left to others
    b = BULLET_RE.match(s)
    if b is None:
        return False
    key, v = b.group("key").strip(), float(b.group("num"))
    if b.group("unit") == "ms":
        v *= 1e-3
    rec = st.rec
    low = key.lower()
    if st.section == "eval":
        rec.setdefault("eval_" + snake_case(key), v)
    elif low == "total step time":
        rec.setdefault("elapsed_s", v)
    elif b.group("unit") and (st.section == "timing" or s.rstrip().endswith("%)")):
        phase = NEMO_RL_TIMERS.get(key)
        col = phase_column(phase) if phase else TIMER_PREFIX + snake_case(key)
        rec[col] = rec.get(col, 0.0) + v if phase and col in rec else v  # two timers of one phase add up
    elif low in _NEMO_RESULTS:
        rec.setdefault(_NEMO_RESULTS[low], v)
    else:
        rec.setdefault(snake_case(key), v)
    router.ignored["joined_continuation"] += 1
    return True


def _nemo_finish(router) -> None:
    st = router.states.get("nemo-rl")
    if st is not None:
        _nemo_flush(router, st)


# ---- DeepSpeed-Chat step 3 ----------------------------------------------------------------------------------

_DS_OLD_TIMING = re.compile(r"^\|\s?E2E latency=")
_DS_PAIR = re.compile(r"\|\s?(?P<key>[A-Za-z][A-Za-z0-9 ]{0,40}?)=(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
                      r"|nan|inf)(?P<unit>s)?")
DS_OLD_STEP = re.compile(r"^epoch: ?(\d{1,9})\s?\|\s?step: ?(\d{1,19})\s?\|")
DS_NEW_STEP = re.compile(r"^Epoch: ?(\d{1,9}) \| Step: ?(\d{1,19}) \| PPO Epoch:")
DS_NEW_TIMING = re.compile(r"^(?P<what>End-to-End|Generation|Training)\s{1,4}=> Latency: ?(?P<num>[-+\d.eE]{1,40}|nan|inf)"
                            r"\s?s\b(?P<rest>.*)$")
DS_REWARD = re.compile(r"^(?:a|A)verage reward score: ?(?P<num>[-+\d.eE]{1,40}|nan|inf)"
                        r"(?: \| EMA reward score: ?(?P<ema>[-+\d.eE]{1,40}|nan|inf))?")
_DS_STEP_PAIRS = re.compile(r"(?P<key>[A-Za-z_][A-Za-z_ ]{0,40}?): ?(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
                            r"|nan|inf)(?=\s?\||\s*$)")
_DS_REST_PAIRS = re.compile(r"(?P<key>[A-Za-z][A-Za-z./ -]{0,40}?):? (?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)"
                            r"(?:[eE][-+]?\d+)?)\s?(?P<unit>s|ms|GB/sec)?(?=,|$)")
#: the older hybrid-engine timing print: key -> column
_DS_OLD_KEYS = {"E2E latency": "elapsed_s", "Generate time": phase_column("generation"),
                "Gen time": phase_column("generation"), "Training time": phase_column("ppo_train"),
                "Gather latency": TIMER_PREFIX + "gather", "Others": "others_s",
                "CurSamplesPerSec": "samples_per_s", "AvgSamplesPerSec": "avg_samples_per_s"}
_DS_NEW_PHASE = {"End-to-End": "elapsed_s", "Generation": phase_column("generate_experience"),
                 "Training": phase_column("ppo_train")}
_DS_STEP_KEYS = {"act_loss": "loss", "actor_loss": "loss", "cri_loss": "critic_loss", "critic_loss": "critic_loss",
                 "unsuper_loss": "unsupervised_loss", "unsupervised_loss": "unsupervised_loss",
                 "ppo_ep": "ppo_epoch", "ppo_epoch": "ppo_epoch"}


class _DsState:
    def __init__(self) -> None:
        self.rec: dict = {}
        self.at: tuple[int, int, str | None] | None = None


def _ds_flush(router, st: _DsState) -> None:
    rec, at = st.rec, st.at
    st.rec, st.at = {}, None
    if not rec:
        return
    if "iteration" not in rec:  # timings without their step line (a cut log): not a record
        router.ignored["no_step"] += 1
        return
    if router.allowed("deepspeed-chat"):
        router.emit("deepspeed-chat", at[0], at[1], at[2], rec)


#: First characters of DeepSpeed-Chat's lines (a cheap guard before its regexes)
_DS_FIRST = frozenset("|eEGTAa")


def _ds_handle(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    if s[:1] not in _DS_FIRST:
        return False
    st: _DsState = router.state("deepspeed-chat", _DsState)
    m = DS_OLD_STEP.match(s) or DS_NEW_STEP.match(s)
    if m:
        if "iteration" in st.rec:
            _ds_flush(router, st)
        st.at = st.at or (line, sub, label)
        st.rec["epoch"] = float(m.group(1))
        st.rec["iteration"] = int(m.group(2))
        for p in _DS_STEP_PAIRS.finditer(s):
            key = snake_case(p.group("key"))
            if key in ("epoch", "step"):
                continue
            st.rec.setdefault(_DS_STEP_KEYS.get(key, key), float(p.group("num")))
        return True
    if _DS_OLD_TIMING.match(s):
        if "elapsed_s" in st.rec:
            _ds_flush(router, st)
        st.at = st.at or (line, sub, label)
        for p in _DS_PAIR.finditer(s):
            key = p.group("key").strip()
            st.rec.setdefault(_DS_OLD_KEYS.get(key, snake_case(key)), float(p.group("num")))
        return True
    t = DS_NEW_TIMING.match(s)
    if t:
        what = t.group("what")
        if what == "End-to-End" and "elapsed_s" in st.rec:
            _ds_flush(router, st)
        st.at = st.at or (line, sub, label)
        st.rec.setdefault(_DS_NEW_PHASE[what], float(t.group("num")))
        prefix = {"End-to-End": "", "Generation": "gen_", "Training": "train_"}[what]
        for p in _DS_REST_PAIRS.finditer(t.group("rest")):
            key = snake_case(p.group("key"))
            if key == "tflops" and what == "End-to-End":
                st.rec.setdefault("tflops_per_gpu_logged", float(p.group("num")))  # DeepSpeed-Chat's own estimate
                continue
            v = float(p.group("num")) * (1e-3 if p.group("unit") == "ms" else 1.0)
            st.rec.setdefault(prefix + key, v)
        return True
    r = DS_REWARD.match(s)
    if r and st.rec:
        st.rec.setdefault("reward_score", float(r.group("num")))
        if r.group("ema"):
            st.rec.setdefault("ema_reward_score", float(r.group("ema")))
        return True
    return False


def _ds_finish(router) -> None:
    st = router.states.get("deepspeed-chat")
    if st is not None:
        _ds_flush(router, st)


# ---- AReaL / ReaLHF master worker: the step's end-to-end time -------------------------------------------------

AREAL_STEP_RE = re.compile(
    r"Epoch (?P<ep>\d{1,9})/\d{1,9} step \d{1,19}(?:/\d{1,19})? \(global step (?P<g>\d{1,19})\) finishes\."
    r".{0,300}?#End to end# execution time: \*(?P<e2e>[-+\d.eE]{1,40})\*s\."
    r"(?:.{0,80}?Total time consumption: (?P<total>[-+\d.eE]{1,40})s\.)?")


#: the master worker's line after each model function call (ReaLHF / AReaL 0.1-0.2
#: realhf/system/model_function_call.py: ``Model rpc {name} finished. Request-reply time {t:.4f}s. ...``)
AREAL_RPC_RE = re.compile(r"Model rpc (?P<name>[A-Za-z0-9_.\-]{1,80}) finished\. Request-reply time "
                          r"(?P<t>[-+\d.eE]{1,40})s\.")


class _ArealState:
    def __init__(self) -> None:
        self.rpcs: dict[str, float] = {}  # RPC name -> seconds since the last step line (calls summed)


def _areal_rpc_columns(rpcs: dict[str, float]) -> dict[str, float]:
    """The step's RPC seconds as columns: a known RPC (`flops.generation.AREAL_RPCS`) -> its phase (calls of one
    phase summed), any other -> a timer kept under its own name."""
    from ...flops.generation import AREAL_RPCS

    out: dict[str, float] = {}
    for name, seconds in rpcs.items():
        phase = AREAL_RPCS.get(name)
        column = phase_column(phase) if phase else TIMER_PREFIX + snake_case(name)
        out[column] = out.get(column, 0.0) + seconds
    return out


def _areal_handle(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
    if "Model rpc " in s:
        r = AREAL_RPC_RE.search(s)
        if r is None:
            return False
        try:
            seconds = float(r.group("t"))
        except ValueError:
            router.fail(line)
            return True
        if not 0 <= seconds < 1e7:  # negative / absurd: not seconds of this step
            router.fail(line)
            return True
        st: _ArealState = router.state("areal", _ArealState)
        st.rpcs[r.group("name")] = st.rpcs.get(r.group("name"), 0.0) + seconds
        router.ignored["areal_rpc"] += 1  # counted: its seconds go into the next step line's record
        return True
    if "#End to end#" not in s:
        return False
    m = AREAL_STEP_RE.search(s)
    if m is None:
        return False
    try:
        rec = {"iteration": int(m.group("g")), "epoch": float(m.group("ep")), "elapsed_s": float(m.group("e2e"))}
        if m.group("total"):
            rec["total_time_s"] = float(m.group("total"))  # cumulative since the start: an extra
    except ValueError:
        router.fail(line)
        return True
    st = router.state("areal", _ArealState)
    rec.update(_areal_rpc_columns(st.rpcs))
    st.rpcs = {}
    if router.allowed("areal"):
        router.emit("areal", line, sub, label, rec)
    return True


register(LogFormat(
    name="areal",
    source="AReaL / ReaLHF master worker: `Epoch E/N step s/S (global step G) finishes. … #End to end# execution time: "
           "*X*s. Total time consumption: Ys.`",
    example="(MasterWorker pid=96390) 20250222-11:10:40.102 realhf.system.model_function_call INFO: Model rpc actor_gen "
            "finished. Request-reply time 1410.2500s. Detailed time stats:\n"
            "(master_worker/0 pid=96390) 20250222-11:11:56.997 master worker INFO: Epoch 1/1 step 1/19 (global step 1) "
            "finishes. Average #tokens per batch is 111847. #End to end# execution time: *2124.429*s. Total time "
            "consumption: 2283.862s.",
    notes="iteration = the global step; the end-to-end time → `elapsed_s` (the phase timers `timeperf/<name>` are in its "
          "W&B / TensorBoard logs, mapped by the vocabulary); `Total time consumption` (cumulative) → `total_time_s`; "
          "each `Model rpc <name> finished. Request-reply time Xs.` line before it adds X to the step's phase "
          "(actor_gen generation, actor_inf old log-probs, ref_inf ref, critic_inf values, rew_inf reward, "
          "actor_train / critic_train the updates; another RPC a timer `timer_s_<name>`)",
    prefilter=r"#End to end# execution time|Model rpc \S+ finished\. Request-reply time",
    detect=r"\(global step \d+\) finishes\..*#End to end# execution time: \*",
    order=46,
    handle=_areal_handle,
))


register(LogFormat(
    name="nemo-rl",
    source="NeMo-RL GRPO / PPO console: `===== Step N/M =====` then `• Key: value` result and timing bullets",
    example="========================= Step 3/100 =========================\n▶ Preparing batch...\n"
            "📊 Training Results:\n  • Loss: 0.1032\n  • Avg Reward: 0.3486\n\n⏱️  Timing:\n  • Total step time: 66.55s\n"
            "  • exposed_generation: 32.52s (48.9%)\n  • policy_training: 25.05s (37.6%)\n"
            "  • policy_and_reference_logprobs: 4.78s (7.2%)\n  • weight_sync: 0.13s (0.2%)\n"
            "  • data_processing: 0.23s (0.4%)",
    notes="one record per step header; `Total step time` → `elapsed_s`; timers → phases (`generation` / "
          "`exposed_generation` → generation, `policy_training` → update_actor, `policy_and_reference_logprobs` → "
          "logprobs, `reward_calculation` → reward, `weight_sync` / `refit` → update_weights), others → `timer_s_*`",
    prefilter=r"^={5,}\s*Step \d+/\d+\s*={5,}\s*$",
    order=44,
    handle=_nemo_handle,
    finish=_nemo_finish,
))

register(LogFormat(
    name="deepspeed-chat",
    source="DeepSpeed-Chat step 3 (RLHF PPO) console: hybrid-engine `|E2E latency=…s |Generate time=…s |Training "
           "time=…s` + `epoch: E|step: S|act_loss: …`, or `Epoch: E | Step: S | Actor Loss: …` + `End-to-End => "
           "Latency: …s` / `Generation => Latency: …s` / `Training   => Latency: …s`",
    example="|E2E latency=2.12s |Gather latency=0.00s (0.00%) |Generate time=1.59s (75.13%) |Training time=0.42s "
            "(19.78%) |Others=0.11 (5.09%)|CurSamplesPerSec=1.89 |AvgSamplesPerSec=1.95\n"
            "epoch: 0|step: 12|ppo_ep: 1|act_loss: 0.25|cri_loss: 0.125|unsuper_loss: 0.0\n"
            "average reward score: -1.5",
    notes="consecutive lines are one record; `Generate time` → generation, `Generation => Latency` → "
          "generate_experience (rollout + forward passes), `Training` → ppo_train, E2E → `elapsed_s`, `Gather "
          "latency` → `timer_s_gather`; `act_loss` / `Actor Loss` → `loss`; the iteration is the step within "
          "its epoch",
    prefilter=r"^\|\s?E2E latency=|^[Ee]poch: ?\d+ ?\| ?[Ss]tep: ?\d|^(?:End-to-End|Generation|Training)\s+=> Latency:"
              r"|^[Aa]verage reward score:",
    order=45,
    handle=_ds_handle,
    finish=_ds_finish,
))
