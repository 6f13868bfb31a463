"""The AUC against scikit-learn's ``roc_auc_score`` (the DLRM references' metric)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from harness.rules.auc import roc_auc


@pytest.mark.parametrize("decimals", [0, 1, 2, 6])  # few distinct scores (many ties) to almost none
def test_equals_scikit_learn_on_random_scores_with_ties(decimals):
    rng = np.random.default_rng(decimals)
    for n in (2, 3, 17, 1000, 20000):
        for _ in range(5):
            labels = (rng.random(n) < rng.uniform(0.05, 0.95)).astype(np.float32)
            labels[:2] = (0, 1)  # both classes
            scores = np.round(rng.normal(size=n) + labels * rng.uniform(0, 2), decimals).astype(np.float32)
            assert roc_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)


def test_worked_cases():
    assert roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == 0.75  # 3 of 4 pairs ordered
    assert roc_auc([0, 1], [0.5, 0.5]) == 0.5  # a tie counts one half
    assert roc_auc([1, 0, 1], [3.0, 1.0, 2.0]) == 1.0
    assert roc_auc([1, 0, 1], [-3.0, 1.0, 2.0]) == 0.5
    assert np.isnan(roc_auc([1, 1], [0.2, 0.3]))  # one class: undefined, as scikit-learn says


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="0 or 1"):
        roc_auc([0, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="NaN"):
        roc_auc([0, 1], [0.1, float("nan")])
    with pytest.raises(ValueError, match="2 labels but 3 scores"):
        roc_auc([0, 1], [0.1, 0.2, 0.3])
