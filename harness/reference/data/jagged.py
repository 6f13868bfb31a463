"""Index helpers for jagged segments (values of variable-length rows laid end to end), shared by the
event-stream data sets (:mod:`~harness.reference.data.events`, :mod:`~harness.reference.data.dlrmv3_streams`)."""

from __future__ import annotations

import numpy as np

__all__ = ["exclusive_cumsum", "ranges"]


def exclusive_cumsum(x: np.ndarray) -> np.ndarray:
    """int64 ``[len(x)]``: where each segment of lengths ``x`` starts (0, x0, x0 + x1, ...)."""
    out = np.zeros(len(x), dtype=np.int64)
    if len(x) > 1:
        np.cumsum(x[:-1], out=out[1:])
    return out


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(s, s + n)`` for each (s, n): a gather index for jagged segments."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return np.repeat(np.asarray(starts, dtype=np.int64) - exclusive_cumsum(lengths), lengths) + np.arange(
        int(lengths.sum()), dtype=np.int64)
