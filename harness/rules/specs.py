"""Benchmarks as data: ``harness/rules/benchmarks/<name>.yaml``, validated at load time."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from compliance.schemas import validate
from harness.errors import ErrorCategory, HarnessError
from harness.reference.embeddings import SparseOptimizerKind
from harness.reference.model import DLRMConfig, Interaction
from harness.rules.hyperparameters import check_hyperparameters

_DIR = resources.files("harness.rules").joinpath("benchmarks")


@dataclass(frozen=True)
class BenchmarkSpec:
    """A validated benchmark spec. ``raw`` is the file's content, the basis of fingerprints."""

    raw: dict[str, Any]

    @property
    def name(self) -> str:
        return self.raw["name"]

    @property
    def ruleset(self) -> str:
        return self.raw["ruleset"]

    @property
    def compliance_ruleset(self) -> str:
        """The rule set under ``compliance/rulesets/`` that checks this benchmark's logs."""
        return self.raw.get("compliance_ruleset") or f"training_{self.ruleset}"

    @property
    def dataset(self) -> dict[str, Any]:
        return self.raw["dataset"]

    @property
    def data_formats(self) -> tuple[str, ...]:
        """The file formats ``harness run --data`` accepts (``criteo-tsv``, ``mlperf-npy``); empty:
        the benchmark trains on its generator only."""
        return tuple(self.dataset.get("formats", ()))

    @property
    def target_auc(self) -> float:
        return float(self.raw["quality"]["target"])

    @property
    def eval_every_epoch_fraction(self) -> float:
        return float(self.raw["eval"]["every_epoch_fraction"])

    @property
    def eval_batch_size(self) -> int:
        return int(self.raw["eval"]["batch_size"])

    @property
    def max_epochs(self) -> float:
        return float(self.raw["max_epochs"])

    @property
    def required_runs(self) -> int:
        return int(self.raw["required_runs"])

    @property
    def max_non_converged_runs(self) -> int:
        return int(self.raw["max_non_converged_runs"])

    @property
    def reference_hyperparameters(self) -> dict[str, Any]:
        return dict(self.raw["reference_hyperparameters"])

    @property
    def tunable_hyperparameters(self) -> frozenset[str]:
        return frozenset(self.raw["tunable_hyperparameters"])

    @property
    def embedding_optimizer(self) -> SparseOptimizerKind:
        return SparseOptimizerKind(self.raw["model"].get("embedding_optimizer", "adagrad"))

    def model_config(self) -> DLRMConfig:
        m, d = self.raw["model"], self.dataset
        return DLRMConfig(
            table_rows=tuple(d["table_rows"]),
            embedding_dim=m["embedding_dim"],
            pooling=tuple(d["pooling"]),
            bottom_mlp=tuple(m["bottom_mlp"]),
            top_mlp=tuple(m["top_mlp"]),
            interaction=Interaction(m["interaction"]),
            dcn_layers=m.get("dcn_layers", 3),
            dcn_rank=m.get("dcn_rank", 512),
            embedding_dims=tuple(m["embedding_dims"]) if "embedding_dims" in m else None,
        )


def benchmark_names() -> list[str]:
    files = _DIR.iterdir()
    return sorted(f.name.removesuffix(".yaml") for f in files if f.name.endswith(".yaml"))


def spec_from_dict(raw: Any, *, what: str) -> BenchmarkSpec:
    """Validate ``raw`` against the benchmark schema and the model's own constraints."""
    validate(raw, "benchmark", what=what)
    spec = BenchmarkSpec(raw=raw)
    spec.model_config()  # raises a HarnessError for an inconsistent architecture
    check_hyperparameters(spec.reference_hyperparameters, what=what)
    return spec


@functools.cache
def load_benchmark(name: str) -> BenchmarkSpec:
    """The shipped benchmark ``name``, or the spec file at path ``name`` (``*.yaml``)."""
    if name.endswith((".yaml", ".yml")):
        return _load_file(Path(name))
    path = _DIR.joinpath(f"{name}.yaml")
    if not path.is_file():
        raise HarnessError(
            f"unknown benchmark {name!r}; known: {', '.join(benchmark_names())}", ErrorCategory.NOT_FOUND
        )
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise HarnessError(f"benchmark file {name}.yaml is not valid YAML: {err}") from None
    spec = spec_from_dict(raw, what=f"benchmark file {name}.yaml")
    if spec.name != name:
        raise HarnessError(f"benchmark file {name}.yaml names itself {spec.name!r}")
    return spec


def _load_file(path: Path) -> BenchmarkSpec:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise HarnessError(f"benchmark file {path} does not exist", ErrorCategory.NOT_FOUND) from None
    except (OSError, UnicodeDecodeError) as err:
        raise HarnessError(f"benchmark file {path} cannot be read: {err}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise HarnessError(f"benchmark file {path} is not valid YAML: {err}") from None
    return spec_from_dict(raw, what=f"benchmark file {path}")
