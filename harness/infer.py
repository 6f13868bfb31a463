"""Inference with the embedding tables on the SSD tier behind a DRAM cache, driven by MLPerf's LoadGen.

One benchmark's trained model is served twice: with its tables in memory, and with its
tables moved into a file (:class:`~harness.reference.tiered.SsdRows`) behind a row cache of
a fraction of the rows (:class:`~harness.reference.tiered.TieredEmbeddingCollection`).
Caching does not change the arithmetic, so both give the same predictions, bit for bit
(checked before timing). MLPerf's own load generator (``mlperf_loadgen``, from the
``mlcommons-loadgen`` package) drives each variant in the Offline scenario (one query of
every sample, answered in batches) and the Server scenario (single-sample queries at a
Poisson rate, answered by a worker thread that batches whatever has arrived), and the
figures are read from LoadGen's own ``mlperf_log_summary.txt``. Beside them: the bytes the
tables keep in memory in each variant, and so the memory the SSD tier saves.

The steps, in order: :func:`trained_model` (train the benchmark's model once, or reuse
it), :func:`memory_model` and :func:`ssd_model` (the two variants), :func:`check_identical`,
then :func:`run_loadgen` per variant and scenario; :func:`run_inference` does them all.
"""

from __future__ import annotations

import enum
import json
import pickle
import queue
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.reference import synthetic
from harness.reference.batches import NUM_DENSE
from harness.reference.from_spec import dlrm_config
from harness.reference.model import DLRM
from harness.reference.run_config import RunConfig
from harness.reference.session import SessionHooks, TrainingSession
from harness.reference.tiered import (
    CachePolicy,
    CacheStats,
    SsdRows,
    TieredEmbeddingCollection,
    state_columns,
)
from harness.rules.specs import BenchmarkSpec

DEFAULT_MODELS_DIR = Path("results") / ".harness" / "models"
# MLPerf's own bound for DLRM-v2 in the Server scenario (LoadGen's mlperf.conf:
# ``dlrm-v2.Server.target_latency = 60``), at the 99th percentile.
DEFAULT_SERVER_LATENCY_MS = 60.0
# The default Server rate: this fraction of the rate at which the in-memory model answers
# one-sample queries back to back, so its worker is about half busy even without batching.
SERVER_LOAD_FRACTION = 0.5
# Offline: LoadGen issues ``1.1 x expected QPS x min duration`` samples; expecting a little
# more than the calibrated rate keeps the run at least ``min duration`` long.
OFFLINE_HEADROOM = 1.25
SERVER_MIN_QUERIES = 100
MODEL_FILE, META_FILE = "model.pt", "model.json"
SUMMARY_FILE = "mlperf_log_summary.txt"
LOADGEN_PACKAGE = "mlcommons-loadgen"


class Scenario(enum.Enum):
    OFFLINE = "offline"
    SERVER = "server"


class Variant(enum.Enum):
    MEMORY = "memory"  # the tables in memory
    SSD = "ssd"  # the tables in a file, behind a row cache


@dataclass(frozen=True)
class InferConfig:
    """What ``harness infer`` runs.

    Attributes:
        train_steps: train exactly this many steps (then evaluate once); ``None``: train as
            the benchmark's run does, evaluating at its cadence until the target AUC or the
            epoch limit.
        model_dir: where the trained model is kept (and LoadGen's logs are written);
            ``None``: :func:`default_model_dir`.
        max_batch: the most samples one model call answers, in both scenarios.
        threads: torch's intra-op threads, for training and inference (LoadGen's threads need
            CPU too, and a spinning thread pool on a busy machine is slow).
    """

    benchmark: str = "dlrm_synthetic"
    scenarios: tuple[Scenario, ...] = (Scenario.OFFLINE, Scenario.SERVER)
    cache_fraction: float = 0.05
    cache_policy: CachePolicy = CachePolicy.LRU
    duration_s: float = 10.0
    server_qps: float | None = None
    server_latency_ms: float = DEFAULT_SERVER_LATENCY_MS
    seed: int = 0
    train_steps: int | None = None
    model_dir: Path | None = None
    max_batch: int = 2048
    threads: int = 1

    def __post_init__(self) -> None:
        checks = [
            (0.0 < self.cache_fraction <= 1.0, f"cache fraction {self.cache_fraction}: give a fraction in (0, 1]"),
            (self.duration_s > 0, f"duration {self.duration_s} s: give a positive number of seconds"),
            (self.server_qps is None or self.server_qps > 0, f"server QPS {self.server_qps}: give a positive rate"),
            (self.server_latency_ms > 0, f"server latency {self.server_latency_ms} ms: give a positive bound"),
            (self.train_steps is None or self.train_steps >= 1, f"train steps {self.train_steps}: give at least 1"),
            (self.max_batch >= 1, f"max batch {self.max_batch}: give at least 1"),
            (self.threads >= 1, f"threads {self.threads}: give at least 1"),
            (bool(self.scenarios), "no scenario to run"),
        ]
        for ok, message in checks:
            if not ok:
                raise HarnessError(message, ErrorCategory.BAD_INPUT)


def default_model_dir(benchmark: str, seed: int, train_steps: int | None) -> Path:
    """``results/.harness/models/<benchmark>-seed<N>[-steps<K>]``."""
    steps = f"-steps{train_steps}" if train_steps is not None else ""
    return DEFAULT_MODELS_DIR / f"{benchmark}-seed{seed}{steps}"


# ---------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class TrainedModel:
    """The model served, and how it was trained."""

    path: Path
    benchmark: str
    seed: int
    train_steps_requested: int | None  # None: until the target AUC at the benchmark's cadence
    steps: int
    epochs: float
    auc: float
    target_auc: float
    train_s: float
    reused: bool = False

    @property
    def reached_target(self) -> bool:
        return self.auc >= self.target_auc

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path), "reached_target": self.reached_target}


@dataclass(frozen=True)
class LoadgenSummary:
    """What LoadGen's ``mlperf_log_summary.txt`` says about one run."""

    scenario: Scenario
    samples_per_s: float  # Offline: samples per second; Server: completed samples per second
    scheduled_per_s: float | None  # Server: the rate LoadGen scheduled queries at
    p99_latency_ms: float  # Offline: the one query's latency, i.e. the whole run
    valid: bool
    path: Path

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "scenario": self.scenario.value, "path": str(self.path)}


@dataclass(frozen=True)
class CacheUse:
    """How the SSD variant's lookups were served during one run.

    A batch whose distinct rows fit the cache goes through it (misses read from the file and
    admitted, evicting others); a larger one bypasses it, reading each row where it is.
    """

    batches_through_cache: int
    batches_bypassing: int
    lookups: int  # ids looked up by the batches through the cache
    hits: int  # of those, the ids whose row was resident
    unique_lookups: int  # distinct rows per batch, summed over the batches through the cache
    unique_hits: int
    ssd_bytes_read: int  # into the cache, and by the bypassing batches

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.lookups if self.lookups else None

    @property
    def unique_hit_rate(self) -> float | None:
        return self.unique_hits / self.unique_lookups if self.unique_lookups else None

    def to_dict(self) -> dict[str, Any]:
        def rounded(x: float | None) -> float | None:
            return None if x is None else round(x, 6)

        return {**asdict(self), "hit_rate": rounded(self.hit_rate), "unique_hit_rate": rounded(self.unique_hit_rate)}


@dataclass(frozen=True)
class ScenarioResult:
    variant: Variant
    summary: LoadgenSummary
    target_qps: float  # Offline: the expected QPS given to LoadGen; Server: the target QPS
    cache: CacheUse | None
    wall_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant.value, **self.summary.to_dict(), "target_qps": round(self.target_qps, 1),
                "cache": None if self.cache is None else self.cache.to_dict(), "wall_s": round(self.wall_s, 2)}


@dataclass(frozen=True)
class TableMemory:
    """Bytes of the embedding tables in memory: all rows, or the SSD variant's cache."""

    rows: int
    cache_rows: int
    memory_bytes: int  # the in-memory variant: every row
    cache_slot_bytes: int  # the SSD variant: the cached rows
    row_map_bytes: int  # the SSD variant: row -> slot (int32 per row)
    bookkeeping_bytes: int  # the SSD variant: slot -> row, recency, dirty bits (and LFU's per-row counts)
    ssd_file_bytes: int

    @property
    def ssd_resident_bytes(self) -> int:
        return self.cache_slot_bytes + self.row_map_bytes + self.bookkeeping_bytes

    @property
    def saved_bytes(self) -> int:
        return self.memory_bytes - self.ssd_resident_bytes

    @property
    def saved_fraction(self) -> float:
        return self.saved_bytes / self.memory_bytes

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ssd_resident_bytes": self.ssd_resident_bytes, "saved_bytes": self.saved_bytes,
                "saved_fraction": round(self.saved_fraction, 6)}


@dataclass(frozen=True)
class InferReport:
    config: InferConfig
    model: TrainedModel
    memory: TableMemory
    identical_samples: int  # samples whose predictions were compared, bit for bit
    offline_expected_qps: dict[str, float]
    server_target_qps: float | None
    results: list[ScenarioResult]
    loadgen_version: str
    wall_s: float
    server_qps_source: str = "calibrated"

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        return {
            "benchmark": c.benchmark,
            "settings": {
                "scenarios": [s.value for s in c.scenarios], "cache_fraction": c.cache_fraction,
                "cache_policy": c.cache_policy.value, "duration_s": c.duration_s, "max_batch": c.max_batch,
                "threads": c.threads, "server_target_latency_ms": c.server_latency_ms,
                "server_target_qps": None if self.server_target_qps is None else round(self.server_target_qps, 1),
                "server_qps_source": self.server_qps_source,
                "offline_expected_qps": {k: round(v, 1) for k, v in self.offline_expected_qps.items()},
            },
            "loadgen_version": self.loadgen_version,
            "model": self.model.to_dict(),
            "identical_predictions_samples": self.identical_samples,
            "table_memory": self.memory.to_dict(),
            "results": [r.to_dict() for r in self.results],
            "wall_s": round(self.wall_s, 2),
        }


# ---------------------------------------------------------------------------------- loadgen
def loadgen() -> Any:
    """The ``mlperf_loadgen`` module, or a one-line error saying how to install it."""
    try:
        import mlperf_loadgen
    except ImportError as err:
        raise HarnessError(
            f"MLPerf's LoadGen is not installed ({err}): pip install '{LOADGEN_PACKAGE}>=6.0,<7'",
            ErrorCategory.NOT_FOUND,
        ) from err
    return mlperf_loadgen


def loadgen_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(LOADGEN_PACKAGE)
    except PackageNotFoundError:
        return "unknown"


# ---------------------------------------------------------------------------------- training
def trained_model(spec: BenchmarkSpec, *, seed: int, train_steps: int | None, model_dir: Path,
                  progress: Callable[[str], None]) -> tuple[TrainedModel, dict[str, torch.Tensor]]:
    """The benchmark's model trained from ``seed``: loaded from ``model_dir`` when it is there,
    else trained now and saved there (``model.pt``: the state dict; ``model.json``, written
    last: how it was trained)."""
    meta_path, model_path = model_dir / META_FILE, model_dir / MODEL_FILE
    if meta_path.is_file():
        model = _read_meta(meta_path, model_path)
        if (model.benchmark, model.seed, model.train_steps_requested) != (spec.name, seed, train_steps):
            raise HarnessError(
                f"{model_dir} holds a model of {model.benchmark} seed {model.seed} "
                f"({_training_words(model.train_steps_requested)}), not of {spec.name} seed {seed} "
                f"({_training_words(train_steps)}): give another --model-dir, or remove that one",
                ErrorCategory.BAD_INPUT,
            )
        state = _read_state(model_path)
        progress(f"reusing the model in {model_dir}: {model.steps} steps ({model.epochs:.3f} epoch), AUC {model.auc:.5f}")
        return model, state
    progress(f"training {spec.name} seed {seed} ({_training_words(train_steps)}) ...")
    t0 = time.perf_counter()
    state, steps, epochs, auc = _train(spec, seed, train_steps, progress)
    model = TrainedModel(path=model_path, benchmark=spec.name, seed=seed, train_steps_requested=train_steps,
                         steps=steps, epochs=epochs, auc=auc, target_auc=spec.target_auc,
                         train_s=time.perf_counter() - t0)
    model_dir.mkdir(parents=True, exist_ok=True)
    torch.save(state, model_path)
    meta = {k: v for k, v in model.to_dict().items() if k not in ("path", "reused")}
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    return model, state


def _training_words(train_steps: int | None) -> str:
    return "until the target AUC" if train_steps is None else f"{train_steps} steps"


def _not_a_model(where: Path, err: Exception) -> HarnessError:
    first = (str(err).strip().splitlines() or [""])[0]
    return HarnessError(f"{where}: not a saved model ({type(err).__name__}: {first}); remove it to train again",
                        ErrorCategory.BAD_INPUT)


def _read_meta(meta_path: Path, model_path: Path) -> TrainedModel:
    try:
        meta = json.loads(meta_path.read_text())
        steps = meta["train_steps_requested"]
        return TrainedModel(path=model_path, benchmark=str(meta["benchmark"]), seed=int(meta["seed"]),
                            train_steps_requested=None if steps is None else int(steps), steps=int(meta["steps"]),
                            epochs=float(meta["epochs"]), auc=float(meta["auc"]),
                            target_auc=float(meta["target_auc"]), train_s=float(meta["train_s"]), reused=True)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise _not_a_model(meta_path, err) from err


def _read_state(model_path: Path) -> dict[str, torch.Tensor]:
    try:
        return torch.load(model_path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as err:
        raise _not_a_model(model_path, err) from err


class _Progress(SessionHooks):
    def __init__(self, progress: Callable[[str], None]):
        self.progress = progress

    def after_eval(self, session: TrainingSession, auc: float) -> bool:
        self.progress(f"  step {session.step_count} (epoch {session.epoch_num:.3f}): AUC {auc:.5f}")
        return False


def _train(spec: BenchmarkSpec, seed: int, train_steps: int | None,
           progress: Callable[[str], None]) -> tuple[dict[str, torch.Tensor], int, float, float]:
    """Train as the reference run does (the same session: model, data order, optimizers,
    schedule); return the inference state dict (no optimizer state), the steps taken, the
    epochs and the last AUC."""
    session = TrainingSession(RunConfig.offline(spec.raw, dict(spec.reference_hyperparameters), seed,
                                                who="harness-infer"))
    limit = session.step_limit()
    if train_steps is not None and train_steps > limit:
        raise HarnessError(f"--train-steps {train_steps}: {spec.name} trains at most {limit} steps "
                           f"({spec.max_epochs:g} epoch of batch {session.global_batch_size})", ErrorCategory.BAD_INPUT)
    if train_steps is None:
        outcome = session.train(_Progress(progress))
    else:
        outcome = session.train(_Progress(progress), eval_at=[train_steps], until=train_steps, stop_at_target=False)
    auc = outcome.eval_accuracies[-1][1] if outcome.eval_accuracies else float("nan")
    state = {k: v.detach().clone() for k, v in session.model.state_dict().items()}
    state["sparse_arch.embeddings.optimizer_state"] = torch.empty(0)  # inference tables carry none
    session.close()
    return state, session.step_count, session.epoch_num, auc


# ---------------------------------------------------------------------------------- the variants
def memory_model(spec: BenchmarkSpec, state: dict[str, torch.Tensor]) -> DLRM:
    """The trained model for inference (no sparse optimizer), tables in memory."""
    model = DLRM(dlrm_config(spec))
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError) as err:
        first = str(err).strip().splitlines()[0]
        raise HarnessError(f"the saved model does not fit {spec.name}'s model ({first}); remove it to train again",
                           ErrorCategory.BAD_INPUT) from err
    return model.eval()


class CountingTieredEmbeddings(TieredEmbeddingCollection):
    """A :class:`TieredEmbeddingCollection` that also counts the lookups bypassing its cache
    (inference batches with more distinct rows than it holds read each row where it is)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.bypass_batches = 0
        self.bypass_rows = 0

    def current_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """As the parent's; called (here) only by the lookups that bypass the cache."""
        self.bypass_batches += 1
        self.bypass_rows += rows.numel()
        return super().current_rows(rows)

    def resident_bytes(self) -> tuple[int, int, int]:
        """Bytes in memory: (the cached rows, the row -> slot map, the rest of the bookkeeping)."""
        c = self.cache
        slots = _nbytes(c.weights) + _nbytes(c.state)
        rest = [c.slot_row, c.dirty, c.last_use] + ([c.row_uses] if c.row_uses is not None else [])
        return slots, _nbytes(c.row_slot), sum(_nbytes(x) for x in rest)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def ssd_model(spec: BenchmarkSpec, state: dict[str, torch.Tensor], path: Path, *, cache_fraction: float,
              policy: CachePolicy) -> tuple[DLRM, CountingTieredEmbeddings]:
    """The trained model for inference with its tables moved to ``path`` (the SSD tier), behind
    a cache of ``cache_fraction`` of their rows; the in-memory copy is dropped."""
    model = memory_model(spec, state)
    full = model.sparse_arch.embeddings
    rows = sum(full.table_rows)
    store = SsdRows(path, rows, full.dim, state_columns(full), create=True)
    tables = CountingTieredEmbeddings(full, store, max(1, round(rows * cache_fraction)), policy)
    store.flush()
    model.sparse_arch.embeddings = tables
    return model.eval(), tables


def table_memory(memory: DLRM, tables: CountingTieredEmbeddings) -> TableMemory:
    slots, row_map, rest = tables.resident_bytes()
    return TableMemory(
        rows=tables.store.rows, cache_rows=tables.cache.capacity,
        memory_bytes=_nbytes(memory.sparse_arch.embeddings.weight) + _nbytes(memory.sparse_arch.embeddings.optimizer_state),
        cache_slot_bytes=slots, row_map_bytes=row_map, bookkeeping_bytes=rest,
        ssd_file_bytes=tables.store.rows * tables.store.row_bytes,
    )


@torch.no_grad()
def check_identical(memory: DLRM, ssd: DLRM, data: synthetic.SyntheticCriteo, *, sizes: Sequence[int]) -> int:
    """Compare the two variants' logits on consecutive eval batches of ``sizes`` samples,
    bit for bit; raise if any differ. Returns the samples compared."""
    idx = data.eval_indices()
    lo = 0
    for size in sizes:
        batch = data.samples(idx[lo : lo + size])
        lo += size
        a, b = memory(batch.dense, batch.sparse), ssd(batch.dense, batch.sparse)
        if not torch.equal(a, b):
            worst = float((a - b).abs().max())
            raise HarnessError(
                f"the SSD-tier model's predictions differ from the in-memory model's on a batch of {size} "
                f"(largest difference {worst:.3g}): the cache changed the arithmetic", ErrorCategory.RUN_FAILED,
            )
    return lo


# ---------------------------------------------------------------------------------- QSL and SUT
class SampleLibrary:
    """LoadGen's query sample library over the eval split: QSL index ``i`` is eval sample ``i``.

    Loading generates the samples LoadGen asks for (``dense`` ``N x 13``, ``sparse``
    ``N x L``), before LoadGen starts timing; unloading forgets them.
    """

    def __init__(self, data: synthetic.SyntheticCriteo, count: int | None = None):
        self.data = data
        self.indices = data.eval_indices()[:count]
        n, width = self.indices.size, sum(data.pooling)
        self.dense = torch.zeros(n, NUM_DENSE)
        self.sparse = torch.zeros(n, width, dtype=torch.int64)
        self.loaded = torch.zeros(n, dtype=torch.bool)

    @property
    def count(self) -> int:
        return int(self.indices.size)

    def load(self, indices: Sequence[int]) -> None:
        idx = np.asarray(indices, dtype=np.int64)
        for lo in range(0, idx.size, 65536):
            part = idx[lo : lo + 65536]
            batch = self.data.samples(self.indices[part])
            t = torch.from_numpy(part)
            self.dense[t], self.sparse[t] = batch.dense, batch.sparse
            self.loaded[t] = True

    def unload(self, indices: Sequence[int]) -> None:
        self.loaded[torch.as_tensor(np.asarray(indices, dtype=np.int64))] = False

    @contextmanager
    def registered(self, lg: Any) -> Iterator[Any]:
        handle = lg.ConstructQSL(self.count, self.count, self.load, self.unload)
        try:
            yield handle
        finally:
            lg.DestroyQSL(handle)


_STOP = object()


class BatchingSut:
    """LoadGen's system under test: ``issue_queries`` hands the query samples to one worker
    thread, which answers whatever has arrived in model calls of up to ``max_batch`` samples
    and reports each sample with ``QuerySamplesComplete`` (response: its float32 click
    probability). In Offline all samples arrive at once; in Server one at a time.

    Args:
        complete: LoadGen's ``QuerySamplesComplete`` (a stand-in when calibrating).
        response: LoadGen's ``QuerySampleResponse(id, address, bytes)``.
    """

    def __init__(self, model: DLRM, library: SampleLibrary, max_batch: int, *,
                 complete: Callable[[list[Any]], None], response: Callable[[int, int, int], Any]):
        self.model, self.library, self.max_batch = model, library, max_batch
        self._complete, self._response = complete, response
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.batches = 0

    def issue_queries(self, samples: list[Any]) -> None:
        self._queue.put(samples)

    def flush_queries(self) -> None:
        """Nothing is held back: the worker answers as soon as it can."""

    def answer(self, samples: Sequence[Any]) -> None:
        """Run the model on ``samples`` (each has ``.id`` and ``.index``) and report them;
        after a failure, report them with no data, so that LoadGen still finishes."""
        ids = [s.id for s in samples]
        if self.error is None:
            try:
                idx = torch.tensor([s.index for s in samples], dtype=torch.int64)
                with torch.no_grad():  # grad mode is per thread
                    logits = self.model(self.library.dense.index_select(0, idx), self.library.sparse.index_select(0, idx))
                probs = torch.sigmoid(logits).numpy()  # float32, contiguous; alive until completion returns
                base = probs.ctypes.data
                self._complete([self._response(i, base + 4 * k, 4) for k, i in enumerate(ids)])
                self.batches += 1
                return
            except Exception as err:  # noqa: BLE001 - LoadGen must still finish; raised after it returns
                self.error = err
        self._complete([self._response(i, 0, 0) for i in ids])

    @contextmanager
    def running(self, lg: Any) -> Iterator[Any]:
        """The worker thread, and the SUT registered with LoadGen, for one test."""
        self._thread = threading.Thread(target=self._work, name="harness-infer-sut", daemon=True)
        self._thread.start()
        handle = lg.ConstructSUT(self.issue_queries, self.flush_queries)
        try:
            yield handle
        finally:
            lg.DestroySUT(handle)
            self._queue.put(_STOP)
            self._thread.join()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            pending, stop = list(item), False
            while not stop:  # everything that has arrived meanwhile
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    stop = True
                else:
                    pending.extend(more)
            for lo in range(0, len(pending), self.max_batch):
                self.answer(pending[lo : lo + self.max_batch])
            if stop:
                return


# ---------------------------------------------------------------------------------- calibration
def calibrate(model: DLRM, library: SampleLibrary, batch: int, *, min_s: float = 0.5) -> float:
    """Seconds per call of ``model`` answering ``batch`` samples through the SUT's path
    (the model, the probabilities, one response per sample), the median of repeated calls."""
    sut = BatchingSut(model, library, batch, complete=lambda _responses: None, response=lambda *a: a)
    samples = [SimpleNamespace(id=k, index=k % library.count) for k in range(batch)]
    library.load(sorted({s.index for s in samples}))
    sut.answer(samples)  # warm up
    times: list[float] = []
    t_end = time.perf_counter() + min_s
    while time.perf_counter() < t_end or len(times) < 3:
        t0 = time.perf_counter()
        sut.answer(samples)
        times.append(time.perf_counter() - t0)
    if sut.error is not None:
        raise HarnessError(f"the model failed while calibrating: {sut.error}", ErrorCategory.RUN_FAILED)
    return float(np.median(times))


# ---------------------------------------------------------------------------------- one run
def _settings(lg: Any, scenario: Scenario, *, duration_s: float, qps: float, latency_ms: float) -> Any:
    s = lg.TestSettings()
    s.mode = lg.TestMode.PerformanceOnly
    s.min_duration_ms = int(duration_s * 1000)
    if scenario is Scenario.OFFLINE:
        s.scenario = lg.TestScenario.Offline
        s.offline_expected_qps = qps
        s.min_query_count = 1
    else:
        s.scenario = lg.TestScenario.Server
        s.server_target_qps = qps
        s.server_target_latency_ns = int(latency_ms * 1e6)
        s.server_target_latency_percentile = 0.99
        s.min_query_count = SERVER_MIN_QUERIES
    return s


def run_loadgen(sut: BatchingSut, library: SampleLibrary, scenario: Scenario, *, out_dir: Path, duration_s: float,
                qps: float, latency_ms: float) -> LoadgenSummary:
    """One LoadGen test (PerformanceOnly) of ``sut``; its logs in ``out_dir``; its summary."""
    lg = loadgen()
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("mlperf_log_*"):
        old.unlink()
    output = lg.LogOutputSettings()
    output.outdir = str(out_dir)
    output.copy_summary_to_stdout = False
    log = lg.LogSettings()
    log.log_output = output
    log.enable_trace = False
    settings = _settings(lg, scenario, duration_s=duration_s, qps=qps, latency_ms=latency_ms)
    with library.registered(lg) as qsl, sut.running(lg) as handle:
        lg.StartTestWithLogSettings(handle, qsl, settings, log)
    if sut.error is not None:
        raise HarnessError(f"the model failed during the LoadGen {scenario.value} run: "
                           f"{type(sut.error).__name__}: {sut.error}", ErrorCategory.RUN_FAILED)
    return parse_summary(out_dir / SUMMARY_FILE, scenario)


_LINE = re.compile(r"^\s*([^:]+?)\s*:\s*(.+?)\s*$")


def parse_summary(path: Path, scenario: Scenario) -> LoadgenSummary:
    """Read a LoadGen ``mlperf_log_summary.txt``: throughput, p99 latency, VALID or not."""
    if not path.is_file():
        raise HarnessError(f"LoadGen wrote no summary at {path}", ErrorCategory.RUN_FAILED)
    fields: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = _LINE.match(line)
        if m and m.group(1) not in fields:
            fields[m.group(1)] = m.group(2)
    try:
        rate_key = "Samples per second" if scenario is Scenario.OFFLINE else "Completed samples per second"
        return LoadgenSummary(
            scenario=scenario,
            samples_per_s=float(fields[rate_key]),
            scheduled_per_s=float(fields["Scheduled samples per second"]) if scenario is Scenario.SERVER else None,
            p99_latency_ms=float(fields["99.00 percentile latency (ns)"]) / 1e6,
            valid=fields["Result is"] == "VALID",
            path=path,
        )
    except (KeyError, ValueError) as err:
        raise HarnessError(f"{path}: not a LoadGen summary of a {scenario.value} run (missing or bad {err})",
                           ErrorCategory.RUN_FAILED) from err


def _cache_delta(tables: CountingTieredEmbeddings, before: tuple[CacheStats, int, int]) -> CacheUse:
    stats, bypass_batches, bypass_rows = before
    now = tables.cache.stats
    return CacheUse(
        batches_through_cache=now.batches - stats.batches,
        batches_bypassing=tables.bypass_batches - bypass_batches,
        lookups=now.lookups - stats.lookups,
        hits=now.hits - stats.hits,
        unique_lookups=now.unique_lookups - stats.unique_lookups,
        unique_hits=now.unique_hits - stats.unique_hits,
        ssd_bytes_read=now.bytes_read - stats.bytes_read + (tables.bypass_rows - bypass_rows) * tables.store.row_bytes,
    )


# ---------------------------------------------------------------------------------- everything
@dataclass
class _Variant:
    """One variant being served, with its calibration."""

    kind: Variant
    model: DLRM
    tables: CountingTieredEmbeddings | None = None
    batch_s: float = 0.0  # one call answering max_batch samples
    single_query_s: float = 0.0  # one call answering one sample


def run_inference(config: InferConfig, *, progress: Callable[[str], None] = lambda _m: None) -> InferReport:
    """Train (or reuse) the benchmark's model, then serve it from memory and from the SSD tier
    under LoadGen, in each of the config's scenarios."""
    from harness.reference.datasets import SyntheticDataset
    from harness.rules.specs import load_benchmark

    t_start = time.perf_counter()
    lg = loadgen()
    spec = load_benchmark(config.benchmark)
    data = SyntheticDataset(spec.dataset).generator
    model_dir = config.model_dir or default_model_dir(spec.name, config.seed, config.train_steps)
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        model, state = trained_model(spec, seed=config.seed, train_steps=config.train_steps, model_dir=model_dir,
                                     progress=progress)
        with tempfile.TemporaryDirectory(dir=model_dir, prefix="ssd-tier-") as tier_dir:
            memory = _Variant(Variant.MEMORY, memory_model(spec, state))
            ssd_net, tables = ssd_model(spec, state, Path(tier_dir) / "tables.bin",
                                        cache_fraction=config.cache_fraction, policy=config.cache_policy)
            try:
                ssd = _Variant(Variant.SSD, ssd_net, tables)
                identical = check_identical(memory.model, ssd.model, data, sizes=_check_sizes(config.max_batch))
                progress(f"the two variants' predictions are identical, bit for bit, on {identical} eval samples")
                library = SampleLibrary(data)
                _calibrate(config, library, (memory, ssd), progress)
                server_qps = config.server_qps or SERVER_LOAD_FRACTION / memory.single_query_s
                results = [
                    _run_one(config, lg, library, v, scenario, server_qps=server_qps, out_dir=model_dir / "loadgen",
                             progress=progress)
                    for scenario in config.scenarios for v in (memory, ssd)
                ]
                table_bytes = table_memory(memory.model, tables)
            finally:
                tables.close()
    finally:
        torch.set_num_threads(threads)
    return InferReport(
        config=config, model=model, memory=table_bytes, identical_samples=identical,
        offline_expected_qps={v.kind.value: config.max_batch / v.batch_s * OFFLINE_HEADROOM for v in (memory, ssd)},
        server_target_qps=server_qps if Scenario.SERVER in config.scenarios else None,
        server_qps_source="--server-qps" if config.server_qps else "calibrated",
        results=results, loadgen_version=loadgen_version(), wall_s=time.perf_counter() - t_start,
    )


def _check_sizes(max_batch: int) -> list[int]:
    """Batches to compare the variants on: a full one (larger than a small cache: it bypasses
    it) and small ones that go through the cache, admitting and evicting rows."""
    return [max_batch, *([64] * 4), 1, 1]


def _calibrate(config: InferConfig, library: SampleLibrary, variants: Sequence[_Variant],
               progress: Callable[[str], None]) -> None:
    for v in variants:
        v.batch_s = calibrate(v.model, library, config.max_batch)
        v.single_query_s = calibrate(v.model, library, 1)
        progress(f"calibration, {v.kind.value} variant: {config.max_batch / v.batch_s:,.0f} samples/s in batches of "
                 f"{config.max_batch}, {v.single_query_s * 1e3:.3f} ms per one-sample query")


def _run_one(config: InferConfig, lg: Any, library: SampleLibrary, v: _Variant, scenario: Scenario, *,
             server_qps: float, out_dir: Path, progress: Callable[[str], None]) -> ScenarioResult:
    """One LoadGen run of one variant, with the cache's use during it (SSD variant)."""
    offline = scenario is Scenario.OFFLINE
    qps = config.max_batch / v.batch_s * OFFLINE_HEADROOM if offline else server_qps
    progress(f"LoadGen {scenario.value}, {v.kind.value} variant, {'expected' if offline else 'target'} {qps:,.0f} QPS ...")
    tables = v.tables
    before = (replace(tables.cache.stats), tables.bypass_batches, tables.bypass_rows) if tables is not None else None
    sut = BatchingSut(v.model, library, config.max_batch, complete=lg.QuerySamplesComplete,
                      response=lg.QuerySampleResponse)
    t0 = time.perf_counter()
    summary = run_loadgen(sut, library, scenario, out_dir=out_dir / f"{v.kind.value}-{scenario.value}",
                          duration_s=config.duration_s, qps=qps, latency_ms=config.server_latency_ms)
    wall_s = time.perf_counter() - t0
    cache = _cache_delta(tables, before) if tables is not None and before is not None else None
    return ScenarioResult(v.kind, summary, qps, cache, wall_s)
