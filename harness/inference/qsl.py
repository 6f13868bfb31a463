"""LoadGen's query sample library (QSL) over the eval split: what a sample is (a user, a run
of consecutive eval rows, as MLPerf's DLRMv2 reference draws them) and its rows, generated
when LoadGen loads the sample, before it starts timing."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from harness.inference import mlperf
from harness.reference.data import synthetic
from harness.reference.data.batches import NUM_DENSE


class SampleLibrary:
    """LoadGen's query sample library over the eval split, as MLPerf's DLRMv2 reference keeps
    it: QSL index ``i`` is a user, eval rows ``offsets[i]:offsets[i + 1]`` (100 to 700 of
    them: :func:`harness.inference.mlperf.user_offsets`).

    Loading generates the rows of the users LoadGen asks for (``dense`` ``rows x 13``,
    ``sparse`` ``rows x L``, ``labels``), before LoadGen starts timing; unloading forgets them.
    """

    def __init__(self, data: synthetic.SyntheticCriteo):
        self.data = data
        self.indices = data.eval_indices()
        n, width = self.indices.size, sum(data.pooling)
        self.offsets = mlperf.user_offsets(int(n))
        self.sizes = np.diff(self.offsets)
        self.dense = torch.zeros(n, NUM_DENSE)
        self.sparse = torch.zeros(n, width, dtype=torch.int64)
        self.labels = torch.zeros(n)
        self.loaded = torch.zeros(n, dtype=torch.bool)

    @property
    def count(self) -> int:
        """The samples (users)."""
        return int(self.sizes.size)

    @property
    def rows(self) -> int:
        return int(self.indices.size)

    @property
    def mean_rows(self) -> float:
        return self.rows / self.count

    def rows_of(self, users: np.ndarray) -> np.ndarray:
        """The eval rows of ``users``, one user after another."""
        sizes = self.sizes[users]
        starts = np.repeat(self.offsets[users] - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)
        return starts + np.arange(int(sizes.sum()), dtype=np.int64)

    def load(self, users: Sequence[int]) -> None:
        rows = self.rows_of(np.asarray(users, dtype=np.int64))
        for lo in range(0, rows.size, 65536):
            part = rows[lo : lo + 65536]
            batch = self.data.samples(self.indices[part])
            t = torch.from_numpy(part)
            self.dense[t], self.sparse[t], self.labels[t] = batch.dense, batch.sparse, batch.labels.float()
            self.loaded[t] = True

    def load_all(self) -> None:
        """Every user's rows, generated once (the calibration's calls need them all)."""
        if not bool(self.loaded.all()):
            self.load(range(self.count))

    def unload(self, users: Sequence[int]) -> None:
        self.loaded[torch.from_numpy(self.rows_of(np.asarray(users, dtype=np.int64)))] = False
