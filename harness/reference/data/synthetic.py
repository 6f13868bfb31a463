"""Synthetic Criteo-like data with a planted teacher, so the best achievable AUC is known.

Each sample has 13 dense features and, like Criteo, 26 categorical features (or as many as the
benchmark has tables: Neo's largest models have 1,000):

* dense feature ``k`` is ``log(1 + c)`` of a count ``c = floor(E * scale_k)`` with ``E``
  exponential, the transform MLPerf applies to Criteo's integer fields;
* categorical feature ``f`` draws ``pooling[f]`` ids from table ``f``'s ``rows[f]`` rows
  with a power-law (Zipf) frequency over ranks, ``P(rank r) ~ (r + 1) ** -s``; ranks are
  scattered over rows by a fixed affine bijection, so the hot rows are not simply 0, 1, 2;
* the label is ``Bernoulli(sigmoid(t(x)))`` for a planted teacher

      t(x) = bias + sum_k a_k * (dense_k - log1p(scale_k))
                  + sum_f mean_j w_f[id_fj]
                  + sum_{f < g} <u_f, u_g>,   u_f = mean_j V_f[id_fj] (a K-vector)

  whose per-row scalars ``w_f`` and vectors ``V_f`` are themselves counter-based normals.

``sigmoid(t(x))`` is the true click probability, so ranking the eval split by it gives the
best AUC any model can reach in expectation (the Bayes-optimal ranking); it is reported as
:meth:`SyntheticCriteo.best_auc`. The student DLRM with a dot or DCN interaction can express
this family, so the gap between its AUC and the teacher's is what training leaves on the table.

Every value of sample ``i`` is a pure function of ``(dataset seed, i)`` through
:mod:`harness.reference.data.counter_rng`: the same whatever the world size, batch size or rank
that produces it. Train samples are indices ``0 .. train_samples - 1`` and eval samples
``train_samples .. train_samples + eval_samples - 1``, so the splits are disjoint.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import HarnessError
from harness.reference.data import counter_rng as rng
from harness.reference.data.batches import NUM_DENSE, NUM_SPARSE, Batch
from harness.rules.auc import roc_auc

# Scales of the 13 count features, in the spirit of Criteo's integer columns (a few are
# small counts, a few are heavy-tailed); they shape the data, not the difficulty.
DENSE_SCALES: tuple[float, ...] = (3.0, 100.0, 20.0, 7.0, 20000.0, 100.0, 10.0, 10.0, 100.0, 1.0, 3.0, 1.0, 10.0)

# Stream numbers: one per kind of random quantity, so no two quantities share a counter.
_S_DENSE = 1 << 20
_S_SPARSE = 2 << 20
_S_LABEL = 3 << 20
_S_ROW_W = 4 << 20
_S_ROW_V = 5 << 20
_S_DENSE_W = 6 << 20
_S_PERM = 7 << 20

# Teacher tables up to this many values per table are materialised (faster); larger ones
# are computed on the fly. Both give the same numbers, since both are the same pure function.
_MATERIALISE_LIMIT = 1 << 24


@dataclass(frozen=True)
class TeacherSpec:
    """The planted model's scales. ``row_effect_std`` etc. are standard deviations."""

    latent_dim: int = 4
    row_effect_std: float = 0.2
    interaction_std: float = 0.3
    dense_weight_std: float = 0.2
    bias: float = -1.2


@dataclass(frozen=True, init=False)
class SyntheticSpec:
    """Everything the synthetic data set is a function of."""

    seed: int
    train_samples: int
    eval_samples: int
    table_rows: tuple[int, ...]
    pooling: tuple[int, ...]  # ids per sample of each feature; given as None: one of every feature
    zipf_exponent: float = 1.05
    teacher: TeacherSpec = TeacherSpec()

    def __init__(self, seed: int, train_samples: int, eval_samples: int, table_rows: tuple[int, ...],
                 pooling: tuple[int, ...] | None = None, zipf_exponent: float = 1.05,
                 teacher: TeacherSpec = TeacherSpec()) -> None:
        # the dataclass's __init__, written out so that ``pooling`` may be given as None
        values = {"seed": seed, "train_samples": train_samples, "eval_samples": eval_samples,
                  "table_rows": table_rows, "pooling": (1,) * len(table_rows) if pooling is None else pooling,
                  "zipf_exponent": zipf_exponent, "teacher": teacher}
        for name, value in values.items():
            object.__setattr__(self, name, value)
        self._check()

    def _check(self) -> None:
        if not self.table_rows or len(self.pooling) != len(self.table_rows):
            raise HarnessError(
                f"synthetic data needs a table size and a pooling factor per categorical feature (Criteo has "
                f"{NUM_SPARSE}), got {len(self.table_rows)} and {len(self.pooling)}"
            )
        if min(self.table_rows) < 1 or min(self.pooling) < 1:
            raise HarnessError("synthetic table rows and pooling factors must be >= 1")
        if self.train_samples < 1 or self.eval_samples < 1:
            raise HarnessError("synthetic train and eval sample counts must be >= 1")
        if self.zipf_exponent <= 0:
            raise HarnessError("zipf_exponent must be > 0")


def _coprime_multiplier(k: np.uint64, n: int) -> int:
    """A multiplier in [1, n) coprime with n, derived from key ``k`` (1 when n <= 2)."""
    if n <= 2:
        return 1
    a = int(rng.bits(k, np.array([0], dtype=np.uint64))[0] % np.uint64(n - 1)) + 1
    while math.gcd(a, n) != 1:
        a = a % (n - 1) + 1
    return a


class SyntheticCriteo:
    """The generator: batches by global sample index, the teacher, the best AUC."""

    def __init__(self, spec: SyntheticSpec):
        self.spec = spec
        self._feature_cols = np.concatenate([[0], np.cumsum(spec.pooling)]).astype(np.int64)
        self._perm_a = [
            _coprime_multiplier(rng.key(spec.seed, _S_PERM + f), n) for f, n in enumerate(spec.table_rows)
        ]
        self._perm_b = [
            int(rng.bits(rng.key(spec.seed, _S_PERM + f), np.array([1], dtype=np.uint64))[0] % np.uint64(n))
            for f, n in enumerate(spec.table_rows)
        ]
        k = rng.key(spec.seed, _S_DENSE_W)
        self._dense_w = spec.teacher.dense_weight_std * rng.normal(k, np.arange(NUM_DENSE))
        self._dense_center = np.log1p(np.asarray(DENSE_SCALES))
        self._tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # Per-column (one column per id of a sample) constants, so that all features' ids
        # are drawn in one vectorised pass. Scalars are computed as Python floats exactly
        # as a per-feature loop would, so the values do not depend on the vectorisation.
        p = spec.pooling
        col_f = np.repeat(np.arange(len(p)), p)
        self._col_feature = col_f
        self._col_hot = np.concatenate([np.arange(q) for q in p]).astype(np.uint64)
        self._col_pool = np.asarray(p, dtype=np.uint64)[col_f]
        self._col_key = np.array([rng.key(spec.seed, _S_SPARSE + f) for f in range(len(p))], dtype=np.uint64)[col_f]
        rows = np.asarray(spec.table_rows, dtype=np.int64)
        self._col_rows = rows[col_f]
        s = spec.zipf_exponent
        if abs(s - 1.0) < 1e-12:
            self._col_base = np.array([float(n + 1) for n in spec.table_rows])[col_f]
        else:
            self._col_top = np.array([float(n + 1) ** (1.0 - s) for n in spec.table_rows])[col_f]
        self._col_a = np.asarray(self._perm_a, dtype=np.int64)[col_f]
        self._col_b = np.asarray(self._perm_b, dtype=np.int64)[col_f]
        self._dense_keys = [rng.key(spec.seed, _S_DENSE + k) for k in range(NUM_DENSE)]
        self._label_key = rng.key(spec.seed, _S_LABEL)

    @property
    def pooling(self) -> tuple[int, ...]:
        return self.spec.pooling

    # ----------------------------------------------------------------- features
    def dense_counts(self, idx: np.ndarray) -> np.ndarray:
        """``N x 13`` int64 counts of samples ``idx``: Criteo's integer fields, before ``log(1 + x)``."""
        idx = np.asarray(idx, dtype=np.int64)
        out = np.empty((idx.shape[0], NUM_DENSE), dtype=np.int64)
        for k_i, scale in enumerate(DENSE_SCALES):
            u = rng.uniform(self._dense_keys[k_i], idx)
            out[:, k_i] = np.floor(-np.log1p(-u) * scale)
        return out

    def _dense(self, idx: np.ndarray) -> np.ndarray:
        """``N x 13`` float32 dense features of samples ``idx``: ``log(1 + count)``, computed in
        float64 (the counts are exact in it) and rounded once, as a Criteo TSV reader does."""
        return np.log1p(self.dense_counts(idx).astype(np.float64)).astype(np.float32)

    def _all_ids(self, idx: np.ndarray) -> np.ndarray:
        """``N x L`` int64 ids of all features side by side (feature ``f`` has ``pooling[f]`` columns)."""
        s = self.spec.zipf_exponent
        counters = idx[:, None].astype(np.uint64) * self._col_pool + self._col_hot
        u = rng.uniform(self._col_key, counters)
        if abs(s - 1.0) < 1e-12:
            x = np.power(self._col_base, u)
        else:
            x = np.power(1.0 + u * (self._col_top - 1.0), 1.0 / (1.0 - s))
        rank = np.clip(np.floor(x).astype(np.int64) - 1, 0, self._col_rows - 1)
        return (rank * self._col_a + self._col_b) % self._col_rows

    def _split(self, ids: np.ndarray) -> list[np.ndarray]:
        return np.split(ids, np.cumsum(self.spec.pooling)[:-1], axis=1)

    # ------------------------------------------------------------------ teacher
    def _row_values(self, f: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Teacher scalar ``w_f[rows]`` and vectors ``V_f[rows]`` (``... x K``)."""
        t, n = self.spec.teacher, self.spec.table_rows[f]
        if n * (1 + t.latent_dim) <= _MATERIALISE_LIMIT:
            if f not in self._tables:
                self._tables[f] = self._compute_rows(f, np.arange(n, dtype=np.int64))
            w, v = self._tables[f]
            return w[rows], v[rows]
        return self._compute_rows(f, rows)

    def _compute_rows(self, f: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = self.spec.teacher
        w = t.row_effect_std * rng.normal(rng.key(self.spec.seed, _S_ROW_W + f), rows)
        scale = t.interaction_std / math.sqrt(t.latent_dim)
        v = np.stack(
            [scale * rng.normal(rng.key(self.spec.seed, _S_ROW_V + f * 64 + c), rows) for c in range(t.latent_dim)],
            axis=-1,
        )
        return w, v

    def _logits(self, dense: np.ndarray, ids: Sequence[np.ndarray]) -> np.ndarray:
        t = self.spec.teacher
        logit = t.bias + (dense.astype(np.float64) - self._dense_center) @ self._dense_w
        u_sum = np.zeros((dense.shape[0], t.latent_dim))
        u_sq = np.zeros(dense.shape[0])
        for f, rows in enumerate(ids):
            w, v = self._row_values(f, rows)
            if rows.shape[1] == 1:  # the mean of one value, without the cost of a reduction
                logit += w[:, 0]
                u = v[:, 0]
            else:
                logit += w.mean(axis=1)
                u = v.mean(axis=1)
            u_sum += u
            u_sq += (u * u).sum(axis=1)
        return logit + 0.5 * ((u_sum * u_sum).sum(axis=1) - u_sq)

    def probabilities(self, idx: np.ndarray) -> np.ndarray:
        """The teacher's true click probability of samples ``idx`` (global indices)."""
        return self._scored(np.asarray(idx, dtype=np.int64))[2]

    def _scored(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Dense features, ids and the teacher's probability of samples ``idx`` (int64)."""
        dense = self._dense(idx)
        all_ids = self._all_ids(idx)
        return dense, all_ids, 1.0 / (1.0 + np.exp(-self._logits(dense, self._split(all_ids))))

    # ------------------------------------------------------------------ samples
    def samples(self, idx: np.ndarray) -> Batch:
        """The samples with global indices ``idx``, in that order."""
        import torch  # here, not at the top: a launcher computes the teacher's AUC without torch

        dense, all_ids, _, labels = self._labelled(idx)
        return Batch(
            dense=torch.from_numpy(dense),
            sparse=torch.from_numpy(all_ids),
            labels=torch.from_numpy(labels),
            pooling=self.spec.pooling,
        )

    def _labelled(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The samples with global indices ``idx``: dense features, ids, the teacher's probability
        and the label drawn from it."""
        idx = np.asarray(idx, dtype=np.int64)
        dense, all_ids, p = self._scored(idx)
        labels = (rng.uniform(self._label_key, idx) < p).astype(np.float32)
        return dense, all_ids, p, labels

    def eval_indices(self) -> np.ndarray:
        return np.arange(self.spec.train_samples, self.spec.train_samples + self.spec.eval_samples, dtype=np.int64)

    @functools.cache
    def best_auc(self) -> float:
        """AUC on the eval split of ranking by the teacher's true probability."""
        chunks = [self._labelled(c) for c in np.array_split(self.eval_indices(), max(1, self.spec.eval_samples // 65536))]
        return roc_auc(np.concatenate([c[3] for c in chunks]), np.concatenate([c[2] for c in chunks]))
