"""explore.regime_split: vision / LM compute of one sample under training regimes, against compute_flops (whole-part
regimes) and hand arithmetic (LoRA on the LM of Qwen2.5-VL-7B, from its published config)."""

import pytest

from vlm_perf.analysis.explore import REGIME_COLUMNS, REGIMES, regime_split, regime_trainability
from vlm_perf.arch import load_model
from vlm_perf.arch.trainability import Trainability
from vlm_perf.errors import ConfigError
from vlm_perf.flops import compute_flops
from vlm_perf.stats import BatchStats

Q25 = load_model("qwen2.5-vl-7b")  # hidden 3584, 28 layers, 28 q heads / 4 kv heads of 128, MLP 18944
T = 1024 + 256  # 1024 text tokens + one 448 px image: grid (1, 32, 32) -> 256 merged tokens
STATS = BatchStats.from_batch(seq_len=T, samples=1, image_grids=[(1, 32, 32)], spec=Q25)


def _row(table, regime):
    return table.filter(table["regime"] == regime).row(0, named=True)


def test_whole_part_regimes_equal_compute_flops():
    table = regime_split(Q25, 448, 1, 1024, regimes=("full", "frozen_tower", "frozen_vision"))
    assert tuple(table.columns) == REGIME_COLUMNS
    for regime, frozen in (("full", ()), ("frozen_tower", ("vision_tower",)),
                           ("frozen_vision", ("vision_tower", "projector"))):
        ref = compute_flops(Q25, STATS, "exact", frozen=frozen)
        row = _row(table, regime)
        assert row["vision_flops"] == ref.vision and row["lm_flops"] == ref.language
        assert row["total_flops"] == ref.total
        assert row["vision_share"] == pytest.approx(ref.vision / ref.total, rel=1e-12)
        assert row["vision_lm_ratio"] == pytest.approx(ref.vision / ref.language, rel=1e-12)
    assert _row(table, "full")["vs_full"] == 1.0
    assert _row(table, "frozen_tower")["vs_full"] < 1.0


def test_lora_on_the_lm_by_hand():
    """LoRA r=16 on the 7 Linears of every LM layer, tower and projector frozen: the vision side runs forward only;
    the LM runs its forward, every input gradient except layer 0's q/k/v (their input, the embeddings, needs no
    gradient; the attention cores' at 2x their forward), no weight gradient, plus the adapters."""
    r, h, kv, ff, layers = 16, 3584, 512, 18944, 28
    row = _row(regime_split(Q25, 448, 1, 1024, regimes=("lora_lm",), rank=r), "lora_lm")
    fwd = compute_flops(Q25, STATS, "exact", mode="forward")
    assert row["vision_flops"] == fwd.vision
    linears = [(h, h), (h, kv), (h, kv), (h, h), (h, ff), (h, ff), (ff, h)]  # q, k, v, o, gate, up, down
    assert row["adapter_params"] == layers * r * sum(i + o for i, o in linears)

    def adapter(i, o, live):
        return 2 * T * r * (i + o) + 4 * T * r * o + 2 * T * i * r + (2 * T * i * r if live else 0)

    adapters = sum(adapter(i, o, not (layer == 0 and k < 3)) for layer in range(layers)
                   for k, (i, o) in enumerate(linears))
    layer0_qkv = 2 * T * h * (h + 2 * kv)
    # the attention core (causal half: QK^T and AV, 2·2·T·T·h halved) backpropagates at 2x its forward
    cores = layers * 2 * T * T * h
    assert row["lm_flops"] == 2 * fwd.language - layer0_qkv + cores + adapters


def test_regime_names_and_custom_trainability():
    custom = Trainability.build(["lm[-4:]"])
    table = regime_split(Q25, 448, 1, 1024, regimes=("lora_all", ("last 4 LM layers", custom)))
    assert table["regime"].to_list() == ["lora_all", "last 4 LM layers"]
    assert _row(table, "lora_all")["vision_tower_flops"] > compute_flops(Q25, STATS, mode="forward").vision
    with pytest.raises(ConfigError, match="needs an MoE LM"):
        regime_trainability(Q25, "lora_lm_experts")
    with pytest.raises(ConfigError, match="unknown regime"):
        regime_split(Q25, regimes=("half",))
    moe = load_model("qwen3-vl-30b-a3b")
    both = regime_split(moe, 448, 1, 1024, regimes=("lora_lm", "lora_lm_experts"))
    # the expert stacks' low-rank deltas run over every expert per forward: more LM work, more adapter weights
    assert _row(both, "lora_lm_experts")["lm_flops"] > _row(both, "lora_lm")["lm_flops"]
    assert _row(both, "lora_lm_experts")["adapter_params"] > _row(both, "lora_lm")["adapter_params"]
    assert set(REGIMES) >= {"full", "frozen_tower", "lora_lm"}
