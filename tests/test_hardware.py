"""Peak-FLOP/s table and device-name matching (vlm_perf.hardware)."""

import pytest

from vlm_perf.hardware import GPU_TYPES, PEAKS, DevicePeak, device_peak, peak_flops, resolve_gpu

# (canonical, dtype, dense TFLOP/s, where the figure comes from). Sparse datasheet headline
# numbers are halved. Values flagged uncertain in vlm_perf.hardware are marked "[uncertain]".
DATASHEET = [
    ("A100", "bf16", 312, "NVIDIA A100 datasheet; torchtitan/veRL/Lightning 312e12"),
    ("A100", "tf32", 156, "NVIDIA A100 datasheet (312 with sparsity); Lightning"),
    ("A100", "fp32", 19.5, "NVIDIA A100 datasheet; Lightning"),
    ("A800", "bf16", 312, "veRL _DEVICE_FLOPS"),
    ("H100 SXM", "bf16", 989, "H100 datasheet 1,979 sparse; torchtitan/veRL 989e12"),
    ("H100 SXM", "fp8", 1979, "H100 datasheet 3,958 sparse; InferenceX #144"),
    ("H100 SXM", "tf32", 494.5, "H100 datasheet 989 sparse (Lightning 494.7)"),
    ("H100 SXM", "fp32", 67, "H100 datasheet; NeMo-RL THEORETICAL_TFLOPS"),
    ("H100 PCIe", "bf16", 756, "H100 datasheet 1,513 sparse; torchtitan; Lightning"),
    ("H100 PCIe", "tf32", 378, "H100 datasheet 756 sparse; Lightning"),
    ("H100 NVL", "bf16", 835, "H100 NVL datasheet 1,671 sparse; torchtitan"),
    ("H800", "bf16", 989, "veRL _DEVICE_FLOPS"),
    ("GH200", "bf16", 989, "GH200 datasheet 1,979 sparse [uncertain]"),
    ("H200", "bf16", 989, "H200 datasheet 1,979 sparse; torchtitan; veRL"),
    ("H200", "fp8", 1979, "H200 datasheet 3,958 sparse; InferenceX #144"),
    ("H200 NVL", "bf16", 835, "NVIDIA H200 page [uncertain]"),
    ("H20", "bf16", 148, "torchtitan (Tom's Hardware); veRL"),
    ("L40S", "bf16", 362, "L40S datasheet 362.05; torchtitan 362e12"),
    ("B200", "bf16", 2250, "Blackwell datasheet 4.5 PF sparse; torchtitan/veRL 2.25e15"),
    ("B200", "fp8", 4500, "InferenceX #144"),
    ("B300", "bf16", 2250, "HGX B300; torchtitan groups with B200 [uncertain]"),
    ("B300", "fp8", 4500, "InferenceX #144"),
    ("GB200", "bf16", 2500, "DGX GB200: 5 PF sparse per GPU; torchtitan/veRL 2.5e15"),
    ("GB200", "fp8", 5000, "InferenceX #144"),
    ("GB300", "bf16", 2500, "DGX GB300; torchtitan 2.5e15"),
    ("GB300", "fp8", 5000, "InferenceX #144"),
    ("MI300X", "bf16", 1307.4, "AMD MI300X datasheet (torchtitan 1300, veRL 1336) [uncertain]"),
    ("MI300X", "fp8", 2614.9, "AMD MI300X datasheet; InferenceX #144 2615"),
    ("MI325X", "bf16", 1307.4, "AMD MI325X page (same compute as MI300X) [uncertain]"),
    ("MI325X", "fp8", 2614.9, "AMD MI325X page; InferenceX #144 2615"),
    ("MI355X", "bf16", 2516.6, "AMD MI355X page ~2.5 PF; torchtitan 2500 [uncertain]"),
    ("MI355X", "fp8", 5033.2, "InferenceX #144 5,033 [uncertain]"),
    ("TPU v5p", "bf16", 459, "https://cloud.google.com/tpu/docs/v5p"),
    ("TPU v6e", "bf16", 918, "https://cloud.google.com/tpu/docs/v6e"),
]


@pytest.mark.parametrize("name,dtype,tflops,source", DATASHEET)
def test_canonical_values_match_datasheet(name, dtype, tflops, source):
    assert peak_flops(name, dtype) == pytest.approx(tflops * 1e12, rel=1e-9), source


def test_units_are_flops_not_tflops():
    assert peak_flops("H100") == 989e12


def test_fp16_equals_bf16_on_gpus():
    for name in GPU_TYPES:
        if not name.startswith("TPU"):
            assert peak_flops(name, "fp16") == peak_flops(name, "bf16")


def test_every_entry_has_source_and_consistent_flags():
    required = {"A100", "H100 SXM", "H100 PCIe", "H100 NVL", "H200", "H20", "H800", "L40S",
                "B200", "B300", "GB200", "GB300", "MI300X", "MI325X", "MI355X", "TPU v5p", "TPU v6e"}
    assert required <= set(GPU_TYPES)
    for name, p in PEAKS.items():
        assert isinstance(p, DevicePeak) and p.name == name
        assert p.source and "bf16" in p.tflops
        assert set(p.uncertain) <= set(p.tflops)
        if "fp8" in p.tflops:
            assert p.tflops["fp8"] == pytest.approx(2 * p.tflops["bf16"], rel=0.01)


def test_uncertain_values_are_flagged():
    for name in ("B300", "MI300X", "MI325X", "MI355X", "H200 NVL"):
        assert "bf16" in PEAKS[name].uncertain
    for name in ("H100 SXM", "H200", "B200", "GB200", "A100"):
        assert not PEAKS[name].uncertain


@pytest.mark.parametrize(
    "raw,canonical",
    [
        # torch.cuda.get_device_name() strings and short forms
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("H100-SXM5-80GB", "H100 SXM"),
        ("h100", "H100 SXM"),  # plain H100 defaults to SXM
        ("  H100   sxm ", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("h100_pcie", "H100 PCIe"),
        ("NVIDIA H100 80GB HBM2e", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("h100nvl", "H100 NVL"),
        ("H100 SXM NVLink", "H100 SXM"),  # "nvlink" is not "NVL"
        # H200 vs H20 vs GH200
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 141GB HBM3e", "H200"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA H20", "H20"),
        ("h20", "H20"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA H800", "H800"),
        # GB200/GB300 vs B200/B300
        ("NVIDIA GB200", "GB200"),
        ("GB200 NVL72", "GB200"),
        ("NVIDIA GB300", "GB300"),
        ("NVIDIA B200", "B200"),
        ("b300", "B300"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA A800-SXM4-80GB", "A800"),
        ("NVIDIA L40S", "L40S"),  # mixed case (torchtitan's lowercase "l40s" pitfall)
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI300X VF", "MI300X"),
        ("mi325x", "MI325X"),
        ("AMD Instinct MI355X", "MI355X"),
        # TPUs: JAX device_kind and short forms
        ("tpu v5p", "TPU v5p"),
        ("TPU v5", "TPU v5p"),
        ("v5p", "TPU v5p"),
        ("TPU v5 lite", "TPU v5e"),
        ("TPU v6 lite", "TPU v6e"),
        ("tpu-v6e", "TPU v6e"),
    ],
)
def test_resolve_gpu(raw, canonical):
    assert resolve_gpu(raw) == canonical


def test_canonical_names_resolve_to_themselves():
    for name in GPU_TYPES:
        assert resolve_gpu(name) == name
        assert resolve_gpu(name.lower().replace(" ", "-")) == name


@pytest.mark.parametrize(
    "raw",
    ["NVIDIA RTX A1000", "NVIDIA L40", "NVIDIA H800 PCIe", "AMD Instinct MI300A", "MI300",
     "TPU v4 lite", "Tesla V100-SXM2-16GB", "", "cpu"],
)
def test_unknown_device_raises(raw):
    with pytest.raises(ValueError) as e:
        peak_flops(raw)
    msg = str(e.value)
    assert "\n" not in msg and repr(raw) in msg
    assert "--peak-tflops" in msg and "H100 SXM" in msg and "MI300X" in msg


@pytest.mark.parametrize(
    "dtype,expected",
    [("bf16", 989e12), ("bfloat16", 989e12), ("torch.bfloat16", 989e12), ("BF16", 989e12),
     ("float16", 989e12), ("half", 989e12), ("fp8", 1979e12), ("float8_e4m3fn", 1979e12),
     ("tf32", 494.5e12), ("float32", 67e12)],
)
def test_dtype_aliases(dtype, expected):
    assert peak_flops("NVIDIA H100 80GB HBM3", dtype) == pytest.approx(expected)


@pytest.mark.parametrize("gpu,dtype", [("A100", "fp8"), ("TPU v5p", "fp16"), ("H20", "fp8"),
                                       ("H100", "int4"), ("H100", "fp4")])
def test_missing_or_unknown_dtype_raises(gpu, dtype):
    with pytest.raises(ValueError, match="--peak-tflops") as e:
        peak_flops(gpu, dtype)
    assert "\n" not in str(e.value)


def test_device_peak_carries_source():
    p = device_peak("NVIDIA GB200")
    assert p.name == "GB200" and "dgx-gb200" in p.source and p.flops() == 2.5e15
