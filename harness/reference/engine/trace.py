"""``harness run --trace``: a PyTorch profiler trace of a few training steps after the warm-up, on
every rank, merged into one timeline (Chrome trace JSON: ``chrome://tracing``, Perfetto).

Each rank profiles its steps ``WARMUP_STEPS + 1`` to ``WARMUP_STEPS + TRACE_STEPS`` (the same
steps on every rank: the collectives line up), each step a ``harness step N`` range, and keeps
the profiler's events in memory. At the end of the run, the ranks' events go to rank 0 (one
gather: no shared file system needed between nodes), which writes them as one file: each rank
a process of the timeline (``pid`` = its rank, named ``rank R``), its threads as the profiler
named them. The profiled steps are slower than the others (the profiler's cost); the run's
``harness_step_phases`` leaves nothing out for it, so read those steps' times in the trace, not
in the statistics.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any

import torch

from harness.reference.timing.phases import WARMUP_STEPS

TRACE_STEPS = 3


class StepTracer:
    """The profiler over this rank's steps ``first`` to ``first + steps - 1`` (counted from 1)."""

    def __init__(self, device_type: str, first: int = WARMUP_STEPS + 1, steps: int = TRACE_STEPS):
        self.first, self.last = first, first + steps - 1
        self._device_type = device_type
        self._profiler: Any = None
        self.events: list[dict[str, Any]] | None = None  # once the traced steps are done
        self.steps: tuple[int, int] | None = None

    def step(self, step: int) -> Any:
        """A context around step ``step``: the profiler starts before the first traced step, and
        each traced step is a named range."""
        if self.events is None and self._profiler is None and self.first <= step <= self.last:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self._device_type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._profiler = torch.profiler.profile(activities=activities)
            self._profiler.start()
            self._from = step
        if self._profiler is None:
            return contextlib.nullcontext()
        return torch.profiler.record_function(f"harness step {step}")

    def after_step(self, step: int) -> None:
        if self._profiler is not None and step >= self.last:
            self.finish(step)

    def finish(self, step: int | None = None) -> None:
        """Stop the profiler (at the end of the traced steps, or of a run that ended first) and
        keep its events."""
        if self._profiler is None:
            return
        profiler, self._profiler = self._profiler, None
        profiler.stop()
        fd, path = tempfile.mkstemp(prefix="harness-trace-", suffix=".json")
        os.close(fd)
        try:
            profiler.export_chrome_trace(path)
            with open(path, encoding="utf-8") as f:
                self.events = list(json.load(f).get("traceEvents", []))
        finally:
            os.unlink(path)
        self.steps = (self._from, step if step is not None else self.last)




def merge(per_rank: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """One Chrome trace of every rank's events (``per_rank[r]``: ``{"events", "steps"}`` or None):
    each rank a process named ``rank R``; None when no rank traced."""
    events: list[dict[str, Any]] = []
    ranks = []
    for rank, trace in enumerate(per_rank):
        if not trace:
            continue
        ranks.append(rank)
        events.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        for event in trace["events"]:
            if event.get("ph") == "M" and event.get("name") in ("process_name", "process_sort_index", "process_labels"):
                continue  # the profiler's own names of its process: ours say the rank
            events.append({**event, "pid": rank})
    if not ranks:
        return None
    first = next(t for t in per_rank if t)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"harness": {"ranks": ranks, "steps": list(first["steps"])}}}
