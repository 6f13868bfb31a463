"""Tiered memory: where rows live (harness.reference.tiered.store), the SSD tier's file and the blocks
its readers move."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.errors import HarnessError
from harness.reference.planner.types import RowReader
from harness.reference.tiered import MemoryRows, SsdRows

# tests of what the tier keeps move rows through the page cache (direct_io=False): what the tier
# computes, not the drive's speed


def test_the_ssd_tier_is_a_file_that_keeps_what_was_written(tmp_path):
    store = SsdRows(tmp_path / "t.bin", 100, 4, 4, create=True, direct_io=False)
    store.write(torch.tensor([3, 7]), torch.arange(16, dtype=torch.float32).view(2, 8))
    store.flush()
    again = SsdRows(tmp_path / "t.bin", 100, 4, 4, create=False, direct_io=False)
    assert again.read(torch.tensor([7, 3, 0])).tolist() == [list(range(8, 16)), list(range(8)), [0.0] * 8]
    assert (tmp_path / "t.bin").stat().st_size == 100 * 8 * 4
    with pytest.raises(HarnessError, match="not a table file of 50 rows"):
        SsdRows(tmp_path / "t.bin", 50, 4, 4, create=False, direct_io=False)


@pytest.mark.parametrize("reader", ["compiled", "python"])
def test_the_ssd_tier_moves_the_blocks_rows_lie_on_and_keeps_every_other_rows_bytes(tmp_path, reader):
    """Random reads and writes of 65-word rows (260 bytes: most straddle two 512-byte blocks, the
    last block is cut by the file's end) equal a store in memory bit for bit, the file itself holds
    the same rows packed, and what the drive moved is the blocks the rows lie on: never a page per
    row. Through the compiled io_uring reader and through its Python fallback."""
    from harness.reference.tiered import rowio

    rowio.compiled_reader.cache_clear()
    try:
        rows, width = 997, 65
        # the drive itself (O_DIRECT where it works), through the reader the test names
        store = SsdRows(tmp_path / "t.bin", rows, width - 1, 1, create=True,
                        reader=RowReader.THREADS if reader == "python" else RowReader.AUTO)
        memory = MemoryRows(rows, width - 1, 1)
        assert store.reader == rowio.COMPILED if reader == "compiled" else store.reader.startswith(rowio.FALLBACK)
        g = torch.Generator().manual_seed(0)
        first = torch.randn(rows, width, generator=g)
        for lo in range(0, rows, 300):  # filled a chunk at a time, as a shard is
            store.write_rows(lo, first[lo : lo + 300])
            memory.write_rows(lo, first[lo : lo + 300])
        moved = store.transfer_bytes
        for step in range(40):
            ids = torch.randperm(rows, generator=g)[: int(torch.randint(1, 200, (1,), generator=g))]
            if step % 2:
                values = torch.randn(ids.numel(), width, generator=g)
                store.write(ids, values)
                memory.write(ids, values)
            else:
                assert torch.equal(store.read(ids), memory.read(ids)), step
        store.flush()
        assert torch.equal(store.read(torch.arange(rows)), memory.data)
        on_disk = torch.from_numpy(np.fromfile(tmp_path / "t.bin", dtype=np.float32)).view(rows, width)
        assert torch.equal(on_disk, memory.data) and (tmp_path / "t.bin").stat().st_size == rows * width * 4
        if store.align > 4:  # O_DIRECT here: one read of 100 rows moves at most two blocks a row
            before = store.transfer_bytes
            store.read(torch.arange(0, rows, 9)[:100])
            assert store.transfer_bytes - before <= 100 * 2 * store.align < 100 * 4096
            assert store.mode.startswith("direct")
        assert moved > 0
    finally:
        rowio.compiled_reader.cache_clear()


def test_a_row_written_twice_in_one_call_keeps_the_other_row_of_its_block(tmp_path):
    """Two 256-byte rows to a 512-byte block: a write that names one of them twice does not
    cover the block, so the other row's bytes are read first and kept."""
    store = SsdRows(tmp_path / "t.bin", 8, 63, 1, create=True)  # O_DIRECT where the drive takes it
    first = torch.arange(8 * 64, dtype=torch.float32).view(8, 64)
    store.write_rows(0, first)
    store.write(torch.tensor([2, 2]), torch.full((2, 64), -1.0))
    got = store.read(torch.arange(8))
    assert torch.equal(got[2], torch.full((64,), -1.0)) and torch.equal(got[3], first[3])
    assert torch.equal(got[[0, 1, 4, 5, 6, 7]], first[[0, 1, 4, 5, 6, 7]])
