"""dlrm-v3's responses, accuracy score and TEST08 (:mod:`harness.inference.dlrmv3_accuracy`): responses
through real LoadGen-format logs, the metrics against hand-computed values and a direct NumPy
computation, the 99.9% targets on both sides, TEST08 passing and failing, and a real LoadGen run whose
performance-mode accuracy log (audit.config in its working directory) TEST08 reads."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.errors import ErrorCategory, HarnessError
from harness.inference import dlrmv3_accuracy as acc

ROOT = Path(__file__).resolve().parents[2]


def _write_log(path: Path, arrays: list[np.ndarray]) -> Path:
    """An accuracy log as LoadGen 6.0 writes it: ``[``, one entry a line, upper-case hex, ``]``."""
    rows = [f'{{ "seq_id" : {k}, "qsl_idx" : {k}, "data" : "{a.astype(np.float32).tobytes().hex().upper()}" }}'
            for k, a in enumerate(arrays)]
    path.write_text("[\n" + ",\n".join(rows) + ("\n" if rows else "") + "]\n")
    return path


def _request(rng: np.random.Generator, c: int, *, ties: bool = False) -> tuple[np.ndarray, ...]:
    preds = rng.random(c).astype(np.float32)
    if ties:
        preds = (np.round(preds * 8) / 8).astype(np.float32)
    labels = (rng.random(c) < rng.random()).astype(np.float32)
    weights = rng.integers(1, 4, c).astype(np.float32)
    return preds, labels, weights


def _responses(arrays: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]) -> list[acc.Response]:
    return [acc.decode_response(acc.encode_response(*a)) for a in arrays]


# ---------------------------------------------------------------------------------- responses
def test_a_response_round_trips_through_a_loadgen_log(tmp_path):
    rng = np.random.default_rng(1)
    reqs = [(90, 0, *_request(rng, 5)), (91, 16_777_215, *_request(rng, 3)), (-1, 7, *_request(rng, 1))]
    data = [acc.encode_response(*r) for r in reqs]
    assert data[0].dtype == np.float32 and data[0].tolist()[:2] == [90.0, 0.0] and data[0][-1] == 5
    assert data[0].size == 3 + 3 * 5
    for layout in ("loadgen", "one line"):
        path = tmp_path / f"{layout}.json"
        if layout == "loadgen":
            _write_log(path, data)
        else:
            path.write_text(json.dumps([{"seq_id": k, "qsl_idx": 0, "data": d.tobytes().hex()}
                                        for k, d in enumerate(data)]))
        back = acc.decode_log(path)
        assert [r.key for r in back] == [(90, 0), (91, 16_777_215), (-1, 7)]
        for r, (_, _, p, lab, w) in zip(back, reqs):
            assert [r.preds.tolist(), r.labels.tolist(), r.weights.tolist()] == [p.tolist(), lab.tolist(), w.tolist()]
    perf = acc.encode_perf_response(92, 3, reqs[0][2])
    assert perf.tolist() == [92.0, 3.0, *reqs[0][2].tolist()]
    (r,) = acc.decode_perf_log(_write_log(tmp_path / "perf.json", [perf]))
    assert r.key == (92, 3) and r.preds.tolist() == reqs[0][2].tolist()
    assert acc.decode_log(_write_log(tmp_path / "empty.json", [])) == []
    with pytest.raises(HarnessError, match="cannot read the accuracy log") as err:
        acc.decode_log(tmp_path / "missing.json")
    assert err.value.category is ErrorCategory.NOT_FOUND
    (tmp_path / "binary.json").write_bytes(b"[\n\xff\xfe\n]\n")
    with pytest.raises(HarnessError, match="not UTF-8 text"):
        acc.decode_log(tmp_path / "binary.json")


@pytest.mark.parametrize(("text", "message"), [
    ('[\n{ "seq_id" : 0, "qsl_idx" : 0, "data" : "XYZ0" }\n]\n',
     r"entry 0 \(seq_id 0, qsl_idx 0\): \"data\" is not hex"),
    ('[\n{ "seq_id" : 0, "qsl_idx" : 0, "data" : "0000803F00" }\n]\n', "5 bytes, not float32 values"),
    ('[\n{ "seq_id" : 0, "qsl_idx" : 0 }\n]\n', 'entry 0 has no "data" string'),
    ("PERF", r"8 values; an accuracy-mode response of C = 0 candidates holds 3 \+ 3 x C = 3 \(a performance-mode log"),
    ("HALF", "ts_idx 90.5 is not an integer"),
    ("CUT", "ends before its closing ']'"),
    ('{"seq_id": 0}', "a JSON dict, not a list"),
    ("", "not a LoadGen accuracy log"),
])
def test_a_malformed_log_is_one_line_naming_the_entry(tmp_path, text, message):
    path = tmp_path / "mlperf_log_accuracy.json"
    if text == "PERF":  # a performance-mode log read as an accuracy-mode one
        _write_log(path, [acc.encode_perf_response(90, 1, np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.0], np.float32))])
    elif text == "CUT":  # a run that stopped while LoadGen wrote its log
        _write_log(path, [acc.encode_response(90, 1, [0.5], [1], [1])] * 2)
        path.write_text(path.read_text().removesuffix("]\n"))
    elif text == "HALF":
        _write_log(path, [np.array([90.5, 1, 0.5, 1, 1, 1], np.float32)])
    else:
        path.write_text(text)
    with pytest.raises(HarnessError, match=message) as err:
        acc.decode_log(path)
    assert err.value.category is ErrorCategory.BAD_INPUT and "\n" not in str(err.value)


def test_encode_refuses_what_float32_or_the_layout_cannot_carry():
    with pytest.raises(HarnessError, match="labels of shape \\(2,\\): need 3 values"):
        acc.encode_response(90, 0, [0.1, 0.2, 0.3], [1, 0], [1, 1, 1])
    with pytest.raises(HarnessError, match="query_idx 16777216 is not an integer"):
        acc.encode_perf_response(90, 2 ** 24, [0.5])
    with pytest.raises(HarnessError, match="preds of shape \\(0,\\)"):
        acc.encode_perf_response(90, 1, [])


# ---------------------------------------------------------------------------------- score
def test_the_metrics_match_hand_computed_values():
    """Request A: 3 of 4 right (0.5 counts as 1), AUC 3/4 (positives 0.9 and 0.5 over negatives 0.2 and 0.6).
    B: one class only, weights 2 and 1 (GAUC skips it). C: weights make its AUC 10/16, not the
    unweighted 3/4. D: equal predictions (and 0s, torchrec's padding) are skipped."""
    a = (90, 0, np.array([0.9, 0.2, 0.6, 0.5]), np.array([1, 0, 0, 1]), np.ones(4))
    b = (90, 1, np.array([0.3, 0.7]), np.array([1, 1]), np.array([2, 1]))
    c = (90, 2, np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1]), np.array([1, 3, 2, 2]))
    d = (91, 0, np.array([0.4, 0.0, 0.4]), np.array([1, 0, 0]), np.ones(3))
    m = acc.score(_responses([a, b, c, d]))
    ce_a = -(np.log2(0.9) + np.log2(0.8) + np.log2(0.4) + np.log2(0.5))
    ce_b = -(2 * np.log2(0.3) + np.log2(0.7))
    ce_c = -(np.log2(0.9) + 3 * np.log2(0.6) + 2 * np.log2(0.35) + 2 * np.log2(0.8))
    ce_d = -(np.log2(0.4) + np.log2(1.0) + np.log2(0.6))
    pos, neg = 2 + 3 + 4 + 1, 2 + 0 + 4 + 2
    rate = pos / (pos + neg)
    assert m.ne == pytest.approx((ce_a + ce_b + ce_c + ce_d) / (-pos * np.log2(rate) - neg * np.log2(1 - rate)),
                                 rel=1e-6)  # the float32 predictions' rounding
    # right (weighted): A 3 of 4; B 0.7 (1 of 3); C 0.1, 0.4 and 0.8 (6 of 8); D 0.0 and the second 0.4 (2 of 3)
    assert m.accuracy == pytest.approx((3 + 1 + 6 + 2) / (4 + 3 + 8 + 3), rel=1e-12)
    assert m.gauc == pytest.approx((0.75 + 10 / 16) / 2, rel=1e-9) and m.gauc_requests == 2
    assert (m.requests, m.candidates, m.duplicates) == (4, 13, 0)
    assert (m.window_ne, m.window_accuracy, m.window_gauc) == (m.ne, m.accuracy, m.gauc)  # 13 candidates: all in
    alone = acc.score(_responses([b]))
    assert alone.gauc == pytest.approx(0.5) and alone.gauc_requests == 0  # torchrec's (0 + 1e-9) / (0 + 2e-9)
    assert alone.ne == pytest.approx(ce_b / (3 * -np.log2(1 - 1e-12)), rel=1e-6)  # base rate clamped to 1 - 1e-12


def _direct(reqs: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]) -> tuple[float, float, float, int]:
    """NE, accuracy and GAUC from their definitions: cross-entropy in bits, weighted; every (positive,
    negative) pair of a request compared, weighted, for its AUC; the requests with both classes averaged."""
    p = np.concatenate([r[2] for r in reqs]).astype(np.float64)
    lab = np.concatenate([r[3] for r in reqs]).astype(np.float64)
    w = np.concatenate([r[4] for r in reqs]).astype(np.float64)
    ce = -(w * (lab * np.log2(p) + (1 - lab) * np.log2(1 - p))).sum()
    rate = (w * lab).sum() / w.sum()
    ne = ce / (w.sum() * -(rate * np.log2(rate) + (1 - rate) * np.log2(1 - rate)))
    accuracy = (w * ((p >= 0.5) == lab)).sum() / w.sum()
    aucs = []
    for _, _, *arrays in reqs:
        rp, rl, rw = (a.astype(np.float64) for a in arrays)
        pos, neg = rl == 1, rl == 0
        if pos.any() and neg.any():
            pairs = np.outer(rw[pos], rw[neg]) * (rp[pos][:, None] > rp[neg][None, :])
            aucs.append(pairs.sum() / (rw[pos].sum() * rw[neg].sum()))
    return float(ne), float(accuracy), float(np.mean(aucs)), len(aucs)


def test_the_metrics_match_a_direct_computation_on_random_data():
    rng = np.random.default_rng(7)
    reqs = [(90 + k // 10, k % 10, *_request(rng, int(rng.integers(2, 40)))) for k in range(60)]
    reqs[3] = (*reqs[3][:3], np.ones_like(reqs[3][3]), reqs[3][4])  # one class only
    m = acc.score(_responses(reqs))
    ne, accuracy, gauc, groups = _direct(reqs)
    assert m.ne == pytest.approx(ne, rel=1e-9) and m.accuracy == pytest.approx(accuracy, rel=1e-12)
    assert m.gauc == pytest.approx(gauc, rel=1e-9) and m.gauc_requests == groups < 60
    shuffled = acc.score(_responses([reqs[i] for i in rng.permutation(len(reqs))]))  # lifetime: order-free
    assert (shuffled.ne, shuffled.accuracy, shuffled.gauc) == pytest.approx((m.ne, m.accuracy, m.gauc), rel=1e-12)


def test_the_window_is_torchrecs_last_3000_candidates_and_duplicates_count_again():
    rng = np.random.default_rng(3)
    reqs = [(95, k, *_request(rng, 1000)) for k in range(5)]
    m = acc.score(_responses(reqs))
    tail = acc.score(_responses(reqs[2:]))  # 3 x 1000 fit the window, a fourth would not
    assert (m.window_ne, m.window_accuracy, m.window_gauc, m.window_gauc_requests) == pytest.approx(
        (tail.ne, tail.accuracy, tail.gauc, tail.gauc_requests), rel=1e-9)
    assert m.window_ne != pytest.approx(m.ne, rel=1e-9)
    full = [(95, 9, *_request(rng, 2048)), (95, 10, *_request(rng, 2048))]  # the reference's C: the last alone
    big, last = acc.score(_responses(full)), acc.score(_responses(full[1:]))
    assert (big.window_ne, big.window_accuracy, big.window_gauc, big.window_gauc_requests) == pytest.approx(
        (last.ne, last.accuracy, last.gauc, 1), rel=1e-9)
    twice = acc.score(_responses([reqs[0], reqs[0], reqs[1]]))  # the reference counts every entry
    once = acc.score(_responses([reqs[0], reqs[1]]))
    w0, w1 = reqs[0][4].sum(), reqs[1][4].sum()
    right = [(r[4] * ((r[2] >= 0.5) == r[3])).sum() for r in reqs[:2]]
    assert (twice.requests, twice.duplicates, twice.candidates) == (3, 1, 3000)
    assert twice.accuracy == pytest.approx((2 * right[0] + right[1]) / (2 * w0 + w1), rel=1e-12)
    assert once.accuracy == pytest.approx((right[0] + right[1]) / (w0 + w1), rel=1e-12)
    with pytest.raises(HarnessError, match="no responses to score"):
        acc.score([])


def test_the_text_is_the_references_and_the_checker_reads_it(tmp_path):
    rng = np.random.default_rng(5)
    m = acc.score(_responses([(90, k, *_request(rng, 64)) for k in range(10)]))
    lines = m.lines()
    # the keys in the order of a v6.0 dlrm-v3 accuracy.txt (mlcommons/inference_results_v6.0,
    # closed/NVIDIA/results/B200-SXM-180GBx8_TRT/dlrm-v3/Offline/accuracy/accuracy.txt)
    keys = [re.match(r"WARNING:main:(metric/\S+): ", line).group(1) for line in lines[2:]]
    assert keys == [f"metric/{p}_{n}/rating" for n in ("ne", "accuracy", "gauc") for p in ("lifetime", "window")] + \
        ["metric/lifetime_gauc_num_samples/rating", "metric/window_gauc_num_samples/rating"]
    assert lines[:2] == ["WARNING:main:Parsing loadgen accuracy log...", "WARNING:main:results have 10 entries"]
    assert lines[-2] == f"WARNING:main:metric/lifetime_gauc_num_samples/rating: {float(m.gauc_requests)}"
    # the checker's regexes (tools/submission/submission_checker/constants.py:1809-1811), re.match per line
    checker = {"DLRM_NE": r".*metric/lifetime_ne/rating:\s*([\d\.]+).*",
               "DLRM_ACC": r".*metric/lifetime_accuracy/rating:\s*([\d\.]+).*",
               "DLRM_AUC": r".*metric/lifetime_gauc/rating:\s*([\d\.]+).*"}
    found = {k: float(mt.group(1)) for line in m.text().splitlines() for k, pat in checker.items()
             if (mt := re.match(pat, line))}
    assert found == {"DLRM_NE": m.ne, "DLRM_ACC": m.accuracy, "DLRM_AUC": m.gauc}  # exactly: repr round-trips
    assert acc.parse_accuracy_txt(m.text()) == m.quality
    with pytest.raises(HarnessError, match="no DLRM_AUC line"):
        acc.parse_accuracy_txt("\n".join(line for line in lines if "lifetime_gauc/" not in line))


# ---------------------------------------------------------------------------------- targets
def test_the_targets_pass_and_fail_on_the_right_side():
    ref = acc.OFFICIAL_FP32
    targets = acc.accuracy_targets(ref)
    assert targets.checker_min(acc.Metric.NE) == 0.86687 * 0.999  # as the checker writes it
    assert targets.checker_min(acc.Metric.GAUC) == 0.78663 * 0.999
    assert targets.check(ref).passed
    at_edge = acc.Quality(ne=ref.ne, accuracy=0.69651 * 0.999, gauc=ref.gauc)
    assert targets.check(at_edge).passed  # >=
    low = targets.check(acc.Quality(ne=ref.ne, accuracy=0.69651 * 0.9989, gauc=ref.gauc))
    assert not low.passed and [v.passed for v in low.verdicts] == [True, False, True]
    worse = targets.check(acc.Quality(ne=ref.ne * 1.002, accuracy=ref.accuracy, gauc=ref.gauc))  # NE 0.2% worse
    ne = worse.verdicts[0]
    assert ne.checker_passed and not ne.meaningful_passed and not worse.passed
    assert "FAIL (NE above the reference's)" in worse.lines()[0]
    better = targets.check(acc.Quality(ne=ref.ne * 0.998, accuracy=ref.accuracy, gauc=ref.gauc))  # 0.2% better
    assert not better.verdicts[0].checker_passed and not better.passed  # the checker's NE >= rule
    assert targets.check(acc.Quality(ne=ref.ne * 1.0009, accuracy=ref.accuracy, gauc=ref.gauc)).passed
    rng = np.random.default_rng(2)
    mine = acc.score(_responses([(90, k, *_request(rng, 32)) for k in range(8)]))
    assert acc.accuracy_targets(mine).check(mine).passed and acc.check_targets(mine, mine).passed
    assert not acc.check_targets(mine).passed  # random predictions against the official model's
    # a v6.0 submission's lifetime lines (mlcommons/inference_results_v6.0, closed/NVIDIA/results/
    # B200-SXM-180GBx8_TRT/dlrm-v3/Offline/accuracy/accuracy.txt): NE 0.08% above the reference's, passes both
    real = acc.parse_accuracy_txt("WARNING:main:metric/lifetime_ne/rating: 0.8675504587396435\n"
                                  "WARNING:main:metric/window_ne/rating: 0.7274742492636647\n"
                                  "WARNING:main:metric/lifetime_accuracy/rating: 0.6964261896038318\n"
                                  "WARNING:main:metric/lifetime_gauc/rating: 0.7862891896349031\n"
                                  "WARNING:main:metric/lifetime_gauc_num_samples/rating: 349823.0\n")
    assert real == acc.Quality(ne=0.8675504587396435, accuracy=0.6964261896038318, gauc=0.7862891896349031)
    assert acc.check_targets(real).passed
    with pytest.raises(HarnessError, match="accuracy fraction 1.5"):
        acc.accuracy_targets(ref, 1.5)


# ---------------------------------------------------------------------------------- TEST08
def _test08_logs(tmp_path: Path, *, perturb: dict[int, float] | None = None, drop: int | None = None,
                 n: int = 12, c: int = 64) -> tuple[Path, Path]:
    rng = np.random.default_rng(11)
    reqs = [(90 + k // 4, k % 4, *_request(rng, c)) for k in range(n)]
    acc_log = _write_log(tmp_path / "acc.json", [acc.encode_response(*r) for k, r in enumerate(reqs) if k != drop])
    perf = []
    for k in [*range(n), 0, 5]:  # a performance run repeats requests
        ts, q, p = reqs[k][:3]
        perf.append(acc.encode_perf_response(ts, q, np.clip(p * (1 + (perturb or {}).get(k, 0.0)), 0, 1)))
    return _write_log(tmp_path / "perf.json", perf), acc_log


def test_test08_passes_on_identical_responses(tmp_path):
    perf, accuracy = _test08_logs(tmp_path, perturb={3: 1e-5})  # well inside 0.1% NE
    result = acc.verify_test08(perf, accuracy)
    assert result.passed
    assert (result.acc_entries, result.perf_entries, result.matched, result.unmatched) == (12, 14, 14, 0)
    assert 0 < result.worst_rel_diff < 1e-4 and result.ne_mismatches == 0
    assert result.text() == ("Verifying accuracy. This might take a while...\nReading accuracy mode results...\n"
                             "Reading performance mode results...\n\nnum_acc_log_entries = 12\n"
                             "num_perf_log_entries = 14\nnum_matched = 14\nnum_unmatched = 0\nnum_ne_mismatch = 0\n"
                             "tolerance = 0.10%\n\nTEST PASS\nTEST08 verification complete\n")


def test_test08_fails_on_a_request_off_by_more_than_the_tolerance(tmp_path):
    perf, accuracy = _test08_logs(tmp_path, perturb={7: -0.001})  # predictions 0.1% lower: NE ~0.6% off
    result = acc.verify_test08(perf, accuracy)
    assert not result.passed and result.ne_mismatches == 1 and 0.001 < result.worst_rel_diff < 0.02
    (line,) = result.mismatch_lines
    assert re.fullmatch(r"  NE mismatch at \(91, 3\): acc_ne=\d+\.\d{6}, perf_ne=\d+\.\d{6}, diff=\d+\.\d{4}%", line)
    assert "\nTEST FAIL\n" in result.text() and line in result.text().splitlines()
    assert acc.verify_test08(perf, accuracy, tolerance=result.worst_rel_diff * 1.01).passed
    assert not acc.verify_test08(perf, accuracy, tolerance=result.worst_rel_diff * 0.99).passed


def test_test08_fails_on_a_request_the_accuracy_run_lacks(tmp_path):
    perf, accuracy = _test08_logs(tmp_path, drop=6)
    result = acc.verify_test08(perf, accuracy)
    assert not result.passed and (result.matched, result.unmatched, result.ne_mismatches) == (13, 1, 0)
    empty = acc.verify_test08(_write_log(tmp_path / "none.json", []), accuracy)  # audit.config not applied
    assert not empty.passed and empty.matched == 0 and empty.brief().startswith("FAIL, 0 of 0")


def test_test08_refuses_performance_responses_in_the_accuracy_layout(tmp_path):
    _, accuracy = _test08_logs(tmp_path)
    full = _write_log(tmp_path / "full.json", [acc.encode_response(90, 0, *_request(np.random.default_rng(11), 64))])
    with pytest.raises(HarnessError, match=r"request \(90, 0\) with 193 predictions; .* 64 candidates \(an "
                                           r"accuracy-mode response: answer performance queries with encode_perf"):
        acc.verify_test08(full, accuracy)


def test_test08_ne_is_the_scripts(tmp_path):
    """run_verification.py's NE: natural logs, labels clipped to [1e-7, 1 - 1e-7], float32; to float32
    rounding, the weighted cross-entropy over the base rate's (the log base cancels)."""
    rng = np.random.default_rng(4)
    p, lab, w = _request(rng, 500)
    ne = acc._test08_ne(p, lab, w)
    assert ne.dtype == np.float32
    p64, lab64 = (np.clip(x.astype(np.float64), 1e-7, 1 - 1e-7) for x in (p, lab))
    rate = (w * lab64).sum() / w.sum()
    expect = -(w * (lab64 * np.log(p64) + (1 - lab64) * np.log(1 - p64))).sum() / (
        w.sum() * -(rate * np.log(rate) + (1 - rate) * np.log(1 - rate)))
    assert ne == pytest.approx(expect, rel=1e-5)
    assert acc._test08_ne(p, lab, np.zeros_like(w)) == 0.0
    ones = np.ones(8, np.float32)  # labels clipped as predictions are: a sure, right prediction scores NE 1
    assert acc._test08_ne(ones, ones, ones) == pytest.approx(1.0, abs=1e-3)


def test_the_test08_folder_is_where_the_checker_reads_it(tmp_path):
    perf, accuracy = _test08_logs(tmp_path)
    result = acc.write_test08(tmp_path / "results", "sys_A", "server", perf, accuracy)
    path = tmp_path / "results" / "sys_A" / "dlrm-v3" / "Server" / "TEST08" / "verify_accuracy.txt"
    assert path.read_text() == result.text()
    assert "TEST PASS" in [line.strip() for line in path.read_text().splitlines()]  # compliance_check.py:388-389
    with pytest.raises(HarnessError, match="scenario 'interactive'"):
        acc.write_test08(tmp_path / "results", "sys_A", "interactive", perf, accuracy)
    (tmp_path / "mlperf_log_detail.txt").write_text(':::MLLOG {"key": "effective_test_mode", "value": '
                                                     '"PerformanceOnly", "metadata": {}}\n')
    with pytest.raises(HarnessError, match="not a TEST08 run: LoadGen did not find audit.config") as err:
        acc.write_test08(tmp_path / "results", "sys_B", "offline", perf, accuracy)
    assert err.value.category is ErrorCategory.RUN_FAILED and not (tmp_path / "results" / "sys_B").exists()


# ---------------------------------------------------------------------------------- LoadGen
_LOADGEN_RUN = """
import sys
import numpy as np
import mlperf_loadgen as lg
from harness.inference import dlrmv3_accuracy as acc

mode, n, c = sys.argv[1], 20, 16
answers = []


def request(i):
    # QSL sample i stands for request (ts_idx, query_idx) and its candidates, as the reference's sampler maps them
    rng = np.random.default_rng(i)
    return 90 + i // 5, i % 5, rng.random(c).astype(np.float32), (rng.random(c) < 0.5).astype(np.float32)


def issue(samples):
    for s in samples:
        ts, q, preds, labels = request(s.index)
        data = acc.encode_response(ts, q, preds, labels, np.ones(c, np.float32)) if mode == "accuracy" \\
            else acc.encode_perf_response(ts, q, preds)
        answers.append(data)
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, data.ctypes.data, data.nbytes)])


sut = lg.ConstructSUT(issue, lambda: None)
qsl = lg.ConstructQSL(n, n, lambda _: None, lambda _: None)
settings = lg.TestSettings()
settings.scenario = lg.TestScenario.Offline
settings.mode = lg.TestMode.AccuracyOnly if mode == "accuracy" else lg.TestMode.PerformanceOnly
settings.offline_expected_qps, settings.min_duration_ms, settings.min_query_count = n, 1000, 1
out = lg.LogOutputSettings()
out.outdir, out.copy_summary_to_stdout = ".", False
log = lg.LogSettings()
log.log_output, log.enable_trace = out, False
lg.StartTestWithLogSettings(sut, qsl, settings, log)
lg.DestroyQSL(qsl)
lg.DestroySUT(sut)
print(len(answers))
"""


def _loadgen(cwd: Path, mode: str) -> int:
    """One LoadGen test of the dummy SUT in a fresh process whose working directory is ``cwd``; the samples answered."""
    pytest.importorskip("mlperf_loadgen")
    cwd.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _LOADGEN_RUN, mode], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return int(proc.stdout.split()[-1])


def test_a_loadgen_performance_run_with_the_audit_config_logs_what_test08_reads(tmp_path):
    assert hashlib.sha1(acc.audit_config_text().encode()).hexdigest() == acc.AUDIT_CONFIG_SHA1
    assert _loadgen(tmp_path / "accuracy", "accuracy") == 20  # AccuracyOnly: each sample once
    acc.write_audit_config(tmp_path / "test08")
    issued = _loadgen(tmp_path / "test08", "performance")
    perf_log = tmp_path / "test08" / "mlperf_log_accuracy.json"
    assert acc.audit_problems(tmp_path / "test08" / "mlperf_log_detail.txt") == []  # LoadGen applied all three keys
    assert len(acc.decode_perf_log(perf_log)) == issued > 20  # 4096 / 20 expected samples: every response logged
    result = acc.write_test08(tmp_path / "results", "sys_A", "offline", perf_log,
                              tmp_path / "accuracy" / "mlperf_log_accuracy.json")
    assert result.passed and result.matched == issued and result.acc_entries == 20 and result.worst_rel_diff == 0.0
    metrics = acc.score_log(tmp_path / "accuracy" / "mlperf_log_accuracy.json")
    assert (metrics.requests, metrics.candidates, metrics.duplicates) == (20, 320, 0)
    # without audit.config a performance run logs nothing, and TEST08 cannot pass
    _loadgen(tmp_path / "plain", "performance")
    assert acc.audit_problems(tmp_path / "plain" / "mlperf_log_detail.txt")[0] == "LoadGen did not find audit.config"
    assert acc.decode_perf_log(tmp_path / "plain" / "mlperf_log_accuracy.json") == []
