"""The projection's few global constants (``constants.yaml``): per device class, the fractions of
peak that GEMMs, memory streams and links reach, the fixed cost of one operation, and the band."""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

import yaml

from harness.errors import HarnessError
from harness.hw_profiles.devices import DeviceKind

_FILE = "constants.yaml"
_FIELDS = ("gemm_efficiency", "memory_efficiency", "gather_efficiency", "link_efficiency", "seconds_per_op", "band")


class DeviceClass(enum.Enum):
    """Devices that share constants: accelerators (GPUs, TPUs) and CPUs."""

    ACCELERATOR = "accelerator"
    CPU = "cpu"

    @classmethod
    def of(cls, kind: DeviceKind) -> DeviceClass:
        return cls.CPU if kind is DeviceKind.CPU else cls.ACCELERATOR


@dataclass(frozen=True)
class Efficiencies:
    """One device class's constants."""

    gemm_efficiency: float  # of the peak dense FLOP/s, for a GEMM large enough to be compute-bound
    memory_efficiency: float  # of the peak memory bandwidth, for streams (activations, GEMM operands)
    gather_efficiency: float  # of the peak memory bandwidth, for embedding rows gathered and updated at random
    link_efficiency: float  # of the peak link bandwidth, for all-to-alls and all-reduces
    seconds_per_op: float  # the fixed cost of one kernel launch (GPU) or operator call (CPU)
    band: float  # the largest ratio projected/measured of the class on the results fitted

    def scaled(self, **factors: float) -> Efficiencies:
        """These constants with some multiplied (a test breaks the projection on purpose this way)."""
        return replace(self, **{k: getattr(self, k) * f for k, f in factors.items()})


@dataclass(frozen=True)
class Constants:
    classes: tuple[tuple[DeviceClass, Efficiencies], ...]
    sources: tuple[tuple[str, str], ...]

    def of(self, device_class: DeviceClass) -> Efficiencies:
        return dict(self.classes)[device_class]

    def with_class(self, device_class: DeviceClass, efficiencies: Efficiencies) -> Constants:
        return replace(self, classes=tuple((c, efficiencies if c is device_class else e) for c, e in self.classes))


def constants_from_dict(raw: Any, *, what: str = _FILE) -> Constants:
    """Constants from the file's layout; one line when a class or a field is missing or not positive."""
    try:
        classes = []
        for device_class in DeviceClass:
            entry = raw["classes"][device_class.value]
            values = {k: float(entry[k]) for k in _FIELDS}
            if any(v <= 0 for v in values.values()):
                raise ValueError(f"{device_class.value}: every constant must be positive")
            classes.append((device_class, Efficiencies(**values)))
        return Constants(tuple(classes), tuple((str(k), str(v)) for k, v in raw.get("sources", {}).items()))
    except (KeyError, TypeError, ValueError) as err:
        raise HarnessError(f"{what} is invalid: {err} (each class needs {', '.join(_FIELDS)})") from None


@functools.cache
def load_constants() -> Constants:
    """The shipped constants."""
    return constants_from_dict(yaml.safe_load(resources.files(__package__).joinpath(_FILE).read_text()))
