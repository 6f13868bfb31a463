"""The training engine: one :class:`TrainingSession` per training, and the only training loop.

A session builds the benchmark's model and its two optimizers (the dense one, a torch
optimizer; the embeddings', fused into their backward pass) from the run's seed, opens the
run's data, and then trains: :meth:`TrainingSession.step` takes one optimizer step,
:meth:`~TrainingSession.evaluate` gives the AUC of the eval split, and
:meth:`~TrainingSession.train` is the loop that everything training runs (MLPerf runs through
:class:`harness.reference.engine.trainer.Trainer`, ``harness infer``, the checkpointed job, the
benches): epoch after epoch in the datasets' order (:mod:`harness.reference.data.datasets`),
evaluating at the benchmark's cadence, stopping at the target, the epoch limit or a step
count, and telling a :class:`SessionHooks` about each event. Logging is the hooks' business:
the session logs nothing.

Every logged hyperparameter is applied here: the learning-rate schedule
(:mod:`harness.reference.engine.schedules`) sets both optimizers' rates before every step, Adagrad's
epsilon, initial accumulator and ``lr_decay`` go to both; with ``opt_name: adam`` (dlrmv4's recipe)
the dense parameters take torch's Adam (``opt_adam_*``) and the tables their fused row-wise
Adagrad (``opt_sparse_*``); ``opt_gradient_clip_norm`` clips the dense gradients' norm before the
dense step. What the engine does not implement was refused when the spec was loaded
(:mod:`harness.rules.hyperparameters`).

The session knows a model only by its loss and its predictions (``batch_loss(batch)``,
``batch_scores(batch) -> (logits, labels)``), its dense parameters and its fused tables
(``set_learning_rate``, ``set_step``): a DLRM on tabular samples or the HSTU ranker on users' event
streams (:func:`harness.reference.models.from_spec.build_model`). Evaluations come every fraction of
an epoch, or on a grid of samples when the benchmark's rules count samples (dlrmv4).

:class:`harness.reference.distributed.session.DistributedSession` is the same engine for one
rank of a sharded run.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.hw_profiles.profiles import DeviceType
from harness.mllog import keys
from harness.reference.data import open_dataset
from harness.reference.data.batches import Batch
from harness.reference.data.datasets import Samples, step_batches
from harness.reference.engine import heap
from harness.reference.engine.build import (
    dense_optimizer,
    eval_split_bytes,
    fused_tables,
    held_bytes,
    rate_holder,
    sparse_optimizer,
    tier_cache_report,
    tier_file,
    tier_tables,
)
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.schedules import LearningRatePolicy, eval_samples_grid, eval_steps, step_limit
from harness.reference.engine.trace import StepTracer, merge
from harness.reference.models import numerics
from harness.reference.models.dlrm import DLRM
from harness.reference.models.embeddings import FusedEmbeddingCollection, SparseOptimizerConfig
from harness.reference.models.from_spec import build_model
from harness.reference.models.hstu import HSTURanker
from harness.reference.tiered import lookahead
from harness.reference.tiered.ledger import peak_rss_bytes, rss_now
from harness.reference.timing import phases
from harness.rules.auc import roc_auc
from harness.rules.precision import Precision, parse_precision
from harness.rules.specs import BenchmarkSpec

# The eval split is kept in memory after its first evaluation when it is at most this large
# (the synthetic benchmarks' are tens of MB); a larger one (Criteo 1TB's 89M samples) is read
# again at every evaluation.
EVAL_CACHE_BYTES = 1 << 30


class Prefetcher:
    """Batches made in a background thread, ``depth`` ahead of the consumer.

    :meth:`close` stops the thread and waits for it (it never waits on anything but the data
    source), so that no thread is left making batches when a session ends or the process exits.
    """

    _DONE = object()

    def __init__(self, batches: Iterator[Batch], depth: int = 2):
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, args=(batches,), name="harness-prefetch", daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self, batches: Iterator[Batch]) -> None:
        try:
            for b in batches:
                if not self._put(b):
                    break
            else:
                self._put(self._DONE)
        except BaseException as err:  # handed to the consumer, which re-raises it
            self._put(err)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> Iterator[Batch]:
        try:
            while True:
                item = self._q.get()
                if item is self._DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.close()

    def close(self) -> None:
        self._stop.set()
        while True:  # unblock a producer waiting for room
            try:
                self._q.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=60)


def prefetch(batches: Iterator[Batch], depth: int = 2) -> Prefetcher:
    """Produce batches in a background thread, ``depth`` ahead of the consumer."""
    return Prefetcher(batches, depth)


class SessionHooks:
    """What :meth:`TrainingSession.train` tells about its events; ``True`` from
    :meth:`after_step` or :meth:`after_eval` stops the training there."""

    def after_step(self, session: TrainingSession, loss: torch.Tensor) -> bool:
        return False

    def before_eval(self, session: TrainingSession) -> None:
        pass

    def after_eval(self, session: TrainingSession, auc: float) -> bool:
        return False

    def epoch_boundary(self, session: TrainingSession, finished_epoch: int) -> None:
        """Epoch ``finished_epoch`` ended and the next one starts (not called at the end of training)."""


@dataclass
class TrainOutcome:
    status: str  # "success" (the target was reached) | "aborted"
    reason: str
    steps: int  # optimizer steps taken in all, by this session
    eval_accuracies: list[tuple[float, float]] = field(default_factory=list)  # (epoch_num, auc)


class Feed:
    """The training items of a range of steps, made ahead of time; :meth:`close` ends it cleanly
    (waiting for what is in flight), :meth:`abandon` after an error or an interrupt."""

    def __init__(self, items: Iterable[Any], *, close: Callable[[], None] | None = None,
                 abandon: Callable[[], None] | None = None):
        self._items = items
        self._close, self._abandon = close, abandon

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)

    def close(self) -> None:
        if self._close is not None:
            self._close()

    def abandon(self) -> None:
        if self._abandon is not None:
            self._abandon()


class TrainingSession:
    """Trains the reference model of one run, a DLRM or HSTU (one process; see the module docstring).

    Args:
        config: the run (benchmark, hyperparameters, seed, profile, data, tier).
        dataset: the data, when the caller opened it already; by default the config's
            (``config.data``, a manifest) or the benchmark's generator.
    """

    def __init__(self, config: RunConfig, *, dataset: Samples | None = None):
        heap.keep_freed_heap()  # a step's transient tensors reuse the heap, not fresh pages (heap.py)
        self.config = config
        self.spec: BenchmarkSpec = config.benchmark
        self.hyperparameters: dict[str, Any] = dict(config.hyperparameters)
        self.rank, self.world_size = self._placement()
        self.device = self._device()
        self.dataset: Samples = dataset if dataset is not None else open_dataset(
            self.spec, None if config.data is None else config.data["root"], manifest=config.data,
            cache_dir=config.data_cache)
        self.global_batch_size = int(self.hyperparameters["global_batch_size"])
        self.steps_per_epoch = self.dataset.train_samples // self.global_batch_size
        if self.steps_per_epoch < 1:
            raise HarnessError(f"global batch size {self.global_batch_size} exceeds the "
                               f"{self.dataset.train_samples} training samples", ErrorCategory.BAD_INPUT)
        self.schedule = LearningRatePolicy.from_hyperparameters(self.hyperparameters)
        self._step = 0
        self._rates: tuple[float, float] | None = None  # (dense, sparse) rates currently set
        self._eval_cache: list[Any] | None = None
        self._loss_fn = torch.nn.BCEWithLogitsLoss()
        self.precision: Precision = parse_precision(config.precision, what="the run config's precision")
        self.table_dtype = numerics.torch_dtype(self.precision)
        # fp16's narrow range needs the loss scaled (dynamic: halved on an overflow, which skips
        # the step, and doubled after 2000 clean steps, as torch.amp.GradScaler does)
        self.scaler = torch.amp.GradScaler(self.device.type) if self.precision.loss_scaling else None
        self.model, self.dense_optimizer = self._build()
        self._clip_norm = (float(self.hyperparameters["opt_gradient_clip_norm"])
                           if "opt_gradient_clip_norm" in self.hyperparameters else None)
        self._clipped = [p for group in self.dense_optimizer.param_groups for p in group["params"]]
        # where each step's time goes (harness.reference.timing.phases); a GPU's phases end synchronised
        self.clock = phases.CLOCK = phases.PhaseClock(
            enabled=config.step_phases, sync=torch.cuda.synchronize if self.device.type == "cuda" else None)
        self.tracer = StepTracer(self.device.type) if config.trace_path else None

    # ------------------------------------------------------------------ building
    def _placement(self) -> tuple[int, int]:
        return 0, 1

    def _device(self) -> torch.device:
        """One process, one device: the profile's accelerator when it has one (a profile is only
        run where its hardware is present, unless emulated), else the CPU."""
        on_gpu = self.config.profile.device_type is DeviceType.CUDA and not self.config.emulated
        return torch.device("cuda" if on_gpu else "cpu")

    def _sparse_optimizer(self) -> SparseOptimizerConfig:
        return sparse_optimizer(self.hyperparameters, self.spec, self.schedule.sparse(0))

    def _dense_optimizer(self, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return dense_optimizer(self.hyperparameters, params, self.schedule.dense(0), self.device)

    def _unsharded(self, *, embedding_device: Any = None) -> DLRM | HSTURanker:
        """The model as built from the seed (every rank of a sharded run builds the same dense
        part, and describes the tables on ``embedding_device="meta"`` to make only its shards)."""
        torch.manual_seed(self.config.seed)
        if self.device.type == "cuda":
            torch.use_deterministic_algorithms(True, warn_only=True)
            # fp32 linear layers, as the log states (lowest_numerical_precision_in_linear fp32):
            # no TF32 on Ampere and later, whatever torch's defaults
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        return build_model(self.spec, self._sparse_optimizer(), device=self.device, seed=self.config.seed,
                           embedding_device=embedding_device, table_dtype=self.table_dtype)

    def _build(self) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        model = self._unsharded()
        self._tiered = None
        if self.config.embedding_tier is not None:
            if not isinstance(model, DLRM):
                raise HarnessError(f"embedding tiers for a {self.spec.family.value} model are not implemented yet",
                                   ErrorCategory.NOT_IMPLEMENTED)
            tables = model.sparse_arch.embeddings
            if not isinstance(tables, FusedEmbeddingCollection):
                raise HarnessError("embedding tiers for tables of several dimensions are not implemented yet",
                                   ErrorCategory.NOT_IMPLEMENTED)
            self._tiered = tier_tables(tables, self.config.embedding_tier, device=self.device,
                                       global_batch_size=self.global_batch_size)
            model.sparse_arch.embeddings = self._tiered
        return model, self._dense_optimizer(model.dense_parameters())

    # ------------------------------------------------------------------ where training is
    @property
    def step_count(self) -> int:
        """Optimizer steps taken (the global step: a resumed session continues the count)."""
        return self._step

    @property
    def epoch_num(self) -> float:
        """Epochs of training samples seen, MLPerf's ``epoch_num``."""
        return self._step * self.global_batch_size / self.dataset.train_samples

    @property
    def samples_count(self) -> int:
        """Training samples seen, MLPerf's ``samples_count`` (dlrmv4's progress)."""
        return self._step * self.global_batch_size

    @property
    def learning_rate(self) -> float:
        """The dense optimizer's rate of the last step taken (the schedule's first before any)."""
        return self.schedule.dense(max(self._step - 1, 0))

    def step_limit(self) -> int:
        """The last step the epoch limit allows."""
        return step_limit(self.spec, self.steps_per_epoch)

    def eval_steps(self) -> list[int]:
        """The steps after which to evaluate (:func:`~harness.reference.engine.schedules.eval_steps`)."""
        return eval_steps(self.spec, self.steps_per_epoch, self.global_batch_size)

    def eval_samples_grid(self) -> list[int]:
        """The samples counts at which to evaluate, a benchmark that counts samples (dlrmv4)."""
        return eval_samples_grid(self.spec, self.steps_per_epoch, self.global_batch_size)

    # ------------------------------------------------------------------ data
    def _on_device(self, batch: Any) -> Any:
        return batch if self.device.type == "cpu" else batch.to(self.device)

    def _train_batches(self, start: int, stop: int) -> Iterator[Batch]:
        """This rank's batches of global steps ``start .. stop - 1``, epoch after epoch."""
        return step_batches(self.dataset, self.global_batch_size, start, stop, seed=self.config.seed, rank=self.rank,
                            world_size=self.world_size)

    def batches(self, *, start: int | None = None, until: int | None = None) -> Feed:
        """The training items of steps ``start`` (default: the next) to ``until`` (default: the
        epoch limit), made in a background thread ahead of the steps that consume them (and,
        with tables on the SSD tier, each batch's rows read while the step before computes)."""
        start = self._step if start is None else start
        until = self.step_limit() if until is None else until
        source = prefetch(self._train_batches(start, until))
        items: Iterator[Any] = (self._on_device(b) for b in source)
        if self._tiered is not None:
            items = lookahead(items, self._tiered)
        return Feed(items, close=source.close, abandon=source.close)

    # ------------------------------------------------------------------ one step
    def _apply_learning_rate(self, step: int) -> None:
        rates = (self.schedule.dense(step), self.schedule.sparse(step))
        if rates == self._rates:
            return
        for group in self.dense_optimizer.param_groups:
            group["lr"] = rates[0]
        self._embeddings().set_learning_rate(rates[1])
        self._rates = rates

    def _embeddings(self) -> Any:
        return rate_holder(self._ranker())

    def _tables(self) -> list[torch.nn.Module]:
        return fused_tables(self._ranker())

    def _ranker(self) -> DLRM | HSTURanker:
        """The model a one-process session trains (a distributed session's sharded model is its own)."""
        assert isinstance(self.model, DLRM | HSTURanker), type(self.model)
        return self.model

    def _loss(self, item: Any) -> torch.Tensor:
        return self._ranker().batch_loss(item)

    def autocast(self) -> Any:
        """The dense layers' autocast region of the run's precision (none for fp32)."""
        return numerics.autocast(self.precision, self.device)

    def step(self, item: Any) -> torch.Tensor:
        """One optimizer step on one item of :meth:`batches` (or a plain :class:`Batch` on the
        session's device): the schedule's rates, forward (under the precision's autocast),
        backward (which updates the embeddings), the dense optimizer's step. Returns the loss
        (fp32), detached."""
        clock = self.clock
        with clock.phase(phases.OPTIMIZER):
            self._apply_learning_rate(self._step)
            scaler = self.scaler
            self._embeddings().set_step(self._step, None if scaler is None else 1.0 / scaler.get_scale())
            self.dense_optimizer.zero_grad(set_to_none=True)
        with clock.phase(phases.DENSE_FORWARD), self.autocast():  # the lookups inside are the embeddings'
            loss = self._loss(item)
            objective = self._objective(loss)
        with clock.phase(phases.DENSE_BACKWARD):  # the embeddings' backward and the collectives inside are theirs
            (objective if scaler is None else scaler.scale(objective)).backward()
        with clock.phase(phases.OPTIMIZER):
            if scaler is None:
                self._clip_gradients()
                self.dense_optimizer.step()
            else:
                if self._clip_norm is not None:
                    scaler.unscale_(self.dense_optimizer)
                self._clip_gradients()
                scaler.step(self.dense_optimizer)
                scaler.update()
        with clock.phase(phases.EMBEDDING_BACKWARD):
            self._after_backward()
        self._step += 1
        return loss.detach()

    def _clip_gradients(self) -> None:
        """The dense gradients scaled so that their total L2 norm is at most ``opt_gradient_clip_norm``."""
        if self._clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self._clipped, self._clip_norm)

    def _objective(self, loss: torch.Tensor) -> torch.Tensor:
        """What the backward pass differentiates: the loss (one process: the global batch's mean)."""
        return loss

    def _after_backward(self) -> None:
        """What a step still has to do after the dense optimizer's step (a sharded session: the
        embedding updates whose gradients were still travelling)."""

    # ------------------------------------------------------------------ evaluation
    def _eval_items(self) -> Iterable[Any]:
        """The eval split, read at the first evaluation (inside the timed region, as MLPerf's
        references read it) and kept in memory after it when it is small enough."""
        if self._eval_cache is not None:
            return self._eval_cache
        items = (self._on_device(b) for b in prefetch(self.dataset.eval_batches(self.spec.eval_batch_size)))
        if eval_split_bytes(self.dataset) > EVAL_CACHE_BYTES:
            return items  # read to the end by the evaluation, which ends its thread
        self._eval_cache = list(items)
        return self._eval_cache

    @torch.no_grad()
    def evaluate(self, batches: Iterable[Any] | None = None) -> float:
        """AUC (:func:`harness.rules.auc.roc_auc`, scikit-learn's ``roc_auc_score`` exactly) over the eval split, or over ``batches``: over what
        the model scores (every sample; HSTU: the candidates that carry a label)."""
        items = self._eval_items() if batches is None else (self._on_device(b) for b in batches)
        self.model.eval()
        try:
            scores, labels = [], []
            for b in items:
                with self.autocast():
                    logits, truth = self._ranker().batch_scores(b)
                scores.append(torch.sigmoid(logits.float()).double().cpu().numpy())
                labels.append(truth.cpu().numpy())
        finally:
            self.model.train()
        return roc_auc(np.concatenate(labels), np.concatenate(scores))

    # ------------------------------------------------------------------ the loop
    def train(self, hooks: SessionHooks | None = None, *, eval_at: Iterable[int] | None = None,
              until: int | None = None, stop_at_target: bool = True) -> TrainOutcome:
        """Train from the next step to ``until`` (default: the epoch limit), evaluating after the
        steps ``eval_at`` (default: the benchmark's cadence) and, with ``stop_at_target``,
        stopping with ``success`` at the first evaluation that reaches the target AUC.

        An error or an interrupt abandons the data in flight and propagates; the session can
        then only be closed.
        """
        hooks = hooks or SessionHooks()
        last = self.step_limit() if until is None else min(until, self.step_limit())
        evals = {s for s in (self.eval_steps() if eval_at is None else eval_at) if self._step < s <= last}
        reason = "epoch limit reached without reaching the target" if until is None else f"{last} steps taken"
        outcome = TrainOutcome(keys.ABORTED, reason, self._step)
        if self._step >= last:
            return outcome
        feed = self.batches(until=last)
        clean = False
        clock = self.clock
        try:
            items = iter(feed)
            while True:
                clock.begin_step()
                with clock.phase(phases.DATA_WAIT):
                    item = next(items, None)
                if item is None:
                    clock.cancel_step()
                    break
                if self.tracer is None:
                    loss = self.step(item)
                    clock.end_step(self._step)
                else:
                    with self.tracer.step(self._step + 1):
                        loss = self.step(item)
                    clock.end_step(self._step)
                    self.tracer.after_step(self._step)  # the trace's export: not the step's time
                if hooks.after_step(self, loss):
                    outcome.reason = f"stopped after step {self._step}"
                    break
                if self._step in evals:
                    hooks.before_eval(self)
                    t0 = time.perf_counter()
                    auc = self.evaluate()
                    clock.add_eval(time.perf_counter() - t0)
                    outcome.eval_accuracies.append((self.epoch_num, auc))
                    stop = hooks.after_eval(self, auc)
                    if stop_at_target and auc >= self.spec.target_auc:
                        outcome.status = keys.SUCCESS
                        outcome.reason = f"AUC {auc:.5f} reached the target {self.spec.target_auc}"
                        break
                    if stop:
                        outcome.reason = f"stopped after the evaluation at step {self._step}"
                        break
                if self._step >= last:
                    break
                if self._step % self.steps_per_epoch == 0:
                    hooks.epoch_boundary(self, self._step // self.steps_per_epoch - 1)
            clean = True
        finally:
            outcome.steps = self._step
            if self.tracer is not None:
                self.tracer.finish(self._step)
            if clean:
                feed.close()  # what is in flight finishes (every rank stops at the same step)
            else:
                feed.abandon()  # other ranks may be elsewhere: waiting on them could hang
        return outcome

    # ------------------------------------------------------------------ state
    @property
    def tables_in_store(self) -> bool:
        """Whether the embedding rows live in a file (the SSD tier) rather than in the model."""
        return self._tiered is not None

    @property
    def table_file(self) -> Path | None:
        """The SSD tier's file of the tables (None when they are in memory)."""
        return tier_file(self._tiered)

    def state_dict(self) -> dict[str, Any]:
        """The step, the model and the dense optimizer's state; with the tables on the SSD tier,
        everything but the tables (which are in :attr:`table_file`, after :meth:`flush`)."""
        model = self.model.state_dict()
        if self.tables_in_store:
            model = {k: v for k, v in model.items() if not k.startswith("sparse_arch.")}
        return {"step": self._step, "model": model, "dense_optimizer": self.dense_optimizer.state_dict(),
                **({"loss_scaler": self.scaler.state_dict()} if self.scaler is not None else {}),
                "tables_in_store": self.tables_in_store}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s ``state`` (the same benchmark and hyperparameters)."""
        try:
            if bool(state["tables_in_store"]) != self.tables_in_store:
                raise ValueError("the state's tables are " + ("in a file" if state["tables_in_store"] else "in it"))
            missing, unexpected = self.model.load_state_dict(state["model"], strict=False)
            if unexpected or any(not (self.tables_in_store and k.startswith("sparse_arch.")) for k in missing):
                raise ValueError(f"missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}")
            self.dense_optimizer.load_state_dict(state["dense_optimizer"])
            if self.scaler is not None:
                self.scaler.load_state_dict(state["loss_scaler"])
            self._step = int(state["step"])
        except (KeyError, TypeError, ValueError, RuntimeError) as err:
            raise HarnessError(f"the saved training state does not match this session's model ({err})",
                               ErrorCategory.BAD_INPUT) from None
        self._rates = None

    # ------------------------------------------------------------------ the tables' cache
    def cache_report(self) -> dict[str, Any] | None:
        """Hit rate and bytes moved per tier of the tables' cache (training lookups); None when
        the tables are in memory."""
        tier = self.config.embedding_tier
        return None if self._tiered is None or tier is None else tier_cache_report(self._tiered, tier)

    def step_phases_report(self) -> dict[str, Any] | None:
        """The run's ``harness_step_phases`` record (every rank's, a collective in a sharded run);
        None when the steps were not measured (``--no-step-phases``) or too few were taken."""
        return phases.record([self.clock.summary(self.rank)], self.clock.evals)

    def trace_report(self) -> dict[str, Any] | None:
        """The merged profiler trace of the run's traced steps (every rank's, gathered on every
        rank in a sharded run: a collective); None without ``trace_path``."""
        return merge([self._own_trace()])

    def _own_trace(self) -> dict[str, Any] | None:
        t = self.tracer
        return None if t is None or t.events is None else {"events": t.events, "steps": t.steps}

    def memory_report(self) -> dict[str, Any]:
        """Per rank: the bytes the plan gave each tier, those held (and their peak) per tier, and
        the process's peak RSS (a collective in a sharded run: every rank calls it)."""
        held = held_bytes(self._tables(), self._tiered, self.device)
        tier = self.config.embedding_tier
        plan = {"tier_plan": tier.tier_plan} if tier is not None and tier.tier_plan is not None else {}
        return {"ranks": [{"rank": 0, "held": held, "peak": held, "peak_rss_bytes": peak_rss_bytes(), **rss_now(),
                           **plan}]}

    def cache_hit_rate(self) -> float | None:
        """This rank's cache hit rate so far (None when the tables are in memory)."""
        return None if self._tiered is None else self._tiered.cache.stats.hit_rate

    def cache_stats(self) -> Any:
        """The cache's counters (:class:`~harness.reference.tiered.CacheStats`), None in memory."""
        return None if self._tiered is None else self._tiered.cache.stats

    def flush(self) -> None:
        """Every update of tables on the SSD tier written back, durably (a no-op in memory)."""
        if self._tiered is not None:
            self._tiered.flush()

    def close(self) -> None:
        """Flush and release the tables' file and threads (after the run's clock has stopped)."""
        if self._tiered is not None:
            self._tiered.flush()
            self._tiered.close()

