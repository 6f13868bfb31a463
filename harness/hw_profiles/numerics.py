"""The fastest precision a machine computes natively: the default of a run whose submitter has
not chosen one for the system (``harness run`` without ``--precision``).

* A CUDA profile computes bf16 natively from compute capability 8.0 (Ampere: A100; Hopper: H100,
  H200): bf16. One below it (V100: ZionEX's predecessor Big Basin) has fp16 tensor cores and no
  bf16 units: fp16, with the loss scaled. An AMD Instinct of CDNA 2 or later (MI250, MI300, MI350,
  which ROCm's torch names "cuda") computes bf16 natively: bf16.
* A run on this CPU (the ``local`` profile, and every ``--emulate`` run, whose ranks are gloo
  processes here) computes bf16 natively where the CPU has AVX512-BF16 or AMX-BF16 instructions
  (Intel Cooper Lake and later, AMD Zen 4 and later): bf16; elsewhere bf16 is emulated in fp32
  arithmetic and slower than fp32 itself: fp32.

The precision is returned by name (``"fp32"``, ``"bf16"``, ``"fp16"``), as
:class:`harness.rules.precision.Precision` spells it: this layer sits below ``harness.rules``.
"""

from __future__ import annotations

from harness.hw_profiles.detection import DetectedHardware, accelerator_family, matching_devices
from harness.hw_profiles.profiles import Profile

# The first compute capability with bf16 tensor cores (NVIDIA Ampere).
BF16_COMPUTE_CAPABILITY = (8, 0)

# Compute capability of NVIDIA's data-centre GPU families, as NVIDIA's list of CUDA GPUs gives
# them (developer.nvidia.com/cuda-gpus): for a profile's accelerator where no device is detected.
COMPUTE_CAPABILITY = {
    "P100": (6, 0),
    "V100": (7, 0),
    "A100": (8, 0),
    "A30": (8, 0),
    "A10": (8, 6),
    "A40": (8, 6),
    "L40": (8, 9),
    "H100": (9, 0),
    "H200": (9, 0),
    "GH200": (9, 0),
    "B200": (10, 0),
}

# AMD Instinct families whose matrix cores compute bf16 (AMD's CDNA 2, 3 and 4 datasheets). ROCm's
# torch reports a gfx architecture, not an NVIDIA compute capability, so they are known by family.
AMD_BF16_FAMILIES = {"MI250": "CDNA 2", "MI300": "CDNA 3", "MI325": "CDNA 3", "MI350": "CDNA 4", "MI355": "CDNA 4"}

_CPU_FLAG_NAMES = {"amx_bf16": "AMX-BF16", "avx512_bf16": "AVX512-BF16"}


def native_precision(profile: Profile, detected: DetectedHardware, *, emulated: bool = False) -> tuple[str, str]:
    """The fastest precision that ``profile``'s hardware computes natively, by name, and why in a
    short phrase (``("bf16", "native AVX512-BF16 on this CPU")``). ``emulated``: the profile's
    ranks run as gloo processes on this CPU, so this CPU decides."""
    if emulated or profile.is_cpu_only or profile.accelerator is None:
        return cpu_native_precision(detected)
    accelerator = profile.accelerator
    family = accelerator_family(accelerator) or accelerator
    if family in AMD_BF16_FAMILIES:
        return "bf16", f"{family} computes bf16 natively ({AMD_BF16_FAMILIES[family]} matrix cores)"
    capability = _detected_capability(profile, detected) or COMPUTE_CAPABILITY.get(family)
    if capability is None:
        return "fp32", f"no native bf16 or fp16 known for {accelerator}"
    cc = f"compute capability {capability[0]}.{capability[1]}"
    if capability >= BF16_COMPUTE_CAPABILITY:
        return "bf16", f"{family} computes bf16 natively ({cc})"
    return "fp16", f"{family} has no bf16 units ({cc}): fp16 with loss scaling"


def cpu_native_precision(detected: DetectedHardware) -> tuple[str, str]:
    """bf16 where this CPU has bf16 instructions (AMX-BF16 named first), else fp32."""
    if detected.cpu_bf16_flags:
        flag = detected.cpu_bf16_flags[0]
        return "bf16", f"native {_CPU_FLAG_NAMES.get(flag, flag)} on this CPU"
    return "fp32", "no native bf16 on this CPU"


def _detected_capability(profile: Profile, detected: DetectedHardware) -> tuple[int, int] | None:
    """The compute capability torch reports for the profile's accelerator, when one is here."""
    return next((d.compute_capability for d in matching_devices(profile, detected) if d.compute_capability), None)
