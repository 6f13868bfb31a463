"""Where training data comes from: one protocol, three formats, one rule for order and sharding.

A :class:`Dataset` is a train split and an eval split of Criteo-like samples (13 dense, 26
categorical features), read as :class:`~harness.reference.data.batches.Batch` es:

* :class:`SyntheticDataset`: the generator of :mod:`harness.reference.data.synthetic` (no files);
* ``criteo-tsv``: Criteo's text files, Terabyte ``day_0`` .. ``day_23`` or Kaggle ``train.txt``,
  plain or gzip (:mod:`harness.reference.data.criteo_tsv`);
* ``mlperf-npy``: MLPerf's preprocessed Criteo 1TB layout, ``day_<d>_dense.npy``,
  ``day_<d>_labels.npy`` and ``day_<d>_sparse.npy`` (one-hot) or
  ``day_<d>_sparse_multi_hot.npz`` (:mod:`harness.reference.data.criteo_npy`).

Every dataset follows the same rules, so that the same run on any of them (the synthetic
benchmark and its exported copies, say) sees the same samples in the same batches:

**Positions.** The train split is positions ``0 .. train_samples - 1`` in the dataset's own
order (file order for the real data, which MLPerf's preprocessing shuffled once; sample index
for the generator); the eval split is positions ``0 .. eval_samples - 1`` of its own.

**Order.** Global batch ``k`` of epoch ``e`` holds the positions ``[b * B, (b + 1) * B)`` with
``b = k`` in epoch 0 (the data in order, as MLPerf's references read it) and ``b = pi_e(k)``
in later epochs, ``pi_e`` a pseudo-random permutation of the epoch's ``train_samples // B``
batches keyed by ``(seed, e)`` (:func:`batch_order`). Reshuffling whole batches keeps the
reads of a batch contiguous (TorchRec's ``shuffle_batches``); the last partial batch is
dropped in every epoch.

**Sharding.** Rank ``r`` of ``W`` gets the ``r``-th of ``W`` equal slices of every global batch
(``B`` must be divisible by ``W``), and the ``r``-th of ``W`` contiguous parts of the eval split
(``numpy.array_split``'s sizes), so the union over the ranks never depends on ``W``.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol, Required, TypedDict, runtime_checkable

import numpy as np

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data import counter_rng as rng
from harness.reference.data import synthetic
from harness.reference.data.batches import Batch

if TYPE_CHECKING:
    pass

_S_BATCH_ORDER = 9 << 20  # counter_rng stream of the epoch orders (see synthetic's streams)
_FEISTEL_ROUNDS = 4


class DataFormat(enum.Enum):
    SYNTHETIC = "synthetic"
    CRITEO_TSV = "criteo-tsv"
    MLPERF_NPY = "mlperf-npy"


class Samples(Protocol):
    """A train split and an eval split of samples of either family, read by (epoch, rank, world
    size, start): a :class:`Dataset` of DLRM batches, or event streams of HSTU batches
    (:class:`~harness.reference.data.events.EventStreams`)."""

    train_samples: int
    eval_samples: int
    reshuffles: bool  # False: only epoch 0 can be read (a stream that cannot seek)

    @property
    def format(self) -> enum.Enum:
        """The data's format (:class:`DataFormat`, or the event streams' ``EventFormat``)."""
        ...

    def train_batches(self, batch_size: int, *, epoch: int = 0, seed: int = 0, rank: int = 0,
                      world_size: int = 1, start: int = 0) -> Iterator[Any]:
        """This rank's slice of each global batch of ``epoch``, from global batch ``start`` on."""
        ...

    def eval_batches(self, batch_size: int, *, rank: int = 0, world_size: int = 1) -> Iterator[Any]:
        """This rank's part of the eval split, in batches of ``batch_size`` (the last one shorter)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What the data is, as plain JSON (for the run's log)."""
        ...


@runtime_checkable
class Dataset(Protocol):
    """A DLRM's train split and eval split, read by (epoch, rank, world size, start)."""

    format: DataFormat
    train_samples: int
    eval_samples: int
    table_rows: tuple[int, ...]  # ids are rows of these tables (reduced modulo them)
    pooling: tuple[int, ...]  # ids per sample of each feature
    reshuffles: bool  # False: only epoch 0 can be read (a stream that cannot seek)

    def train_batches(self, batch_size: int, *, epoch: int = 0, seed: int = 0, rank: int = 0,
                      world_size: int = 1, start: int = 0) -> Iterator[Batch]:
        """This rank's slice of each global batch of ``epoch``, from global batch ``start`` on."""
        ...

    def eval_batches(self, batch_size: int, *, rank: int = 0, world_size: int = 1) -> Iterator[Batch]:
        """This rank's part of the eval split, in batches of ``batch_size`` (the last one shorter)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What the data is, as plain JSON (for the run's log)."""
        ...


# ---------------------------------------------------------------------------------- order
def train_batches_per_epoch(train_samples: int, batch_size: int) -> int:
    return train_samples // batch_size


def batch_order(seed: int, epoch: int, num_batches: int, batches: np.ndarray) -> np.ndarray:
    """``pi_epoch(batches)``: which of the epoch's ``num_batches`` dataset batches global
    batches ``batches`` are. The identity in epoch 0; later, a keyed permutation (a Feistel
    network over the next even power of two, cycle-walked into range), computed for just the
    batches asked for, so no rank materialises the whole order."""
    k = np.asarray(batches, dtype=np.uint64)
    if epoch == 0 or num_batches <= 1:
        return k.astype(np.int64)
    bits = max(2, (num_batches - 1).bit_length())
    bits += bits % 2
    half = np.uint64(bits // 2)
    mask = np.uint64((1 << (bits // 2)) - 1)
    keys = [rng.key(seed, _S_BATCH_ORDER + (epoch << 3) + r) for r in range(_FEISTEL_ROUNDS)]

    def permute(x: np.ndarray) -> np.ndarray:
        left, right = x >> half, x & mask
        for key in keys:
            left, right = right, left ^ (rng.bits(key, right) & mask)
        return (left << half) | right

    out = permute(k)
    outside = out >= np.uint64(num_batches)
    while outside.any():  # cycle walking: a permutation of the larger domain, restricted
        out[outside] = permute(out[outside])
        outside = out >= np.uint64(num_batches)
    return out.astype(np.int64)


def rank_slice(batch_size: int, rank: int, world_size: int) -> tuple[int, int]:
    """``(offset, size)`` of rank ``rank``'s slice within every global batch."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise HarnessError(f"rank {rank} of a world of {world_size}", ErrorCategory.BAD_INPUT)
    if batch_size < 1 or batch_size % world_size:
        raise HarnessError(f"global batch size {batch_size} is not divisible by the world size {world_size}",
                           ErrorCategory.BAD_INPUT)
    local = batch_size // world_size
    return rank * local, local


def train_ranges(train_samples: int, batch_size: int, *, epoch: int, seed: int, rank: int, world_size: int,
                 start: int) -> Iterator[tuple[int, int]]:
    """``(lo, hi)``: the train positions of this rank's slice of each global batch from ``start`` on."""
    offset, local = rank_slice(batch_size, rank, world_size)
    if epoch < 0:
        raise HarnessError(f"epoch {epoch} < 0", ErrorCategory.BAD_INPUT)
    n = train_batches_per_epoch(train_samples, batch_size)
    for k in range(max(0, start), n):
        b = int(batch_order(seed, epoch, n, np.array([k]))[0])
        lo = b * batch_size + offset
        yield lo, lo + local


def eval_range(eval_samples: int, rank: int, world_size: int) -> tuple[int, int]:
    """``(lo, hi)``: rank ``rank``'s contiguous part of the eval split (``numpy.array_split``'s sizes)."""
    base, extra = divmod(eval_samples, world_size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def check_epoch(dataset: Samples, epoch: int) -> None:
    if epoch > 0 and not dataset.reshuffles:
        raise HarnessError(
            f"{dataset.describe().get('path', 'this dataset')}: a gzip-compressed TSV can only be read in order, "
            "once; a run of more than one epoch needs it uncompressed (gunzip) or in the mlperf-npy layout",
            ErrorCategory.BAD_INPUT,
        )


def step_batches(dataset: Samples, global_batch_size: int, start: int, stop: int, *, seed: int, rank: int,
                 world_size: int) -> Iterator[Any]:
    """A rank's batches of the global steps ``start .. stop - 1``, epoch after epoch (an epoch is
    ``train_samples // global_batch_size`` steps; each is read from its step's position on)."""
    spe, step = dataset.train_samples // global_batch_size, start
    while step < stop:
        epoch, k = divmod(step, spe)
        check_epoch(dataset, epoch)
        batches = dataset.train_batches(global_batch_size, epoch=epoch, seed=seed, rank=rank, world_size=world_size,
                                        start=k)
        made = step
        try:
            for batch in batches:
                yield batch
                step += 1
                if step >= stop or step % spe == 0:
                    break
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()
        if step == made:
            raise HarnessError(f"the dataset gave no batch for step {step} (epoch {epoch})", ErrorCategory.BAD_INPUT)


# ---------------------------------------------------------------------------------- synthetic
class SyntheticDataset:
    """The synthetic benchmark's generator as a :class:`Dataset`: train position ``p`` is sample
    ``p``, eval position ``q`` is sample ``train_samples + q`` (the splits are disjoint)."""

    format = DataFormat.SYNTHETIC
    reshuffles = True

    def __init__(self, dataset: dict[str, Any]):
        if dataset.get("kind") != "synthetic":
            raise HarnessError(f"not a synthetic data set: {dataset.get('kind')!r}", ErrorCategory.BAD_INPUT)
        self.spec = synthetic.SyntheticSpec(
            seed=dataset["seed"],
            train_samples=dataset["train_samples"],
            eval_samples=dataset["eval_samples"],
            table_rows=tuple(dataset["table_rows"]),
            pooling=tuple(dataset["pooling"]),
            zipf_exponent=dataset.get("zipf_exponent", 1.05),
            teacher=synthetic.TeacherSpec(**dataset.get("teacher", {})),
        )
        self.generator = synthetic.SyntheticCriteo(self.spec)
        self.train_samples, self.eval_samples = self.spec.train_samples, self.spec.eval_samples
        self.table_rows: tuple[int, ...] = self.spec.table_rows
        self.pooling: tuple[int, ...] = self.spec.pooling or (1,) * len(self.table_rows)  # set by the spec

    def train_batches(self, batch_size: int, *, epoch: int = 0, seed: int = 0, rank: int = 0,
                      world_size: int = 1, start: int = 0) -> Iterator[Batch]:
        for lo, hi in train_ranges(self.train_samples, batch_size, epoch=epoch, seed=seed, rank=rank,
                                   world_size=world_size, start=start):
            yield self.generator.samples(np.arange(lo, hi, dtype=np.int64))

    def eval_batches(self, batch_size: int, *, rank: int = 0, world_size: int = 1) -> Iterator[Batch]:
        lo, hi = eval_range(self.eval_samples, rank, world_size)
        first = self.train_samples
        for a in range(lo, hi, batch_size):
            yield self.generator.samples(np.arange(first + a, first + min(a + batch_size, hi), dtype=np.int64))

    def best_auc(self) -> float:
        """The planted teacher's AUC on the eval split: the best any model can expect."""
        return self.generator.best_auc()

    def describe(self) -> dict[str, Any]:
        return {"format": self.format.value, "seed": self.spec.seed, "train_samples": self.train_samples,
                "eval_samples": self.eval_samples}


# ---------------------------------------------------------------------------------- opening
def generation_seconds_per_sample(dataset: dict[str, Any], *, samples: int = 8192, repeats: int = 3) -> float:
    """One core's seconds to generate one sample of a synthetic benchmark's data (its ``dataset``
    section), measured: the best of ``repeats`` batches of ``samples`` after one to warm up. What the
    projection of a synthetic benchmark on this machine counts for the data a run generates beside
    its step (``harness project``)."""
    generator = SyntheticDataset(dataset).generator
    generator.samples(np.arange(samples, dtype=np.int64))
    best = float("inf")
    for i in range(repeats):
        start = time.perf_counter()
        generator.samples(np.arange((i + 1) * samples, (i + 2) * samples, dtype=np.int64))
        best = min(best, time.perf_counter() - start)
    return best / samples


class ManifestFile(TypedDict, total=False):
    """One file of a dataset's manifest: its name (relative to the root) and size, and what its
    source recorded of it (samples, gzip, the TSV reader's line offsets)."""

    name: Required[str]
    bytes: Required[int]
    samples: int
    gzip: bool
    offsets: list[int]


class DatasetManifest(TypedDict, total=False):
    """What a worker needs to reopen a dataset without reading it again, as its source wrote it
    (``manifest()``): every source gives its format, root and files; Criteo's TSV adds the layout
    and the index stride, MLPerf's npy the layout and each day's arrays."""

    format: Required[str]
    root: Required[str]
    files: Required[list[ManifestFile]]
    layout: str
    index_stride: int
    days: list[dict[str, Any]]


def dataset_manifest(dataset: Samples) -> DatasetManifest | None:
    """What a worker needs to reopen ``dataset`` without reading it again (None: the generator)."""
    manifest = getattr(dataset, "manifest", None)
    return manifest() if callable(manifest) else None
