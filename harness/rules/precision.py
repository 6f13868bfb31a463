"""The run's numerical precision: what the dense layers compute in, what the embedding tables
are stored in, and what the pooled embeddings cross the wire in (torch-free: the run set, the
rules and the logs speak of it without the training stack).

* ``fp32``: everything in fp32.
* ``bf16``: the dense layers under autocast to bf16 (fp32 master weights, losses and AUCs in
  fp32); the tables stored in bf16, updated in fp32 and rounded stochastically; pooled
  embeddings cross in bf16.
* ``fp16``: as bf16 with fp16, and the loss scaled (dynamic loss scaling, as
  ``torch.amp.GradScaler``) so that small gradients do not flush to zero.

Optimizer state stays fp32 in every precision. See ``docs/design.md`` ("Numerics").
"""

from __future__ import annotations

import enum

from harness.errors import ErrorCategory, HarnessError


class Precision(enum.Enum):
    """A run's precision (one value for the dense compute, the tables and the pooled wire)."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"

    @property
    def bytes_per_element(self) -> int:
        """Bytes of one embedding-table value stored in this precision."""
        return 4 if self is Precision.FP32 else 2

    @property
    def mlperf_name(self) -> str:
        """The value MLPerf's ``lowest_numerical_precision_*`` keys use for it."""
        return {"fp32": "fp32", "bf16": "bfloat16", "fp16": "fp16"}[self.value]

    @property
    def loss_scaling(self) -> bool:
        """Whether training in this precision scales the loss (fp16's narrow exponent range)."""
        return self is Precision.FP16

    @property
    def reduced(self) -> bool:
        return self is not Precision.FP32


def parse_precision(name: str | Precision, *, what: str = "precision") -> Precision:
    """``name`` as a :class:`Precision`; a name that is none is one line naming the choices."""
    if isinstance(name, Precision):
        return name
    try:
        return Precision(str(name).lower())
    except ValueError:
        raise HarnessError(f"{what} must be one of {', '.join(p.value for p in Precision)}, not {name!r}",
                           ErrorCategory.BAD_INPUT) from None


def lowest(*precisions: Precision) -> Precision:
    """The lowest of ``precisions`` (fewest bytes; fp16 below bf16 at equal bytes: fewer exponent bits)."""
    order = {Precision.FP32: 2, Precision.BF16: 1, Precision.FP16: 0}
    return min(precisions, key=order.__getitem__)
