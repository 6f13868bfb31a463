"""The real Criteo data as :class:`~harness.reference.data.datasets.Dataset` s, one module per role
(:mod:`.criteo_tsv`, :mod:`.criteo_npy`, :mod:`.criteo_manifest`), and :func:`open_files`, which
opens a folder of them for a benchmark.

Two formats, found by :func:`~harness.reference.data.criteo_manifest.find_layout` and opened by
:func:`open_files` (which :func:`harness.reference.data.open_dataset` calls), both following the
positions, order and sharding rules of :mod:`harness.reference.data.datasets`:

:class:`~harness.reference.data.criteo_tsv.CriteoTsvDataset` (``criteo-tsv``, :mod:`.criteo_tsv`)
    Criteo's click logs as text, plain or gzip (recognised by its magic bytes, whatever the name):
    Terabyte, a folder of ``day_0`` .. ``day_{D-1}`` (or ``day_N.gz``), or Kaggle, ``train.txt``
    (or ``train.txt.gz``). Each line holds 40 tab-separated fields: the label (``0``/``1``), 13
    integer counts and 26 categorical values written as hex strings (eight digits in the real data).

:class:`~harness.reference.data.criteo_npy.MlperfNpyDataset` (``mlperf-npy``, :mod:`.criteo_npy`)
    MLPerf's preprocessed Criteo 1TB: ``day_<d>_dense.npy`` (N x 13 float, already transformed),
    ``day_<d>_labels.npy`` (N or N x 1) and ``day_<d>_sparse.npy`` (N x 26, one-hot) or
    ``day_<d>_sparse_multi_hot.npz`` (members ``"0"`` .. ``"25"``, N x P_f, multi-hot), memory-mapped.

:mod:`.criteo_manifest` holds what both share: what a folder holds (its layout and days), the checks of
a manifest's files, of a dataset against a benchmark's spec, and the errors they raise. Neither
format's module imports the other's; this package chooses between them.

**Splits** (as MLPerf's references split Criteo; facebookresearch/dlrm ``data_utils.py``
``getCriteoAdData`` and ``dlrm_data_pytorch.py`` ``CriteoDataset`` are the source): days
``0 .. D-2`` in order are the train split; the first ``ceil(n / 2)`` samples of the last day are
the eval split (dlrm's ``test_size = ceil(num_samples / 2)``), the rest of it (dlrm's validation
half) is unused. With Terabyte's 24 days that is MLPerf's split: days 0-22 train, the first half
of day 23 eval (89,137,319 samples). Kaggle's ``train.txt`` is first cut into 7 day-sized parts
as dlrm does (``divmod(total, 7)``, the first ``extras`` parts one line longer), then split alike.
A global batch may span days.

**Categorical values -> rows.** A hex string is read as an unsigned integer (at most 16 digits,
case-insensitive, empty -> 0) and reduced modulo the table's rows::

    id = int(value, 16) % table_rows[f]

the convention of MLPerf's and TorchRec's preprocessing (``torchrec/datasets/criteo.py``
``BinaryCriteoUtils.tsv_to_npys``: ``int(x, 16)``, empty -> 0; the ids modulo
``num_embeddings_per_feature`` at batch time) and of facebookresearch/dlrm's ``getCriteoAdData``
with ``--max-ind-range`` (``int(x, 16) % max_ind_range``). MLPerf-npy ids are reduced alike.

**Dense features.** TSV counts become ``log(1 + max(x, 0))`` as float32, computed in float64
(facebookresearch/dlrm; empty counts are 0, negative ones clamp to 0); the synthetic generator
computes its dense features the same way, so an exported copy reads back bit for bit.
MLPerf-npy dense values pass through unchanged: its preprocessing already transformed them (as
``log(x + 3)``, see :mod:`.criteo_npy`).

**Validation before training.** :func:`open_files` without a manifest reads everything once:
every TSV line is parsed (the first malformed one is reported as ``file:line``) and counted, an
index of line offsets is kept every :data:`~harness.reference.data.criteo_tsv.INDEX_STRIDE` lines;
every npy header, shape, dtype and row count is checked (label values are checked as they are
read). The dataset's :meth:`~harness.reference.data.criteo_tsv.CriteoTsvDataset.manifest` reopens
it later without reading, after checking that every file still has its size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.reference.data.criteo_manifest import bad_input, check_against_spec, check_format, find_layout
from harness.reference.data.criteo_npy import MlperfNpyDataset
from harness.reference.data.criteo_tsv import DEFAULT_BUFFER_BYTES, INDEX_STRIDE, CriteoTsvDataset
from harness.reference.data.datasets import DataFormat

if TYPE_CHECKING:
    from harness.rules.specs import BenchmarkSpec

__all__ = ["open_files"]


def open_files(spec: BenchmarkSpec, path: Path | str, *, manifest: Mapping[str, Any] | None = None,
               buffer_bytes: int = DEFAULT_BUFFER_BYTES, index_stride: int = INDEX_STRIDE,
               progress: Callable[[str], None] | None = None) -> CriteoTsvDataset | MlperfNpyDataset:
    """The benchmark's data in the files at ``path``, checked against ``spec`` (format accepted,
    sample counts, pooling, 26 features; ids are reduced modulo its tables' rows).

    Without ``manifest`` every file is validated first (every TSV line parsed, every npy header
    checked); with one (what :meth:`CriteoTsvDataset.manifest` returned for the same files) the
    files are only checked to have the sizes they had.

    Raises:
        HarnessError: one line: NOT_FOUND (nothing recognisable at ``path``, a missing file) or
            BAD_INPUT (a format the benchmark does not accept, counts or pooling that differ from
            the spec, a malformed line as ``file:line``, a file changed since it was validated).
    """
    path = Path(path).absolute()
    rows = spec.dataset["table_rows"]
    if manifest is not None:
        dataset = _from_manifest(manifest, path, rows, buffer_bytes)
        check_format(spec, dataset.format, dataset.layout.layout, path)
    else:
        multi_hot = any(int(p) != 1 for p in spec.dataset["pooling"])
        layout = find_layout(path, multi_hot=multi_hot)
        check_format(spec, layout.format, layout.layout, path)
        if layout.format is DataFormat.CRITEO_TSV:
            if multi_hot:
                raise bad_input(f"{path} holds criteo-tsv (one id per feature); benchmark {spec.name} needs multi-hot "
                                f"pooling {list(spec.dataset['pooling'])}")
            dataset = CriteoTsvDataset.scan(layout, rows, buffer_bytes=buffer_bytes, index_stride=index_stride,
                                            progress=progress)
        else:
            dataset = MlperfNpyDataset.scan(layout, rows)
    check_against_spec(spec, dataset, path)
    return dataset


def _from_manifest(manifest: Mapping[str, Any], path: Path, rows: Sequence[int],
                   buffer_bytes: int) -> CriteoTsvDataset | MlperfNpyDataset:
    try:
        root = Path(manifest["root"])
        given = path.resolve()
        if given != root.resolve() and not (given.is_file() and given.parent == root.resolve()):
            raise bad_input(f"the dataset manifest is for {root}, not {path}")
        fmt = DataFormat(manifest["format"])
        if fmt is DataFormat.CRITEO_TSV:
            return CriteoTsvDataset.from_manifest(manifest, rows, buffer_bytes=buffer_bytes)
        if fmt is DataFormat.MLPERF_NPY:
            return MlperfNpyDataset.from_manifest(manifest, rows)
        raise bad_input(f"not a file dataset's manifest: format {fmt.value}")
    except (KeyError, TypeError, ValueError) as exc:
        raise bad_input(f"not a dataset manifest ({type(exc).__name__}: {exc})") from None
