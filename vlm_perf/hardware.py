"""Dense peak tensor FLOP/s per accelerator and dtype (the MFU denominator).

Conventions
-----------
* **Dense** peaks only (no 2:4 structured sparsity). Vendor headline numbers are often "with
  sparsity"; those are halved here.
* **Per device as the framework sees it**: per GPU for NVIDIA/AMD, per chip for TPU v5e/v5p/v6e
  (one JAX device per chip). The superchips GB200 / GB300 are listed **per Blackwell GPU**
  (one Grace CPU + two GPUs; an NVL72 rack is 72 GPUs), GH200 per Hopper GPU.
* Table values are TFLOP/s; :func:`peak_flops` returns **FLOP/s** (TFLOP/s x 1e12).
* dtypes: ``bf16``, ``fp16`` (tensor-core FP16, equal to BF16 on every GPU listed; TPUs list
  BF16 only), ``fp8``, ``tf32`` (tensor core) and ``fp32`` (plain, non-tensor FP32).
  A dtype missing for a device raises rather than guessing.
* Plain "H100" (e.g. ``torch.cuda.get_device_name`` -> "NVIDIA H100 80GB HBM3") means **SXM**;
  "PCIe" or "HBM2e" selects H100 PCIe, "NVL" selects H100 NVL.
* MI300X / MI325X use AMD's datasheet **1307.4** (304 CUs x 2.1 GHz x 2048 dense BF16
  FLOP/clk/CU). Also in circulation: torchtitan's rounded 1300 (-0.6 %) and veRL's 1336
  (+2.2 %, origin unknown). MFU computed against another table can differ by that much.

Every entry records its ``source``; ``uncertain`` lists the dtypes whose value is vendor-only,
not cross-checked against a code table, or disputed between sources
(sources per entry; see docs/hardware.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

__all__ = ["DevicePeak", "GPU_TYPES", "DTYPES", "PEAKS", "resolve_gpu", "device_peak", "peak_flops",  # noqa: F822
           "peak_used", "register_peak"]

DTYPES: tuple[str, ...] = ("bf16", "fp16", "fp8", "tf32", "fp32")

_TT = "pytorch/torchtitan torchtitan/tools/utils.py get_peak_flops"
_VERL = "verl-project/verl verl/utils/flops_counter.py _DEVICE_FLOPS"
_PL = "Lightning-AI/pytorch-lightning src/lightning/fabric/utilities/throughput.py _CUDA_FLOPS"
_IX = "SemiAnalysisAI/InferenceX issue #144 (third-party dense FP8 table)"


@dataclass(frozen=True)
class DevicePeak:
    """Dense peak TFLOP/s of one device, by dtype, with where the numbers come from."""

    name: str  # canonical name, one of GPU_TYPES
    tflops: Mapping[str, float]  # dtype -> dense TFLOP/s per device
    source: str  # URL(s) and/or repo/path of the code tables
    uncertain: tuple[str, ...] = ()  # dtypes whose value is vendor-only or disputed
    note: str = ""
    clock: str = ""  # which clock / derivation the tabulated value follows
    alternatives: Mapping[str, float] = field(default_factory=dict)  # other bf16 figures in circulation -> TFLOP/s

    def describe(self, dtype: str = "bf16") -> dict:
        """The audit record of the peak used for an MFU: value, dtype, dense, clock, source, alternatives."""
        d = _norm_dtype(dtype)
        value = self.flops(d) / 1e12
        alternatives = dict(self.alternatives) if d in ("bf16", "fp16") else {}  # bf16 figures only
        return {"device": self.name, "dtype": d, "tflops": value, "dense": True,
                "sparsity": "dense: 2:4 structured sparsity never counted (datasheet 'with sparsity' figures halved)",
                "clock": self.clock, "source": self.source, "source_short": self.source.split(";")[0].strip(),
                "uncertain": d in self.uncertain, "alternatives": alternatives, "note": self.note,
                "override": False}

    def flops(self, dtype: str = "bf16") -> float:
        """Dense peak in FLOP/s for ``dtype`` (raises ValueError if not tabulated)."""
        d = _norm_dtype(dtype)
        if d not in self.tflops:
            raise ValueError(
                f"no dense {d} peak tabulated for {self.name} (known: {', '.join(self.tflops)}); "
                "pass --peak-tflops to set it explicitly"
            )
        return self.tflops[d] * 1e12


_NV_CLOCK = "NVIDIA datasheet figure (dense; at the clock NVIDIA quotes it)"
_AMD_CLOCK = "computed: CUs x peak engine clock x dense FLOP/clock/CU (AMD datasheet)"
_TPU_CLOCK = "Google Cloud TPU documentation, per chip"


def _p(name, bf16, source, *, fp8=None, tf32=None, fp32=None, fp16=True, uncertain=(), note="", clock=None,
       alternatives=None):
    t = {"bf16": bf16}
    if fp16:
        t["fp16"] = bf16
    for k, v in (("fp8", fp8), ("tf32", tf32), ("fp32", fp32)):
        if v is not None:
            t[k] = v
    if clock is None:
        clock = _TPU_CLOCK if name.startswith("TPU") else _AMD_CLOCK if name.startswith("MI") else _NV_CLOCK
    return DevicePeak(name, MappingProxyType(t), source, tuple(uncertain), note, clock,
                      MappingProxyType(dict(alternatives or {})))


_A100_DS = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
_H100_DS = "https://www.nvidia.com/en-us/data-center/h100/"

_TABLE: tuple[DevicePeak, ...] = (
    _p("A100", 312, f"{_A100_DS}; {_TT}; {_VERL}; {_PL}", tf32=156, fp32=19.5,
       note="SXM and PCIe, 40 and 80 GB: same tensor peak; no FP8"),
    _p("A800", 312, f"{_VERL}", note="A100 compute, reduced NVLink; no FP8"),
    _p("H100 SXM", 989, f"{_H100_DS}; {_TT}; {_VERL}; {_PL}; {_IX}", fp8=1979, tf32=494.5, fp32=67,
       note="datasheet 1,979 BF16 / 3,958 FP8 / 989 TF32 with sparsity; 989.4-989.5 also seen"),
    _p("H100 PCIe", 756, f"{_H100_DS}; {_TT}; {_PL}", tf32=378, fp32=51,
       note="datasheet 1,513 BF16 with sparsity"),
    _p("H100 NVL", 835, f"{_H100_DS}; {_TT}",
       note="Lightning issue #20660's 1978.8e12 'h100 nvl' is sparse/2-GPU: not used"),
    _p("H800", 989, f"{_VERL}", fp8=1979, uncertain=("fp8",),
       note="SXM; H100 SXM compute, reduced NVLink; fp8 taken equal to H100 SXM"),
    _p("GH200", 989, "https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/",
       fp8=1979, uncertain=("bf16", "fp8"),
       note="per Hopper GPU; vendor-only (1,979 BF16 with sparsity), not in a code table"),
    _p("H200", 989, f"https://www.nvidia.com/en-us/data-center/h200/; {_TT}; {_VERL}; {_IX}", fp8=1979,
       note="H200 SXM"),
    _p("H200 NVL", 835, "https://www.nvidia.com/en-us/data-center/h200/", uncertain=("bf16",),
       note="vendor only"),
    _p("H20", 148, f"{_TT} (cites Tom's Hardware; no NVIDIA global datasheet); {_VERL}"),
    _p("L40S", 362, f"https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413; {_TT}; {_VERL}",
       note="veRL uses 362.05"),
    _p("B200", 2250, f"https://nvdam.widen.net/s/wwnsxrhm2w/blackwell-datasheet-3384703; {_TT}; {_VERL}; {_IX}",
       fp8=4500, note="HGX B200; datasheet 4.5 PF BF16 with sparsity",
       alternatives={"VeOmni PR #986 boost clock (148 SM x 8192 x 1.965 GHz)": 2382}),
    _p("B300", 2250, f"https://www.nvidia.com/en-us/data-center/hgx/ (HGX B300); {_TT}; {_IX}",
       fp8=4500, uncertain=("bf16",),
       note="HGX B300; Blackwell Ultra raises FP4, not BF16 (to confirm on the datasheet)"),
    _p("GB200", 2500, f"https://www.nvidia.com/en-us/data-center/dgx-gb200/; {_TT}; {_VERL}; {_IX}",
       fp8=5000, note="per Blackwell GPU in NVL72 (rack 180 PF BF16 sparse / 72 / 2)",
       alternatives={"VeOmni PR #986 boost-clock figure (152 SM x 8192 x ~2.06 GHz)": 2565}),
    _p("GB300", 2500, f"https://www.nvidia.com/en-us/data-center/dgx-gb300/; {_TT}; {_IX}",
       fp8=5000, note="per Blackwell Ultra GPU in NVL72"),
    _p("MI300X", 1307.4,
       f"https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html; {_IX}",
       fp8=2614.9, uncertain=("bf16",),
       note="AMD datasheet value; torchtitan uses 1300, veRL 1336",
       alternatives={"torchtitan get_peak_flops (rounded)": 1300, "veRL _DEVICE_FLOPS (origin unknown)": 1336}),
    _p("MI325X", 1307.4,
       f"https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html; {_IX}",
       fp8=2614.9, uncertain=("bf16",), note="same compute as MI300X; torchtitan 1300",
       alternatives={"torchtitan get_peak_flops (rounded)": 1300}),
    _p("MI350X", 2306.9, "https://www.amd.com/en/products/accelerators/instinct/mi350/mi350x.html",
       uncertain=("bf16",), note="~2.3 PF; 256 CUs x 2.2 GHz x 4096 FLOP/clk/CU; vendor only"),
    _p("MI355X", 2516.6,
       f"https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html; {_TT}; {_IX}",
       fp8=5033.2, uncertain=("bf16", "fp8"),
       note="256 CUs x 2.4 GHz x 4096; AMD rounds to 2.5 PF, torchtitan uses 2500; IX fp8 5033",
       alternatives={"AMD rounded / torchtitan": 2500}),
    _p("TPU v5e", 197, f"https://cloud.google.com/tpu/docs/v5e; {_PL} (_TPU_FLOPS v5litepod)",
       fp16=False, note="per chip"),
    _p("TPU v5p", 459, "https://cloud.google.com/tpu/docs/v5p", fp16=False, note="per chip"),
    _p("TPU v6e", 918, "https://cloud.google.com/tpu/docs/v6e", fp16=False,
       note="Trillium, per chip"),
    _p("TPU v7", 2307, "https://docs.cloud.google.com/tpu/docs/tpu7x", fp8=4614, fp16=False,
       note="TPU7x (Ironwood), per chip (two TensorCores); a table exposing each TensorCore as a device uses half"),
)

_PEAKS: dict[str, DevicePeak] = {p.name: p for p in _TABLE}
#: canonical name -> DevicePeak; a read-only *live* view, so devices added by :func:`register_peak` appear
PEAKS: Mapping[str, DevicePeak] = MappingProxyType(_PEAKS)


def __getattr__(name: str):
    if name == "GPU_TYPES":  # canonical device names, read at each access (registered devices included)
        return tuple(_PEAKS)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- name matching -------------------------------------------------------------------------
# Names are lower-cased and every run of non-alphanumerics becomes one space
# ("NVIDIA H100-SXM5-80GB" -> "nvidia h100 sxm5 80gb"). A model token must not be preceded by a
# letter/digit and must not be followed by a digit, so "b200" never matches inside "gb200",
# "h20" never matches "h200", "h200" never matches "gh200", "a100" never matches "a1000".
# Qualifiers (nvl, pcie, hbm2e) must not be glued to letters: "nvlink" is not "nvl".
# Rules are still ordered most specific first; the first rule that matches wins.


@dataclass(frozen=True)
class _Rule:
    canonical: str
    model: str  # regex for the model token
    all_of: tuple[str, ...] = ()  # qualifiers that must all appear (as words, see _has_word)
    none_of: tuple[str, ...] = ()  # qualifiers that veto the rule
    pattern: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "pattern", re.compile(rf"(?<![a-z0-9])(?:{self.model})(?![0-9])"))

    def matches(self, s: str) -> bool:
        return (
            bool(self.pattern.search(s))
            and all(_has_word(s, q) for q in self.all_of)
            and not any(_has_word(s, q) for q in self.none_of)
        )


def _has_word(s: str, word: str) -> bool:
    """``word`` not glued to other letters: "h100nvl" has "nvl", "nvlink" does not."""
    return re.search(rf"(?<![a-z]){word}(?![a-z])", s) is not None


_RULES: list[_Rule] = [
    _Rule("GB300", "gb300"),
    _Rule("GB200", "gb200"),
    _Rule("B300", "b300"),
    _Rule("B200", "b200"),
    _Rule("GH200", "gh200"),
    _Rule("H200 NVL", "h200", all_of=("nvl",)),
    _Rule("H200", "h200"),
    _Rule("H20", "h20"),
    _Rule("H100 NVL", "h100", all_of=("nvl",)),
    _Rule("H100 PCIe", "h100", all_of=("pcie",)),
    _Rule("H100 PCIe", "h100", all_of=("hbm2e",)),
    _Rule("H100 SXM", "h100"),  # default: "NVIDIA H100 80GB HBM3" is the SXM part
    _Rule("H800", "h800", none_of=("pcie", "hbm2e", "nvl")),  # H800 PCIe: not tabulated
    _Rule("A800", "a800"),
    _Rule("A100", "a100"),
    _Rule("L40S", "l40s"),
    _Rule("MI355X", "mi355x"),
    _Rule("MI350X", "mi350x"),
    _Rule("MI325X", "mi325x"),
    _Rule("MI300X", "mi300x"),
    # JAX device_kind: "TPU v5 lite" (v5e), "TPU v5" (v5p), "TPU v6 lite" (v6e)
    _Rule("TPU v5e", r"(?:tpu ?)?v5(?:e| ?lite(?:pod)?)"),
    _Rule("TPU v5p", r"(?:tpu ?)?v5p|tpu ?v5$"),
    _Rule("TPU v6e", r"(?:tpu ?)?v6(?:e| ?lite)|trillium"),
    _Rule("TPU v7", r"tpu ?v?7x?|ironwood"),
]


def register_peak(peak: DevicePeak, model: str | None = None, all_of: tuple[str, ...] = (),
                  none_of: tuple[str, ...] = ()) -> DevicePeak:
    """Add a device to the peak table (a second device of the same canonical name is rejected).

    ``model``: an optional regex for the model token in free-form device names (as the built-in rules, e.g.
    ``"h20"``), with qualifier words ``all_of`` / ``none_of``; registered rules are tried before the built-in
    ones. Without it only the canonical name (any case/separators) resolves to the device.
    """
    if peak.name in _PEAKS:
        raise ValueError(f"device {peak.name!r} is already in the peak table")
    for d in peak.tflops:
        if d not in DTYPES:
            raise ValueError(f"device {peak.name!r}: unknown dtype {d!r} (known: {', '.join(DTYPES)})")
    _PEAKS[peak.name] = peak
    if model is not None:
        _RULES.insert(0, _Rule(peak.name, model, tuple(all_of), tuple(none_of)))
    return peak


def _normalize(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", str(name).lower()).strip()


def _unknown(kind: str, value: str, known: tuple[str, ...]) -> ValueError:
    return ValueError(
        f"unknown {kind} {value!r}; known: {', '.join(known)}; "
        "pass --peak-tflops to set the peak explicitly"
    )


def resolve_gpu(name: str) -> str:
    """Canonical device name (one of ``GPU_TYPES``) for a free-form device name.

    Accepts ``torch.cuda.get_device_name()`` / JAX ``device_kind`` strings and short forms, any
    case or separators: "NVIDIA H100 80GB HBM3" -> "H100 SXM", "H100-PCIe" -> "H100 PCIe",
    "NVIDIA GB200" -> "GB200", "AMD Instinct MI300X" -> "MI300X", "tpu v5p" / "TPU v5" ->
    "TPU v5p". Plain "H100" means SXM. Raises ``ValueError`` for anything not tabulated.
    """
    s = _normalize(name)
    for canonical in tuple(_PEAKS):  # exact canonical name, any case/spacing
        if s == _normalize(canonical):
            return canonical
    for rule in _RULES:
        if rule.matches(s):
            return rule.canonical
    raise _unknown("device", name, tuple(_PEAKS))


_DTYPE_ALIASES = {
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "fp8": "fp8", "float8": "fp8", "e4m3": "fp8", "e5m2": "fp8",
    "tf32": "tf32", "tfloat32": "tf32",
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
}


def _norm_dtype(dtype: str) -> str:
    d = str(dtype).lower().removeprefix("torch.")
    d = re.sub(r"[^a-z0-9]", "", d)
    if d.startswith(("fp8", "float8")):  # fp8_e4m3, float8_e4m3fn, ...
        d = "fp8"
    if d not in _DTYPE_ALIASES:
        raise _unknown("dtype", dtype, DTYPES)
    return _DTYPE_ALIASES[d]


def device_peak(gpu: str) -> DevicePeak:
    """The :class:`DevicePeak` entry (values, source, uncertainty) for a device name."""
    return PEAKS[resolve_gpu(gpu)]


def peak_used(gpu: str | None, dtype: str = "bf16", override_tflops: float | None = None) -> dict | None:
    """Audit record of the peak behind an MFU (see `DevicePeak.describe`); ``override_tflops``
    (``--peak-tflops``) wins and is recorded as such, with the table value beside it when known."""
    table = None
    if gpu:
        try:
            table = device_peak(gpu).describe(dtype)
        except ValueError:
            table = None
    if override_tflops is None:
        return table
    return {"device": gpu, "dtype": _norm_dtype(dtype) if dtype else None, "tflops": float(override_tflops),
            "dense": None, "sparsity": "as given by --peak-tflops (the table's values are dense)",
            "clock": "as given by --peak-tflops", "source": "--peak-tflops (user override)",
            "source_short": "--peak-tflops", "uncertain": False, "alternatives": {}, "note": "",
            "override": True, "table_tflops": table["tflops"] if table else None}


def peak_flops(gpu: str, dtype: str = "bf16") -> float:
    """Dense peak of one device in **FLOP/s** (not TFLOP/s) for ``dtype``.

    ``peak_flops("NVIDIA H100 80GB HBM3") == 989e12``. Raises ``ValueError`` (one line, listing
    known devices/dtypes and pointing at ``--peak-tflops``) for an unknown device or a dtype
    with no tabulated peak on that device. Record ``device_peak(gpu).source`` next to any MFU.
    """
    return device_peak(gpu).flops(dtype)
