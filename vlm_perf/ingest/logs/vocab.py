"""The canonical metric vocabulary: every log key spelling -> one column, its unit and its scope.

One table (``FIELDS``) says, per canonical column, its unit, whether it is per GPU or for the whole
job, and the key spellings that mean it. ``lookup(key)`` maps any spelling a framework prints to a
``Mapping`` (column, multiplier to the column's unit, why) or None (an unknown key, kept as an extra
column by the caller). The rules, applied in this order, each one written down so that a mapping
can be explained (``Mapping.why``) and tested:

1. **Whole keys** (``FULL_KEYS``): spellings that only mean something as a whole, e.g. veRL's
   ``perf/throughput`` (tokens/s per GPU) or Composer's ``loss/train/total``. Case-insensitive.
2. **Scale in the key**: ``actor/lr(1e-4)`` means the printed number is in units of 1e-4, so the
   value is multiplied by 1e-4 (also ``(x1e-4)``, ``[1e-4]``).
3. **Unit annotations** are removed and remembered: ``(ms)``, ``(s)``, ``(%)``, `` in s``,
   `` in ms`` and the key suffixes ``_ms``, ``_s``, ``_sec``, ``_seconds``, ``_pct``, ``_percent``
   (a time suffix only where the rest of the key is a time quantity).
4. **Prefixes** (``PREFIXES``) are removed, repeatedly: ``train/``, ``training/``, ``actor/``,
   ``perf/``, ``timing_s/`` (which also says: seconds), ``timing/``, ``trainer/``, ``throughput/``,
   ``metrics/``. A key with an evaluation prefix (``val/``, ``eval/``, ``eval_``, ``val_``,
   ``val-core/``, ``validation/``, ``test/``) is never mapped: ``is_eval_key`` says so and the
   record kind decides (evaluations are not iterations).
5. **Scope**: ``_per_gpu``, ``_per_device``, ``_gpu``, ``_device``, ``/gpu``, ``/device``,
   ``_per_rank`` make a throughput per GPU; without one, a spelling takes its synonym's default
   scope (``tps``/``wps``/``tgs`` per GPU as torchtitan and Megatron-DeepSpeed print them,
   ``tokens_per_sec`` for the job as nanotron prints it).
6. **Synonyms** (snake_case, after the steps above) name the column.

Wrapped values (``unwrap``, rule 7): a number printed inside a repr is the number:
``np.float64(-0.00066)`` / ``numpy.float32(...)`` / ``np.int64(...)`` (numpy >= 2 scalar reprs),
``tensor(1.23, device='cuda:0')`` (torch, any keyword arguments after the number, a one-element
``tensor([1.23])``), ``Array(1.5, dtype=float32)`` (JAX) / ``array(1.5, dtype=float32)`` (mlx),
``Decimal('1.5')``, a quoted number ``'1.5'`` / ``"1.5"``, and a list of ONE value ``[1e-05]``. A list
of several values (``lr=[1e-05, 2e-05]``: per parameter group) is not one number; a wrapper not in
this list (``Foo(1.5)``) is not read: both are dropped, and ``unwrap`` says why (``parse --explain``).

Values: ``value_of`` reads ``1.2e+03``, ``12,345``, ``5.2K`` (K/M/B/G/T = 1e3/1e6/1e9/1e9/1e12),
``43%`` (a percentage: ÷ 100 for fractions), ``512.3ms`` / ``2.5s`` (a time unit on the value wins
over the key's), ``nan``/``inf``; a value followed by a parenthesised average (``0.41 (1.87)``,
MetricLogger) is the first number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .schema import snake_case


@dataclass(frozen=True)
class Field:
    """One canonical column: ``unit`` of its values, ``scope`` (``per GPU``, ``job``, or ``-``) and the
    snake_case ``synonyms`` (after prefix, unit and scope removal) that mean it."""

    column: str
    unit: str
    scope: str
    synonyms: tuple[str, ...]
    #: the kind of unit the key or value may carry: "time" (ms/s converted to seconds), "fraction"
    #: (a percentage is divided by 100), "" (taken as printed)
    quantity: str = ""


#: The canonical RL-step phases (``vlm_perf.flops.generation.PHASES``; a test keeps the two equal: the
#: vocabulary does not import the FLOPs layer at start-up). Column ``phase_s_<phase>`` holds a phase's seconds.
_RL_PHASES: tuple[str, ...] = ("generation", "old_log_prob", "ref", "values", "update_critic", "update_actor",
                               "reward", "adv", "update_weights", "save_checkpoint", "testing", "make_experience",
                               "ppo_train", "logprobs", "generate_experience", "ref_values")
PHASE_PREFIX = "phase_s_"
#: Column prefix of a timer that is not a phase of the step (an unknown name, or a timer nested in a phase):
#: kept, in seconds, under its own name
TIMER_PREFIX = "timer_s_"


def phase_column(phase: str) -> str:
    """The iteration-frame column of a canonical RL phase's seconds."""
    return PHASE_PREFIX + phase


#: The vocabulary. Order matters only for the docs.
FIELDS: tuple[Field, ...] = (
    Field("loss", "-", "-", ("loss", "lm_loss", "train_loss", "reduced_train_loss", "total_loss", "avg_loss",
                             "step_loss")),
    Field("lr", "-", "-", ("lr", "learning_rate")),
    Field("grad_norm", "-", "-", ("grad_norm", "gradient_norm", "grad_l2_norm", "total_grad_norm")),
    Field("elapsed_s", "s per iteration", "-",
          ("elapsed_s", "step_time", "time_per_step", "time_per_iteration", "elapsed_time_per_iteration",
           "iteration_time", "iter_time_per_step", "train_step_timing", "step_timing", "time", "dt", "batch_time",
           "time_step", "sec_per_step", "s_per_step", "seconds_per_step", "seconds"),
          quantity="time"),
    Field("tflops_per_gpu_logged", "TFLOP/s", "per GPU",
          ("tflops", "tflop_s", "tflops_s", "tflops_per_sec", "tflops_per_second", "model_tflops",
           "model_tflop_s", "model_tflops_per_sec", "tflops_per_gpu_logged", "tflop_per_s", "tflops_per_s",
           "model_tflop_per_s"), quantity=""),
    Field("mfu_logged", "fraction", "-", ("mfu", "model_flops_utilization", "mfu_logged"), quantity="fraction"),
    Field("tokens_per_s", "tokens/s", "per GPU", ("tps", "wps", "tgs", "tokens_per_gpu_per_s", "tgs_per_gpu"),
          quantity=""),
    Field("tokens_per_s_total", "tokens/s", "job",
          ("tokens_per_sec", "tokens_per_second", "tokens_s", "tokens_per_s", "tok_sec", "tok_s", "tok_per_sec", "tokens_per_s_total",
           "throughput_tokens", "tokens_per_sec_total"), quantity=""),
    Field("global_batch_size", "samples", "job", ("global_batch_size", "global_batch")),
    Field("consumed_samples", "samples", "job", ("consumed_samples",)),
    # ---- RL (GRPO / PPO) steps: rollout lengths and token counts (veRL / EasyR1 compute_data_metrics,
    # TRL GRPOTrainer, OpenRLHF experience info), per response unless said otherwise
    Field("prompt_len_mean", "tokens per sample", "-", ("prompt_length_mean", "prompt_len_mean")),
    Field("prompt_len_max", "tokens per sample", "-", ("prompt_length_max", "prompt_len_max")),
    Field("prompt_len_min", "tokens per sample", "-", ("prompt_length_min", "prompt_len_min")),
    Field("response_len_mean", "tokens per sample", "-",
          ("response_length_mean", "response_len_mean", "completions_mean_length", "response_length",
           "completion_length", "glen", "rollout_response_length_mean")),
    Field("response_len_max", "tokens per sample", "-",
          ("response_length_max", "response_len_max", "completions_max_length")),
    Field("response_len_min", "tokens per sample", "-",
          ("response_length_min", "response_len_min", "completions_min_length")),
    Field("response_clip_ratio", "fraction", "-",
          ("response_length_clip_ratio", "response_clip_ratio", "completions_clipped_ratio", "rollout_truncated_rate"),
          quantity="fraction"),
    Field("sequence_len_mean", "tokens per sample", "-", ("total_length", "sequence_len_mean", "tlen")),
    Field("step_tokens", "tokens per iteration", "job", ("total_num_tokens", "step_tokens")),
    Field("rl_samples", "responses per iteration", "job", ("rollout_num_samples", "rl_samples")),
    Field("tokens_seen", "tokens (cumulative)", "job", ("num_input_tokens_seen", "tokens_seen")),
    Field("mfu_old_log_prob_logged", "fraction", "-", (), quantity="fraction"),
    Field("mfu_critic_logged", "fraction", "-", (), quantity="fraction"),
    # one column per canonical RL phase (seconds of that phase in the step): ``phase_column(phase)``
    *(Field(f"phase_s_{_p}", "s per iteration", "-", (), quantity="time") for _p in _RL_PHASES),
)

#: Whole keys (lower-case) that map only as a whole: key -> (column, multiplier, why).
FULL_KEYS: dict[str, tuple[str, float, str]] = {
    "perf/throughput": ("tokens_per_s", 1.0, "veRL: tokens/s per GPU"),
    "perf/time_per_step": ("elapsed_s", 1.0, "veRL: seconds per step"),
    "timing_s/step": ("elapsed_s", 1.0, "veRL: seconds per step"),
    "perf/mfu/actor": ("mfu_logged", 1.0, "veRL: a fraction"),
    "mfu/actor": ("mfu_logged", 1.0, "early veRL: a fraction"),
    "perf/mfu_actor": ("mfu_logged", 1.0, "EasyR1: the actor update's MFU, a fraction"),
    "perf/mfu/actor_infer": ("mfu_old_log_prob_logged", 1.0, "veRL: the old-policy log-prob pass's MFU"),
    "perf/mfu/critic": ("mfu_critic_logged", 1.0, "veRL: the critic update's MFU"),
    "num_tokens": ("tokens_seen", 1.0, "TRL GRPOTrainer: prompt + completion tokens seen since the start"),
    "actor/pg_loss": ("loss", 1.0, "veRL GRPO/PPO: the policy-gradient loss is the training loss"),
    "loss/train/total": ("loss", 1.0, "Composer: the total training loss"),
    "throughput/device/tokens_per_sec": ("tokens_per_s", 1.0, "Composer: tokens/s per device"),
    "throughput/tokens_per_sec": ("tokens_per_s_total", 1.0, "Composer: tokens/s of the job"),
    "throughput/device/mfu": ("mfu_logged", 1.0, "Composer: a fraction"),
    "device/mfu": ("mfu_logged", 1.0, "Lightning ThroughputMonitor: a fraction"),
    "tokens/s/device": ("tokens_per_s", 1.0, "MaxText: tokens/s per device"),
    "tflop/s/device": ("tflops_per_gpu_logged", 1.0, "MaxText: TFLOP/s per device"),
    "throughput per gpu (tflop/s/gpu)": ("tflops_per_gpu_logged", 1.0, "Megatron: TFLOP/s per GPU"),
    "elapsed time per iteration (ms)": ("elapsed_s", 1e-3, "Megatron: ms per iteration"),
    "train_step_timing in s": ("elapsed_s", 1.0, "NeMo: seconds per step"),
    "hardware_tflops_per_gpu": ("", 1.0, "nanotron: hardware (recomputation-counting) TFLOP/s kept as an extra"),
    "hardware_tflops": ("", 1.0, "hardware TFLOP/s kept as an extra (model TFLOP/s is the logged figure)"),
    "lrm": ("", 1.0, "nanochat: a learning-rate multiplier, not the learning rate"),
    "time/batch": ("", 1.0, "Composer: a batch counter, not a time"),
    "time/sample": ("", 1.0, "Composer: a sample counter, not a time"),
    "time/token": ("", 1.0, "Composer: a token counter, not a time"),
    "time/train": ("", 1.0, "Composer: wall hours since start, not a step time"),
    "time/val": ("", 1.0, "Composer: wall hours of evaluation"),
    "time/total": ("", 1.0, "Composer: wall hours since start"),
    "data_time": ("", 1.0, "data-loading time, not the step time (kept as an extra)"),
    "eta": ("", 1.0, "time remaining, not a step time"),
    "train_runtime": ("", 1.0, "HF end-of-run summary: total seconds"),
    "rollout/response_len/mean": ("response_len_mean", 1.0, "slime: mean response length of the rollout"),
    "rollout/response_len/max": ("response_len_max", 1.0, "slime: longest response of the rollout"),
    "rollout/response_len/min": ("response_len_min", 1.0, "slime: shortest response of the rollout"),
    "rollout/truncated_ratio": ("response_clip_ratio", 1.0, "slime: share of responses cut at the length limit"),
}

#: Prefixes removed from a key (repeatedly), and the unit each one implies.
PREFIXES: tuple[tuple[str, str], ...] = (
    ("train/", ""), ("training/", ""), ("actor/", ""), ("perf/", ""), ("timing_s/", "s"), ("timing_ms/", "ms"),
    ("timing/", ""), ("trainer/", ""), ("throughput/", ""), ("metrics/", ""),
)
#: Keys never shortened by a prefix (none today; `train_` is deliberately not a prefix: modded-nanogpt's
#: `train_time` is the cumulative training time, not a step time)
_PREFIX_KEEP_WHOLE: set[str] = set()

#: Key prefixes of evaluation metrics (never mapped to training columns).
EVAL_PREFIXES: tuple[str, ...] = ("val/", "eval/", "eval_", "val_", "val-", "validation/",
                                  "validation_", "test/", "test_", "valid/", "valid_", "evaluation/")
#: Keys of an end-of-run summary (HF Trainer's ``train()`` result and friends).
SUMMARY_KEYS: frozenset[str] = frozenset({
    "train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos", "train_tokens_per_second",
})

#: Keys of an end-of-run report that holds no per-step metric (ms-swift / HF ``train()`` result printed with the
#: checkpoint paths, a trainer state dump): the record is a summary.
END_OF_RUN_KEYS: frozenset[str] = frozenset({
    "last_model_checkpoint", "best_model_checkpoint", "best_metric", "log_history", "train_result",
})
#: Keys that never decide a record's kind: step and epoch counters, progress, wall clocks, and the timer of the
#: validation pass (``timing_s/testing``: present on a validation-only step).
KIND_NEUTRAL: frozenset[str] = frozenset({
    "epoch", "step", "global_step", "current_steps", "total_steps", "max_steps", "percentage", "elapsed_time",
    "remaining_time", "global_step/max_steps", "_step", "_runtime", "_timestamp", "iteration", "iter",
    "training/global_step", "training/epoch", "train/global_step", "train/epoch", "trainer/global_step",
    "timing_s/testing", "timing_s/stop_profile", "timing_s/start_profile", "memory(gib)", "memory",
})


def record_kind(keys) -> str:
    """The kind of a record from the keys it holds (values present): ``summary`` when one is an end-of-run
    key (``SUMMARY_KEYS``, ``END_OF_RUN_KEYS``); ``eval`` when every key that is not neutral
    (``KIND_NEUTRAL``: counters, progress, the validation timer) is an evaluation key; ``other`` when no key
    is a metric at all (a progress or counter print); else ``train``. Keys compare case-insensitively."""
    keys = tuple(keys)
    hit = _KIND_CACHE.get(keys)
    if hit is not None:
        return hit
    out = _record_kind(keys)
    if len(_KIND_CACHE) < 10_000:
        _KIND_CACHE[keys] = out
    return out


_KIND_CACHE: dict[tuple, str] = {}


def _record_kind(keys: tuple) -> str:
    metrics = 0
    evals = 0
    for k in keys:
        if not isinstance(k, str):
            metrics += 1
            continue
        low = k.strip().lower()
        if low in SUMMARY_KEYS or low in END_OF_RUN_KEYS:
            return "summary"
        if low in KIND_NEUTRAL:
            continue
        metrics += 1
        evals += is_eval_key(low)
    if not metrics:
        return "other"
    return "eval" if evals == metrics else "train"


_SCALE_RE = re.compile(r"\s*[\(\[]\s*(?:x\s*)?([0-9.]*[eE][-+]?\d+)\s*[\)\]]")
_UNIT_RE = re.compile(r"\s*(?:\((ms|s|sec|%|pct)\)| in (ms|s)\b)", re.IGNORECASE)
_SCOPE_SUFFIXES = ("_per_gpu", "_per_device", "_per_rank", "_gpu", "_device")
_TIME_SUFFIXES = (("_ms", "ms"), ("_seconds", "s"), ("_secs", "s"), ("_sec", "s"), ("_s", "s"))
_PCT_SUFFIXES = ("_pct", "_percent")


@dataclass(frozen=True)
class Mapping:
    """A key's meaning: ``column`` ("" = deliberately not mapped), ``mult`` converts the printed
    number to the column's unit (before a value's own unit), ``quantity`` tells ``value_of`` how to
    read a unit on the value, ``why`` the rule that decided."""

    column: str
    mult: float
    quantity: str
    why: str
    #: the part of ``mult`` that is the key's unit (ms -> 1e-3, % -> 0.01); a unit printed on the value
    #: replaces it
    unit_mult: float = 1.0


#: The RL-step columns (lengths, token counts, per-phase MFUs, phase seconds): declared here, produced by every
#: reader that maps keys through the vocabulary; ``is_rl_column`` also accepts a kept timer (``timer_s_*``).
RL_COLUMNS: frozenset[str] = frozenset(
    f.column for f in FIELDS
    if f.column.startswith(PHASE_PREFIX) or f.column in {
        "prompt_len_mean", "prompt_len_max", "prompt_len_min", "response_len_mean", "response_len_max",
        "response_len_min", "response_clip_ratio", "sequence_len_mean", "step_tokens", "rl_samples", "tokens_seen",
        "mfu_old_log_prob_logged", "mfu_critic_logged"})


def is_rl_column(column: str) -> bool:
    """A declared RL-step column or a kept RL timer (``timer_s_<name>``)."""
    return column in RL_COLUMNS or column.startswith(TIMER_PREFIX)


_SYN: dict[str, Field] = {}
for _f in FIELDS:
    for _s in _f.synonyms:
        key = snake_case(_s)
        if key in _SYN:
            raise ValueError(f"vocabulary: synonym {_s!r} given for {_SYN[key].column!r} and {_f.column!r}")
        _SYN[key] = _f
_BY_COLUMN = {f.column: f for f in FIELDS}
#: Columns whose synonyms may carry a scope suffix (throughputs).
_SCOPED = {"tokens_per_s", "tokens_per_s_total", "tflops_per_gpu_logged"}
_TIME_UNIT = {"ms": 1e-3, "s": 1.0, "sec": 1.0}


def is_eval_key(key: str) -> bool:
    low = key.strip().lower()
    return low.startswith(EVAL_PREFIXES) or "/val/" in low or "/eval/" in low


_CACHE: dict[str, Mapping | None] = {}


def lookup(key: str) -> Mapping | None:
    """The mapping of a log key, or None (unknown: the caller keeps it as an extra column). Cached:
    a log has few distinct keys."""
    try:
        return _CACHE[key]
    except KeyError:
        pass
    out = _lookup(key)
    if len(_CACHE) < 100_000:
        _CACHE[key] = out
    return out


def _lookup(key: str) -> Mapping | None:
    low = key.strip().lower()
    if not low:
        return None
    if low in FULL_KEYS:
        col, mult, why = FULL_KEYS[low]
        return Mapping(col, mult, _BY_COLUMN[col].quantity if col else "", f"whole key: {why}", mult)
    if is_eval_key(low):
        return None
    timer = _timer(low)
    if timer is not None:
        return timer
    why = []
    mult = 1.0
    m = _SCALE_RE.search(low)
    if m:
        try:
            mult = float(m.group(1))
        except ValueError:
            return None
        low = (low[:m.start()] + low[m.end():]).strip()
        why.append(f"scale {m.group(1)} in the key")
    unit = ""
    m = _UNIT_RE.search(low)
    if m:
        unit = (m.group(1) or m.group(2)).lower()
        low = (low[:m.start()] + low[m.end():]).strip()
        why.append(f"unit ({unit}) in the key")
    stripped = True
    while stripped:
        stripped = False
        for pre, pre_unit in PREFIXES:
            if low.startswith(pre) and len(low) > len(pre) and snake_case(low) not in _PREFIX_KEEP_WHOLE:
                low = low[len(pre):]
                unit = unit or pre_unit
                why.append(f"prefix {pre!r} removed")
                stripped = True
                break
    if low in FULL_KEYS:  # e.g. `timing_s/step` after a `train/` prefix
        col, m2, w = FULL_KEYS[low]
        return Mapping(col, mult * m2, _BY_COLUMN[col].quantity if col else "", f"whole key: {w}", m2)
    snake = snake_case(low.replace("/", "_per_") if "/s" in low or "/gpu" in low or "/device" in low else low)
    snake = snake.replace("_per_s_per_", "_per_s_")
    scope = ""
    field = _SYN.get(snake)
    if field is None:
        for suf in _SCOPE_SUFFIXES:
            if snake.endswith(suf) and snake[:-len(suf)] in _SYN and _SYN[snake[:-len(suf)]].column in _SCOPED:
                snake = snake[:-len(suf)]
                scope = "per GPU"
                why.append(f"{suf!r}: per GPU")
                field = _SYN[snake]
                break
    if field is None:
        for suf, u in _TIME_SUFFIXES:
            if snake.endswith(suf) and _SYN.get(snake[:-len(suf)]) is not None \
                    and _SYN[snake[:-len(suf)]].quantity == "time":
                field = _SYN[snake[:-len(suf)]]
                unit = unit or u
                why.append(f"suffix {suf!r}: {u}")
                break
    if field is None:
        for suf in _PCT_SUFFIXES:
            if snake.endswith(suf) and _SYN.get(snake[:-len(suf)]) is not None \
                    and _SYN[snake[:-len(suf)]].quantity == "fraction":
                field = _SYN[snake[:-len(suf)]]
                unit = "%"
                why.append(f"suffix {suf!r}: percent")
                break
    if field is None:
        return None
    col = field.column
    if col in ("tokens_per_s", "tokens_per_s_total") and scope == "per GPU":
        col = "tokens_per_s"
    elif col == "tokens_per_s_total" and not scope:
        why.append("no per-GPU mark: the job's rate")
    unit_mult = 1.0
    if field.quantity == "time":
        if unit in _TIME_UNIT:
            unit_mult = _TIME_UNIT[unit]
        elif unit:
            return None
    elif field.quantity == "fraction" and unit in ("%", "pct"):
        unit_mult = 0.01
    elif unit:
        return None  # a time unit on a non-time quantity: not this column
    why.append(f"synonym of {col!r}")
    return Mapping(col, mult * unit_mult, field.quantity, "; ".join(why), unit_mult)


#: RL-step timer prefixes (veRL / EasyR1 ``compute_timing_metrics``) and their unit.
_TIMER_PREFIXES: tuple[tuple[str, float], ...] = (("timing_s/", 1.0), ("timing_ms/", 1e-3))


def _timer(low: str) -> Mapping | None:
    """Rule 0 (before the prefixes): ``timing_s/<name>`` (``timing_ms/``: ms) is a timer of one RL step. A
    phase's timer (``vlm_perf.flops.generation.PHASE_TIMERS``: ``gen``, ``old``, ``old_log_prob``, ``ref``,
    ``update_actor``, ``reward``, ...) -> ``phase_s_<phase>``; any other single name (a timer nested in a
    phase, outside the step, or unknown) -> ``timer_s_<name>``, kept in seconds and never summed as a phase;
    a deeper name (``timing_s/agent_loop/tool_calls/mean``: statistics over a phase's requests, some of them
    counts) -> kept as an extra as printed."""
    found = next(((pre, mult) for pre, mult in _TIMER_PREFIXES if low.startswith(pre) and len(low) > len(pre)), None)
    if found is None:
        return _derived_timer(low) or _openrlhf_timer(low)
    pre, mult = found
    name = low[len(pre):].strip()
    if "/" in name:
        return Mapping("", 1.0, "", f"{pre}{name}: a statistic within a phase (not one timer): kept as an extra")
    from ...flops.generation import NESTED_TIMERS, OUTSIDE_STEP_TIMERS, PHASE_TIMERS

    if name in PHASE_TIMERS:
        phase = PHASE_TIMERS[name]
        return Mapping(phase_column(phase), mult, "time", f"RL timer {name!r} ({pre}): phase {phase!r}", mult)
    if name in NESTED_TIMERS:
        why = f"RL timer {name!r} runs inside phase {NESTED_TIMERS[name]!r}: kept, not summed"
    elif name in OUTSIDE_STEP_TIMERS:
        why = f"RL timer {name!r} runs outside the step: kept, not summed"
    else:
        why = f"unknown RL timer {name!r}: kept in seconds, not a phase"
    return Mapping(TIMER_PREFIX + snake_case(name), mult, "time", why, mult)


_SIIRL_PREFIX = "perf/delta_time/"


def _derived_timer(low: str) -> Mapping | None:
    """siiRL ``perf/delta_time/<node>`` and slime ``perf/<timer>_time`` (seconds): a phase's timer
    (``flops.generation.SIIRL_TIMERS`` / ``SLIME_TIMERS``) -> ``phase_s_<phase>``, the step's -> ``elapsed_s``, a
    known kept timer (or, under siiRL's prefix, any other node) -> ``timer_s_<name>``; other ``perf/*_time`` keys
    are not slime's and go through the usual rules."""
    name = low.removeprefix("train/")
    for prefix in _PREFIXED_TIMERS:
        if name.startswith(prefix):
            return _prefixed_timer(prefix, name[len(prefix):])
    if not name.startswith("perf/"):
        return None
    from ...flops.generation import SIIRL_TIMERS, SLIME_KEPT_TIMERS, SLIME_TIMERS

    if name.startswith(_SIIRL_PREFIX):
        node = name[len(_SIIRL_PREFIX):].strip()
        if not node or "/" in node:
            return None
        if node == "step":
            return Mapping("elapsed_s", 1.0, "time", "siiRL: perf/delta_time/step, the step's seconds", 1.0)
        if node in SIIRL_TIMERS:
            phase = SIIRL_TIMERS[node]
            return Mapping(phase_column(phase), 1.0, "time", f"siiRL timer {node!r}: phase {phase!r}", 1.0)
        return Mapping(TIMER_PREFIX + snake_case(node), 1.0, "time",
                       f"siiRL timer {node!r} (a DAG / data-buffer timer or nested): kept in seconds, not summed", 1.0)
    if not name.endswith("_time"):
        return None
    timer = name[len("perf/"):-len("_time")]
    if timer == "step":
        return Mapping("elapsed_s", 1.0, "time", "slime: perf/step_time (train_wait + train), the step's seconds", 1.0)
    if timer in SLIME_TIMERS:
        phase = SLIME_TIMERS[timer]
        return Mapping(phase_column(phase), 1.0, "time", f"slime timer {timer!r}: phase {phase!r}", 1.0)
    if timer in SLIME_KEPT_TIMERS:
        return Mapping(TIMER_PREFIX + timer, 1.0, "time", f"slime timer {timer!r}: kept in seconds, not summed", 1.0)
    return None


# prefix -> (framework, the name of its whole-step timer, what that timer is, its phase table in flops.generation)
_PREFIXED_TIMERS = {
    "time/": ("ROLL", "step_total", "the step's seconds", "ROLL_TIMERS"),
    "timeperf/": ("AReaL", "e2e", "the step's end-to-end seconds", "AREAL_TIMERS"),
}


def _prefixed_timer(prefix: str, name: str) -> Mapping | None:
    """ROLL ``time/<name>`` and AReaL ``timeperf/<name>`` (seconds): the step's timer (``step_total`` / ``e2e``) ->
    ``elapsed_s``, a phase timer (``flops.generation.ROLL_TIMERS`` / ``AREAL_TIMERS``) -> ``phase_s_<phase>``; other
    names (AReaL's ``rollout_wait_fraction`` is a fraction) go through the usual rules."""
    from ...flops import generation

    framework, step_timer, what, table = _PREFIXED_TIMERS[prefix]
    if name == step_timer:
        return Mapping("elapsed_s", 1.0, "time", f"{framework}: {prefix}{name}, {what}", 1.0)
    phase = getattr(generation, table).get(name)
    if phase is None:
        return None
    return Mapping(phase_column(phase), 1.0, "time", f"{framework} timer {name!r} ({prefix}): phase {phase!r}", 1.0)


#: TRL ``trl/extras/profiling.py``: ``f"{metric_prefix}: {name}"`` with the default prefix
_TRL_PROFILING = "profiling/time taken:"


def _openrlhf_timer(low: str) -> Mapping | None:
    """OpenRLHF ``PPOTrainer`` timers (``timing/generation``, ``timing/make_experience``, ``timing/ppo_train``,
    ``timing/broadcast``, seconds; ``train/``-prefixed on W&B) -> their phases; ``timing/step_total`` (the SUM of
    those timers, not a wall clock) -> the step time. Any other ``timing/`` key goes through the usual rules."""
    name = low.removeprefix("train/")
    if name.startswith(_TRL_PROFILING):  # TRL's profiling_context (W&B only): a method's time, kept
        what = name[len(_TRL_PROFILING):].strip()
        return Mapping(TIMER_PREFIX + snake_case(what), 1.0, "time", f"TRL profiling timer {what!r}: kept in "
                       "seconds, not a phase (a method may run several times per step)", 1.0) if what else None
    if not name.startswith("timing/"):
        return None
    name = name[len("timing/"):]
    if name == "step_total":
        return Mapping("elapsed_s", 1.0, "time", "OpenRLHF: timing/step_total, the sum of its phase timers (not a "
                                                 "wall clock: nothing is unaccounted by construction)", 1.0)
    from ...flops.generation import OPENRLHF_TIMERS, PHASE_TIMERS

    if name not in OPENRLHF_TIMERS:
        return None
    phase = PHASE_TIMERS[name]
    return Mapping(phase_column(phase), 1.0, "time", f"OpenRLHF timer {name!r} (timing/): phase {phase!r}", 1.0)


#: A number inside a repr a trainer printed (rule 7); ``num``: the number's text.
_NUMBER_TEXT = r"[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf|infinity)"
#: Wrapper names whose single argument is the value (numpy scalar reprs, torch/JAX/mlx arrays, Decimal).
WRAPPERS = r"(?:(?:np|numpy|torch|jnp|jax\.numpy|mx)\.)?(?:float(?:16|32|64|128)|u?int(?:8|16|32|64)|longdouble|" \
           r"double|half|bfloat16|tensor|Tensor|Array|array|Decimal)"
_WRAPPED_RE = re.compile(
    rf"^\s*(?P<name>{WRAPPERS})\(\s*(?P<lb>\[\s*)?(?P<q>['\"]?)(?P<num>{_NUMBER_TEXT})(?P=q)\s*(?(lb)\])\s*"
    r"(?:,[^()\n]{0,200}?(?:\([^()\n]{0,60}\)[^()\n]{0,100}?)?)?\)\s*$")
_QUOTED_RE = re.compile(rf"^\s*(?P<q>['\"])(?P<num>{_NUMBER_TEXT})(?:\s?(?:%|ms|s|sec))?(?P=q)\s*$")
_LIST1_RE = re.compile(r"^\s*\[\s*(?P<inner>[^\[\],]{1,300})\s*\]\s*$")
_OTHER_CALL_RE = re.compile(r"^\s*(?P<name>[A-Za-z_][\w.]{0,60})\(.*\)\s*$", re.DOTALL)
_LIST_RE = re.compile(r"^\s*\[.*\]\s*$", re.DOTALL)


@dataclass(frozen=True)
class Unwrapped:
    """What ``unwrap`` made of a value text: ``text`` the number's text (None: not a number),
    ``wrapper`` what was removed ("" for a plain number), ``start`` the offset of ``text`` in the
    value text, ``why`` the reason a value was not read (``text`` None)."""

    text: str | None
    wrapper: str = ""
    start: int = 0
    why: str = ""


def unwrap(raw: str) -> Unwrapped:
    """Rule 7: the number inside a wrapped value text (see the module doc); a plain number comes back
    as it is. Never raises; bounded (anchored regexes on at most the value text)."""
    if not isinstance(raw, str):
        return Unwrapped(None, why="not text")
    s = raw.strip()
    if not s or s[0] in "0123456789.-+" or s[0] in "nNiI" and _VALUE_RE.match(s):
        return Unwrapped(raw, "", 0)
    if len(raw) > 600:
        return Unwrapped(None, why="value text too long to be one number")
    m = _WRAPPED_RE.match(raw)
    if m:
        return Unwrapped(m.group("num"), f"{m.group('name')}(...)", m.start("num"))
    m = _QUOTED_RE.match(raw)
    if m:
        return Unwrapped(raw[m.start("num"):m.end() - 1].rstrip().rstrip("'\"").rstrip(), "quotes", m.start("num"))
    m = _LIST1_RE.match(raw)
    if m:
        inner = unwrap(m.group("inner"))
        if inner.text is not None:
            return Unwrapped(inner.text, "list of one value" + (f", {inner.wrapper}" if inner.wrapper else ""),
                             m.start("inner") + inner.start)
        return Unwrapped(None, why=f"a list of one value that is not a number ({inner.why})")
    if _LIST_RE.match(raw):
        n = raw.count(",") + 1
        return Unwrapped(None, why=f"a list of {n} values (not one number)")
    m = _OTHER_CALL_RE.match(raw)
    if m:
        return Unwrapped(None, why=f"wrapper {m.group('name')}(...) not understood")
    return Unwrapped(None, why="not a number")


_PLAIN_START = frozenset("0123456789-+.")


def scalar_of(value: object) -> object:
    """A dict value as a scalar for ``preprocess.to_float``: a wrapped text (rule 7) -> the number's
    text, a list/tuple of one value -> that value; anything else unchanged."""
    if isinstance(value, str):
        if value[:1] in _PLAIN_START:  # a plain number (the common case): nothing to unwrap
            return value
        u = unwrap(value)
        return u.text if u.text is not None and u.wrapper else value
    if isinstance(value, (list, tuple)) and len(value) == 1 and not isinstance(value[0], (list, tuple, dict)):
        return scalar_of(value[0])
    return value


_VALUE_RE = re.compile(
    r"^\s*(?P<num>[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf|infinity))"
    r"\s?(?P<suf>[KMBGT](?![a-zA-Z]))?\s?(?P<unit>%|ms|s|sec|GiB|GB|MiB|MB)?(?![\w.])")
_SUFFIX = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_VALUE_UNIT = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "%": 0.01}


def value_of(raw: str, mapping: Mapping | None = None) -> float | None:
    """The number a value text means for ``mapping`` (None: not a number): the printed number, times
    its K/M/B/G/T suffix, times the key's scale, times the unit: the value's own unit (``ms``, ``s``
    for a time, ``%`` for a fraction) where it prints one, else the key's."""
    m = _VALUE_RE.match(raw)
    if not m:
        u = unwrap(raw)
        if u.text is None or not u.wrapper:
            return None
        raw = u.text
        m = _VALUE_RE.match(raw)
        if not m:
            return None
    try:
        v = float(m.group("num").replace(",", ""))
    except ValueError:
        return None
    suffix, scale, unit = _factors(m, mapping)
    if mapping is None:
        return v * suffix
    out = v * suffix * scale * unit
    return 0.0 if out == 0.0 else out


def docs_markdown() -> str:
    """The vocabulary section of docs/log-formats.md (a test keeps it in sync)."""
    out = [VOCAB_BEGIN, "", "| column | unit | scope | synonyms (snake_case, after prefix/unit/scope removal) |",
           "|---|---|---|---|"]
    for f in FIELDS:
        syn = ", ".join(f"`{s}`" for s in f.synonyms)
        out.append(f"| `{f.column}` | {f.unit} | {f.scope} | {syn} |")
    out += ["", "Whole keys (matched before any other rule; an empty column means: deliberately kept as an extra):",
            "", "| key | column | × | why |", "|---|---|---|---|"]
    for k, (col, mult, why) in FULL_KEYS.items():
        out.append(f"| `{k}` | {f'`{col}`' if col else '(extra)'} | {mult:g} | {why} |")
    out += ["", "Prefixes removed: " + ", ".join(f"`{p}`" + (f" (unit {u})" if u else "") for p, u in PREFIXES)
            + " (`train_` is not one: `train_time` is a cumulative time, `train_loss` a synonym).",
            "Evaluation prefixes (never mapped; the record is an evaluation when all its metrics carry one): "
            + ", ".join(f"`{p}`" for p in EVAL_PREFIXES) + ".",
            "End-of-run summary keys (the record is a summary): " + ", ".join(f"`{k}`" for k in sorted(SUMMARY_KEYS))
            + "; end-of-run report keys (also a summary): " + ", ".join(f"`{k}`" for k in sorted(END_OF_RUN_KEYS))
            + ".",
            "Keys that never decide a record's kind (a record of them alone is `other`, not an iteration): "
            + ", ".join(f"`{k}`" for k in sorted(KIND_NEUTRAL)) + ".",
            "Wrapped values: the number inside `np.float64(...)` / `np.float32` / `np.int64` (numpy reprs), "
            "`tensor(1.23, device='cuda:0')`, `Array(...)` / `array(...)`, `Decimal('...')`, quotes, and a list of "
            "one value `[1e-05]`; a list of several values or another wrapper is not read (`parse --explain` says "
            "why).",
            "Multi-word keys: `Train loss 1.23`, `Learning Rate 1e-05` (a whole `, `-separated segment of words then "
            "a number); a leading `Train`/`Val`/`Eval`/`Test` word is the mode (a line with `train loss` and `val "
            "loss` is an evaluation).",
            "Scope suffixes (throughputs: per GPU): " + ", ".join(f"`{s}`" for s in _SCOPE_SUFFIXES)
            + ", and `/gpu`, `/device`.",
            "Time units: key suffixes " + ", ".join(f"`{s}`" for s, _ in _TIME_SUFFIXES)
            + ", annotations `(ms)`, `(s)`, ` in s`, ` in ms`, a unit on the value (`512ms`, `2.5s`; it wins).",
            "Fractions: `%` on the value, `(%)` or `_pct`/`_percent` on the key divide by 100; an MFU printed "
            "without a percent sign is taken as a fraction.",
            "Scale: `(1e-4)` in a key multiplies the value by 1e-4; `K`/`M`/`B`/`G`/`T` after a number multiply by "
            "1e3/1e6/1e9/1e9/1e12.",
            "", VOCAB_END]
    return "\n".join(out)


VOCAB_BEGIN = "<!-- vocabulary: generated from vlm_perf/ingest/logs/vocab.py; do not edit by hand -->"
VOCAB_END = "<!-- vocabulary: end -->"


def put_known_or_extra(rec: dict, key: str, raw: object, v: float, outputs=frozenset()) -> str:
    """For a declared format's key its own table does not know: the vocabulary's column when it has
    one and the record has no value for it yet, else an extra column (``schema.extra_name``). ``raw``
    is the printed value (its own unit, ``%`` or ``ms``, is read by ``value_of``), ``v`` its number.
    Returns the column used."""
    from .schema import extra_name

    m = lookup(key) if isinstance(key, str) else None
    if m is not None and m.column and m.column not in rec:
        val = value_of(raw, m) if isinstance(raw, str) else v * m.mult
        if val is not None:
            rec[m.column] = val
            return m.column
    name = extra_name(snake_case(key), rec, outputs)
    rec.setdefault(name, v)
    return name


def value_factors(raw: str, mapping: Mapping | None = None) -> tuple[float, float, float] | None:
    """The factors ``value_of`` applies to the printed number, in its order: (K/M/B/G/T suffix, the
    key's scale, the unit); ``value_of(raw, m) == ((number * suffix) * scale) * unit`` exactly (up to
    the -0.0 -> 0.0 of a mapped value). None when ``raw`` is not a number. Without a mapping the last
    two are 1.0 (``value_of`` returns the number times its suffix)."""
    m = _VALUE_RE.match(raw)
    return _factors(m, mapping) if m else None


def _factors(m: re.Match, mapping: Mapping | None) -> tuple[float, float, float]:
    """(suffix, the key's scale, the unit) of a matched value: the one unit rule of `value_of` and
    `value_factors` — the value's own unit (``ms``/``s`` for a time, ``%`` for a fraction) where it
    prints one, else the key's."""
    suf = _SUFFIX[m.group("suf")] if m.group("suf") else 1.0
    if mapping is None:
        return suf, 1.0, 1.0
    unit = m.group("unit") or ""
    own = None
    if mapping.quantity == "time" and unit in ("ms", "s", "sec"):
        own = _VALUE_UNIT[unit]
    elif mapping.quantity == "fraction" and unit == "%":
        own = 0.01
    scale = mapping.mult / mapping.unit_mult if mapping.unit_mult else mapping.mult
    return suf, scale, (own if own is not None else mapping.unit_mult)
