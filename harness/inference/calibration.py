"""How fast a variant answers, measured before its LoadGen runs: the time of a model call on
an Offline batch (:func:`calibrate`) and on one user's query (:func:`calibrate_user_query`),
from which the default targets are sized, and the largest Offline target whose one query
fits the memory available (:func:`offline_qps_cap`)."""

from __future__ import annotations

import itertools
import time

import numpy as np
import torch

from harness.inference import mlperf
from harness.inference.qsl import SampleLibrary
from harness.reference.models.dlrm import DLRM

# Offline: LoadGen issues one query of max(min_query_count, 1.1 x target QPS x min duration)
# samples; with LoadGen 6.0.17 and the SUT's lists of ids it holds about this many bytes per
# sample, whatever a sample holds (measured: docs/performance.md, "Figures behind the code's choices")
OFFLINE_BYTES_PER_SAMPLE = 190
# The default Offline target: this many times the calibrated rate (LoadGen issues 1.1 x target
# x min duration samples; a run is valid if it lasts at least the min duration, i.e. if LoadGen's
# rate stays under 1.1 x this x the calibrated rate)
OFFLINE_HEADROOM = 1.25
OFFLINE_MEMORY_SHARE = 0.4  # of the memory available when the run starts
# Calibrate every variant, then every variant again, keeping each one's faster round: the
# first reads of a file just written (and fsynced) ran slower (measured: docs/performance.md,
# "Figures behind the code's choices"), and a shared machine's other jobs come and go
CALIBRATION_ROUNDS = 2


@torch.no_grad()
def calibrate(model: DLRM, library: SampleLibrary, batch: int, *, lookup_calls: int = 1, min_s: float = 0.5,
              max_calls: int = 400, seed: int = 0) -> float:
    """Seconds per model call on ``batch`` rows (sigmoid included) as the SUT's pipeline spends
    them (its slower stage: the embedding lookups, or the dense part), the fastest of at least 5
    calls of users drawn at random as LoadGen's Offline query draws them (with repeats; a fixed
    seed) and cut into calls of about ``batch`` rows as the SUT cuts them, each call's time
    scaled to ``batch`` rows; with ``lookup_calls`` k, the lookups of k consecutive calls in one
    lookup call, a k-th of its time charged to each (an SSD variant's Offline SUT: a row several
    of their users look up is read once). The Offline target is sized from it, and the asymmetry
    decides the statistic: a target under the run's rate ends the run before the minimum duration
    (INVALID), one over it only makes the run longer; on a shared machine the median of a
    half-second sample can be far under the rate of a 600 s run."""
    library.load_all()
    rng = np.random.default_rng(seed)
    draw = int(2 * lookup_calls * batch / library.sizes.min()) + 2  # users enough for k calls
    times: list[float] = []
    t_end = time.perf_counter() + min_s
    while (time.perf_counter() < t_end or len(times) < 5) and len(times) < max_calls:
        users = rng.integers(0, library.count, size=draw)
        sizes = library.sizes[users]
        call = (np.cumsum(sizes) - sizes) // batch  # by the row each user starts at, as the SUT cuts
        users, call = users[call < lookup_calls], call[call < lookup_calls]
        rows = torch.from_numpy(library.rows_of(users))
        t0 = time.perf_counter()
        pooled = model.sparse_arch(library.sparse.index_select(0, rows))
        lookup_s = (time.perf_counter() - t0) / lookup_calls
        bounds = np.concatenate([[0], np.cumsum(library.sizes[users])[np.flatnonzero(np.diff(call))],
                                 [rows.numel()]]).tolist()
        for lo, hi in itertools.pairwise(bounds):
            t1 = time.perf_counter()
            dense = model.dense_arch(library.dense.index_select(0, rows[lo:hi]))
            torch.sigmoid(model.over_arch(model.interaction(dense, pooled[lo:hi]))).numpy()
            # the SUT's two stages overlap (lookups of the next call during this one's dense
            # part): a call's share of the run is its slower stage
            times.append(max(lookup_s, time.perf_counter() - t1) * batch / (hi - lo))
    return float(np.min(times))


@torch.no_grad()
def calibrate_user_query(model: DLRM, library: SampleLibrary, *, max_s: float = 10.0) -> tuple[float, float]:
    """Seconds per Server query: one model call on one user's rows, the mean and the 99th
    percentile over every user once, in a random order (as LoadGen draws them; a fixed seed),
    or as many as ``max_s`` allows (users differ in size, so the tail needs all of them)."""
    library.load_all()
    times: list[float] = []
    t_end = time.perf_counter() + max_s
    for user in np.random.default_rng(0).permutation(library.count):
        if len(times) >= 3 and time.perf_counter() > t_end:
            break
        idx = torch.from_numpy(library.rows_of(np.array([user])))
        t0 = time.perf_counter()
        torch.sigmoid(model(library.dense.index_select(0, idx), library.sparse.index_select(0, idx))).numpy()
        times.append(time.perf_counter() - t0)
    return float(np.mean(times)), float(np.percentile(times, 99))


@torch.no_grad()
def warm_cache(model: DLRM, library: SampleLibrary, *, max_s: float = 1.0, max_calls: int = 50) -> None:
    """Model calls on one user each (they go through the cache, admitting rows), from the
    first users of the eval split, for up to ``max_s`` seconds."""
    library.load_all()
    t_end = time.perf_counter() + max_s
    for user in range(min(max_calls, library.count)):
        if time.perf_counter() > t_end:
            break
        idx = torch.from_numpy(library.rows_of(np.array([user])))
        model(library.dense.index_select(0, idx), library.sparse.index_select(0, idx))


def memory_available_bytes() -> int | None:
    return mlperf.proc_bytes("/proc/meminfo", "MemAvailable")


def offline_qps_cap(min_duration_s: float, min_query_count: float) -> float | None:
    """The largest Offline target QPS whose one query fits :data:`OFFLINE_MEMORY_SHARE` of the
    memory available now (None: unknown)."""
    available = memory_available_bytes()
    if available is None:
        return None
    samples = OFFLINE_MEMORY_SHARE * available / OFFLINE_BYTES_PER_SAMPLE
    if samples <= min_query_count:
        return None
    return samples / (1.1 * min_duration_s)
