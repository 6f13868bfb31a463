"""The reference trainer: one timed MLPerf run, from ``init_start`` to ``run_stop``.

The MLPerf clock runs from ``run_start`` (before the first touch of the training data) to
``run_stop``: ``status=success`` at the first evaluation whose AUC reaches the target,
``status=aborted`` at the epoch limit, on an interrupt or on an error. Evaluation runs on the
whole eval split at the benchmark's cadence (every ``1/20`` epoch for DLRM); ``epoch_num``
is the fraction of the epoch seen so far. Log records are emitted from the ``_log_*`` hooks
only, through :class:`harness.reference.mlperf_log.MLPerfLog`.
"""

from __future__ import annotations

import json
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.errors import ErrorCategory, HarnessError
from harness.reference import synthetic
from harness.reference.batches import Batch
from harness.reference.comm_codecs import CommConfig
from harness.reference.embeddings import (
    FusedEmbeddingCollection,
    SparseOptimizerConfig,
    SparseOptimizerKind,
)
from harness.reference.mlperf_log import MLPerfLog
from harness.reference.model import DLRM
from harness.rules.specs import BenchmarkSpec, spec_from_dict


@dataclass(frozen=True)
class RunConfig:
    """Everything one run depends on, as plain JSON (it crosses a process boundary)."""

    benchmark: dict[str, Any]
    hyperparameters: dict[str, Any]
    profile: dict[str, Any]
    seed: int
    seed_source: str
    submitter: str
    division: str
    status: str
    platform: str
    log_path: str
    fingerprint: str
    config_filename: str
    emulated: bool = False
    run_index: int = 0
    progress: bool = False
    threads: int | None = None
    extra_log: dict[str, Any] = field(default_factory=dict)
    world_size: int = 1
    sharding_plan: dict[str, Any] | None = None  # Plan.to_dict(), for world_size > 1
    comm: dict[str, str] = field(default_factory=dict)  # codec per collective: forward, backward, allreduce
    # the tables' tier: {"tier": "ssd", "path": file, "cache_fraction": 0.05, "policy": "lru", "ssd_tables": [..]
    # or None (all), "rows_in_file": True when the file already holds the rows}; None: memory
    embedding_tier: dict[str, Any] | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        return cls(**json.loads(text))

    @classmethod
    def offline(cls, benchmark: dict[str, Any], hyperparameters: dict[str, Any], seed: int, *,
                who: str = "harness", **fields: Any) -> RunConfig:
        """A config for training outside a run set (``harness infer``, benches, tests): no log,
        the local CPU unless ``profile`` says otherwise, a chosen seed; ``fields`` set the rest."""
        return cls(**{
            "benchmark": benchmark, "hyperparameters": hyperparameters, "seed": seed, "seed_source": "user",
            "profile": {"name": "local", "device_type": "cpu"}, "submitter": who, "division": "closed",
            "status": "research", "platform": who, "log_path": os.devnull, "fingerprint": who,
            "config_filename": f"{who}.yaml", **fields,
        })


@dataclass
class RunResult:
    status: str  # "success" | "aborted"
    reason: str
    eval_accuracies: list[tuple[float, float]]  # (epoch_num, auc)
    train_samples_per_s: float

    def reason_is_final(self) -> bool:
        """Whether the run ended by its own rules (target or epoch limit), not by an error or interrupt."""
        return not (self.reason == "interrupted" or self.reason.startswith("error: "))


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """scikit-learn's ``roc_auc_score``, imported on first use: only the rank that computes the
    AUC pays for importing scikit-learn (a second per process; :meth:`Trainer.run` imports it
    during init, outside the timed region)."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, scores))


def synthetic_data(spec: BenchmarkSpec) -> synthetic.SyntheticCriteo:
    """The generator of a synthetic benchmark's data set."""
    d = spec.dataset
    if d["kind"] != "synthetic":
        raise HarnessError(
            f"benchmark {spec.name} trains on {d['kind']} data; training on real Criteo data "
            "is not wired into `harness run` yet (the readers exist in harness.reference.criteo)",
            ErrorCategory.NOT_IMPLEMENTED,
        )
    return synthetic.SyntheticCriteo(
        synthetic.SyntheticSpec(
            seed=d["seed"],
            train_samples=d["train_samples"],
            eval_samples=d["eval_samples"],
            table_rows=tuple(d["table_rows"]),
            pooling=tuple(d["pooling"]),
            zipf_exponent=d.get("zipf_exponent", 1.05),
            teacher=synthetic.TeacherSpec(**d.get("teacher", {})),
        )
    )


def _prefetch(batches: Iterator[Batch], depth: int = 2) -> Iterator[Batch]:
    """Produce batches in a background thread, ``depth`` ahead of the consumer."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    sentinel = object()

    def produce() -> None:
        try:
            for b in batches:
                if stop.is_set():
                    return
                q.put(b)
            q.put(sentinel)
        except BaseException as err:  # handed to the consumer, which re-raises it
            q.put(err)

    thread = threading.Thread(target=produce, name="harness-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is sentinel:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


class Trainer:
    """Trains the reference DLRM once, logging the MLPerf events of the run."""

    def __init__(self, config: RunConfig, log: MLPerfLog | None = None, *,
                 progress: Callable[[dict], None] | None = None):
        self.config = config
        self.log = log if log is not None else MLPerfLog(Path(os.devnull), enabled=False)  # None: no log
        self.spec: BenchmarkSpec = spec_from_dict(config.benchmark, what="benchmark of the run config")
        self.hp = config.hyperparameters
        self._progress = progress or (lambda _event: None)
        self.rank, self.world_size = 0, 1
        # one process, one device: the profile's accelerator when it has one (a profile is
        # only run where its hardware is present, unless emulated), else the CPU
        on_gpu = config.profile.get("device_type") == "cuda" and not config.emulated
        self.device = torch.device("cuda" if on_gpu else "cpu")
        self._eval_cache: list[Batch] | None = None
        self.codecs = CommConfig()  # one process: nothing is communicated
        self._tiered_tables: Any = None  # a TieredEmbeddingCollection when the tables are on SSD

    # ------------------------------------------------------------------ hooks
    def _log_init_start(self) -> None:
        c, hp = self.config, self.hp
        self.log.event("cache_clear", True)
        self.log.start("init_start")
        self.log.event("submission_benchmark", self.spec.name)
        self.log.event("submission_org", c.submitter)
        self.log.event("submission_division", c.division)
        self.log.event("submission_status", c.status)
        self.log.event("submission_platform", c.platform)
        self.log.event("seed", c.seed, {"seed_source": c.seed_source})
        for key in sorted(hp):
            self.log.event(key, hp[key])
        self.log.event("lowest_numerical_precision_in_linear", "fp32")
        self.log.event("lowest_numerical_precision_in_comm", self.codecs.lowest_precision())
        self.log.event("data_parallelism", self.world_size)
        self.log.event("tensor_parallelism", 1)
        self.log.event("pipeline_parallelism", 1)
        self.log.event("config_filename", c.config_filename)
        self.log.event("harness_fingerprint", c.fingerprint)
        self.log.event("harness_ruleset", self.spec.ruleset)
        self.log.event("harness_emulated", c.emulated)
        self.log.event("harness_profile", str(c.profile.get("name", "")) or "unknown")
        for key, value in sorted(c.extra_log.items()):
            self.log.event(key, value)

    def _log_init_stop(self) -> None:
        d = self.spec.dataset
        self.log.event("train_samples", d["train_samples"])
        self.log.event("eval_samples", d["eval_samples"])
        self.log.end("init_stop")

    def _log_run_start(self) -> None:
        self.log.start("run_start")
        self.log.start("epoch_start", metadata={"epoch_num": 0})

    def _log_eval_start(self, epoch_num: float) -> None:
        self.log.start("eval_start", metadata={"epoch_num": epoch_num})

    def _log_eval(self, epoch_num: float, auc: float) -> None:
        self.log.event("eval_accuracy", auc, {"epoch_num": epoch_num})
        self.log.end("eval_stop", metadata={"epoch_num": epoch_num})

    def _log_run_stop(self, status: str, reason: str, epoch_num: float, throughput: float) -> None:
        self.log.end("run_stop", metadata={"status": status, "epoch_num": epoch_num, "reason": reason})
        self.log.end("epoch_stop", metadata={"epoch_num": epoch_num})
        self.log.event("tracked_stats", {"throughput": throughput}, {"step": epoch_num})
        if self._tiered_tables is not None:
            self.log.event("harness_embedding_cache", self.cache_report())

    def cache_report(self) -> dict[str, Any]:
        """Hit rate and bytes moved per tier of the tables' cache (training lookups)."""
        tables = self._tiered_tables
        cache = tables.cache
        memory_rows = cache.capacity - cache.free_capacity
        tier = self.config.embedding_tier or {}
        placement = {k: tier[k] for k in ("table_tiers", "tier_plan") if k in tier}  # the planner's, when planned
        return {**cache.stats.to_dict(tables.store.tier), "policy": cache.policy.value,
                "cache_rows": cache.free_capacity, "rows": tables.store.rows - memory_rows,
                "memory_tables": list(tables.memory_tables), "memory_rows": memory_rows, **placement}

    # ------------------------------------------------------------------ pieces
    def _data(self) -> synthetic.SyntheticCriteo:
        return synthetic_data(self.spec)

    def _model(self) -> tuple[DLRM, torch.optim.Optimizer]:
        hp = self.hp
        lr = float(hp["opt_base_learning_rate"])
        if hp["opt_name"] == "adagrad":
            sparse = SparseOptimizerConfig(
                kind=self.spec.embedding_optimizer,
                learning_rate=lr,
                eps=float(hp.get("opt_adagrad_epsilon", 1e-8)),
                initial_accumulator_value=float(hp.get("opt_adagrad_initial_accumulator_value", 0.0)),
            )
        else:
            sparse = SparseOptimizerConfig(kind=SparseOptimizerKind.SGD, learning_rate=lr)
        torch.manual_seed(self.config.seed)
        if self.device.type == "cuda":
            torch.use_deterministic_algorithms(True, warn_only=True)
        model = DLRM(self.spec.model_config(), sparse_optimizer=sparse, device=self.device)
        if self.config.embedding_tier and self.config.world_size == 1:  # sharded runs: per shard, see ShardedDLRM
            model.sparse_arch.embeddings = self._tiered(model.sparse_arch.embeddings, self.config.embedding_tier)
        if hp["opt_name"] == "adagrad":
            dense = torch.optim.Adagrad(
                model.dense_parameters(),
                lr=lr,
                lr_decay=float(hp.get("opt_adagrad_learning_rate_decay", 0.0)),
                weight_decay=float(hp.get("opt_weight_decay", 0.0)),
                initial_accumulator_value=float(hp.get("opt_adagrad_initial_accumulator_value", 0.0)),
                eps=float(hp.get("opt_adagrad_epsilon", 1e-8)),
            )
        else:
            dense = torch.optim.SGD(model.dense_parameters(), lr=lr, weight_decay=float(hp.get("opt_weight_decay", 0.0)))
        return model, dense

    def _eval_steps(self, steps_per_epoch: int) -> list[int]:
        """The steps after which to evaluate: every ``fraction`` of an epoch, up to the limit."""
        fraction, limit = self.spec.eval_every_epoch_fraction, self.spec.max_epochs
        count = int(math.floor(limit / fraction + 1e-9))
        steps = sorted({max(1, round(k * fraction * steps_per_epoch)) for k in range(1, count + 1)})
        last = int(math.floor(limit * steps_per_epoch))
        if not steps or steps[-1] != last:
            steps.append(last)
        return steps

    def _tiered(self, full: FusedEmbeddingCollection, tier: dict[str, Any]) -> FusedEmbeddingCollection:
        """``full``'s tables moved to the SSD tier (a file), behind a cache of a fraction of their rows;
        tables not in ``tier["ssd_tables"]`` (when given) stay in memory."""
        from harness.reference.planner.estimators import cache_rows
        from harness.reference.tiered import (
            CachePolicy,
            SsdRows,
            TieredEmbeddingCollection,
            state_columns,
        )

        if tier.get("tier") != "ssd" or self.device.type != "cpu":
            raise HarnessError(
                f"embedding tier {tier.get('tier')!r} on {self.device.type}: only the SSD tier behind a host-memory "
                "cache is implemented", ErrorCategory.NOT_IMPLEMENTED,
            )
        rows = sum(full.table_rows)
        in_file = bool(tier.get("rows_in_file"))  # resuming: the file already holds the rows
        store = SsdRows(Path(tier["path"]), rows, full.dim, state_columns(full), create=not in_file)
        on_ssd = tier.get("ssd_tables")  # table indices; None: all
        memory = tuple(t for t in range(len(full.table_rows)) if on_ssd is not None and t not in on_ssd)
        # each SSD table's share of the cache, as the planner counts it
        batch, fraction = int(self.hp["global_batch_size"]), float(tier["cache_fraction"])
        capacity = sum(cache_rows(r, fraction, batch * full.pooling[t])
                       for t, r in enumerate(full.table_rows) if t not in memory)
        self._tiered_tables = TieredEmbeddingCollection(
            full, store, capacity, CachePolicy(tier.get("policy", "lru")), memory_tables=memory, copy_rows=not in_file
        )
        return self._tiered_tables

    def _train_items(self, data: synthetic.SyntheticCriteo, order: synthetic.EpochOrder, gbs: int,
                     model: Any) -> Iterator[Any]:
        """What one training step consumes, in order (here: the global batches)."""
        batches = (self._on_device(b) for b in _prefetch(synthetic.train_batches(data, order, gbs)))
        if self._tiered_tables is not None:
            from harness.reference.tiered import lookahead

            return lookahead(batches, self._tiered_tables)
        return batches

    def train_step(self, model: Any, dense_opt: torch.optim.Optimizer, loss_fn: torch.nn.Module,
                   item: Any) -> torch.Tensor:
        """One optimizer step on one item of :meth:`_train_items`; the loss, detached."""
        dense_opt.zero_grad(set_to_none=True)
        loss = self._loss(model, loss_fn, item)
        loss.backward()
        dense_opt.step()
        return loss.detach()

    def _loss(self, model: Any, loss_fn: torch.nn.Module, item: Any) -> torch.Tensor:
        """The loss of one step's item (the distributed trainer's items carry their ids' distribution)."""
        return loss_fn(model(item.dense, item.sparse), item.labels)

    def _cache_progress(self) -> dict[str, float]:
        if self._tiered_tables is None:
            return {}
        return {"cache_hit_rate": self._tiered_tables.cache.stats.hit_rate}

    def _on_device(self, batch: Batch) -> Batch:
        if self.device.type == "cpu":
            return batch
        return Batch(
            dense=batch.dense.to(self.device, non_blocking=True),
            sparse=batch.sparse.to(self.device, non_blocking=True),
            labels=batch.labels.to(self.device, non_blocking=True),
            pooling=batch.pooling,
        )

    @torch.no_grad()
    def evaluate(self, model: DLRM, data: synthetic.SyntheticCriteo) -> float:
        """AUC over the whole eval split (scikit-learn's ``roc_auc_score``).

        The eval split is generated at the first evaluation (inside the timed region, as
        reading it would be) and kept in memory for the later ones.
        """
        if self._eval_cache is None:
            self._eval_cache = [
                self._on_device(b) for b in _prefetch(synthetic.eval_batches(data, self.spec.eval_batch_size))
            ]
        model.eval()
        scores = [torch.sigmoid(model(b.dense, b.sparse)).double().cpu().numpy() for b in self._eval_cache]
        labels = [b.labels.cpu().numpy() for b in self._eval_cache]
        model.train()
        return roc_auc(np.concatenate(labels), np.concatenate(scores))

    # ------------------------------------------------------------------ the run
    def run(self) -> RunResult:
        if self.config.threads:
            torch.set_num_threads(self.config.threads)
        self._log_init_start()
        if self.rank == 0:
            import sklearn.metrics  # noqa: F401  (now, not at the first evaluation, inside the timed region)
        data = self._data()  # builds the generator; no sample is made before run_start
        model, dense_opt = self._model()
        loss_fn = torch.nn.BCEWithLogitsLoss()
        gbs = int(self.hp["global_batch_size"])
        train_samples = self.spec.dataset["train_samples"]
        steps_per_epoch = train_samples // gbs
        if steps_per_epoch < 1:
            raise HarnessError(f"global batch size {gbs} exceeds the {train_samples} training samples")
        eval_at = self._eval_steps(steps_per_epoch)
        self._log_init_stop()

        self._log_run_start()
        order = synthetic.EpochOrder.from_seed(self.config.seed, train_samples)
        result = RunResult("aborted", "epoch limit reached without reaching the target", [], 0.0)
        step, epoch_num, train_time, next_eval = 0, 0.0, 0.0, 0
        last_progress = 0.0
        items = self._train_items(data, order, gbs, model)
        try:
            t0 = time.perf_counter()
            for item in items:
                self.train_step(model, dense_opt, loss_fn, item)
                step += 1
                epoch_num = step * gbs / train_samples
                now = time.perf_counter()
                if now - last_progress > 0.5:
                    self._progress({"samples": step * gbs, "samples_per_s": step * gbs / max(train_time + now - t0, 1e-9),
                                    **self._cache_progress()})
                    last_progress = now
                if step == eval_at[next_eval]:
                    train_time += time.perf_counter() - t0
                    self._log_eval_start(epoch_num)
                    auc = self.evaluate(model, data)
                    self._log_eval(epoch_num, auc)
                    result.eval_accuracies.append((epoch_num, auc))
                    self._progress({"samples": step * gbs, "auc": auc, "epoch_num": epoch_num,
                                    "samples_per_s": step * gbs / max(train_time, 1e-9)})
                    next_eval += 1
                    if auc >= self.spec.target_auc:
                        result.status, result.reason = "success", f"AUC {auc:.5f} reached the target {self.spec.target_auc}"
                        break
                    if next_eval == len(eval_at):
                        break
                    t0 = time.perf_counter()
        except KeyboardInterrupt:
            result.reason = "interrupted"
            raise
        except Exception as err:
            result.reason = f"error: {type(err).__name__}: {err}"
            raise
        finally:
            # a clean stop lets the item source finish what it started; an error abandons it
            stop = getattr(items, "close" if result.reason_is_final() else "abandon", None)
            if stop is not None:
                stop()
            result.train_samples_per_s = step * gbs / max(train_time, 1e-9)
            self._log_run_stop(result.status, result.reason, epoch_num, result.train_samples_per_s)
            if self._tiered_tables is not None:  # after run_stop: the run's time does not include it
                self._tiered_tables.flush()
                self._tiered_tables.close()
        return result


def run_from_config(config: RunConfig) -> RunResult:
    """Run one training run in this process (one rank of it when ``config.world_size > 1``,
    launched by torchrun); rank 0 writes the log and reports progress."""
    if config.world_size == 1:
        return _run(Trainer, config, rank=0)
    from harness.reference.distributed.trainer import DistributedTrainer, process_group

    with process_group(config):
        import torch.distributed as dist

        return _run(DistributedTrainer, config, rank=dist.get_rank())


def _run(trainer: type[Trainer], config: RunConfig, *, rank: int) -> RunResult:
    log = MLPerfLog(Path(config.log_path), enabled=rank == 0)

    def progress(event: dict) -> None:
        if config.progress and rank == 0:
            print("HARNESS_PROGRESS " + json.dumps(event), flush=True)

    try:
        return trainer(config, log, progress=progress).run()
    finally:
        log.close()

