"""Where a training step's time goes, measured by the run itself (``harness_step_phases``).

Each step is cut into phases by the code that does the work: the wait for the next batch (its
ids' input distribution included), the embedding lookups forward, the dense forward, the dense
backward, the embedding backward (the fused updates: the single-process tables' in their
backward pass, a sharded run's when its gradients have arrived), the optimizer (the dense
optimizer's step, clipping, the schedule) and each kind of collective (the time a rank *waits*
for an input, forward or backward all-to-all, a dense or replica all-reduce, on its own thread:
launched but not waited-for time is not theirs).
Phases nest: a collective waited for inside the embedding lookup counts as the collective's,
not the lookup's (each moment of the step is charged to the innermost phase open on the
training thread). The phases are measured independently of the step's own time (first moment
of its batch wait to the end of its last phase), so that their sum checks their coverage
(``bench/step_phases.py`` prints both, and the cost of measuring).

What other threads do (the prefetcher, a dense all-reduce overlapped on the comm's thread, the
SSD tier's read-ahead) is not charged: it is not on the step's path unless the training thread
waits for it, and then the wait is charged to the phase that waits (with ``overlap``, DDP waits
for the dense all-reduce at the end of the backward pass, inside ``dense_backward``). On a GPU a
phase's end is a device synchronisation (``sync``): without it a phase would end when its
kernels are launched, not done; this is the only synchronisation measuring adds, and
``--no-step-phases`` turns the measuring (and it) off.

The clock of the process is :data:`CLOCK`, set by the session that trains; modules that do the
work (the comm, the embedding collections) mark their phases with ``with phases.CLOCK.phase(
name):``. A disabled clock costs one attribute test per phase.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from harness.reference.planner.traffic import KINDS

DATA_WAIT, EMBEDDING_FORWARD, DENSE_FORWARD, DENSE_BACKWARD, EMBEDDING_BACKWARD, OPTIMIZER = (
    "data_wait", "embedding_forward", "dense_forward", "dense_backward", "embedding_backward", "optimizer")
# each collective's waited-for time is a phase of its own, named by its kind (the comm's)
COLLECTIVES = KINDS  # input_all_to_all, forward_all_to_all, backward_all_to_all, dense_all_reduce, replica_all_reduce
PHASES = (DATA_WAIT, EMBEDDING_FORWARD, DENSE_FORWARD, DENSE_BACKWARD, EMBEDDING_BACKWARD, OPTIMIZER, *COLLECTIVES)
WARMUP_STEPS = 5  # left out of the statistics: first calls allocate, warm caches, build kernels
SERIES_POINTS = 200  # the step-time series over the run, down-sampled to at most this many points


class _Phase:
    __slots__ = ("clock", "name")

    def __init__(self, clock: PhaseClock, name: str):
        self.clock, self.name = clock, name

    def __enter__(self) -> None:
        self.clock.enter(self.name)

    def __exit__(self, *exc: Any) -> None:
        self.clock.exit()


_NOTHING = contextlib.nullcontext()  # what a disabled clock's phase is (reusable)


class PhaseClock:
    """The phases of each step of the training thread (the thread that made the clock).

    ``enabled``: False makes every call a no-op. ``sync``: called at every phase boundary (a
    device synchronisation on a GPU; None on the CPU)."""

    def __init__(self, enabled: bool = True, sync: Callable[[], None] | None = None):
        self.enabled = enabled
        self._sync = sync
        self._owner = threading.get_ident()
        self._index = {name: i for i, name in enumerate(PHASES)}
        self._open: list[int] = []  # the phases open, innermost last
        self._mark = 0.0  # when the innermost open phase last started being charged
        self._current = np.zeros(len(PHASES))
        self._step_start: float | None = None
        self.steps: list[tuple[int, float, np.ndarray]] = []  # (step, its seconds, seconds per phase)
        self.evals: list[float] = []
        self.entered = 0  # phases entered, in all (what measuring costs is about this many clock reads)

    # -- phases
    def phase(self, name: str) -> Any:
        """A context in which the training thread's time is charged to ``name``."""
        if not self.enabled or threading.get_ident() != self._owner:
            return _NOTHING
        return _Phase(self, name)

    def enter(self, name: str) -> None:
        self.entered += 1
        now = self._now()
        if self._open:
            self._current[self._open[-1]] += now - self._mark
        self._open.append(self._index[name])
        self._mark = now

    def exit(self) -> None:
        now = self._now()
        self._current[self._open.pop()] += now - self._mark
        self._mark = now

    def _now(self) -> float:
        if self._sync is not None:
            self._sync()
        return time.perf_counter()

    # -- steps
    def begin_step(self) -> None:
        if self.enabled:
            self._current[:] = 0.0
            self._step_start = self._now()

    def end_step(self, step: int) -> None:
        """The step ``step`` (counted from 1) has ended."""
        if self.enabled and self._step_start is not None:
            self.steps.append((step, self._now() - self._step_start, self._current.copy()))
            self._step_start = None

    def cancel_step(self) -> None:
        """The step begun has not happened (its batch wait found the end of the data)."""
        self._step_start = None

    def add_eval(self, seconds: float) -> None:
        if self.enabled:
            self.evals.append(seconds)

    # -- the record
    def summary(self, rank: int = 0) -> dict[str, Any] | None:
        """This rank's statistics after the warm-up steps: the step time's and each phase's mean
        and P50/P90/P99, and the step time over the run (``series``); None when disabled or no
        step was measured after the warm-up."""
        kept = self.steps[WARMUP_STEPS:]
        if not self.enabled or not kept:
            return None
        step_s = np.array([s for _, s, _ in kept])
        phase_s = np.stack([p for _, _, p in kept])
        groups = np.array_split(np.arange(len(kept)), min(SERIES_POINTS, len(kept)))
        return {
            "rank": rank, "steps": len(kept),
            "step_s": _stats(step_s),
            "phase_s": {name: _stats(phase_s[:, i]) for i, name in enumerate(PHASES)},
            "phase_sum_s": round(float(phase_s.sum(axis=1).mean()), 9),
            "series": {"step": [int(kept[g[0]][0]) for g in groups],
                       "step_s": [round(float(step_s[g].mean()), 9) for g in groups]},
        }


def _stats(values: np.ndarray) -> dict[str, float]:
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"mean": round(float(values.mean()), 9), "p50": round(float(p50), 9), "p90": round(float(p90), 9),
            "p99": round(float(p99), 9)}


def record(ranks: list[dict[str, Any] | None], evals: list[float]) -> dict[str, Any] | None:
    """The ``harness_step_phases`` record of a run from every rank's :meth:`PhaseClock.summary`
    (rank 0's evaluations): None when no rank measured."""
    measured = [r for r in ranks if r is not None]
    if not measured:
        return None
    return {"steps": max(r["steps"] for r in measured) + WARMUP_STEPS, "warmup_steps": WARMUP_STEPS,
            "phases": list(PHASES), "ranks": measured,
            "eval_s": {"count": len(evals), "mean": round(float(np.mean(evals)), 6) if evals else 0.0,
                       "total": round(float(np.sum(evals)), 6)}}


#: the clock of the process's training thread (a disabled one until a session makes its own)
CLOCK = PhaseClock(enabled=False)
