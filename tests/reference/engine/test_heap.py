"""The training process's allocator policy (harness/reference/engine/heap.py): a large transient
tensor made again and again, as a step makes its tensors, reuses the same memory instead of fresh
pages that the kernel must fault in."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")

_PROBE = r"""
import json, resource
import torch
from harness.reference.engine import heap


def step():  # three 24 MB tensors live at once, written, then freed: a step's transient tensors
    held = [torch.ones(24 << 18) for _ in range(3)]
    del held


tuned = heap.keep_freed_heap()
for _ in range(5):  # warm-up: the pages faulted in once
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"tuned": tuned, "faults": faults}))
"""


def _probe() -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_tensors_of_a_step_reuse_their_memory_once_the_policy_is_set():
    """Five steps after the warm-up fault in (almost) no page. Setting only one of the two thresholds
    (each broke it once: the mmap threshold alone, the trim threshold alone) faulted in 15 tensors'
    pages, every time. glibc's own policy is not asserted: its raised thresholds reuse the heap on
    some runs and give it back on others, with the heap's layout."""
    result = _probe()
    assert result["tuned"] is True
    assert result["faults"] < (24 << 20) // 4096 // 10
