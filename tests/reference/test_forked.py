"""Workers forked from the preloaded fork server (harness.reference.forked)."""

from __future__ import annotations

import gc
import json

from harness.reference.forked import ForkedProcess


def _collector_state() -> int:
    """In the worker: how many objects the collector leaves alone, and whether it still collects
    what the worker makes."""
    a: list = []
    a.append(a)  # a cycle of the worker's own, unreachable once ``a`` is dropped
    del a
    print(json.dumps({"frozen": gc.get_freeze_count(), "collected": gc.collect()}), flush=True)
    return 0


def test_a_worker_starts_with_the_preloaded_modules_frozen_and_collects_its_own_garbage(tmp_path):
    """The server froze what it imported (torch's objects: a full collection in a training loop
    does not walk them), and a worker's own cycles are still collected."""
    worker = ForkedProcess(_collector_state, stderr_path=tmp_path / "err.txt")
    out = worker.stdout.read()
    assert worker.wait(timeout=120) == 0, (tmp_path / "err.txt").read_text()
    state = json.loads(out)
    assert state["frozen"] > 100_000, state  # torch alone makes several hundred thousand objects
    assert state["collected"] >= 1, state
