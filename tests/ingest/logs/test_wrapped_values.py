"""Values printed inside a wrapper, multi-word / Title-Case keys, and a plain Megatron ``loss:`` (issue 31 §1).

The shapes are those of public logs (the lines below are written here, not copied):

* numpy >= 2 scalar reprs in metric prints: veRL console steps ``actor/pg_loss:np.float64(-0.00066)``
  (verl-project/verl issue #1208 shows the step line; the same line with ``np.float64(...)`` values is in
  public veRL run logs), vLLM's ``'Avg xfer time (ms)': np.float64(2.338)`` dict print
  (vllm-project/vllm#57068), ``np.float32(0.85)`` metric prints (isaac-sim/IsaacLab-Arena#601);
* torch ``tensor(1.23, device='cuda:0')`` and ``Decimal('1.5')`` reprs in dict prints;
* mlx-lm ``Iter 10: Train loss 2.363, Learning Rate 1.000e-05, It/sec 1.022, Tokens/sec 88.083, Trained Tokens
  862, Peak mem 9.707 GB`` and ``Iter 1: Val loss 2.480, Val took 0.732s`` (ml-explore/mlx-examples#557,
  ml-explore/mlx-lm#330, ml-explore/mlx-examples#210 without the learning rate);
  mlx-vlm's ``{'Step': 10, 'Loss': '3.4376', 'Learning Rate': '1.00e-04', 'Tokens/sec': '302'}`` (Blaizzy/mlx-vlm#261);
* ms-swift Megatron GRPO iteration lines with a plain ``| loss: -2.529132E-02 |`` and no ``lm loss``
  (modelscope/ms-swift#8173, modelscope/ms-swift#6718).

Every expected number is the printed number (times the unit written next to it).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import megatron_line, write_log
from vlm_perf.ingest.logs import parse_logs
from vlm_perf.ingest.logs.dicts import load_dict, record_from_dict
from vlm_perf.ingest.logs.generic import extract, pairs
from vlm_perf.ingest.logs.verl import parse as verl_parse
from vlm_perf.ingest.logs.vocab import lookup, scalar_of, unwrap, value_of

# ---- the rule: unwrap(value text) -> the number inside, or why not -------------------------------------------

WRAPPED = [
    ("np.float64(-0.00066)", -0.00066, "np.float64(...)"),
    ("np.float32(0.85)", 0.85, "np.float32(...)"),
    ("np.int64(12)", 12.0, "np.int64(...)"),
    ("numpy.float64(1e-06)", 1e-06, "numpy.float64(...)"),
    ("np.float64(nan)", math.nan, "np.float64(...)"),
    ("tensor(1.23, device='cuda:0')", 1.23, "tensor(...)"),
    ("tensor(2.5, device='cuda:0', grad_fn=<AddBackward0>)", 2.5, "tensor(...)"),
    ("tensor([0.75], device='cuda:1', dtype=torch.bfloat16)", 0.75, "tensor(...)"),
    ("tensor(3)", 3.0, "tensor(...)"),
    ("Decimal('1.5')", 1.5, "Decimal(...)"),
    ('Decimal("2E-5")', 2e-5, "Decimal(...)"),
    ("Array(0.25, dtype=float32)", 0.25, "Array(...)"),
    ("array(4.5, dtype=float32)", 4.5, "array(...)"),
    ("'1.5'", 1.5, "quotes"),
    ('"3e-4"', 3e-4, "quotes"),
    ("[1e-05]", 1e-05, "list of one value"),
    ("[np.float64(0.3)]", 0.3, "list of one value, np.float64(...)"),
]


@pytest.mark.parametrize("raw,number,wrapper", WRAPPED)
def test_a_wrapped_value_is_the_number_inside_it(raw, number, wrapper):
    u = unwrap(raw)
    assert u.wrapper == wrapper
    got = value_of(raw)
    assert (math.isnan(got) and math.isnan(number)) if isinstance(number, float) and math.isnan(number) else got == number
    assert raw[u.start:].startswith(u.text)  # the offset points at the number (the generic lane replays it)


@pytest.mark.parametrize("raw,why", [
    ("[1e-05, 2e-05]", "a list of 2 values (not one number)"),  # DeepSpeed lr per parameter group
    ("Foo(1.5)", "wrapper Foo(...) not understood"),
    ("np.bool_(True)", "wrapper np.bool_(...) not understood"),
    ("abc", "not a number"),
    ("[abc]", "a list of one value that is not a number (not a number)"),
])
def test_a_value_that_is_not_one_number_says_why(raw, why):
    u = unwrap(raw)
    assert u.text is None and u.why == why
    assert value_of(raw) is None


def test_a_wrapped_value_takes_the_keys_unit():
    # `mfu(%)` divides by 100; `dt` in ms: the unit of the key applies to the number inside the wrapper
    assert value_of("np.float64(40)", lookup("mfu(%)")) == 0.40
    assert value_of("tensor(523.5, device='cuda:0')", lookup("dt_ms")) == 0.5235


def test_scalar_of_dict_values():
    assert scalar_of("np.float64(0.5)") == "0.5"
    assert scalar_of([1e-05]) == 1e-05
    assert scalar_of(("0.25",)) == "0.25"
    assert scalar_of([1e-05, 2e-05]) == [1e-05, 2e-05]  # several values: left as they are (not read)
    assert scalar_of("1.5") == "1.5"


# ---- the generic extractor (key: value, key=value, spaced runs) --------------------------------------------

@pytest.mark.parametrize("line,want", [
    ("step: 5 | loss: np.float64(1.25) | grad_norm: np.float64(0.5) | lr: np.float64(2e-05)",
     {"loss": 1.25, "grad_norm": 0.5, "lr": 2e-05}),
    ("step: 6 | loss: tensor(1.125, device='cuda:0') | grad_norm: tensor(0.25, device='cuda:0', grad_fn=<X>)",
     {"loss": 1.125, "grad_norm": 0.25}),
    ("global_step=7 loss=[0.75] lr=[1e-5]", {"loss": 0.75, "lr": 1e-5}),
    ("step: 8 | loss: '0.5' | mfu: \"0.31\" | lr: Decimal('3e-4')", {"loss": 0.5, "mfu_logged": 0.31, "lr": 3e-4}),
])
def test_generic_line_with_wrapped_values(line, want):
    rec = extract(line).record
    assert rec is not None
    assert {k: rec[k] for k in want} == want


def test_generic_list_of_several_values_is_not_read_as_its_first():
    # DeepSpeed engine print: lr per parameter group; the first group's rate is not "the" rate
    dropped: list = []
    from vlm_perf.ingest.logs.generic import pairs_at

    got = pairs_at("step=10, skipped=0, lr=[1e-05, 2e-05], loss=1.5", dropped)
    assert ("lr", "a list of several values (not one number)") in dropped
    assert "lr" not in [k for k, _, _ in got]
    assert extract("step=10, skipped=0, lr=[1e-05, 2e-05], loss=1.5").record["loss"] == 1.5


# ---- multi-word and Title-Case keys ----------------------------------------------------------------------

MLX = [
    ("Iter 10: Train loss 2.363, Learning Rate 1.000e-05, It/sec 1.022, Tokens/sec 88.083, Trained Tokens 862",
     {"iteration": 10, "loss": 2.363, "lr": 1e-05, "tokens_per_s_total": 88.083, "it_sec": 1.022,
      "trained_tokens": 862.0}),
    ("Iter 30: Train loss 1.781, Learning Rate 1.000e-05, It/sec 24.234, Tokens/sec 7514.985, Trained Tokens 9669, "
     "Peak mem 10.588 GB",
     {"iteration": 30, "loss": 1.781, "tokens_per_s_total": 7514.985, "peak_mem": 10.588}),
    ("Iter 20: Train loss 3.508, It/sec 0.013, Tokens/sec 1.522", {"iteration": 20, "loss": 3.508,
                                                                   "tokens_per_s_total": 1.522}),
]


@pytest.mark.parametrize("line,want", MLX)
def test_mlx_lm_multi_word_keys(line, want):
    rec = extract(line).record
    assert rec is not None and rec.get("kind", "train") == "train"
    assert {k: rec[k] for k in want} == want


def test_mlx_lm_validation_line_is_an_evaluation():
    rec = extract("Iter 1: Val loss 2.480, Val took 0.732s").record
    assert rec["kind"] == "eval" and rec["iteration"] == 1 and "loss" not in rec


def test_mlx_lm_log_end_to_end(tmp_path):
    text = ("Starting training..., iters: 100\n"
            "Iter 1: Val loss 2.936, Val took 5.265s\n"
            "Iter 10: Train loss 2.662, Learning Rate 1.000e-05, It/sec 0.490, Tokens/sec 161.374, Trained Tokens 3290, "
            "Peak mem 9.707 GB\n"
            "Iter 20: Train loss 2.101, Learning Rate 1.000e-05, It/sec 13.913, Tokens/sec 4560.749, Trained Tokens 6568, "
            "Peak mem 10.588 GB\n"
            "Iter 20: Saved adapter weights to adapters/0000020_adapters.safetensors.\n")
    it = parse_logs([write_log(tmp_path, text)]).iterations
    assert it.get_column("iteration").to_list() == [10, 20]
    assert it.get_column("loss").to_list() == [2.662, 2.101]
    assert it.get_column("lr").to_list() == [1e-05, 1e-05]


@pytest.mark.parametrize("text,want", [
    ("{'Step': 10, 'Loss': '3.4376', 'Learning Rate': '1.00e-04', 'Tokens/sec': '302'}",
     {"iteration": 10, "loss": 3.4376, "lr": 1e-04, "tokens_per_s_total": 302.0}),
    ("{'loss': tensor(1.25, device='cuda:0'), 'grad_norm': np.float64(0.5), 'learning_rate': Decimal('1e-05'), "
     "'epoch': np.float32(0.25)}", {"loss": 1.25, "grad_norm": 0.5, "lr": 1e-05, "epoch": 0.25}),
    ("{'loss': [0.5], 'Train Loss': 0.75, 'Avg xfer time (ms)': np.float64(2.338)}",
     {"loss": 0.5, "avg_xfer_time_ms": 2.338}),
])
def test_dict_prints_with_wrapped_values_and_title_case_keys(text, want):
    fmt, rec = record_from_dict(load_dict(text))
    assert {k: rec[k] for k in want} == want


def test_dict_with_an_unknown_wrapper_keeps_the_rest():
    _, rec = record_from_dict(load_dict("{'loss': Foo(1.0), 'grad_norm': 0.5, 'step': 3}"))
    assert rec == {"grad_norm": 0.5, "iteration": 3}


def test_verl_step_with_numpy_reprs():
    line = ("step:71 - actor/entropy:0.125 - critic/vf_loss:np.float64(0.007) - actor/pg_loss:np.float64(-0.00066) "
            "- actor/grad_norm:np.float64(3.8) - perf/mfu/actor:np.float64(0.25) - actor/lr:np.float64(1e-06) "
            "- timing_s/gen:4.25 - timing_s/update_actor:np.float64(22.5) - perf/throughput:1220.5")
    rec = verl_parse(line)
    assert rec["iteration"] == 71
    assert (rec["loss"], rec["grad_norm"], rec["mfu_logged"], rec["lr"]) == (-0.00066, 3.8, 0.25, 1e-06)
    assert rec["phase_s_generation"] == 4.25 and rec["phase_s_update_actor"] == 22.5
    assert rec["critic_vf_loss"] == 0.007 and rec["tokens_per_s"] == 1220.5


# ---- a plain `loss:` in a Megatron iteration line ----------------------------------------------------------

def _swift_megatron(it: int, loss: str) -> str:
    return (f" [2026-03-03 16:38:{it:02d}] iteration {it:8d}/     624 | consumed samples: {it * 128:12d} | "
            f"elapsed time per iteration (ms): 3988.6 | memory(GiB): 83.46 | learning rate: 9.999746E-07 | "
            f"global batch size:   128 | loss: {loss} | kl: 1.107648E-02 | reward: 7.636719E-01 | loss scale: 1.0 | "
            f"grad norm: 75.173 | number of skipped iterations:   0 | number of nan iterations:   0 |")


@pytest.mark.parametrize("n", [3, 6000])  # the slow path, and the vectorised fast path (>= PROBE_ROWS lines)
def test_megatron_plain_loss_is_the_loss(tmp_path, n):
    text = "\n".join(_swift_megatron(i % 60, f"-{i}.5E-02") for i in range(1, n + 1)) + "\n"
    raw = parse_logs([write_log(tmp_path, text)]).raw
    assert raw.get_column("loss").to_list()[:3] == [-0.015, -0.025, -0.035]
    assert "loss_extra" not in raw.columns and raw.get_column("kl").to_list()[0] == 1.107648E-02


def test_megatron_plain_loss_next_to_lm_loss_is_an_extra(tmp_path):
    lines = [megatron_line(1, 2.5, after_loss=" loss: 9.0 |"), megatron_line(2, 2.5),
             _swift_megatron(3, "-2.5E-02")]
    r = parse_logs([write_log(tmp_path, "\n".join(lines) + "\n")])
    assert r.raw.get_column("loss").to_list() == [2.5, 2.5, -0.025]
    assert r.raw.get_column("loss_extra").to_list() == [9.0, None, None]
    assert any("loss_extra" in n for n in r.diagnostics.notes)


# ---- seeded, bounded fuzzing of the new reader paths -------------------------------------------------------

_ATOMS = ["np.float64(", "tensor(", "Decimal(", "'", '"', "[", "]", "(", ")", ",", " device='cuda:0'", "1.5", "-2e-3",
          "nan", "9" * 40, "x", " ", "<AddBackward0>", "np.", "float32", "=", ":"]


@settings(derandomize=True, deadline=None, max_examples=300, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(_ATOMS), max_size=12))
def test_unwrap_never_raises_and_a_number_it_returns_is_in_the_text(parts):
    raw = "".join(parts)
    u = unwrap(raw)
    if u.text is not None:
        assert raw[u.start:].startswith(u.text)
        value_of(raw)
    else:
        assert u.why


@settings(derandomize=True, deadline=None, max_examples=150, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(_ATOMS), max_size=10), st.sampled_from(["generic", "verl", "dict"]))
def test_wrapped_value_readers_never_raise_and_keep_the_plain_keys(parts, where):
    junk = "".join(parts)
    if where == "generic":
        rec = extract(f"step: 4 | loss: 1.25 | grad_norm: {junk} | lr: 2e-05").record
        assert rec is not None and rec["loss"] == 1.25 and rec["iteration"] == 4
        pairs(junk)
    elif where == "verl":
        rec = verl_parse(f"step:4 - actor/pg_loss:0.5 - actor/grad_norm:{junk}")
        if " - " not in junk and ":" not in junk:
            assert rec["loss"] == 0.5
    else:
        d = load_dict("{'loss': 1.25, 'grad_norm': " + junk + ", 'step': 4}")
        if d is not None:
            _, rec = record_from_dict(d)
            assert rec.get("iteration") == 4
