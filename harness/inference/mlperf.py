"""MLPerf Inference's settings, results layout and accuracy scoring, for DLRMv2.

**Settings.** ``mlperf.conf`` here is a byte-identical copy of ``loadgen/mlperf.conf`` from
mlcommons/inference at the version of the installed LoadGen (``mlcommons-loadgen`` 6.0.17),
which compiles it in: its SHA-1, :data:`MLPERF_CONF_SHA1`, is the one LoadGen records for
``/mlperf.conf`` in every ``mlperf_log_detail.txt`` (``loadgen_file_sha1``), and
``tests/cli/test_infer.py`` checks that it still is. LoadGen 6.0 reads its compiled-in copy
itself: ``TestSettings.FromConfig(user_conf, model, scenario)`` (``conf_type`` 1, the
default) loads the official settings first, then the submitter's ``user.conf``, and only
in the first call of a process (a second call logs ``error_invalid_config``: "Multiple conf
files are used"), so each LoadGen test runs in a process of its own
(:mod:`harness.inference.worker`), as MLPerf's reference harnesses do. :func:`official`
reads this copy only to plan (the minimum duration and query counts, before a run) and to
print what applies; what LoadGen applied is read back from its detail log.

**Results.** ``<results>/<system>/<model>/<scenario>/performance/run_1/`` and
``.../accuracy/``, LoadGen's logs in each, ``accuracy.txt`` as the official DLRMv2 accuracy
script prints it (``AUC=..%, accuracy=..%, good=.., total=.., queries=..``).

**Samples.** A DLRMv2 sample is not one row: as in MLPerf's reference
(``recommendation/dlrm_v2/pytorch/python/multihot_criteo.py``), each QSL sample is a *user*,
a run of consecutive eval rows (user-item pairs) whose length is drawn from the official
distribution (``tools/dist_quantile.txt``: 20 quantiles, 100 to 700 rows, mean 270) with the
reference's NumPy seed (123): :func:`user_offsets`. So LoadGen's samples per second are users
per second, a Server query is one user's ranking request, and an Offline query of 600 s
holds hundreds of thousands of samples, not hundreds of millions of rows.
:func:`write_aggregation_trace` writes which rows each sample holds, in the reference's
``dlrm_trace_of_aggregated_samples.txt`` format.

**Accuracy.** ``mlperf_log_accuracy.json`` (a JSON list of ``{"seq_id", "qsl_idx",
"data"}``, ``data`` the response's bytes in hex: here, as the reference's post-processing
writes them, a float32 (prediction, label) pair per row of the user) is decoded and scored by
the AUC scikit-learn's ``roc_auc_score`` computes (:func:`harness.rules.auc.roc_auc`), as the official ``accuracy-dlrm.py`` does with a log that
carries the labels; the labels logged are checked against the eval split's.

**LoadGen.** :func:`loadgen` is the installed ``mlperf_loadgen`` module (an optional
dependency: a one-line error says how to install it), :func:`loadgen_version` its version.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ErrorCategory, HarnessError
from harness.mllog.reader import mllog_texts, parse_object
from harness.rules.auc import roc_auc

MLPERF_CONF = Path(__file__).with_name("mlperf.conf")
MLPERF_CONF_SHA1 = "68cdba8667e971c3ae8f1617ba67fa56d01065b4"  # loadgen/mlperf.conf at mlcommons-loadgen 6.0.17
LOADGEN_MODEL = "dlrm-v2"  # the model's name in mlperf.conf
SCENARIO_NAMES = {"offline": "Offline", "server": "Server"}  # LoadGen's and the results layout's spelling
# MLPerf's DLRMv2 accuracy rule: at least this fraction of the reference AUC
ACCURACY_TARGETS = {"dlrm-v2-99": 0.99, "dlrm-v2-99.9": 0.999}
SUMMARY, DETAIL, ACCURACY_LOG, ACCURACY_TXT = (
    "mlperf_log_summary.txt", "mlperf_log_detail.txt", "mlperf_log_accuracy.json", "accuracy.txt")
NOT_VALID_FILE = "NOT_A_VALID_MLPERF_RESULT.txt"
AGGREGATION_TRACE = "dlrm_trace_of_aggregated_samples.txt"  # the reference's name for the trace
# rows per user: mlcommons/inference recommendation/dlrm_v2/pytorch/tools/dist_quantile.txt (the
# inverse CDF of the query length at p = .05, .10, ..., 1.0), drawn with the reference's seed
# (main.py --numpy-rand-seed, default 123)
USER_ROWS_QUANTILES = (100, 100, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 300, 300, 400, 500,
                       600, 700)
USER_ROWS_SEED = 123
NOT_VALID = "not a valid MLPerf result"
LOADGEN_PACKAGE = "mlcommons-loadgen"


def loadgen() -> Any:
    """The ``mlperf_loadgen`` module, or a one-line error saying how to install it."""
    try:
        import mlperf_loadgen  # here, not at the top: an optional dependency, needed only to run a test
    except ImportError as err:
        raise HarnessError(
            f"MLPerf's LoadGen is not installed ({err}): pip install '{LOADGEN_PACKAGE}>=6.0,<7'",
            ErrorCategory.NOT_FOUND,
        ) from err
    return mlperf_loadgen


def loadgen_version() -> str:
    """The installed LoadGen's version, or ``unknown``."""
    try:
        return version(LOADGEN_PACKAGE)
    except PackageNotFoundError:
        return "unknown"


def conf_sha1(path: Path = MLPERF_CONF) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


_CONF_LINE = re.compile(r"^\s*([^.\s]+)\.([^.\s]+)\.(\w+)\s*=\s*(\S+)\s*$")


def parse_conf(text: str) -> dict[tuple[str, str, str], str]:
    """``model.scenario.key = value`` lines (``#`` comments skipped), as LoadGen's parser takes them."""
    out: dict[tuple[str, str, str], str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        m = _CONF_LINE.match(line)
        if m:
            out[(m.group(1), m.group(2), m.group(3))] = m.group(4)
    return out


def official(scenario: str, key: str, model: str = LOADGEN_MODEL) -> float | None:
    """The value ``mlperf.conf`` gives ``key`` for ``model`` in ``scenario`` (LoadGen's
    precedence: ``model.scenario`` over ``model.*`` over ``*.scenario`` over ``*.*``)."""
    conf = parse_conf(MLPERF_CONF.read_text())
    for m, s in ((model, scenario), (model, "*"), ("*", scenario), ("*", "*")):
        if (m, s, key) in conf:
            return float(conf[(m, s, key)])
    return None


def write_user_conf(path: Path, scenario: str, *, target_qps: float, note: str) -> Path:
    """The submitter's ``user.conf`` for one system and scenario: its target QPS (Offline: the
    expected throughput, which sizes the one query; Server: the Poisson rate)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {note}\n{LOADGEN_MODEL}.{SCENARIO_NAMES[scenario]}.target_qps = {target_qps:.1f}\n")
    return path


# ---------------------------------------------------------------------------------- samples
def user_offsets(rows: int, *, quantiles: tuple[int, ...] = USER_ROWS_QUANTILES,
                 seed: int = USER_ROWS_SEED) -> np.ndarray:
    """The row offsets of the QSL's samples over ``rows`` eval rows (``users + 1`` of them,
    from 0 to ``rows``): each sample's length a quantile drawn uniformly, the last cut at the
    end, as the reference's ``MultihotCriteo`` draws them (inverse transform sampling, one
    ``randint`` per sample from ``RandomState(seed)``)."""
    if rows < 1:
        raise ValueError("no rows to make samples of")
    q = np.asarray(quantiles, dtype=np.int64)
    draws = np.random.RandomState(seed).randint(0, q.size, size=rows // int(q.min()) + 1)
    ends = np.cumsum(q[draws])
    users = int(np.searchsorted(ends, rows)) + 1  # the first sample that reaches the last row ends there
    return np.concatenate([[0], np.minimum(ends[:users], rows)]).astype(np.int64)


def write_aggregation_trace(path: Path, offsets: np.ndarray) -> Path:
    """``start, end, rows`` per sample (the reference's ``dlrm_trace_of_aggregated_samples.txt``,
    which its accuracy script reads to map samples to rows)."""
    path.write_text("".join(f"{s}, {e}, {e - s}\n" for s, e in zip(offsets[:-1].tolist(), offsets[1:].tolist())))
    return path


# ---------------------------------------------------------------------------------- layout
def scenario_dir(results: Path, system: str, model: str, scenario: str) -> Path:
    return results / system / model / SCENARIO_NAMES[scenario]


def performance_dir(results: Path, system: str, model: str, scenario: str) -> Path:
    return scenario_dir(results, system, model, scenario) / "performance" / "run_1"


def accuracy_dir(results: Path, system: str, model: str, scenario: str) -> Path:
    return scenario_dir(results, system, model, scenario) / "accuracy"


def clear_run_dir(path: Path) -> None:
    """Make ``path`` and remove what an earlier run left in it (LoadGen's logs, the scores, the label)."""
    path.mkdir(parents=True, exist_ok=True)
    for old in [*path.glob("mlperf_log_*"), path / ACCURACY_TXT, path / NOT_VALID_FILE, path / AGGREGATION_TRACE]:
        if old.is_file():
            old.unlink()


def label_not_valid(path: Path, label: str) -> None:
    """``label`` (it starts "not a valid MLPerf result") in ``path/NOT_A_VALID_MLPERF_RESULT.txt``."""
    (path / NOT_VALID_FILE).write_text(f"{label}\n")


# ---------------------------------------------------------------------------------- detail log
def detail_values(path: Path) -> dict[str, Any]:
    """The ``key -> value`` pairs of LoadGen's ``mlperf_log_detail.txt`` (``:::MLLOG`` JSON lines);
    the first of each key, and every error message under ``errors``."""
    out: dict[str, Any] = {"errors": []}
    if not path.is_file():
        return out
    for lineno, text in mllog_texts(path, encoding="utf-8"):  # the one MLLOG reader's tokenising
        rec = parse_object(lineno, text) if text is not None else None
        if not isinstance(rec, dict):  # an overlong or malformed line: LoadGen's own, skipped
            continue
        if (rec.get("metadata") or {}).get("is_error"):
            out["errors"].append(f"{rec.get('key')}: {rec.get('value')}")
        out.setdefault(rec["key"], rec.get("value"))  # parse_object: a record's key is a string
    return out


# ---------------------------------------------------------------------------------- accuracy
def read_accuracy_log(path: Path) -> tuple[np.ndarray, list[np.ndarray]]:
    """``(qsl indices, per record its (rows x 2) float32 (prediction, label) pairs)`` of
    LoadGen's ``mlperf_log_accuracy.json``."""
    try:
        records = json.loads(path.read_text())
        idx = np.array([int(r["qsl_idx"]) for r in records], dtype=np.int64)
        raw = [bytes.fromhex(r["data"]) for r in records]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise HarnessError(f"{path}: not a LoadGen accuracy log ({type(err).__name__}: {err})",
                           ErrorCategory.RUN_FAILED) from err
    bad = next((k for k, b in enumerate(raw) if len(b) % 8), None)
    if bad is not None:
        raise HarnessError(f"{path}: record {bad} holds {len(raw[bad])} bytes, not float32 (prediction, label) "
                           f"pairs", ErrorCategory.RUN_FAILED)
    return idx, [np.frombuffer(b, dtype=np.float32).reshape(-1, 2) for b in raw]


@dataclass(frozen=True)
class AccuracyScore:
    """One AccuracyOnly run scored as the official DLRMv2 script scores it."""

    auc: float
    good: int  # predictions that round to the label
    total: int
    queries: int  # distinct QSL indices
    duplicates: int
    reference_auc: float
    model: str  # dlrm-v2-99 or dlrm-v2-99.9

    @property
    def accuracy(self) -> float:
        return self.good / self.total if self.total else 0.0

    @property
    def ratio(self) -> float:
        return self.auc / self.reference_auc

    @property
    def required_auc(self) -> float:
        return ACCURACY_TARGETS[self.model] * self.reference_auc

    @property
    def passed(self) -> bool:
        return self.auc >= self.required_auc

    def official_line(self) -> str:
        """``accuracy.txt`` as ``recommendation/dlrm_v2/pytorch/tools/accuracy-dlrm.py`` prints it."""
        return (f"AUC={100.0 * self.auc:.3f}%, accuracy={100.0 * self.accuracy:.3f}%, good={self.good}, "
                f"total={self.total}, queries={self.queries}")

    def to_dict(self) -> dict[str, Any]:
        return {"auc": self.auc, "accuracy": round(self.accuracy, 6), "good": self.good, "total": self.total,
                "queries": self.queries, "duplicates": self.duplicates, "reference_auc": self.reference_auc,
                "ratio": self.ratio, "required_auc": self.required_auc, "model": self.model,
                "passed": self.passed, "line": self.official_line()}


def score_accuracy_log(path: Path, offsets: np.ndarray, labels: np.ndarray, *, reference: np.ndarray,
                       model: str) -> AccuracyScore:
    """Score LoadGen's accuracy log: sample ``i`` is rows ``offsets[i]:offsets[i + 1]`` of the
    eval split, whose ``labels`` (and the reference model's probabilities, ``reference``) are
    by row. Every row's logged label must be the eval split's; duplicates of a QSL index
    (none in an AccuracyOnly run) are ignored after the first, as the official script does.
    The reference AUC is that of ``reference`` on the same rows: the whole eval split, unless
    ``--quick`` asked for fewer samples."""
    idx, data = read_accuracy_log(path)
    users = offsets.size - 1
    seen: set[int] = set()
    rows, preds, logged = [], [], []
    for i, pairs in zip(idx.tolist(), data):
        if i in seen:
            continue
        seen.add(i)
        if not 0 <= i < users:
            raise HarnessError(f"{path}: QSL index {i} beyond the {users} samples", ErrorCategory.RUN_FAILED)
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        if pairs.shape[0] != hi - lo:
            raise HarnessError(f"{path}: sample {i} answered {pairs.shape[0]} rows; it holds {hi - lo}",
                               ErrorCategory.RUN_FAILED)
        rows.append(np.arange(lo, hi))
        preds.append(pairs[:, 0])
        logged.append(pairs[:, 1])
    if not rows:
        raise HarnessError(f"{path}: no predictions", ErrorCategory.RUN_FAILED)
    row = np.concatenate(rows)
    pred, truth = np.nan_to_num(np.concatenate(preds)), labels[row]
    wrong = np.flatnonzero(np.concatenate(logged) != truth)
    if wrong.size:
        raise HarnessError(f"{path}: {wrong.size} logged labels differ from the eval split's (first at row "
                           f"{int(row[wrong[0]])})", ErrorCategory.RUN_FAILED)
    good = int(np.count_nonzero(np.round(pred) == truth))
    return AccuracyScore(auc=roc_auc(truth, pred), good=good, total=int(row.size), queries=len(seen),
                         duplicates=int(idx.size) - len(seen), reference_auc=roc_auc(truth, reference[row]), model=model)


def proc_bytes(path: str, field: str) -> int | None:
    """A ``kB`` field of a /proc file (``MemAvailable`` of /proc/meminfo, ``VmHWM`` of
    /proc/self/status) in bytes, or None where /proc does not have it."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
