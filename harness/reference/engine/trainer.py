"""The reference trainer: one timed MLPerf run, from ``init_start`` to ``run_stop``.

The MLPerf clock runs from ``run_start`` (before the first touch of the training data) to
``run_stop``: ``status=success`` at the first evaluation whose AUC reaches the target,
``status=aborted`` at the epoch limit, on an interrupt or on an error. Evaluation runs on the
whole eval split at the benchmark's cadence (every ``1/20`` epoch for DLRM); ``epoch_num``
is the fraction of the epoch seen so far. A benchmark that counts samples (``dlrmv4``) evaluates on its
grid of samples and states ``samples_count`` on every ``eval_accuracy``, and its log states
``max_sequence_length`` and ``eval_every_data_pct``.

The training itself is a :class:`~harness.reference.engine.session.TrainingSession`'s (the one
engine and its one loop); the trainer adds only MLPerf's timing and log around it. Log
records are emitted from the ``_log_*`` hooks only, through
:class:`harness.reference.engine.mlperf_log.MLPerfLog`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.files import replace_atomic
from harness.mllog import keys
from harness.process import interrupt_reason, run_pending_signals
from harness.reference.engine.mlperf_log import MLPerfLog
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import (
    SessionHooks,
    TrainingSession,
    roc_auc,
)
from harness.reference.planner.codecs import Codec, mlperf_precision
from harness.rules.hyperparameters import logged_value
from harness.rules.precision import Precision, parse_precision
from harness.rules.specs import BenchmarkSpec

__all__ = ["EMBEDDING_PRECISION", "RunConfig", "RunResult", "Trainer", "roc_auc"]

# The tables' numerics: {"tables": "bf16", "optimizer_state": "fp32", "rounding": "stochastic",
# "loss_scaling": false} (rounding "none" for fp32 tables; loss_scaling: the fp16 run's scaled loss)
EMBEDDING_PRECISION = keys.HARNESS_EMBEDDING_PRECISION


@dataclass
class RunResult:
    status: str  # "success" | "aborted"
    reason: str
    eval_accuracies: list[tuple[float, float]]  # (epoch_num, auc)
    train_samples_per_s: float

    def reason_is_final(self) -> bool:
        """Whether the run ended by its own rules (target or epoch limit), not by an error or interrupt."""
        return not (self.reason.startswith("interrupted") or self.reason.startswith("error: "))


class _RunHooks(SessionHooks):
    """The trainer's view of the session's loop: MLPerf's eval and epoch records, the training
    time (evaluations excluded) and the progress lines."""

    def __init__(self, trainer: Trainer):
        self.trainer = trainer
        self.train_s = 0.0
        self._t0: float | None = time.perf_counter()  # None while the clock of the training time is stopped
        self._last_progress = 0.0

    def samples_per_s(self, session: TrainingSession, *, now: float | None = None) -> float:
        running = 0.0 if now is None or self._t0 is None else now - self._t0
        return session.step_count * session.global_batch_size / max(self.train_s + running, 1e-9)

    def after_step(self, session: TrainingSession, loss: torch.Tensor) -> bool:
        now = time.perf_counter()
        if now - self._last_progress > 0.5:
            self.trainer._progress({"samples": session.step_count * session.global_batch_size,
                                    "samples_per_s": self.samples_per_s(session, now=now),
                                    **self.trainer._cache_progress()})
            self._last_progress = now
        return False

    def before_eval(self, session: TrainingSession) -> None:
        self.stop()
        self.trainer._log_eval_start(session.epoch_num)

    def after_eval(self, session: TrainingSession, auc: float) -> bool:
        self.trainer._log_eval(session.epoch_num, auc, session.samples_count)
        self.trainer._progress({"samples": session.step_count * session.global_batch_size, "auc": auc,
                                "epoch_num": session.epoch_num, "samples_per_s": self.samples_per_s(session)})
        self._t0 = time.perf_counter()
        return False

    def epoch_boundary(self, session: TrainingSession, finished_epoch: int) -> None:
        self.trainer._log_epoch_boundary(finished_epoch)

    def stop(self) -> None:
        """Stop the clock of the training time (evaluations are not training)."""
        if self._t0 is not None:
            self.train_s += time.perf_counter() - self._t0
            self._t0 = None


class Trainer:
    """Trains the reference model (DLRM or HSTU) once, logging the MLPerf events of the run."""

    def __init__(self, config: RunConfig, log: MLPerfLog | None = None, *,
                 progress: Callable[[dict], None] | None = None):
        self.config = config
        self.log = log if log is not None else MLPerfLog(Path(os.devnull), enabled=False)  # None: no log
        self.spec: BenchmarkSpec = config.benchmark
        self.hp = config.hyperparameters
        self._progress = progress or (lambda _event: None)
        self.rank = 0
        self.world_size = config.world_size
        self.codecs = config.comm
        self.precision: Precision = parse_precision(config.precision, what="the run config's precision")
        self.session: TrainingSession | None = None

    # ------------------------------------------------------------------ hooks
    def _log_init_start(self) -> None:
        c, hp = self.config, self.hp
        self.log.event(keys.CACHE_CLEAR, True)
        self.log.start(keys.INIT_START)
        self.log.event(keys.SUBMISSION_BENCHMARK, self.spec.name)
        self.log.event(keys.SUBMISSION_ORG, c.submitter)
        self.log.event(keys.SUBMISSION_DIVISION, c.division)
        self.log.event(keys.SUBMISSION_STATUS, c.status)
        self.log.event(keys.SUBMISSION_PLATFORM, c.platform)
        self.log.event(keys.SEED, c.seed, {"seed_source": c.seed_source})
        for key in sorted(hp):
            self.log.event(key, logged_value(key, hp[key]))
        self.log.event(keys.LOWEST_NUMERICAL_PRECISION_IN_LINEAR, mlperf_precision(Codec(self.precision.value)))
        self.log.event(keys.LOWEST_NUMERICAL_PRECISION_IN_COMM, self._comm_precision())
        self.log.event(EMBEDDING_PRECISION, embedding_precision(self.precision))
        self.log.event(keys.DATA_PARALLELISM, self.world_size)
        self.log.event(keys.TENSOR_PARALLELISM, 1)
        self.log.event(keys.PIPELINE_PARALLELISM, 1)
        self.log.event(keys.CONFIG_FILENAME, c.config_filename)
        self.log.event(keys.HARNESS_FINGERPRINT, c.fingerprint)
        self.log.event(keys.HARNESS_RULESET, self.spec.ruleset)
        self.log.event(keys.HARNESS_EMULATED, c.emulated)
        self.log.event(keys.HARNESS_PROFILE, c.profile.name or "unknown")
        for key, value in sorted(c.extra_log.items()):
            self.log.event(key, value)

    def _comm_precision(self) -> str:
        """The lowest precision that crosses the wire, as MLPerf names it: the codecs', and with
        several ranks the pooled embeddings', which cross in the tables' type (fp16 below bf16)."""
        if self.world_size == 1 or not self.precision.reduced:
            return self.codecs.lowest_precision()
        wire = (self.codecs.forward, self.codecs.backward, self.codecs.allreduce, Codec(self.precision.value))
        return mlperf_precision(min(wire, key=lambda c: (c.bytes_per_element, c is not Codec.FP16)))

    def _init_checks(self) -> None:
        """Checks of the machine that a run makes inside its init (none for one process)."""

    def _log_init_stop(self, session: TrainingSession) -> None:
        self.log.event(keys.HARNESS_DATASET, session.dataset.describe())
        self.log.event(keys.TRAIN_SAMPLES, session.dataset.train_samples)
        self.log.event(keys.EVAL_SAMPLES, session.dataset.eval_samples)
        if hasattr(session.dataset, "max_sequence_length"):  # users' event streams
            self.log.event(keys.MAX_SEQUENCE_LENGTH, int(session.dataset.max_sequence_length))
        if self.spec.eval_in_samples:
            self.log.event(keys.EVAL_EVERY_DATA_PCT, self.spec.eval_every_data_fraction)
        self.log.end(keys.INIT_STOP)

    def _log_run_start(self) -> None:
        self.log.start(keys.RUN_START)
        self.log.start(keys.EPOCH_START, metadata={keys.EPOCH_NUM: 0})

    def _log_epoch_boundary(self, finished_epoch: int) -> None:
        self.log.end(keys.EPOCH_STOP, metadata={keys.EPOCH_NUM: finished_epoch + 1})
        self.log.start(keys.EPOCH_START, metadata={keys.EPOCH_NUM: finished_epoch + 1})

    def _log_eval_start(self, epoch_num: float) -> None:
        self.log.start(keys.EVAL_START, metadata={keys.EPOCH_NUM: epoch_num})

    def _log_eval(self, epoch_num: float, auc: float, samples_count: int) -> None:
        progress = {keys.SAMPLES_COUNT: samples_count} if self.spec.eval_in_samples else {}
        self.log.event(keys.EVAL_ACCURACY, auc, {keys.EPOCH_NUM: epoch_num, **progress})
        self.log.end(keys.EVAL_STOP, metadata={keys.EPOCH_NUM: epoch_num})

    def _log_run_stop(self, result: RunResult, epoch_num: float) -> None:
        self.log.end(keys.RUN_STOP, metadata={keys.STATUS: result.status, keys.EPOCH_NUM: epoch_num, keys.REASON: result.reason})
        self.log.end(keys.EPOCH_STOP, metadata={keys.EPOCH_NUM: epoch_num})
        self.log.event(keys.TRACKED_STATS, {keys.THROUGHPUT: result.train_samples_per_s}, {keys.STEP: epoch_num})
        session = self.session
        if session is not None and result.reason_is_final():  # the sharded reports are collectives
            report = session.cache_report()
            if report is not None:
                self.log.event(keys.HARNESS_EMBEDDING_CACHE, report)
            self.log.event(keys.HARNESS_MEMORY, session.memory_report())
            phases = session.step_phases_report()
            if phases is not None:
                self.log.event(keys.HARNESS_STEP_PHASES, phases)
            trace = session.trace_report()
            if trace is not None and session.rank == 0:
                path = Path(self.config.trace_path)  # type: ignore[arg-type]
                replace_atomic(path, lambda tmp: tmp.write_text(json.dumps(trace)), doing="writing the trace")
                self.log.event(keys.HARNESS_TRACE, {"file": str(path), "ranks": trace["otherData"]["harness"]["ranks"],
                                                    "steps": trace["otherData"]["harness"]["steps"]})

    def _cache_progress(self) -> dict[str, float]:
        rate = self.session.cache_hit_rate() if self.session is not None else None
        return {} if rate is None else {"cache_hit_rate": rate}

    # ------------------------------------------------------------------ the run
    def open_session(self) -> TrainingSession:
        """This rank's session (the distributed trainer opens a distributed one)."""
        return TrainingSession(self.config)

    def run(self) -> RunResult:
        if self.config.threads:
            torch.set_num_threads(self.config.threads)
        self._log_init_start()
        self._init_checks()
        self.session = session = self.open_session()  # the model; the data opened, no sample made
        self._log_init_stop(session)

        self._log_run_start()
        hooks = _RunHooks(self)
        result = RunResult(keys.ABORTED, "epoch limit reached without reaching the target", [], 0.0)
        try:
            outcome = session.train(hooks)
            result.status, result.reason = outcome.status, outcome.reason
            result.eval_accuracies = outcome.eval_accuracies
        except KeyboardInterrupt as err:
            result.reason = interrupt_reason(err)
            raise
        except Exception as err:
            try:  # a signal behind the failure (another node's ranks stopped first) is what stopped the run
                run_pending_signals(grace_s=_PEER_SIGNAL_GRACE_S if self.world_size > 1 else 0.0)
            except KeyboardInterrupt as stop:
                result.reason = interrupt_reason(stop)
                raise stop from err
            result.reason = f"error: {type(err).__name__}: {err}"
            raise
        finally:
            hooks.stop()
            result.train_samples_per_s = session.step_count * session.global_batch_size / max(hooks.train_s, 1e-9)
            self._log_run_stop(result, session.epoch_num)
            session.close()  # after run_stop: the run's time does not include flushing the tables
        return result


# how long a failed rank of a multi-rank run waits for a stop signal that may be on its way before it
# reports the failure (a second, at most, added to a genuine error's report)
_PEER_SIGNAL_GRACE_S = 1.0


def embedding_precision(precision: Precision) -> dict[str, str | bool]:
    """The value of the run's :data:`EMBEDDING_PRECISION` record: the tables' storage type, their
    optimizer state's (always fp32), how updates are rounded into the tables, and whether the loss
    is scaled."""
    return {"tables": precision.value, "optimizer_state": Precision.FP32.value,
            "rounding": "stochastic" if precision.reduced else "none", "loss_scaling": precision.loss_scaling}
