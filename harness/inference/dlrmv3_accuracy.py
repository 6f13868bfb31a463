"""MLPerf Inference dlrm-v3: the LoadGen response layout, the accuracy score and the TEST08 check, torch-free.

The reference (mlcommons/inference ``recommendation/dlrm_v3/``) scores with torchrec's metric classes;
this module computes the same numbers with NumPy, so a reviewer can score and audit a run on a machine
without torch, and the LoadGen worker shares one definition of the bytes it answers with. Sources:
mlcommons/inference@b66003e1 (INF), pytorch/torchrec v1.3.0 (TR, the version the reference's
``requirements.txt`` pins; ``ne.py``, ``accuracy.py``, ``gauc.py`` are the same at its HEAD a48cef79).

**Responses.** One QSL sample is one request: a user's history and its C candidates (2048). The reference
answers with float32 arrays whose layout depends on the LoadGen mode (INF ``main.py:218-294``):
AccuracyOnly ``[ts_idx, query_idx, preds x C, labels x C, weights x C, C]`` (:func:`encode_response`),
PerformanceOnly ``[ts_idx, query_idx, preds x C]`` (:func:`encode_perf_response`). ``(ts_idx,
query_idx)`` names the request, not LoadGen's sample index: the reference's streaming sampler chooses
which request answers a sample (INF ``main.py:429-619``), so TEST08 matches runs by that pair.

**Score.** :func:`score` is the reference's ``accuracy.py`` (INF ``accuracy.py:56-85``): every entry of
``mlperf_log_accuracy.json`` fed in log order, one request per update, to torchrec's NE, accuracy and
GAUC (``MetricsLogger``, INF ``utils.py:189-218``: batch 1, window 3000), their lifetime and window
values logged as ``metric/lifetime_ne/rating: ...``; :meth:`Dlrmv3Metrics.lines` is that text, which the
submission checker's regexes read from ``accuracy.txt`` (INF ``tools/submission/submission_checker/
constants.py:1809-1811``). The quality bar is 99.9% of the fp32 reference on all three
(:func:`accuracy_targets`).

**TEST08** replaces TEST01 for dlrm-v3 (INF ``constants.py:326-328``): a performance run with
``audit.config`` in LoadGen's working directory (:func:`audit_config_text`) logs a sample of its
responses; :func:`verify_test08` matches them to the accuracy run's by ``(ts_idx, query_idx)`` and
compares per-request NE as ``compliance/TEST08/run_verification.py`` does, and :func:`write_test08`
writes ``<results>/<system>/dlrm-v3/<Scenario>/TEST08/verify_accuracy.txt``, the one file the checker
reads for it.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from harness.errors import ErrorCategory, HarnessError
from harness.files import write_atomic
from harness.inference import mlperf

MODEL = "dlrm-v3"  # LoadGen's and the checker's name (INF loadgen/mlperf.conf:91, constants.py:20)
ACCURACY_FRACTION = 0.999  # every metric >= 99.9% of fp32 (INF constants.py:145-152; rules :273)
# torchrec's constants, as the reference sets them up (TR ne.py:149, accuracy.py:69; INF accuracy.py:57-63)
ETA = 1e-12
THRESHOLD = 0.5
WINDOW_CANDIDATES = 3000  # MetricsLogger(window_size=3000): the window holds at most this many candidates
WINDOW_MAX_REQUESTS = 1000  # TR rec_metric.py:69 MAX_BUFFER_COUNT, the window's most updates
EXACT_INT = 2 ** 24  # float32 holds every integer up to this: ts_idx, query_idx and C travel as float32
LOGGER_PREFIX = "WARNING:main:"  # how the reference's logger.warning lines read (INF utils.py:48 basicConfig)

# compliance/TEST08 (INF compliance/TEST08/dlrm-v3/audit.config, byte for byte; its SHA-1 below)
AUDIT_CONFIG = "audit.config"  # LoadGen reads this name from its process's working directory (INF loadgen.cc:1232)
AUDIT_SEED = 720381539243781796
AUDIT_SAMPLING_TARGET = 4096
AUDIT_CONFIG_SHA1 = "0ba112b3f272ab1e20ba4f39817eb7f49ecef158"
TEST08_TOLERANCE = 0.001  # run_verification.py:110-113
TEST08_DIR, VERIFY_ACCURACY = "TEST08", "verify_accuracy.txt"  # INF constants.py:2155-2159
TEST08_EPS = 1e-7  # run_verification.py:71
_AUDIT_TEXT = (
    "# The format of this config file is 'key = value'.\n"
    "# The key has the format 'model.scenario.key'. Value is mostly int64_t.\n"
    "# Model maybe '*' as wildcard. In that case the value applies to all models.\n"
    "# All times are in milli seconds\n"
    "\n"
    "# mode dictionary (0 = submission, 1 = accuracy, 2 = performance, 3 = find peak perf)\n"
    "*.*.mode = 2\n"
    f"*.*.accuracy_log_rng_seed = {AUDIT_SEED}\n"
    f"*.*.accuracy_log_sampling_target = {AUDIT_SAMPLING_TARGET}\n"
)


class Metric(enum.Enum):
    """The three metrics, each with the key the reference logs and the checker's name for it."""

    NE = "ne"
    ACCURACY = "accuracy"
    GAUC = "gauc"

    @property
    def checker_name(self) -> str:
        return {"ne": "DLRM_NE", "accuracy": "DLRM_ACC", "gauc": "DLRM_AUC"}[self.value]

    @property
    def pattern(self) -> str:
        """The checker's regex for it (INF constants.py:1809-1811)."""
        return rf".*metric/lifetime_{self.value}/rating:\s*([\d\.]+).*"


# ---------------------------------------------------------------------------------- responses
@dataclass(frozen=True, eq=False)
class Response:
    """One AccuracyOnly response: a request's C candidates, float32 arrays of shape ``(C,)``."""

    ts_idx: int
    query_idx: int
    preds: np.ndarray
    labels: np.ndarray
    weights: np.ndarray

    @property
    def key(self) -> tuple[int, int]:
        return (self.ts_idx, self.query_idx)


@dataclass(frozen=True, eq=False)
class PerfResponse:
    """One PerformanceOnly response: the request and its predictions only."""

    ts_idx: int
    query_idx: int
    preds: np.ndarray

    @property
    def key(self) -> tuple[int, int]:
        return (self.ts_idx, self.query_idx)


def _index(name: str, value: int) -> float:
    if not (isinstance(value, (int, np.integer)) and -1 <= int(value) < EXACT_INT):
        raise HarnessError(f"{name} {value!r} is not an integer in [-1, 2**24): it would not survive float32",
                           ErrorCategory.BAD_INPUT)
    return float(value)


def _column(name: str, values: ArrayLike, size: int | None = None) -> np.ndarray:
    out = np.asarray(values, dtype=np.float32).reshape(-1) if np.ndim(values) <= 1 else None
    if out is None or out.size == 0 or (size is not None and out.size != size):
        want = f"{size} values, as the predictions" if size is not None else "a 1-D array of at least one value"
        raise HarnessError(f"{name} of shape {np.shape(values)}: need {want}", ErrorCategory.BAD_INPUT)
    return out


def encode_response(ts_idx: int, query_idx: int, preds: ArrayLike, labels: ArrayLike,
                    weights: ArrayLike) -> np.ndarray:
    """The AccuracyOnly response, float32 ``[ts_idx, query_idx, preds x C, labels x C, weights x C, C]``
    (INF main.py:249-287; the reference answers -1 for a missing index, :274-277)."""
    p = _column("preds", preds)
    lab, w = _column("labels", labels, p.size), _column("weights", weights, p.size)
    head = np.array([_index("ts_idx", ts_idx), _index("query_idx", query_idx)], dtype=np.float32)
    return np.concatenate([head, p, lab, w, np.array([p.size], dtype=np.float32)])


def encode_perf_response(ts_idx: int, query_idx: int, preds: ArrayLike) -> np.ndarray:
    """The PerformanceOnly response, float32 ``[ts_idx, query_idx, preds x C]`` (INF main.py:219-240):
    what a performance run's sampled accuracy log holds, and so what TEST08 compares."""
    head = np.array([_index("ts_idx", ts_idx), _index("query_idx", query_idx)], dtype=np.float32)
    return np.concatenate([head, _column("preds", preds)])


def _entries(path: Path) -> Iterator[Any]:
    """The entries of a LoadGen accuracy log, one at a time. LoadGen writes ``[``, one ``{...}`` per
    line and ``]`` (a full accuracy run's log is ~17 GB), so lines are read one by one; any other
    JSON layout is read whole."""
    try:
        yield from _entries_of(path)
    except OSError as err:
        raise HarnessError(f"{path}: cannot read the accuracy log ({err.strerror})", ErrorCategory.NOT_FOUND) from err
    except UnicodeDecodeError as err:
        raise HarnessError(f"{path}: not a LoadGen accuracy log (not UTF-8 text: {err.reason})",
                           ErrorCategory.BAD_INPUT) from err


def _entries_of(path: Path) -> Iterator[Any]:
    with path.open(encoding="utf-8") as f:
        if f.readline().strip() == "[":
            count, closed = 0, False
            for lineno, line in enumerate(f, start=2):
                text = line.strip()
                if closed and text:
                    raise HarnessError(f"{path}:{lineno}: text after the closing ']'", ErrorCategory.BAD_INPUT)
                if not text or text == "]":
                    closed = closed or text == "]"
                    continue
                try:
                    entry = json.loads(text.removesuffix(","))
                except json.JSONDecodeError as err:
                    if count == 0:  # not LoadGen's one entry a line: JSON of another layout
                        break
                    raise HarnessError(f"{path}:{lineno}: not a JSON entry ({err.msg})",
                                       ErrorCategory.BAD_INPUT) from err
                count += 1
                yield entry
            else:
                if not closed:
                    raise HarnessError(f"{path}: ends before its closing ']' (LoadGen did not finish writing it)",
                                       ErrorCategory.BAD_INPUT)
                return
        f.seek(0)
        try:
            whole = json.load(f)
        except json.JSONDecodeError as err:
            raise HarnessError(f"{path}: not a LoadGen accuracy log (line {err.lineno}: {err.msg})",
                               ErrorCategory.BAD_INPUT) from err
    if not isinstance(whole, list):
        raise HarnessError(f"{path}: not a LoadGen accuracy log (a JSON {type(whole).__name__}, not a list)",
                           ErrorCategory.BAD_INPUT)
    yield from whole


def _floats(path: Path, k: int, entry: object) -> tuple[str, np.ndarray]:
    """``(where, the entry's data as float32)``; ``where`` names the entry in errors."""
    if not isinstance(entry, dict) or not isinstance(entry.get("data"), str):
        raise HarnessError(f"{path}: entry {k} has no \"data\" string", ErrorCategory.BAD_INPUT)
    where = f"{path}: entry {k} (seq_id {entry.get('seq_id', '?')}, qsl_idx {entry.get('qsl_idx', '?')})"
    try:
        raw = bytes.fromhex(entry["data"])
    except ValueError as err:
        raise HarnessError(f"{where}: \"data\" is not hex ({err})", ErrorCategory.BAD_INPUT) from err
    if len(raw) % 4:
        raise HarnessError(f"{where}: {len(raw)} bytes, not float32 values", ErrorCategory.BAD_INPUT)
    return where, np.frombuffer(raw, dtype=np.float32)


def _as_index(where: str, name: str, value: np.float32) -> int:
    if not (math.isfinite(value) and float(value).is_integer()):
        raise HarnessError(f"{where}: {name} {float(value)!r} is not an integer", ErrorCategory.BAD_INPUT)
    return int(value)


def _accuracy_response(where: str, data: np.ndarray) -> Response:
    """One AccuracyOnly response, checked as the reference's ``accuracy.py:66-70`` asserts: ``3 + 3 x C``
    float32 values, C the last."""
    c = data[-1] if data.size else np.float32(math.nan)
    if not (data.size >= 3 and math.isfinite(c) and float(c).is_integer() and c >= 0):
        raise HarnessError(f"{where}: {data.size} values ending in {float(c)!r}: not an accuracy-mode response "
                           f"(its last value is C, the candidates)", ErrorCategory.BAD_INPUT)
    n = int(c)
    if data.size != 3 + 3 * n:
        raise HarnessError(f"{where}: {data.size} values; an accuracy-mode response of C = {n} candidates holds "
                           f"3 + 3 x C = {3 + 3 * n} (a performance-mode log? read it with iter_perf_log)",
                           ErrorCategory.BAD_INPUT)
    return Response(_as_index(where, "ts_idx", data[0]), _as_index(where, "query_idx", data[1]),
                    data[2:2 + n], data[2 + n:2 + 2 * n], data[2 + 2 * n:2 + 3 * n])


def decode_response(data: np.ndarray | bytes) -> Response:
    """One AccuracyOnly response from its array or bytes (:func:`encode_response`'s inverse)."""
    raw = np.frombuffer(data, dtype=np.float32) if isinstance(data, bytes) else np.asarray(data, dtype=np.float32)
    return _accuracy_response("response", raw.reshape(-1))


def iter_log(path: Path) -> Iterator[Response]:
    """The AccuracyOnly responses of ``mlperf_log_accuracy.json``, in log order."""
    for k, entry in enumerate(_entries(Path(path))):
        yield _accuracy_response(*_floats(Path(path), k, entry))


def iter_perf_log(path: Path) -> Iterator[PerfResponse]:
    """The PerformanceOnly responses of a performance run's (sampled) ``mlperf_log_accuracy.json``."""
    for k, entry in enumerate(_entries(Path(path))):
        where, data = _floats(Path(path), k, entry)
        if data.size < 2:
            raise HarnessError(f"{where}: {data.size} values; a response starts with ts_idx, query_idx",
                               ErrorCategory.BAD_INPUT)
        yield PerfResponse(_as_index(where, "ts_idx", data[0]), _as_index(where, "query_idx", data[1]), data[2:])


def decode_log(path: Path) -> list[Response]:
    """All AccuracyOnly responses of ``mlperf_log_accuracy.json`` (:func:`iter_log`)."""
    return list(iter_log(path))


def decode_perf_log(path: Path) -> list[PerfResponse]:
    """All PerformanceOnly responses of a performance run's ``mlperf_log_accuracy.json``."""
    return list(iter_perf_log(path))


# ---------------------------------------------------------------------------------- score
class QualityLike(Protocol):
    @property
    def ne(self) -> float: ...

    @property
    def accuracy(self) -> float: ...

    @property
    def gauc(self) -> float: ...


@dataclass(frozen=True)
class Quality:
    """The three lifetime values, alone: a reference's, or those read from an ``accuracy.txt``."""

    ne: float
    accuracy: float
    gauc: float


# the fp32 reference's values, as the rules state them (POL inference_rules.adoc:273) and the
# checker multiplies them (INF constants.py:145-152)
OFFICIAL_FP32 = Quality(ne=0.86687, accuracy=0.69651, gauc=0.78663)

# per request, the states torchrec adds up (TR ne.py:81-95, accuracy.py:43-54, gauc.py:24-91)
_CE, _WEIGHT, _POS, _NEG, _ACC, _ACC_WEIGHT, _AUC, _AUC_GROUPS, _SIZE = range(9)
_CHUNK = 1024  # requests scored at once


def _states(preds: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """torchrec's per-update states of ``n`` requests of C candidates each (``(n, C)`` float32 in),
    ``(n, 9)`` float64 out. NE and accuracy as torchrec computes them (its double states; the
    products of float32 weights and labels float32, as torch promotes them); GAUC in float64 where
    torchrec's per-request value is float32 (the lifetime GAUC agrees to ~1e-7)."""
    p = preds.astype(np.float64)
    pc = np.clip(p, ETA, 1.0 - ETA)  # TR ne.py:28-29
    out = np.empty((preds.shape[0], 9))
    with np.errstate(divide="ignore", invalid="ignore"):
        # TR ne.py:30-32: -w*l*log2(p) - w*(1-l)*log2(1-p), summed per request (:91)
        out[:, _CE] = (-weights * labels * np.log2(pc) - weights * (1.0 - labels) * np.log2(1.0 - pc)).sum(-1)
        out[:, _WEIGHT] = weights.sum(-1, dtype=np.float64)  # ne.py:92
        out[:, _POS] = (weights * labels).sum(-1, dtype=np.float64)  # ne.py:93
        out[:, _NEG] = (weights * (1.0 - labels)).sum(-1, dtype=np.float64)  # ne.py:94
        out[:, _ACC] = (weights * ((p >= THRESHOLD) == labels)).sum(-1, dtype=np.float64)  # accuracy.py:39-40
        out[:, _ACC_WEIGHT] = out[:, _WEIGHT]  # accuracy.py:53
        # GAUC, one group per request (TR gauc.py:24-91): candidates by ascending prediction; each
        # positive's weight times the negative weight ranked at or below it, over w_pos * w_neg
        order = np.argsort(preds, axis=-1, kind="stable")  # gauc.py:37 (ties: see score())
        lab = np.take_along_axis(labels, order, -1).astype(np.float64)
        w = np.take_along_axis(weights, order, -1).astype(np.float64)
        neg = 1.0 - lab
        numerator = (lab * w * np.cumsum(w * neg, axis=-1)).sum(-1)  # gauc.py:62-67
        w_pos, w_neg = (lab * w).sum(-1), (neg * w).sum(-1)  # gauc.py:69-70
        auc = numerator / (w_pos * w_neg + 1e-10)  # gauc.py:71-73
    # skipped: a request whose predictions are all equal (or 0, padding), or whose labels are one class
    same = np.all((preds == preds[:, :1]) | (preds == 0), axis=-1)  # gauc.py:76-84
    counted = (w_pos > 0) & (w_neg > 0) & ~same  # gauc.py:86-87
    out[:, _AUC] = auc * counted  # gauc.py:88-90
    out[:, _AUC_GROUPS] = counted
    out[:, _SIZE] = preds.shape[1]
    return out


def _ne(s: np.ndarray) -> float:
    """torchrec's ``compute_ne`` (TR ne.py:50-67) of summed states."""
    with np.errstate(divide="ignore", invalid="ignore"):
        weight = max(s[_WEIGHT], ETA)
        mean = min(max(s[_POS] / weight, ETA), 1.0 - ETA)
        norm = -s[_POS] * np.log2(mean) - s[_NEG] * np.log2(1.0 - mean)
        return float(np.float64(s[_CE]) / norm)


def _accuracy(s: np.ndarray) -> float:
    return 0.0 if s[_ACC_WEIGHT] == 0.0 else float(s[_ACC] / s[_ACC_WEIGHT])  # TR accuracy.py:25-30


def _gauc(s: np.ndarray) -> float:
    return float((s[_AUC] + 1e-9) / (s[_AUC_GROUPS] + 2e-9))  # TR gauc.py:127-136


def _window_start(sizes: np.ndarray) -> int:
    """Where torchrec's window begins: the longest tail of updates holding at most
    :data:`WINDOW_CANDIDATES` candidates in at most :data:`WINDOW_MAX_REQUESTS` updates
    (TR rec_metric.py:76-101, ``WindowBuffer.aggregate_state``)."""
    start, total = sizes.size, 0.0
    while start > 0 and sizes.size - start < WINDOW_MAX_REQUESTS and total + sizes[start - 1] <= WINDOW_CANDIDATES:
        start -= 1
        total += sizes[start]
    return start


@dataclass(frozen=True)
class Dlrmv3Metrics:
    """One accuracy log scored as the reference scores it: torchrec's lifetime values (all entries)
    and window values (the last entries, :func:`_window_start`), and what was scored."""

    ne: float
    accuracy: float
    gauc: float
    gauc_requests: int  # requests GAUC averages over (``lifetime_gauc_num_samples``)
    window_ne: float
    window_accuracy: float
    window_gauc: float
    window_gauc_requests: int
    requests: int  # log entries scored, duplicates included
    candidates: int
    duplicates: int  # entries whose (ts_idx, query_idx) an earlier entry had

    @property
    def quality(self) -> Quality:
        return Quality(ne=self.ne, accuracy=self.accuracy, gauc=self.gauc)

    def values(self) -> dict[str, float]:
        """``metric/<prefix><name>/rating -> value`` in the reference's order (torchrec's reports,
        INF utils.py:309-315: NE, accuracy, GAUC; lifetime, then window; GAUC's counts last)."""
        return {
            "metric/lifetime_ne/rating": self.ne, "metric/window_ne/rating": self.window_ne,
            "metric/lifetime_accuracy/rating": self.accuracy, "metric/window_accuracy/rating": self.window_accuracy,
            "metric/lifetime_gauc/rating": self.gauc, "metric/window_gauc/rating": self.window_gauc,
            "metric/lifetime_gauc_num_samples/rating": float(self.gauc_requests),
            "metric/window_gauc_num_samples/rating": float(self.window_gauc_requests),
        }

    def lines(self) -> list[str]:
        """What the reference's ``accuracy.py`` logs (INF accuracy.py:53, :64, :84-85), as its logger
        writes it (``WARNING:main:``) and as dlrm-v3's ``accuracy.txt`` files of MLPerf Inference v6.0
        hold it; the checker reads the three ``lifetime`` lines. (The ``hash=`` line the checker also
        wants is added by ``tools/submission/truncate_accuracy_log.py``.)"""
        head = ["Parsing loadgen accuracy log...", f"results have {self.requests} entries"]
        return [LOGGER_PREFIX + text for text in head + [f"{k}: {v!r}" for k, v in self.values().items()]]

    def text(self) -> str:
        """``accuracy.txt``: :meth:`lines`, one a line."""
        return "\n".join(self.lines()) + "\n"

    def summary(self) -> str:
        dup = f", {self.duplicates} duplicates" if self.duplicates else ""
        return (f"NE {self.ne:.5f}, accuracy {self.accuracy:.5f}, GAUC {self.gauc:.5f} ({self.requests:,} requests, "
                f"{self.candidates:,} candidates{dup})")


def score(responses: Iterable[Response]) -> Dlrmv3Metrics:
    """NE, accuracy and GAUC of AccuracyOnly responses, as the reference's ``accuracy.py`` computes them
    with torchrec: each response one update (batch 1), in the order given (the log's), duplicates of a
    ``(ts_idx, query_idx)`` counted again as the reference counts every entry (INF accuracy.py:65-83; its
    accuracy run issues each request once, main.py:472-477, so a duplicate there is a SUT's doing).

    NE is the weighted cross-entropy over the cross-entropy of the weighted base rate, predictions and
    the base rate clamped to [1e-12, 1 - 1e-12]; accuracy the weighted share of candidates where
    ``pred >= 0.5`` equals the label; GAUC the unweighted mean over requests of each request's weighted
    AUC, skipping a request with one class only or one prediction only (:func:`_states`). Where a request
    ties predictions across classes, torchrec's GAUC depends on its sort (``torch.argsort``, not stable:
    x86-simd-sort or ``std::sort``); here ties keep their candidate order, as ``argsort(stable=True)``."""
    seen: set[tuple[int, int]] = set()
    rows: list[np.ndarray] = []
    batch: list[Response] = []
    duplicates = 0

    def flush() -> None:
        if batch:
            rows.append(_states(*(np.stack([getattr(r, a) for r in batch]) for a in ("preds", "labels", "weights"))))
            batch.clear()

    for r in responses:
        if r.key in seen:
            duplicates += 1
        seen.add(r.key)
        if batch and (len(batch) == _CHUNK or batch[0].preds.size != r.preds.size):
            flush()
        batch.append(r)
    flush()
    if not rows:
        raise HarnessError("no responses to score: the accuracy log is empty", ErrorCategory.BAD_INPUT)
    states = np.concatenate(rows)
    life, window = states.sum(0), states[_window_start(states[:, _SIZE]):].sum(0)
    return Dlrmv3Metrics(
        ne=_ne(life), accuracy=_accuracy(life), gauc=_gauc(life), gauc_requests=int(life[_AUC_GROUPS]),
        window_ne=_ne(window), window_accuracy=_accuracy(window), window_gauc=_gauc(window),
        window_gauc_requests=int(window[_AUC_GROUPS]), requests=states.shape[0], candidates=int(life[_SIZE]),
        duplicates=duplicates)


def score_log(path: Path) -> Dlrmv3Metrics:
    """:func:`score` of ``mlperf_log_accuracy.json``, read one entry at a time."""
    return score(iter_log(path))


def parse_accuracy_txt(text: str) -> Quality:
    """The three lifetime values of an ``accuracy.txt``, read with the checker's regexes (the last
    match of each, as INF accuracy_check.py:147-169 records it); a missing one is a one-line error."""
    found: dict[Metric, float] = {}
    for line in text.splitlines():
        for metric in Metric:
            m = re.match(metric.pattern, line)
            if m:
                found[metric] = float(m.group(1))
    missing = [m.checker_name for m in Metric if m not in found]
    if missing:
        raise HarnessError(f"accuracy.txt has no {', '.join(missing)} line (metric/lifetime_*/rating: <value>)",
                           ErrorCategory.BAD_INPUT)
    return Quality(ne=found[Metric.NE], accuracy=found[Metric.ACCURACY], gauc=found[Metric.GAUC])


# ---------------------------------------------------------------------------------- targets
@dataclass(frozen=True)
class MetricVerdict:
    """One metric against its targets. The checker's rule is ``value >= fraction x reference`` for all
    three (INF accuracy_check.py:157, targets constants.py:145-152), NE included though lower NE is
    better; the meaningful rule for NE is ``value <= (2 - fraction) x reference`` (at most 0.1% worse).
    A metric passes when both hold, so an NE more than 0.1% *better* than the reference's fails, as
    the official checker would fail it."""

    metric: Metric
    value: float
    reference: float
    checker_min: float
    ne_max: float | None  # NE only

    @property
    def checker_passed(self) -> bool:
        return self.value >= self.checker_min

    @property
    def meaningful_passed(self) -> bool:
        return self.value <= self.ne_max if self.ne_max is not None else self.checker_passed

    @property
    def passed(self) -> bool:
        return self.checker_passed and self.meaningful_passed

    def line(self) -> str:
        bounds = f">= {self.checker_min:.6f}" + (f" and <= {self.ne_max:.6f}" if self.ne_max is not None else "")
        verdict = "PASS" if self.passed else "FAIL (the checker's rule)" if not self.checker_passed \
            else "FAIL (NE above the reference's)"
        return f"{self.metric.value}: {self.value:.6f} vs reference {self.reference:.6f}, needs {bounds}: {verdict}"


@dataclass(frozen=True)
class AccuracyCheck:
    verdicts: tuple[MetricVerdict, ...]

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)

    def lines(self) -> list[str]:
        return [v.line() for v in self.verdicts]


@dataclass(frozen=True)
class Targets:
    """The quality bar: ``fraction`` of a reference's values (the official fp32 one: :data:`OFFICIAL_FP32`)."""

    reference: Quality
    fraction: float = ACCURACY_FRACTION

    def checker_min(self, metric: Metric) -> float:
        return getattr(self.reference, metric.value) * self.fraction  # as the checker writes it: 0.86687 * 0.999

    @property
    def ne_max(self) -> float:
        return self.reference.ne * (2.0 - self.fraction)

    def check(self, metrics: QualityLike) -> AccuracyCheck:
        return AccuracyCheck(tuple(
            MetricVerdict(metric=m, value=float(getattr(metrics, m.value)), reference=getattr(self.reference, m.value),
                          checker_min=self.checker_min(m), ne_max=self.ne_max if m is Metric.NE else None)
            for m in Metric))


def check_targets(metrics: QualityLike, reference: QualityLike = OFFICIAL_FP32,
                  fraction: float = ACCURACY_FRACTION) -> AccuracyCheck:
    """``metrics`` against :func:`accuracy_targets` of ``reference``."""
    return accuracy_targets(reference, fraction).check(metrics)


def accuracy_targets(reference: QualityLike = OFFICIAL_FP32, fraction: float = ACCURACY_FRACTION) -> Targets:
    """The targets for ``fraction`` (0.999: dlrm-v3's only class) of ``reference``'s NE, accuracy and GAUC."""
    if not 0.0 < fraction <= 1.0:
        raise HarnessError(f"accuracy fraction {fraction}: need 0 < fraction <= 1", ErrorCategory.BAD_INPUT)
    return Targets(Quality(ne=float(reference.ne), accuracy=float(reference.accuracy), gauc=float(reference.gauc)),
                   fraction)


# ---------------------------------------------------------------------------------- TEST08
def audit_config_text() -> str:
    """compliance/TEST08/dlrm-v3/audit.config, byte for byte (SHA-1 :data:`AUDIT_CONFIG_SHA1`): LoadGen reads
    ``audit.config`` from its process's working directory at ``StartTest`` and applies it over the test's
    settings (INF loadgen.cc:1232-1249, ``FromConfig(..., conf_type=2)``): PerformanceOnly, and an accuracy
    log of about 4096 sampled responses (probability ``4096 / expected samples``, loadgen.cc:462-480)."""
    return _AUDIT_TEXT


def write_audit_config(folder: Path) -> Path:
    """``audit.config`` in ``folder``, the working directory the performance run's LoadGen process will have
    (remove it, or run elsewhere, for any other run: LoadGen applies it to every test started there)."""
    path = Path(folder) / AUDIT_CONFIG
    write_atomic(path, audit_config_text())
    return path


def audit_problems(detail: Path) -> list[str]:
    """What ``mlperf_log_detail.txt`` of a TEST08 run shows was not as ``audit.config`` sets it (TEST08
    README, Part I step 3); empty when LoadGen found the file and applied it."""
    text = Path(detail).read_text(encoding="utf-8", errors="replace") if Path(detail).is_file() else ""
    if not text:
        return [f"{detail}: missing or empty"]
    values = mlperf.detail_values(Path(detail))
    problems = [] if "Found Audit Config file (audit.config)" in text else ["LoadGen did not find audit.config"]
    for key, want in (("effective_test_mode", "PerformanceOnly"), ("effective_accuracy_log_rng_seed", AUDIT_SEED),
                      ("effective_accuracy_log_sampling_target", AUDIT_SAMPLING_TARGET)):
        if values.get(key) != want:
            problems.append(f"{key} is {values.get(key)!r}, not {want!r}")
    return problems


def _test08_ne(preds: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> Any:
    """Per-request NE as TEST08 computes it (run_verification.py:64-92), not as torchrec does: natural
    logs, labels clipped too, eps 1e-7, 0 where the weights or the base entropy are 0, and float32
    arithmetic throughout (NumPy keeps float32 arrays float32), so the verdict is the script's."""
    p = np.clip(preds, TEST08_EPS, 1 - TEST08_EPS)
    lab = np.clip(labels, TEST08_EPS, 1 - TEST08_EPS)
    total = np.sum(weights)
    if total == 0:
        return 0.0
    cross_entropy = -np.sum(weights * (lab * np.log(p) + (1 - lab) * np.log(1 - p)))
    rate = np.clip(np.sum(weights * lab) / total, TEST08_EPS, 1 - TEST08_EPS)
    base = -rate * np.log(rate) - (1 - rate) * np.log(1 - rate)
    if base == 0:
        return 0.0
    return cross_entropy / (base * total)


@dataclass(frozen=True)
class Test08Result:
    """TEST08's counts and verdict, as ``run_verification.py`` prints them (:meth:`text`)."""

    __test__ = False  # not a pytest class

    acc_entries: int
    perf_entries: int
    matched: int
    unmatched: int
    ne_mismatches: int
    tolerance: float
    worst_rel_diff: float  # over matched entries; inf where one NE is 0 and the other not
    nan_ne: int  # matched entries whose NE is NaN: the script's ``>`` lets them pass, as here
    mismatch_lines: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return self.ne_mismatches == 0 and self.matched > 0 and self.unmatched == 0  # run_verification.py:185

    def brief(self) -> str:
        worst = "-" if self.matched == 0 else f"{100 * self.worst_rel_diff:.4f}%"
        return (f"{'PASS' if self.passed else 'FAIL'}, {self.matched} of {self.perf_entries} logged responses matched, "
                f"{self.ne_mismatches} NE mismatches, worst NE difference {worst}")

    def text(self) -> str:
        """``verify_accuracy.txt``: the script's output (run_verification.py:129-202), whose ``TEST PASS``
        line the checker looks for (INF compliance_check.py:377-400)."""
        return "\n".join([
            "Verifying accuracy. This might take a while...", "Reading accuracy mode results...",
            "Reading performance mode results...", *self.mismatch_lines, "",
            f"num_acc_log_entries = {self.acc_entries}", f"num_perf_log_entries = {self.perf_entries}",
            f"num_matched = {self.matched}", f"num_unmatched = {self.unmatched}",
            f"num_ne_mismatch = {self.ne_mismatches}", f"tolerance = {self.tolerance * 100:.2f}%", "",
            "TEST PASS" if self.passed else "TEST FAIL", "TEST08 verification complete"]) + "\n"


def verify_test08(perf_accuracy_log: Path, accuracy_log: Path, tolerance: float = TEST08_TOLERANCE) -> Test08Result:
    """TEST08 (compliance/TEST08/run_verification.py:118-190): each response the performance run logged is
    matched to the accuracy run's by ``(ts_idx, query_idx)`` (the accuracy log's last entry of a pair wins,
    as the script's dict keeps it), its NE computed on the accuracy run's labels and weights
    (:func:`_test08_ne`), and a relative NE difference above ``tolerance`` is a mismatch; the test passes
    with no mismatch, no unmatched response and at least one matched (the script asks no more). The
    performance log may repeat a request (a performance run repeats the dataset, INF main.py:472-477):
    each entry counts. Only the matched requests' labels are kept while the accuracy log streams by."""
    perf = decode_perf_log(Path(perf_accuracy_log))
    wanted = {r.key for r in perf}
    acc: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, Any]] = {}
    acc_entries = 0
    for a in iter_log(Path(accuracy_log)):
        acc_entries += 1
        if a.key in wanted:
            acc[a.key] = (a.labels, a.weights, _test08_ne(a.preds, a.labels, a.weights))
    matched = unmatched = mismatches = nan_ne = 0
    worst, lines = 0.0, []
    for k, r in enumerate(perf):
        if r.key not in acc:
            unmatched += 1
            continue
        labels, weights, acc_ne = acc[r.key]
        matched += 1
        if r.preds.size != labels.size:
            hint = " (an accuracy-mode response: answer performance queries with encode_perf_response)" \
                if r.preds.size == 3 * labels.size + 1 else ""
            raise HarnessError(f"{perf_accuracy_log}: entry {k} answers request {r.key} with {r.preds.size} "
                               f"predictions; the accuracy run's has {labels.size} candidates{hint}",
                               ErrorCategory.BAD_INPUT)
        perf_ne = _test08_ne(r.preds, labels, weights)
        nan_ne += int(bool(np.isnan(acc_ne) or np.isnan(perf_ne)))
        if acc_ne == 0 and perf_ne == 0:
            continue
        if acc_ne == 0 or perf_ne == 0:
            mismatches += 1
            worst = math.inf
            lines.append(f"  NE mismatch at {r.key}: acc_ne={acc_ne}, perf_ne={perf_ne}")
            continue
        rel = abs(perf_ne - acc_ne) / abs(acc_ne)
        worst = max(worst, float(rel)) if not np.isnan(rel) else worst
        if rel > tolerance:
            mismatches += 1
            lines.append(f"  NE mismatch at {r.key}: acc_ne={acc_ne:.6f}, perf_ne={perf_ne:.6f}, "
                         f"diff={rel * 100:.4f}%")
    return Test08Result(acc_entries=acc_entries, perf_entries=len(perf), matched=matched, unmatched=unmatched,
                        ne_mismatches=mismatches, tolerance=tolerance, worst_rel_diff=worst, nan_ne=nan_ne,
                        mismatch_lines=tuple(lines))


def scenario_test08_dir(results: Path, system: str, scenario: str, model: str = MODEL) -> Path:
    """``<results>/<system>/<model>/<Scenario>/TEST08``: the compliance folder of v6.0 on (INF
    constants.py:2155-2167; v5.x kept compliance apart, in ``compliance/``)."""
    if scenario not in mlperf.SCENARIO_NAMES:
        raise HarnessError(f"scenario {scenario!r}: dlrm-v3 has {', '.join(mlperf.SCENARIO_NAMES)}",
                           ErrorCategory.BAD_INPUT)
    return mlperf.scenario_dir(Path(results), system, model, scenario) / TEST08_DIR


def write_test08(results: Path, system: str, scenario: str, perf_accuracy_log: Path, accuracy_log: Path, *,
                 model: str = MODEL, tolerance: float = TEST08_TOLERANCE) -> Test08Result:
    """Run :func:`verify_test08` and write its ``verify_accuracy.txt`` where the checker reads it
    (:func:`scenario_test08_dir`), as the v6.0 dlrm-v3 submissions hold it (that file alone: the checker reads no
    other of TEST08, INF compliance_check.py:128-170, :377-400). When the performance run's
    ``mlperf_log_detail.txt`` lies beside its accuracy log, LoadGen must have applied ``audit.config``
    there (:func:`audit_problems`), or this is a one-line error and nothing is written."""
    detail = Path(perf_accuracy_log).with_name(mlperf.DETAIL)
    problems = audit_problems(detail) if detail.is_file() else []
    if problems:
        raise HarnessError(f"{detail}: not a TEST08 run: {'; '.join(problems)} (run it with audit.config in "
                           f"LoadGen's working directory)", ErrorCategory.RUN_FAILED)
    result = verify_test08(perf_accuracy_log, accuracy_log, tolerance)
    write_verify_accuracy(scenario_test08_dir(results, system, scenario, model), result)
    return result


def write_verify_accuracy(folder: Path, result: Test08Result) -> Path:
    """``result``'s ``verify_accuracy.txt`` in ``folder`` (a scenario's ``TEST08``)."""
    path = Path(folder) / VERIFY_ACCURACY
    write_atomic(path, result.text())
    return path
