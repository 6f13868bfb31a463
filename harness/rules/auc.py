"""The quality metric of MLPerf's recommendation benchmarks: the area under the ROC curve.

Computed exactly, as the Mann-Whitney statistic: the probability that a random positive scores
above a random negative, ties counting one half. That is the area under the ROC curve with ties
drawn as diagonal segments, which is what scikit-learn's ``roc_auc_score`` (the DLRM references'
metric) computes by the trapezoidal rule; the tests check the two agree to 1e-12.

Why not scikit-learn itself: importing ``sklearn.metrics`` costs seconds of CPU (it imports SciPy's
statistics; measured: docs/performance.md, "Figures behind the code's choices"), paid by every
process that evaluates, for one function. Here it is one sort and integer sums: twice the rank
sums are integers, exact in int64 up to billions of samples, and the one division at the end is
the only rounding.
"""

from __future__ import annotations

import numpy as np


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """AUC of ``scores`` (any real numbers, higher = more likely positive) against ``labels``
    (0 or 1). ``nan`` when only one class is present, as scikit-learn returns (with a warning)."""
    y = np.asarray(labels).reshape(-1)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if y.shape != s.shape:
        raise ValueError(f"roc_auc: {y.size} labels but {s.size} scores")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("roc_auc: labels must be 0 or 1")
    if np.isnan(s).any():
        raise ValueError("roc_auc: the scores contain NaN")
    n = y.size
    positives = int(np.count_nonzero(y))
    negatives = n - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    order = np.argsort(s, kind="stable")
    ranked, is_positive = s[order], (y[order] != 0).astype(np.int64)
    # groups of equal scores: every member's rank (1-based) is the group's average, (start + 1 + end) / 2
    starts = np.concatenate([[0], np.flatnonzero(np.diff(ranked)) + 1])
    ends = np.concatenate([starts[1:], [n]])
    positives_in_group = np.add.reduceat(is_positive, starts)
    twice_rank_sum = int(np.dot(starts + ends + 1, positives_in_group))
    twice_u = twice_rank_sum - positives * (positives + 1)
    return twice_u / (2 * positives * negatives)
