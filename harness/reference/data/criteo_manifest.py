"""What a Criteo dataset folder holds and the checks around it: file discovery (:func:`find_layout`,
:class:`Layout`, Kaggle's day-sized parts), the check that a manifest's files are unchanged, the
checks of a dataset against a benchmark's spec, and the one-line errors the TSV and npy readers share.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data.batches import NUM_SPARSE
from harness.reference.data.datasets import DataFormat

if TYPE_CHECKING:
    from harness.reference.data.criteo_npy import MlperfNpyDataset
    from harness.reference.data.criteo_tsv import CriteoTsvDataset
    from harness.rules.specs import BenchmarkSpec

__all__ = [
    "KAGGLE_PARTS",
    "Layout",
    "bad_input",
    "check_against_spec",
    "check_eval_batching",
    "check_format",
    "check_manifest_files",
    "check_table_rows",
    "days_text",
    "find_layout",
    "kaggle_parts",
    "not_found",
]

KAGGLE_PARTS = 7  # dlrm's days=7 for train.txt

_DAY_TSV = re.compile(r"day_(\d+)(\.gz)?")
_DAY_NPY = re.compile(r"day_(\d+)_dense\.npy")


def bad_input(message: str) -> HarnessError:
    """The error for bad input: ``message`` as one line, BAD_INPUT."""
    return HarnessError(message, ErrorCategory.BAD_INPUT)


def not_found(path: Path, what: str = "file") -> HarnessError:
    """The error for a missing ``path``, NOT_FOUND."""
    return HarnessError(f"{path}: no such {what}", ErrorCategory.NOT_FOUND)


# --------------------------------------------------------------------------- layouts and shared checks


@dataclass(frozen=True)
class Layout:
    """What :func:`find_layout` found at a path: the format, its layout (``terabyte`` or ``kaggle``
    for TSV, ``one-hot`` or ``multi-hot`` for npy), the folder, and the files or days."""

    format: DataFormat
    layout: str
    root: Path  # the folder (absolute)
    files: tuple[Path, ...]  # TSV: the files in order; npy: the days' dense files
    days: int  # Terabyte / npy days; Kaggle: the 7 parts of train.txt

    def describe(self) -> str:
        return f"{self.format.value} ({self.layout} layout)"


def _contiguous_days(root: Path, pattern: re.Pattern[str], name: Callable[[int], list[str]]) -> list[Path]:
    """``day_0`` .. ``day_{D-1}`` under ``root`` (one of ``name(d)``'s spellings each), refusing a gap."""
    present: dict[int, list[Path]] = {}
    for entry in root.iterdir():
        m = pattern.fullmatch(entry.name)
        if m:
            present.setdefault(int(m.group(1)), []).append(entry)
    out = []
    for d in range(len(present) + 1):
        if d not in present:
            if present and max(present) > d:
                raise HarnessError(
                    f"{root / name(d)[0]}: no such file (the days must run from day_0 without a gap; "
                    f"day_{max(present)} is there)", ErrorCategory.NOT_FOUND)
            break
        if len(present[d]) > 1:
            raise bad_input(f"{root}: both {' and '.join(sorted(p.name for p in present[d]))}: keep one")
        out.append(present[d][0])
    return out


def find_layout(path: Path | str, *, multi_hot: bool | None = None) -> Layout:
    """The dataset at ``path``: a folder with ``day_0_dense.npy`` (mlperf-npy), with ``day_0`` or
    ``day_0.gz`` (criteo-tsv, Terabyte), with ``train.txt[.gz]`` or that file (criteo-tsv, Kaggle).
    ``multi_hot`` picks the npy ids when a day has both (default: the npz when there is one).

    Raises:
        HarnessError: NOT_FOUND saying what was looked for; BAD_INPUT for fewer than two days.
    """
    p = Path(path).absolute()
    if not p.exists():
        raise HarnessError(f"{p}: no such file or folder", ErrorCategory.NOT_FOUND)
    if p.is_file():
        if p.name in ("train.txt", "train.txt.gz"):
            return Layout(DataFormat.CRITEO_TSV, "kaggle", p.parent, (p,), KAGGLE_PARTS)
        raise HarnessError(f"{p}: not a Criteo dataset: a file must be Kaggle's train.txt or train.txt.gz, "
                           "else give the folder of the days", ErrorCategory.NOT_FOUND)
    if (p / "day_0_dense.npy").is_file():
        dense = _contiguous_days(p, _DAY_NPY, lambda d: [f"day_{d}_dense.npy"])
        npz, npy = (p / "day_0_sparse_multi_hot.npz").exists(), (p / "day_0_sparse.npy").exists()
        hot = npz if multi_hot is None else (npz or not npy) if multi_hot else (npz and not npy)
        layout = Layout(DataFormat.MLPERF_NPY, "multi-hot" if hot else "one-hot", p, tuple(dense), len(dense))
    elif (p / "day_0").exists() or (p / "day_0.gz").exists():
        files = _contiguous_days(p, _DAY_TSV, lambda d: [f"day_{d}", f"day_{d}.gz"])
        layout = Layout(DataFormat.CRITEO_TSV, "terabyte", p, tuple(files), len(files))
    elif (p / "train.txt").exists() or (p / "train.txt.gz").exists():
        if (p / "train.txt").exists() and (p / "train.txt.gz").exists():
            raise bad_input(f"{p}: both train.txt and train.txt.gz: keep one")
        name = "train.txt" if (p / "train.txt").exists() else "train.txt.gz"
        return Layout(DataFormat.CRITEO_TSV, "kaggle", p, (p / name,), KAGGLE_PARTS)
    else:
        raise HarnessError(
            f"{p}: no Criteo dataset here: looked for day_0_dense.npy (mlperf-npy), day_0 or day_0.gz "
            "(criteo-tsv, Terabyte) and train.txt or train.txt.gz (criteo-tsv, Kaggle)", ErrorCategory.NOT_FOUND)
    if layout.days < 2:
        raise bad_input(f"{p}: only day_0: the {layout.describe()} needs at least two days "
                        "(the last one holds the eval split)")
    return layout


def kaggle_parts(total: int, parts: int = KAGGLE_PARTS) -> list[int]:
    """dlrm's day-sized parts of ``total`` lines: ``divmod``, the first ``extras`` one longer."""
    base, extras = divmod(total, parts)
    return [base + (1 if j < extras else 0) for j in range(parts)]


def check_eval_batching(batch_size: int, rank: int, world_size: int) -> None:
    """Refuse an eval batch size that is not a positive integer, or a rank outside the world."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise bad_input(f"batch size must be a positive integer, got {batch_size!r}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise bad_input(f"rank {rank} of a world of {world_size}")


def check_table_rows(table_rows: Sequence[int]) -> np.ndarray:
    """The 26 tables' rows as int64, refusing another count or a size that is not a positive integer."""
    rows = list(table_rows)
    if len(rows) != NUM_SPARSE:
        raise bad_input(f"expected {NUM_SPARSE} table sizes, got {len(rows)}")
    for f, r in enumerate(rows):
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 1:
            raise bad_input(f"table {f}: rows must be a positive integer, got {r!r}")
    return np.array(rows, np.int64)


def days_text(layout: str, days: int) -> tuple[str, str]:
    """How the train and the eval split are named in messages."""
    if layout == "kaggle":
        return "parts 0-5 of train.txt", "the first half of part 6 of train.txt"
    return f"days 0-{days - 2}", f"the first half of day {days - 1}"


def check_manifest_files(root: Path, entries: Sequence[dict[str, Any]]) -> None:
    """Refuse a manifest's file that is missing or whose size changed since it was validated."""
    for entry in entries:
        path = root / entry["name"]
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise bad_input(f"{path}: changed since it was validated (was {entry['bytes']} bytes, "
                            "now missing)") from None
        if size != entry["bytes"]:
            raise bad_input(f"{path}: changed since it was validated (was {entry['bytes']} bytes, now {size})")


# --------------------------------------------------------------------------- against a benchmark's spec


def check_format(spec: BenchmarkSpec, fmt: DataFormat, layout: str, path: Path) -> None:
    """Refuse a format that the benchmark does not accept."""
    accepted = spec.data_formats
    if fmt.value not in accepted:
        accepts = ", ".join(accepted) if accepted else "no data files (it trains on its generator only)"
        raise bad_input(f"benchmark {spec.name} accepts {accepts}; {path} holds {fmt.value} ({layout} layout)")


def check_against_spec(spec: BenchmarkSpec, dataset: CriteoTsvDataset | MlperfNpyDataset, path: Path) -> None:
    """Refuse a dataset whose tables, pooling or split sizes differ from the benchmark's."""
    d = spec.dataset
    pooling = tuple(int(p) for p in d["pooling"])
    if len(pooling) != NUM_SPARSE or len(d["table_rows"]) != NUM_SPARSE:
        raise bad_input(f"benchmark {spec.name} has {len(d['table_rows'])} tables and {len(pooling)} pooling factors; "
                        f"Criteo data has {NUM_SPARSE} categorical features")
    if dataset.pooling != pooling:
        f = next(i for i, (a, b) in enumerate(zip(dataset.pooling, pooling)) if a != b)
        what = ("one-hot ids" if set(dataset.pooling) == {1} else
                f"multi-hot ids (pooling {list(dataset.pooling)})")
        raise bad_input(f"{path} holds {what}: feature {f} has {dataset.pooling[f]} ids per sample, benchmark "
                        f"{spec.name} needs {pooling[f]} (pooling {list(pooling)})")
    train_name, eval_name = dataset.split_names()
    if dataset.train_samples != d["train_samples"]:
        raise bad_input(f"{path} holds {dataset.train_samples} training samples ({train_name}), benchmark "
                        f"{spec.name} needs {d['train_samples']}")
    if dataset.eval_samples != d["eval_samples"]:
        raise bad_input(f"{path} holds {dataset.eval_samples} eval samples ({eval_name}), benchmark "
                        f"{spec.name} needs {d['eval_samples']}")
