"""Hardware profiles (data, one YAML file each) and detection of the machine actually present.

``load_profile("zionex-8gpu")`` gives a :class:`Profile`; ``load_profile("local")`` (the
default) describes this machine from :func:`detect`. :func:`profile_present` says whether a
profile's hardware is here to run for real, and :func:`system_description` writes the MLPerf
``systems/<name>.json`` without ever claiming hardware the run did not use.
:func:`native_precision` is the fastest precision a profile's hardware computes natively.
"""

from harness.hw_profiles.detection import (
    CudaDevice,
    DetectedHardware,
    detect,
    matching_devices,
    profile_present,
)
from harness.hw_profiles.emulation import emulated_profile
from harness.hw_profiles.numerics import native_precision
from harness.hw_profiles.profiles import (
    DEFAULT_PROFILE,
    LOCAL,
    CollectiveBackend,
    DeviceType,
    HostSpec,
    Interconnect,
    MemoryTier,
    Profile,
    format_bytes,
    format_rate,
    list_profiles,
    load_profile,
    local_profile,
    profile_from_file,
    profile_names,
)
from harness.hw_profiles.system_desc import (
    SYSTEM_DESC_FIELDS,
    system_description,
    system_name_for,
    system_statuses,
    write_system_description,
)
from harness.hw_profiles.tiers import TIERS, Tier

__all__ = [
    "emulated_profile",
    "DEFAULT_PROFILE",
    "LOCAL",
    "SYSTEM_DESC_FIELDS",
    "TIERS",
    "CollectiveBackend",
    "CudaDevice",
    "DetectedHardware",
    "DeviceType",
    "HostSpec",
    "Interconnect",
    "MemoryTier",
    "Profile",
    "Tier",
    "detect",
    "format_bytes",
    "format_rate",
    "list_profiles",
    "load_profile",
    "local_profile",
    "matching_devices",
    "native_precision",
    "profile_from_file",
    "profile_names",
    "profile_present",
    "system_description",
    "system_name_for",
    "system_statuses",
    "write_system_description",
]
