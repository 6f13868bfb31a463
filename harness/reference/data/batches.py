"""The batch every data source yields and the model consumes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

NUM_DENSE = 13
NUM_SPARSE = 26


@dataclass(frozen=True)
class Batch:
    """One batch of Criteo-like samples.

    Attributes:
        dense: ``B x 13`` float32, already transformed (``log(1 + x)`` for Criteo counts).
        sparse: ``B x L`` int64, the categorical ids of all features side by side, where
            ``L = sum(pooling)``; feature ``f`` occupies columns
            ``sum(pooling[:f]) .. sum(pooling[:f+1])`` and its ids are rows of table ``f``
            (``0 <= id < rows[f]``).
        labels: ``B`` float32 in {0, 1}.
        pooling: ids per sample for each feature (1 for one-hot Criteo; MLPerf's multi-hot
            Criteo uses 1 to 100).
    """

    dense: torch.Tensor
    sparse: torch.Tensor
    labels: torch.Tensor
    pooling: tuple[int, ...]

    @property
    def size(self) -> int:
        return int(self.labels.shape[0])

    def to(self, device: torch.device | str) -> Batch:
        """The batch on ``device``, copied without waiting (pinned host memory overlaps the copy)."""
        return Batch(dense=self.dense.to(device, non_blocking=True), sparse=self.sparse.to(device, non_blocking=True),
                     labels=self.labels.to(device, non_blocking=True), pooling=self.pooling)
