"""Embedding tables of a model to plan: a shipped model description
(``harness/reference/models/<name>.yaml``) or a benchmark spec."""

from __future__ import annotations

from fractions import Fraction
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ErrorCategory, HarnessError
from harness.reference.planner.types import TableSpec

_MODELS = resources.files("harness.reference").joinpath("models")
_CLASS_KEYS = {"name", "count", "rows", "dim", "pooling"}


def optimizer_state_factor(optimizer: str, dim: int) -> float:
    """Optimizer-state elements per weight element of an embedding optimizer."""
    factors = {"sgd": 0.0, "rowwise_adagrad": 1.0 / dim, "adagrad": 1.0, "adam": 2.0}
    if optimizer not in factors:
        raise HarnessError(f"unknown embedding optimizer {optimizer!r}; known: {', '.join(factors)}")
    return factors[optimizer]


def model_names() -> list[str]:
    return sorted(f.name.removesuffix(".yaml") for f in _MODELS.iterdir() if f.name.endswith(".yaml"))


def load_model(name: str) -> list[TableSpec]:
    """The tables of shipped model ``name`` (or of the model file at path ``name``)."""
    if name.endswith((".yaml", ".yml")):
        path: Any = Path(name)
    else:
        path = _MODELS.joinpath(f"{name}.yaml")
    if not path.is_file():
        raise HarnessError(f"unknown model {name!r}; known: {', '.join(model_names())}", ErrorCategory.NOT_FOUND)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise HarnessError(f"model file {name} is not valid YAML: {err}") from None
    return tables_from_description(data, what=f"model {name}")


def tables_from_description(data: Any, *, what: str = "model") -> list[TableSpec]:
    """Tables from size classes: ``count`` tables per class, rows spread evenly around ``rows``."""
    if not isinstance(data, dict) or not isinstance(data.get("classes"), list) or not data["classes"]:
        raise HarnessError(f"{what} is invalid: it needs a non-empty list 'classes'")
    optimizer = data.get("optimizer", "sgd")
    tables = []
    for entry in data["classes"]:
        if not isinstance(entry, dict) or not _CLASS_KEYS <= entry.keys():
            raise HarnessError(f"{what} is invalid: each class needs {', '.join(sorted(_CLASS_KEYS))}")
        count, spread = int(entry["count"]), Fraction(str(entry.get("rows_spread", 0)))
        for i in range(count):
            position = Fraction(2 * i, count - 1) - 1 if count > 1 else Fraction(0)
            rows = round(entry["rows"] * (1 + spread * position))
            dim = int(entry["dim"])
            tables.append(
                TableSpec(
                    name=f"{entry['name']}_{i:04d}",
                    rows=max(rows, 1),
                    dim=dim,
                    pooling=float(entry["pooling"]),
                    optimizer_state_factor=optimizer_state_factor(optimizer, dim),
                )
            )
    return tables


# an HSTU ranker's tables, in the order of their table ids (harness.reference.models.hstu): the
# per-event sequence tables, then the per-user contextual one
HSTU_SEQUENCE_TABLES = ("item", "artist", "album")
HSTU_CONTEXTUAL_TABLES = ("uid",)


def sequence_events(spec: Any) -> tuple[float, str]:
    """The mean ids a sample of an HSTU benchmark's sequence tables, as the planner prices them, and
    where that figure comes from: the dataset's ``mean_sequence_length`` when the spec states it,
    else ``max_sequence_length`` (every sample a full sequence: an upper bound)."""
    dataset, model = spec.raw["dataset"], spec.raw["model"]
    if "mean_sequence_length" in dataset:
        return float(dataset["mean_sequence_length"]), "the dataset's mean_sequence_length"
    return float(model["max_sequence_length"]), "max_sequence_length (the dataset states no mean: an upper bound)"


def tables_for_benchmark(spec: Any) -> list[TableSpec]:
    """The tables of a benchmark spec (``harness.rules.specs.BenchmarkSpec``): a DLRM's ``t00 ..``;
    an HSTU ranker's ``item``, ``artist``, ``album`` (sequence tables: one lookup per event,
    :func:`sequence_events` a sample), then its contextual features' tables in the model's
    ``contextual`` order (one lookup a sample each: ``uid`` and dlrmv4's hashed crosses, rows from the
    dataset's ``cross_features``; a uid table when it names none), as
    :class:`~harness.reference.models.hstu.HSTURanker` numbers them."""
    model = spec.raw["model"]
    if model.get("family", "dlrm") == "hstu":
        dataset, dim = spec.raw["dataset"], int(model["embedding_dim"])
        optimizer = model.get("embedding_optimizer", "rowwise_adagrad")
        factor = optimizer_state_factor(optimizer, dim)
        events, _ = sequence_events(spec)
        rows = {"uid": int(dataset["users"]), **{str(c["name"]): int(c["rows"]) for c in dataset.get("cross_features", ())}}
        contextual = [str(c) for c in model.get("contextual", ["uid"])] or ["uid"]
        unknown = [c for c in contextual if c not in rows]
        if unknown:
            raise HarnessError(f"{spec.name}: model.contextual names {unknown}, neither uid nor a dataset cross feature",
                               ErrorCategory.BAD_INPUT)
        return [*(TableSpec(name, int(dataset[f"{name}_rows"]), dim, events, factor, sequence=True)
                  for name in HSTU_SEQUENCE_TABLES),
                *(TableSpec(name, rows[name], dim, 1.0, factor) for name in contextual)]
    optimizer = model.get("embedding_optimizer", "adagrad")
    rows, pooling = spec.dataset["table_rows"], spec.dataset["pooling"]
    dims = model.get("embedding_dims") or [model["embedding_dim"]] * len(rows)
    width = max(2, len(str(len(rows) - 1)))
    return [
        TableSpec(f"t{i:0{width}d}", int(r), int(d), float(p), optimizer_state_factor(optimizer, int(d)))
        for i, (r, p, d) in enumerate(zip(rows, pooling, dims))
    ]
