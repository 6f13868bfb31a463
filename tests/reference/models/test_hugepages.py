"""The tables ask Linux for transparent huge pages (harness.reference.models.hugepages)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.reference.models.hugepages import advise_huge_pages, empty_table

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not THP.exists() or "[never]" in THP.read_text(),
    reason="needs Linux with transparent huge pages enabled",
)

# in a fresh process, so that no other test's mappings sit next to these
PROBE = r"""
import json
from pathlib import Path
import torch
from harness.reference.models.embeddings import FusedEmbeddingCollection, SparseOptimizerConfig

def eligible(address):
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "THPeligible:":
            return line.split()[1] == "1"
    raise AssertionError(hex(address))

def middle(t):
    return t.untyped_storage().data_ptr() + t.untyped_storage().nbytes() // 2

plain = torch.empty(8 << 20, dtype=torch.uint8)
emb = FusedEmbeddingCollection([40_000, 30_000], dim=32, pooling=[1, 1], optimizer=SparseOptimizerConfig(),
                               dtype=torch.bfloat16)
print(json.dumps({"plain": eligible(middle(plain)), "weight": eligible(middle(emb.weight)),
                  "state": eligible(middle(emb.optimizer_state))}))
"""


def test_a_table_and_its_state_are_eligible_for_huge_pages_and_plain_tensors_are_not():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["weight"] and seen["state"]
    if "[madvise]" in THP.read_text():  # under "always" every large mapping is eligible anyway
        assert not seen["plain"]


def test_small_and_non_cpu_tensors_are_left_alone():
    assert not advise_huge_pages(torch.empty(1 << 20, dtype=torch.uint8))
    assert not advise_huge_pages(torch.empty(8 << 20, dtype=torch.uint8, device="meta"))
    t = empty_table((1 << 20, 4))
    assert advise_huge_pages(t) and t.shape == (1 << 20, 4)
