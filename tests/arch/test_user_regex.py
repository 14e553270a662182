"""Every regex a user writes into adapter_config.json is compiled once and matched with a bound (issue 34, hangs).

Specification (`vlm_perf.arch.user_regex`):
* an invalid pattern in any of ``target_modules``, ``exclude_modules``, ``modules_to_save``, ``layers_pattern``,
  ``rank_pattern``, ``alpha_pattern`` is a one-line error naming the file and the field, exit 2, no traceback;
* a pattern whose backtracking can explode (a repetition inside a repetition, an alternation inside a
  repetition, a backreference, more than MAX_UNBOUNDED unbounded repetitions, more than MAX_PATTERN_CHARS
  characters) is refused the same way, before any module name is matched: no hang;
* the patterns real adapter configs use are accepted and select the same modules PEFT's own
  ``check_target_module_exists`` selects (near misses: nothing honest is refused).
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings, strategies as st

from tests.support import run_cli, run_main
from vlm_perf.arch.adapters import adapter_from_dict
from vlm_perf.arch.user_regex import MAX_PATTERN_CHARS, MAX_UNBOUNDED, compile_user_regex
from vlm_perf.errors import ConfigError

FLOPS = ("flops", "--model", "qwen2.5-vl-7b", "--seq-len", "1024", "--grid", "1,16,16")
EXPLOSIVE = ["(a+)+$", "(.*)*x", "(a|a)*b", "(\\.\\w+)*!", "(x+x+)+y", "(a)\\1*", "(?P<n>a)(?P=n)+",
             ".*a.*b.*c.*d.*e", "a" * (MAX_PATTERN_CHARS + 1)]
INVALID = ["(", "[a-", "*x", "a{2,1}", "(?P<1>x)", "\\"]
REAL = [r".*\.(q_proj|v_proj)$", r"^(?!.*visual).*(?:q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj).*",
        r"model\.language_model\.layers\.\d+\.self_attn\.(q|k|v)_proj", r".*language_model.*\.(q_proj|v_proj)",
        r"(?:.*\.)?mlp\.(gate|up|down)_proj"]
NAMES = ["model.visual.blocks.0.attn.qkv", "model.visual.blocks.31.mlp.down_proj", "model.visual.merger.mlp.0",
         "model.language_model.layers.0.self_attn.q_proj", "model.language_model.layers.27.self_attn.v_proj",
         "model.language_model.layers.3.mlp.gate_proj", "model.language_model.layers.3.mlp.down_proj", "lm_head"]


def _adapter_file(tmp_path, **fields) -> str:
    data = {"peft_type": "LORA", "r": 8, "target_modules": ["q_proj"], **fields}
    path = tmp_path / "adapter_config.json"
    path.write_text(json.dumps(data))
    return str(path)


FIELDS = {  # field -> how a pattern is placed into it
    "target_modules": lambda p: {"target_modules": p},
    "exclude_modules": lambda p: {"exclude_modules": p},
    "modules_to_save": lambda p: {"modules_to_save": [p]},
    "layers_pattern": lambda p: {"layers_pattern": p, "layers_to_transform": [0]},
    "rank_pattern": lambda p: {"rank_pattern": {p: 4}},
    "alpha_pattern": lambda p: {"alpha_pattern": {p: 16}},
}


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("pattern", INVALID + EXPLOSIVE[:3])
def test_a_bad_pattern_in_any_field_is_one_line_naming_file_and_field(tmp_path, field, pattern):
    path = _adapter_file(tmp_path, **FIELDS[field](pattern))
    r = run_main(*FLOPS, "--adapter", path)
    assert r.returncode == 2, r.stdout
    assert r.stderr.startswith("error: ") and r.stderr.strip().count("\n") == 0, r.stderr
    assert path in r.stderr and f"field {field}" in r.stderr


@pytest.mark.parametrize("pattern", EXPLOSIVE)
def test_an_explosive_pattern_is_refused_before_matching(pattern):
    with pytest.raises(ConfigError, match="x.json: field target_modules: pattern"):
        adapter_from_dict({"target_modules": pattern}, source="x.json")


def test_a_redos_target_modules_ends_in_a_real_process_without_hanging(tmp_path):
    path = _adapter_file(tmp_path, target_modules="(.*a){1,64}(.*)*$")
    r = run_cli(*FLOPS, "--adapter", path, timeout=120)  # a hang fails the test with TimeoutExpired
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "field target_modules" in r.stderr and "repetition inside a repetition" in r.stderr


def test_the_unbounded_repetition_limit_is_exact():
    ok = ".*a" * MAX_UNBOUNDED
    compile_user_regex(ok, "f.json", "target_modules")
    with pytest.raises(ConfigError, match=f"{MAX_UNBOUNDED + 1} unbounded repetitions"):
        compile_user_regex(ok + ".*", "f.json", "target_modules")


@pytest.mark.parametrize("pattern", REAL)
def test_real_patterns_select_what_peft_selects(pattern):
    from peft import LoraConfig
    from peft.tuners.tuners_utils import check_target_module_exists

    ours = adapter_from_dict({"target_modules": pattern, "r": 8})
    theirs = LoraConfig(target_modules=pattern, r=8)
    for name in NAMES:
        assert ours.targets(name) == bool(check_target_module_exists(theirs, name)), name


def test_rank_and_layer_patterns_still_apply():
    a = adapter_from_dict({"target_modules": ["q_proj", "v_proj"], "r": 8, "rank_pattern": {r"layers\.27\..*": 2},
                           "layers_to_transform": [0, 27], "layers_pattern": "layers"})
    assert a.rank("model.language_model.layers.27.self_attn.v_proj") == 2
    assert a.rank("model.language_model.layers.0.self_attn.q_proj") == 8
    assert a.targets("model.language_model.layers.0.self_attn.q_proj")
    assert not a.targets("model.language_model.layers.3.self_attn.q_proj")


_ATOMS = st.sampled_from(["a", ".", "\\.", "(", ")", "|", "*", "+", "?", "{2}", "{1,}", "[a-z]", "^", "$", "\\d",
                          "q_proj", "(?:", "(?!", "\\1"])


@settings(derandomize=True, deadline=None, database=None, max_examples=300)
@given(st.lists(_ATOMS, min_size=1, max_size=10).map("".join))
def test_fuzz_a_pattern_is_refused_in_one_line_or_matches_as_python_re(pattern):
    try:
        adapter = adapter_from_dict({"target_modules": pattern}, source="a.json")
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("a.json: field target_modules: pattern")
        return
    for name in NAMES:
        assert adapter.targets(name) == (re.fullmatch(pattern, name) is not None)
