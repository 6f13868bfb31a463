"""Every source of training data behind the :class:`~harness.reference.data.datasets.Samples`
protocol (a DLRM's :class:`~harness.reference.data.datasets.Dataset`, or event streams): the
synthetic generator, Criteo TSV and MLPerf npy files, users' event streams (generated, or Yambda's
parquet), export and inspection.

:func:`open_dataset`, at the package's level, chooses the source (no source module imports
another's) and imports it only when it is chosen: the run set's launcher, which opens the
generator to validate a run's data or to compute the teacher's AUC, loads neither torch nor
pyarrow for the sources it does not use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import ErrorCategory, HarnessError

if TYPE_CHECKING:
    from harness.reference.data.datasets import Samples
    from harness.rules.specs import BenchmarkSpec


def open_dataset(spec: BenchmarkSpec, path: Path | str | None = None, *, manifest: Mapping[str, Any] | None = None,
                 cache_dir: Path | str | None = None, progress: Callable[[str], None] | None = None) -> Samples:
    """The benchmark's data: its generator when ``path`` is None (synthetic benchmarks only),
    else the files at ``path`` in one of the formats the spec accepts, checked against the
    spec (sample counts, tables, pooling) before anything is trained on them.

    ``manifest`` is what :func:`dataset_manifest` returned when the same files were opened and
    validated before (by the run set, before any run starts): the files are then checked
    against it (names and sizes) instead of being read again. ``progress`` hears of each file
    validated. ``cache_dir`` is where a dataset that needs a cache of its own keeps it (Yambda's
    memory-mapped columns; None: :func:`~harness.reference.data.yambda_store.default_cache_dir`).

    Raises:
        HarnessError: BAD_INPUT or NOT_FOUND, one line naming the file (and line, for TSV).
    """
    if spec.dataset["kind"] == "yambda":  # dlrmv4's real data
        if path is None:
            raise HarnessError(
                f"benchmark {spec.name} trains on Yambda-5B's events (Hugging Face yandex/yambda, flat/5b parquet): "
                "give the dataset's folder with --data PATH", ErrorCategory.BAD_INPUT)
        from harness.reference.data.yambda import open_yambda

        return open_yambda(spec.dataset, path, manifest=manifest, cache_dir=cache_dir, progress=progress)
    if spec.dataset["kind"] == "event_streams":
        if path is not None:  # an export of the generator in Yambda's layout (harness data export)
            from harness.reference.data.yambda import open_yambda

            return open_yambda(spec.dataset, path, manifest=manifest, cache_dir=cache_dir, progress=progress)
        from harness.reference.data.events import open_event_streams

        return open_event_streams(spec.dataset)
    if path is None:
        if spec.dataset["kind"] != "synthetic":
            raise HarnessError(
                f"benchmark {spec.name} trains on {spec.dataset['kind']} data: give the dataset's folder with "
                "--data PATH (README: 'Running the official benchmarks')", ErrorCategory.BAD_INPUT,
            )
        from harness.reference.data.datasets import SyntheticDataset

        return SyntheticDataset(spec.dataset)
    from harness.reference.data import criteo

    return criteo.open_files(spec, Path(path), manifest=manifest, progress=progress)
