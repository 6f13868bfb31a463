"""Embedding tables of a model to plan: a shipped model description
(``harness/reference/models/<name>.yaml``) or a benchmark spec.

An inference benchmark's tables (``suite: inference``, MLPerf Inference's ``dlrm-v3``) are planned as
they are served: weights only, at the spec's ``table_precision`` (no optimizer state), each sequence
table priced at the ids of one mean request (:func:`inference_request`: its history and its
candidates, as the spec's ``inference.request`` states them).
"""

from __future__ import annotations

from dataclasses import dataclass
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


TABLE_BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}


def _is_inference(spec: Any) -> bool:
    return spec.raw.get("suite") == "inference"


@dataclass(frozen=True)
class InferenceRequest:
    """One request of an inference benchmark as the planner and the projection price it: its
    contextual tokens, its history's mean length and its candidates (``source``: where the figures
    come from). Every candidate and history item is one lookup of each per-event table."""

    contextual: int
    history: float
    candidates: int
    source: str

    @property
    def events(self) -> float:
        """History items and candidates: the ids a request looks up in each per-event table."""
        return self.history + self.candidates

    @property
    def tokens(self) -> float:
        """The sequence the STU layers run over: contextual tokens, history, candidates."""
        return self.contextual + self.events


def inference_request(spec: Any) -> InferenceRequest:
    """The mean request of an inference benchmark (``BenchmarkSpec``), as its ``inference.request``
    states it: contextual tokens, candidates and the history's mean length (dlrm-v3's is the
    generator's expectation over the inference timestamps; tests/rules/test_specs.py derives it from
    the dataset's parameters and samples the generator)."""
    request = spec.raw["inference"]["request"]
    history = float(request["mean_history"])
    candidates = int(request["candidates"])
    source = f"{history:,.0f} history items (inference.request.mean_history) + {candidates:,} candidates"
    return InferenceRequest(int(request["contextual"]), history, candidates, source)


def table_bytes_per_element(spec: Any) -> int:
    """Bytes of one table element as the benchmark stores its tables: an inference benchmark's
    ``table_precision``, else 4 (fp32, as ``harness run`` trains by default)."""
    if not _is_inference(spec):
        return 4
    return TABLE_BYTES_PER_ELEMENT[str(spec.raw["inference"]["table_precision"])]


def sequence_events(spec: Any) -> tuple[float, str]:
    """The mean ids a sample of an HSTU benchmark's sequence tables, as the planner prices them, and
    where that figure comes from: an inference benchmark's mean request (:func:`inference_request`),
    the dataset's ``mean_sequence_length`` when the spec states it, else ``max_sequence_length``
    (every sample a full sequence: an upper bound)."""
    dataset, model = spec.raw["dataset"], spec.raw["model"]
    if _is_inference(spec):
        request = inference_request(spec)
        return request.events, request.source
    if "mean_sequence_length" in dataset:
        return float(dataset["mean_sequence_length"]), "the dataset's mean_sequence_length"
    return float(model["max_sequence_length"]), "max_sequence_length (the dataset states no mean: an upper bound)"


def tables_for_benchmark(spec: Any) -> list[TableSpec]:
    """The tables of a benchmark spec (``harness.rules.specs.BenchmarkSpec``): a DLRM's ``t00 ..``;
    an HSTU ranker's ``item``, ``artist``, ``album`` (sequence tables: one lookup per event,
    :func:`sequence_events` a sample), then its contextual features' tables in the model's
    ``contextual`` order (one lookup a sample each: ``uid`` and dlrmv4's hashed crosses, rows from the
    dataset's ``cross_features``; a uid table when it names none), as
    :class:`~harness.reference.models.hstu.HSTURanker` numbers them. An inference benchmark's rows are
    its ``inference.tables`` (dlrm-v3: item_id as item, item_category_id in the artist slot, a one-row
    album, user_id as uid), without optimizer state; a sample is a request."""
    model = spec.raw["model"]
    if model.get("family", "dlrm") == "hstu":
        dim = int(model["embedding_dim"])
        if _is_inference(spec):
            dataset, factor = spec.raw["inference"]["tables"], 0.0
        else:
            dataset = spec.raw["dataset"]
            factor = optimizer_state_factor(model.get("embedding_optimizer", "rowwise_adagrad"), dim)
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
