"""The model ``harness infer`` serves: trained once and kept, then built for inference.

:func:`trained_model` trains the benchmark's model as the reference run does (the same
:class:`~harness.reference.engine.session.TrainingSession`) and keeps it in a model directory
(``model.pt``, the state dict; ``model.json``, how it was trained), so that the same command
reuses it. :func:`memory_model` builds it for inference with its tables in memory,
:func:`ssd_model` with its tables served from the SSD tier's rows file through a row cache
(warm at start with :func:`hot_rows`, the hottest of them pinned, by default). :func:`check_identical` and
:func:`reference_auc` are the checks made on the built models before any timing.
"""

from __future__ import annotations

import io
import json
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.files import replace_atomic, write_atomic
from harness.inference.config import AGAIN
from harness.inference.storage import PreadRows, RowLayout, SdmEmbeddings
from harness.reference.data import synthetic
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import SessionHooks, TrainingSession
from harness.reference.models.dlrm import DLRM
from harness.reference.models.embeddings import FusedEmbeddingCollection
from harness.reference.models.from_spec import dlrm_config
from harness.reference.planner.types import RowReader
from harness.reference.tiered import CachePolicy
from harness.rules.auc import roc_auc
from harness.rules.precision import Precision, parse_precision
from harness.rules.specs import BenchmarkSpec

MODEL_FILE, META_FILE = "model.pt", "model.json"
WARM_SAMPLES = 1 << 18  # the training samples whose ids a warm cache's rows are counted over


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
    precision: str = Precision.FP32.value  # what it was trained in (a model saved before it was kept: fp32)

    @property
    def reached_target(self) -> bool:
        return self.auc >= self.target_auc

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path), "reached_target": self.reached_target}


# ---------------------------------------------------------------------------------- the model kept
def trained_model(spec: BenchmarkSpec, *, seed: int, train_steps: int | None, model_dir: Path,
                  progress: Callable[[str], None],
                  precision: str = Precision.FP32.value) -> tuple[TrainedModel, dict[str, torch.Tensor]]:
    """The benchmark's model trained from ``seed`` in ``precision``: loaded from ``model_dir``
    when it is there, else trained now and saved there (``model.pt``: the state dict;
    ``model.json``, written last: how it was trained)."""
    meta_path, model_path = model_dir / META_FILE, model_dir / MODEL_FILE
    if meta_path.is_file():
        return _reused_model(spec, seed, train_steps, precision, model_dir, progress)
    progress(f"training {spec.name} seed {seed} ({_training_words(train_steps, precision)}) ...")
    t0 = time.perf_counter()
    state, steps, epochs, auc = _train(spec, seed, train_steps, progress, precision)
    model = TrainedModel(path=model_path, benchmark=spec.name, seed=seed, train_steps_requested=train_steps,
                         steps=steps, epochs=epochs, auc=auc, target_auc=spec.target_auc,
                         train_s=time.perf_counter() - t0, precision=precision)
    # serialised in memory first: torch's zip writer reports a full disk as a RuntimeError
    buffer = io.BytesIO()
    torch.save(state, buffer)
    replace_atomic(model_path, lambda tmp: tmp.write_bytes(buffer.getbuffer()), doing="saving the trained model",
                   then=AGAIN)
    meta = {k: v for k, v in model.to_dict().items() if k not in ("path", "reused")}
    write_atomic(meta_path, json.dumps(meta, indent=1) + "\n", then=AGAIN)
    return model, state


def _reused_model(spec: BenchmarkSpec, seed: int, train_steps: int | None, precision: str, model_dir: Path,
                  progress: Callable[[str], None]) -> tuple[TrainedModel, dict[str, torch.Tensor]]:
    """The model kept in ``model_dir``, refused if it was trained otherwise than asked."""
    model_path = model_dir / MODEL_FILE
    model = _read_meta(model_dir / META_FILE, model_path)
    if (model.benchmark, model.seed, model.train_steps_requested, model.precision) != (
            spec.name, seed, train_steps, precision):
        raise HarnessError(
            f"{model_dir} holds a model of {model.benchmark} seed {model.seed} "
            f"({_training_words(model.train_steps_requested, model.precision)}), not of {spec.name} seed {seed} "
            f"({_training_words(train_steps, precision)}): give another --model-dir, or remove that one",
            ErrorCategory.BAD_INPUT,
        )
    state = _read_state(model_path)
    progress(f"reusing the model in {model_dir}: {model.steps} steps ({model.epochs:.3f} epoch), AUC {model.auc:.5f}")
    return model, state


def _training_words(train_steps: int | None, precision: str) -> str:
    return ("until the target AUC" if train_steps is None else f"{train_steps} steps") + f" in {precision}"


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
                            target_auc=float(meta["target_auc"]), train_s=float(meta["train_s"]), reused=True,
                            precision=parse_precision(meta.get("precision", Precision.FP32.value)).value)
    except (OSError, ValueError, KeyError, TypeError, HarnessError) as err:
        raise _not_a_model(meta_path, err) from err


def _read_state(model_path: Path) -> dict[str, torch.Tensor]:
    try:
        return torch.load(model_path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as err:
        raise _not_a_model(model_path, err) from err


class _Progress(SessionHooks):
    """Says each evaluation's AUC while the model trains."""

    def __init__(self, progress: Callable[[str], None]):
        self.progress = progress

    def after_eval(self, session: TrainingSession, auc: float) -> bool:
        self.progress(f"  step {session.step_count} (epoch {session.epoch_num:.3f}): AUC {auc:.5f}")
        return False


def _train(spec: BenchmarkSpec, seed: int, train_steps: int | None, progress: Callable[[str], None],
           precision: str) -> tuple[dict[str, torch.Tensor], int, float, float]:
    """Train as the reference run does (the same session: model, data order, optimizers,
    schedule, precision); return the inference state dict (no optimizer state), the steps
    taken, the epochs and the last AUC."""
    session = TrainingSession(RunConfig.offline(spec, dict(spec.reference_hyperparameters), seed,
                                                who="harness-infer", precision=precision))
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


# ---------------------------------------------------------------------------------- the models served
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


def memory_tables(model: DLRM) -> FusedEmbeddingCollection:
    """The tables of a model :func:`memory_model` or :func:`ssd_model` built: one collection of
    one width (a benchmark ``harness infer`` serves has tables of one dimension)."""
    tables = model.sparse_arch.embeddings
    assert isinstance(tables, FusedEmbeddingCollection), type(tables).__name__
    return tables


def ssd_model(spec: BenchmarkSpec, state: dict[str, torch.Tensor], rows_file: Path, layout: RowLayout, *,
              cache_rows: int, policy: CachePolicy, latency_us: float,
              queue_depth: int = 1, warm: np.ndarray | None = None, pin_rows: int = 0,
              reader: RowReader = RowReader.AUTO, coalesce: bool = True) -> tuple[DLRM, SdmEmbeddings]:
    """The trained model with its tables served from ``rows_file`` through a cache of
    ``cache_rows`` rows, each read taking ``latency_us`` more, ``queue_depth`` reads in flight,
    misses of concurrent calls coalesced (``coalesce``); the cache holding ``warm``'s rows
    (:func:`hot_rows`, hottest first) at start, the first ``pin_rows`` of them for good, or empty."""
    model = memory_model(spec, state)
    full = memory_tables(model)
    store = PreadRows(rows_file, layout, latency_us=latency_us, queue_depth=queue_depth, reader=reader)
    tables = SdmEmbeddings(full.table_rows, full.dim, full.pooling, store, cache_rows, policy, coalesce=coalesce)
    if warm is not None:
        hot = torch.from_numpy(warm)
        tables.pin(hot[:pin_rows])
        tables.warm(hot[pin_rows:])
    model.sparse_arch.embeddings = tables
    return model.eval(), tables


def hot_rows(data: synthetic.SyntheticCriteo, column_offsets: torch.Tensor, table_rows: int, count: int, *,
             samples: int = WARM_SAMPLES, chunk: int = 1 << 15) -> tuple[np.ndarray, int]:
    """The ``count`` rows (of the fused table of ``table_rows`` rows) that the first ``samples``
    training samples look up most, hottest first (ties: the lower row first), and the samples
    counted: what a deployment would load into its cache at start."""
    n = min(int(samples), int(data.spec.train_samples))
    uses = np.zeros(table_rows, dtype=np.int64)
    offsets = column_offsets.numpy()
    for lo in range(0, n, chunk):
        ids = data._all_ids(np.arange(lo, min(lo + chunk, n), dtype=np.int64)) + offsets
        uses += np.bincount(ids.reshape(-1), minlength=table_rows)
    order = np.argsort(-uses, kind="stable")[: min(int(count), int(np.count_nonzero(uses)))]
    return order.astype(np.int64), n


# ---------------------------------------------------------------------------------- checks before timing
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


@torch.no_grad()
def reference_auc(model: DLRM, data: synthetic.SyntheticCriteo, *,
                  batch: int = 8192) -> tuple[float, np.ndarray, np.ndarray]:
    """The model's AUC on the whole eval split, computed directly (no LoadGen): the reference
    the accuracy runs are checked against; the eval labels and the model's probabilities, by QSL index."""
    idx = data.eval_indices()
    probs, labels = [], []
    for lo in range(0, idx.size, batch):
        b = data.samples(idx[lo : lo + batch])
        probs.append(torch.sigmoid(model(b.dense, b.sparse)).numpy())
        labels.append(b.labels.numpy())
    y, p = np.concatenate(labels), np.concatenate(probs)
    return roc_auc(y, p), y, p
