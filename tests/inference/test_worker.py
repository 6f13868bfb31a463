"""The SUT's model calls: whole users in every call, Offline's of about the batch's rows, Server's
of the queries that arrived together."""

from __future__ import annotations

import numpy as np

from harness.inference.qsl import SampleLibrary


def test_the_sut_answers_whole_users_in_its_calls():
    from harness.inference.worker import OFFLINE_LOOKUP_CALLS, SERVER_LOOKUP_ROWS, FastSut
    from harness.reference.data.datasets import SyntheticDataset
    from harness.rules.specs import load_benchmark

    library = SampleLibrary(SyntheticDataset(load_benchmark("dlrm_synthetic").dataset).generator)
    users = np.random.default_rng(1).permutation(library.count)
    rows = library.rows_of(users)
    assert rows.size == library.sizes[users].sum() and np.array_equal(
        rows[: library.sizes[users[0]]], np.arange(library.offsets[users[0]], library.offsets[users[0] + 1]))
    offline = FastSut(None, None, library, 2048).calls_of(users)
    assert sum(c.stop - c.start for c in offline) == users.size and offline[0].start == 0
    for c in offline:
        n = library.sizes[users[c]]
        assert n[:-1].sum() < 2048 <= n.sum() + 2048 and n.sum() < 2048 + 700  # about 2048 rows, whole users
    # Server: the queries that arrived together share lookup calls of about SERVER_LOOKUP_ROWS rows
    server = FastSut(None, None, library, 0).calls_of(users)
    assert sum(c.stop - c.start for c in server) == users.size and 1 < len(server) < users.size // 20
    for c in server[:-1]:
        n = library.sizes[users[c]]
        assert n[:-1].sum() < SERVER_LOOKUP_ROWS <= n.sum() + SERVER_LOOKUP_ROWS
    assert FastSut(None, None, library, 0).calls_of(users[:1]) == [slice(0, 1)]
    # the lookup calls: Offline, an SSD variant's span OFFLINE_LOOKUP_CALLS of those calls (the
    # in-memory one's one each), their dense calls the same users as calls_of's; Server, a user each
    for tables, group in ((None, 1), (object(), OFFLINE_LOOKUP_CALLS)):
        sut = FastSut(None, None, library, 2048, tables)  # type: ignore[arg-type]
        lookups = sut.lookup_calls(users)
        assert len(lookups) == -(-len(offline) // group)
        dense = [slice(c.start + d.start, c.start + d.stop) for c, parts in lookups for d in parts]
        assert dense == offline and all(len(parts) == group for _, parts in lookups[:-1])
    assert all(parts == [slice(k, k + 1) for k in range(c.stop - c.start)]
               for c, parts in FastSut(None, None, library, 0).lookup_calls(users))
