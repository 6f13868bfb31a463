"""MLPerf Inference's own pieces: LoadGen's reading of ``mlperf.conf`` and our ``user.conf``, the
samples (users of 100 to 700 rows, as MLPerf's DLRMv2 reference draws them), and the accuracy log
decoded and scored as the official script does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.errors import ErrorCategory, HarnessError
from harness.inference import mlperf


_FROM_CONFIG = """
import json, sys, mlperf_loadgen as lg
s = lg.TestSettings()
assert s.FromConfig(sys.argv[1], "dlrm-v2", sys.argv[2]) == 0
print(json.dumps([s.min_duration_ms, s.min_query_count, s.offline_expected_qps, s.server_target_qps,
                  s.server_target_latency_ns]))
"""


def test_loadgen_reads_the_official_settings_and_the_user_conf(tmp_path):
    """Each in a fresh process (LoadGen applies mlperf.conf in its first FromConfig only):
    our user.conf through FromConfig gives the official minimums, as our copy of mlperf.conf
    states them, and the user's target."""

    def settings(conf: Path, scenario: str) -> list[float]:
        out = subprocess.run([sys.executable, "-c", _FROM_CONFIG, str(conf), scenario], capture_output=True,
                             text=True, check=True)
        return json.loads(out.stdout)

    offline = settings(mlperf.write_user_conf(tmp_path / "o.conf", "offline", target_qps=1234.5, note="t"), "Offline")
    assert offline[0] == mlperf.official("Offline", "min_duration") == 600_000
    assert offline[1] == mlperf.official("Offline", "min_query_count") == 24576 and offline[2] == 1234.5
    server = settings(mlperf.write_user_conf(tmp_path / "s.conf", "server", target_qps=77.0, note="t"), "Server")
    assert server[0] == mlperf.official("Server", "min_duration") == 600_000 and server[3] == 77.0
    assert server[4] == mlperf.official("Server", "target_latency") * 1e6 == 60_000_000


def _accuracy_log(path: Path, offsets: np.ndarray, preds: np.ndarray, labels: np.ndarray, order: list[int]) -> Path:
    """A LoadGen accuracy log as the SUT writes it: per sample its rows' (prediction, label) pairs."""
    log = []
    for k, i in enumerate(order):
        lo, hi = offsets[i], offsets[i + 1]
        pairs = np.stack([preds[lo:hi], labels[lo:hi]], axis=1).astype(np.float32)
        log.append({"seq_id": k, "qsl_idx": i, "data": pairs.tobytes().hex().upper()})
    path.write_text(json.dumps(log))
    return path


def test_the_accuracy_log_is_decoded_and_scored_as_the_official_script_does(tmp_path):
    offsets = np.array([0, 2, 3, 6])  # three users of 2, 1 and 3 rows
    labels = np.array([0, 1, 0, 1, 1, 0], dtype=np.float32)
    preds = np.array([0.1, 0.8, 0.6, 0.4, 0.9, 0.2], dtype=np.float32)
    path = _accuracy_log(tmp_path / "mlperf_log_accuracy.json", offsets, preds, labels, [2, 0, 1, 0])  # 0 twice
    score = mlperf.score_accuracy_log(path, offsets, labels, reference=preds, model="dlrm-v2-99")
    from sklearn.metrics import roc_auc_score

    order = [3, 4, 5, 0, 1, 2]  # the rows in the log's order
    # the script's AUC (its roc_auc_score) to rounding: 8 of 9 pairs ordered, 0.8888888888888888 here, the
    # trapezoids' sum 0.888888888888889 there
    assert score.auc == pytest.approx(roc_auc_score(labels[order], preds[order]), abs=1e-12) == 8 / 9
    assert score.good == 4 and score.total == 6
    assert (score.queries, score.duplicates) == (3, 1)
    assert score.official_line() == (f"AUC={100 * score.auc:.3f}%, accuracy={100 * 4 / 6:.3f}%, good=4, total=6, "
                                     f"queries=3")
    assert score.passed and score.ratio == 1.0
    worse = mlperf.score_accuracy_log(path, offsets, labels, reference=labels, model="dlrm-v2-99")  # a perfect one
    assert worse.reference_auc == 1.0 and not worse.passed
    flipped = labels.copy()
    flipped[4] = 0
    _accuracy_log(tmp_path / "wrong.json", offsets, preds, flipped, [0, 1, 2])
    with pytest.raises(HarnessError, match="1 logged labels differ from the eval split's"):
        mlperf.score_accuracy_log(tmp_path / "wrong.json", offsets, labels, reference=preds, model="dlrm-v2-99")
    _accuracy_log(tmp_path / "short.json", np.array([0, 2, 3, 5]), preds, labels, [2])
    with pytest.raises(HarnessError, match="sample 2 answered 2 rows; it holds 3"):
        mlperf.score_accuracy_log(tmp_path / "short.json", offsets, labels, reference=preds, model="dlrm-v2-99")
    path.write_text("[{\"qsl_idx\": 0}]")
    with pytest.raises(HarnessError, match="not a LoadGen accuracy log") as err:
        mlperf.score_accuracy_log(path, offsets, labels, reference=preds, model="dlrm-v2-99")
    assert err.value.category is ErrorCategory.RUN_FAILED


def _reference_offsets(rows: int) -> list[int]:
    """The reference's loop (recommendation/dlrm_v2/pytorch/python/multihot_criteo.py), as it is
    written there: the global NumPy generator seeded 123, one randint per sample."""
    quantile = np.array(mlperf.USER_ROWS_QUANTILES)
    np.random.seed(123)
    offsets, qo = [], 0
    while True:
        offsets.append(qo)
        qo = min(qo + int(quantile[np.random.randint(low=0, high=len(quantile))]), rows)
        if qo >= rows:
            break
    offsets.append(qo)
    return offsets


@pytest.mark.parametrize("rows", [1, 100, 101, 5000, 65536])
def test_the_samples_are_the_references_users(rows):
    offsets = mlperf.user_offsets(rows)
    assert offsets.tolist() == _reference_offsets(rows)
    sizes = np.diff(offsets)
    assert offsets[0] == 0 and offsets[-1] == rows and (sizes >= 1).all() and (sizes[:-1] >= 100).all()
    assert set(sizes[:-1].tolist()) <= set(mlperf.USER_ROWS_QUANTILES)
