"""Every registry accepts registrations after import, and the lookups and the CLI see them (a plugin's
``register()`` works): conventions, families, log formats, block kinds, report sections, checks, metadata
engines, GPU peaks. Duplicates are rejected everywhere. Each test removes what it registered."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import ClassVar

import pytest



# ------------------------------------------------------------------------------------------------ conventions


@pytest.fixture
def late_convention():
    from vlm_perf.flops.conventions import CONVENTIONS, Convention, register_convention
    from vlm_perf.flops.language import linear_per_token

    def forward(spec, stats, options):
        return {k: v * stats.lm_tokens for k, v in linear_per_token(spec.lm).items()}

    conv = register_convention(Convention(
        name="plugin-2nd", source="a plugin", formula="2*N*S forward; training bills x3 except the logits x2",
        deviations=(), forward=forward, counts_vision=False, families=None,
        training_rule={"lm.logits": 2}))
    yield conv
    CONVENTIONS.pop(conv.name)


def test_late_convention_is_seen_by_lookups_and_the_cli(late_convention, cli):
    from vlm_perf import flops
    from vlm_perf.flops.conventions import get_convention, names

    assert get_convention("plugin-2nd") is late_convention and "plugin-2nd" in names()
    assert "plugin-2nd" in flops.CONVENTIONS  # the mapping the rest of the code imported at start-up
    r = cli("flops", "--model", "qwen3-30b-a3b", "--seq-len", "128", "--convention", "all", "--json")
    assert r.exit_code == 0, r.output
    assert "plugin-2nd" in json.loads(r.stdout)["conventions"]
    r = cli("conventions", "plugin-2nd")
    assert r.exit_code == 0 and "a plugin" in r.stdout


def test_training_rule_is_per_component(late_convention):
    from vlm_perf.arch import load_model
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec, stats = load_model("qwen3-30b-a3b"), BatchStats.from_batch(seq_len=64)
    fwd = compute_flops(spec, stats, "plugin-2nd", mode="forward").components
    train = compute_flops(spec, stats, "plugin-2nd").components
    assert train["lm.logits"] == 2 * fwd["lm.logits"]
    assert train["lm.routed_experts"] == 3 * fwd["lm.routed_experts"]


def test_convention_registration_is_checked(late_convention):
    from vlm_perf.arch import load_model
    from vlm_perf.flops import compute_flops
    from vlm_perf.flops.conventions import CONVENTIONS, Convention, ConventionRegistryError, register_convention
    from vlm_perf.stats import BatchStats

    with pytest.raises(ConventionRegistryError, match="already registered"):
        register_convention(replace(late_convention))
    with pytest.raises(ConventionRegistryError, match="unknown components"):
        Convention(name="bad-rule", formula="", deviations=(), forward=lambda *a: {}, training_rule={"lm.foo": 3})
    with pytest.raises(ConventionRegistryError, match="exactly one of"):
        Convention(name="no-formula", formula="", deviations=())
    with pytest.raises(ConventionRegistryError, match="variant_of"):
        register_convention(Convention(name="x@1", formula="", deviations=(), forward=lambda *a: {},
                                       variant_of="no-such-base"))
    bad = register_convention(Convention(name="bad-keys", formula="", deviations=(), families=None,
                                         forward=lambda spec, s, o: {"lm.attention": 1}))
    try:
        with pytest.raises(ConventionRegistryError, match="lm.attention"):
            compute_flops(load_model("qwen3-30b-a3b"), BatchStats.from_batch(seq_len=8), "bad-keys")
    finally:
        CONVENTIONS.pop(bad.name)


def test_every_builtin_convention_is_pinned():
    from vlm_perf.flops.conventions import CONVENTIONS

    for name, conv in CONVENTIONS.items():
        if name in ("exact", "6nd"):
            continue
        assert conv.pin is not None, name
        assert conv.pin.repo and conv.pin.file and conv.pin.version and conv.pin.verified, name


# ------------------------------------------------------------------------------------------------ families


@pytest.fixture
def late_family():
    from vlm_perf.arch import families as fam

    base = fam.FAMILIES["qwen3"]
    family = fam.register_family(fam.Family(name="plugin_lm", model_types=("plugin_lm",), build=base.build,
                                            hf_class="PluginForCausalLM", is_vlm=False))
    yield family
    fam.FAMILIES.pop("plugin_lm")
    fam._BY_MODEL_TYPE.pop("plugin_lm")


def test_late_family_is_seen_by_lookups_and_the_cli(late_family, tmp_path, cli):
    import vlm_perf.arch as arch
    from vlm_perf.arch import hf_config
    from vlm_perf.arch.presets_loader import preset_config

    assert "plugin_lm" in arch.SUPPORTED_MODEL_TYPES and "plugin_lm" in hf_config.LM_TYPES
    cfg = dict(preset_config("qwen3-30b-a3b"), model_type="plugin_lm")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    r = cli("flops", "--model", str(path), "--seq-len", "64", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["total"] > 0
    with pytest.raises(ValueError, match="already"):
        from vlm_perf.arch.families import register_family
        register_family(late_family)


# ------------------------------------------------------------------------------------------------ log formats


def test_late_log_format_is_parsed(tmp_path):
    from vlm_perf.ingest import logs
    from vlm_perf.ingest.logs import LogFormat, parse_logs, register
    from vlm_perf.ingest.logs import formats as formats_mod

    def handle(router, line, sub, label, text, s):
        if not text.startswith("PLUGINLOG "):
            return False
        step, loss = text.split()[1:3]
        return router.train_or_validation("plugin-log", ("plugin-log", {"iteration": int(step), "loss": float(loss)}),
                                          line, sub, label)

    register(LogFormat(name="plugin-log", source="a plugin", example="PLUGINLOG 1 2.5", prefilter=r"^PLUGINLOG ",
                       handle=handle, order=1))
    try:
        assert "plugin-log" in logs.FORMATS
        path = tmp_path / "train.log"
        path.write_text("PLUGINLOG 1 2.5\nPLUGINLOG 2 2.25\n", encoding="utf-8")
        r = parse_logs([path], format="plugin-log")
        assert r.iterations.height == 2
        r = parse_logs([path])  # auto-detection offers the lines to the late format too
        assert r.iterations.height == 2
    finally:
        formats_mod._REGISTRY.pop("plugin-log")


# ------------------------------------------------------------------------------------------------ block kinds


def test_late_block_kind_counts_in_exact():
    from vlm_perf.arch import load_model
    from vlm_perf.arch.blocks import Block
    from vlm_perf.arch.parts import LANGUAGE_MODEL
    from vlm_perf.flops import compute_flops
    from vlm_perf.flops.blocks import BLOCK_FLOPS, block_flops
    from vlm_perf.flops.terms import Term
    from vlm_perf.stats import BatchStats

    @dataclass(frozen=True)
    class PluginAdapter(Block):
        kind: ClassVar[str] = "plugin_adapter"
        width: int

        def params(self) -> int:
            return self.width * self.width

        def describe(self) -> str:
            return "plugin adapter"

    @block_flops(PluginAdapter)
    def _flops(b, s, ctx):
        return [Term("lm.dense_mlp", b.count * 2 * s.lm_tokens * b.width * b.width, b.part)]

    try:
        spec = load_model("llama3-8b")
        stats = BatchStats.from_batch(seq_len=16)
        base = compute_flops(spec, stats, "exact", mode="forward").total
        spec2 = replace(spec, blocks=spec.blocks + (PluginAdapter(part=LANGUAGE_MODEL, count=2, width=8),))
        assert compute_flops(spec2, stats, "exact", mode="forward").total == base + 2 * 2 * 16 * 64
        with pytest.raises(ValueError, match="already registered"):
            block_flops(PluginAdapter)(_flops)
    finally:
        BLOCK_FLOPS.pop(PluginAdapter)


# ------------------------------------------------------------------------------------------------ report sections, checks


def test_late_report_section_and_check_are_listed():
    from vlm_perf.analysis import checks
    from vlm_perf.report import sections

    sections.register_section("plugin-section", order=999)(lambda inputs: None)
    checks.register_check("plugin-check")(lambda inputs: None)
    try:
        assert "plugin-section" in [s.name for s in sections.all_sections()]
        assert "plugin-check" in checks.CHECKS
        with pytest.raises(ValueError, match="already registered"):
            sections.register_section("plugin-section", order=1)(lambda inputs: None)
        with pytest.raises(ValueError, match="already registered"):
            checks.register_check("plugin-check")(lambda inputs: None)
    finally:
        sections.SECTIONS.pop("plugin-section")
        checks.CHECKS.pop("plugin-check")


def test_late_report_part_is_in_the_schema_sections_and_terminal():
    from vlm_perf.report import parts, schema, terminal
    from vlm_perf.report.sections import all_sections

    part = parts.register_part(parts.ReportPart(
        "plugin_part", order=998, compute=lambda ctx: 1, section=lambda inputs: None,
        keys=(schema.key("plugin_part", "count", int, "a plugin's number", "a plugin"),),
        terminal=lambda summary: [f"plugin {summary['plugin_part']}"]))
    try:
        assert "plugin_part" in [k.name for k in schema.SUMMARY]
        assert schema.check_summary({"plugin_part": "x"}).count("summary.plugin_part: str, declared int") == 1
        assert "| `plugin_part` | count | a plugin's number | `a plugin` |" in schema.schema_markdown()
        assert part in all_sections() and "plugin 1" in terminal.number_lines({"plugin_part": 1})
        with pytest.raises(ValueError, match="already registered"):
            parts.register_part(part)
    finally:
        parts.PARTS.pop("plugin_part")


# ------------------------------------------------------------------------------------------------ metadata engines


def test_late_metadata_engine_is_accepted():
    from vlm_perf.ingest import metadata_source as ms

    builtin = next(iter(ms.ENGINES.values()))
    ms.register_engine(ms.ParseEngine(name="plugin-engine", parse=builtin.parse, description="a plugin"))
    try:
        assert "plugin-engine" in ms.ENGINES
        with pytest.raises(ValueError, match="already registered"):
            ms.register_engine(ms.ParseEngine(name="plugin-engine", parse=builtin.parse, description="again"))
    finally:
        ms.ENGINES.pop("plugin-engine")


# ------------------------------------------------------------------------------------------------ GPU peaks


def test_late_gpu_peak_resolves():
    from vlm_perf import hardware

    peak = hardware.DevicePeak("Plugin X1", MappingProxyType({"bf16": 123.0}), "a plugin")
    hardware.register_peak(peak, model="px1")
    try:
        assert "Plugin X1" in hardware.GPU_TYPES and "Plugin X1" in hardware.PEAKS
        assert hardware.resolve_gpu("ACME PX1 96GB") == "Plugin X1"
        assert hardware.resolve_gpu("plugin-x1") == "Plugin X1"
        assert hardware.peak_flops("Plugin X1") == 123e12
        with pytest.raises(ValueError, match="already"):
            hardware.register_peak(peak)
    finally:
        hardware._PEAKS.pop("Plugin X1")
        hardware._RULES.pop(0)
