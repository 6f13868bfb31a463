"""Benchmarks as data: ``harness/rules/benchmarks/<name>.yaml``, validated at load time.

Torch-free, as all of ``harness/rules/``: a spec describes its model as data
(:class:`ModelSpec`); the reference turns that into its own model config
(``harness.reference.models.from_spec``).

Most specs are MLPerf Training benchmarks. A spec of ``suite: inference`` (``dlrm-v3``) is an MLPerf
Inference benchmark: it has a model, a dataset and an ``inference`` section, and none of training's
quality target, eval cadence, runs or hyperparameters. ``harness plan`` plans it; everything that
trains or judges training refuses it in one line (:meth:`BenchmarkSpec.for_training`, and every
training-only property), and :func:`benchmark_names` lists it only when asked for every suite.
"""

from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from compliance.schemas import validate
from harness.errors import ErrorCategory, HarnessError, unknown_name
from harness.rules.hyperparameters import check_hyperparameters

_DIR = resources.files("harness.rules").joinpath("benchmarks")


class Interaction(enum.Enum):
    """How the dense vector and the pooled embeddings meet: DLRM's pairwise dots, or DCNv2's cross network."""

    DOT = "dot"
    DCN = "dcn"


class ModelFamily(enum.Enum):
    """The benchmark's model: a tabular DLRM on samples, or the HSTU ranker on users' event streams."""

    DLRM = "dlrm"
    HSTU = "hstu"


class Suite(enum.Enum):
    """Which MLPerf suite a benchmark belongs to: Training (time to a quality target) or Inference
    (a served model's throughput under a latency bound)."""

    TRAINING = "training"
    INFERENCE = "inference"


class EmbeddingOptimizer(enum.Enum):
    """The optimizer fused into the embedding tables' backward pass."""

    ADAGRAD = "adagrad"  # elementwise, as torch.optim.Adagrad
    ROWWISE_ADAGRAD = "rowwise_adagrad"  # one accumulator per row (FBGEMM EXACT_ROWWISE_ADAGRAD)
    SGD = "sgd"


def check_architecture(m: Any) -> None:
    """Refuse, in one line, an architecture the DLRM cannot build: ``m`` has ``table_rows``,
    ``embedding_dim``, ``embedding_dims``, ``bottom_mlp``, ``top_mlp`` and ``interaction``
    (a :class:`ModelSpec`, or the reference's ``DLRMConfig``, which checks itself with this)."""
    if m.embedding_dims is not None:
        if len(m.embedding_dims) != len(m.table_rows) or min(m.embedding_dims, default=1) < 1:
            raise HarnessError(f"embedding_dims needs one positive dimension per table ({len(m.table_rows)}), "
                               f"got {list(m.embedding_dims)}")
        if m.interaction is Interaction.DOT and len(set(m.embedding_dims)) > 1:
            raise HarnessError("tables of several embedding dimensions need the dcn interaction: the dot "
                               "interaction takes dot products of vectors of one length")
    if not m.bottom_mlp or (m.interaction is Interaction.DOT and m.bottom_mlp[-1] != m.embedding_dim):
        raise HarnessError(f"the bottom MLP must end at the embedding dimension {m.embedding_dim}, got {m.bottom_mlp}")
    if not m.top_mlp or m.top_mlp[-1] != 1:
        raise HarnessError(f"the top MLP must end with one output (the logit), got {m.top_mlp}")


@dataclass(frozen=True)
class ModelSpec:
    """A benchmark's model as data: the architecture and the embeddings' optimizer.

    Sizes are layer widths after the input. ``embedding_dims`` gives each table its own
    dimension (``None``: every table ``embedding_dim``); tables of several dimensions need the
    DCN interaction, and the bottom MLP ends at ``embedding_dim`` for the dot interaction.
    Inconsistent values are a HarnessError here, when the spec is loaded.
    """

    table_rows: tuple[int, ...]
    embedding_dim: int
    pooling: tuple[int, ...]
    bottom_mlp: tuple[int, ...]
    top_mlp: tuple[int, ...]
    interaction: Interaction = Interaction.DOT
    dcn_layers: int = 3
    dcn_rank: int = 512
    embedding_dims: tuple[int, ...] | None = None
    embedding_optimizer: EmbeddingOptimizer = EmbeddingOptimizer.ADAGRAD

    def __post_init__(self) -> None:
        check_architecture(self)

    @classmethod
    def from_raw(cls, model: dict[str, Any], dataset: dict[str, Any]) -> ModelSpec:
        """From a spec file's ``model`` and ``dataset`` sections (already schema-validated)."""
        return cls(
            table_rows=tuple(dataset["table_rows"]),
            embedding_dim=model["embedding_dim"],
            pooling=tuple(dataset["pooling"]),
            bottom_mlp=tuple(model["bottom_mlp"]),
            top_mlp=tuple(model["top_mlp"]),
            interaction=Interaction(model["interaction"]),
            dcn_layers=model.get("dcn_layers", 3),
            dcn_rank=model.get("dcn_rank", 512),
            embedding_dims=tuple(model["embedding_dims"]) if "embedding_dims" in model else None,
            embedding_optimizer=EmbeddingOptimizer(model.get("embedding_optimizer", "adagrad")),
        )


@dataclass(frozen=True)
class BenchmarkSpec:
    """A validated benchmark spec. ``raw`` is the file's content, the basis of fingerprints."""

    raw: dict[str, Any]

    @property
    def name(self) -> str:
        return self.raw["name"]

    @property
    def suite(self) -> Suite:
        """MLPerf Training (the default) or Inference."""
        return Suite(self.raw.get("suite", Suite.TRAINING.value))

    def for_training(self, command: str) -> BenchmarkSpec:
        """This spec, when it is a training benchmark; else one line saying that ``command`` trains or
        judges training benchmarks only, and what plans this one (BAD_INPUT, exit 2)."""
        if self.suite is not Suite.TRAINING:
            raise HarnessError(f"{command} is for MLPerf Training benchmarks; {self.name} is an MLPerf Inference "
                               f"benchmark (suite: {self.suite.value}): `harness plan --benchmark {self.name} "
                               f"--profile P` places its tables and projects its Server QPS bound",
                               ErrorCategory.BAD_INPUT)
        return self

    def _training(self, key: str, what: str) -> Any:
        """``raw[key]`` of a training spec; for an inference spec, one line: it has no ``what``."""
        if self.suite is not Suite.TRAINING:
            raise HarnessError(f"benchmark {self.name} is an MLPerf Inference benchmark: it has no {what} (training "
                               f"commands refuse it; `harness plan --benchmark {self.name} --profile P` plans it)",
                               ErrorCategory.BAD_INPUT)
        return self.raw[key]

    @property
    def inference(self) -> dict[str, Any]:
        """An inference benchmark's ``inference`` section (round, scenarios, latency bound, quality,
        precisions, batching, a request's shape, the tables); one line for a training benchmark."""
        if self.suite is not Suite.INFERENCE:
            raise HarnessError(f"benchmark {self.name} is an MLPerf Training benchmark: it has no inference section",
                               ErrorCategory.BAD_INPUT)
        return dict(self.raw["inference"])

    @property
    def ruleset(self) -> str:
        return str(self._training("ruleset", "MLPerf Training ruleset"))

    @property
    def compliance_ruleset(self) -> str:
        """The rule set under ``compliance/rulesets/`` that checks this benchmark's logs."""
        return self.raw.get("compliance_ruleset") or f"training_{self.ruleset}"

    @property
    def family(self) -> ModelFamily:
        """The model family (``dlrm`` when the spec does not say)."""
        return ModelFamily(self.raw["model"].get("family", ModelFamily.DLRM.value))

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
        return float(self._training("quality", "training quality target")["target"])

    @property
    def _eval(self) -> dict[str, Any]:
        return dict(self._training("eval", "training eval cadence"))

    @property
    def eval_in_samples(self) -> bool:
        """Whether the eval cadence is a grid of samples (dlrmv4's rules), not epoch fractions; such a
        benchmark's logs state ``samples_count`` on every evaluation."""
        return "every_data_fraction" in self._eval

    @property
    def eval_every_epoch_fraction(self) -> float:
        return float(self._eval["every_epoch_fraction"])

    @property
    def eval_every_data_fraction(self) -> float:
        """The samples-based cadence: an evaluation every this fraction of ``train_samples``, rounded
        up to whole global batches (MLPerf's ``eval_every_data_pct``)."""
        return float(self._eval["every_data_fraction"])

    def eval_interval_samples(self, global_batch_size: int) -> int:
        """The samples between evaluations: ``max(1, ceil(fraction * train_samples / GBS)) * GBS``, as
        closed_dlrmv4.yaml derives ``eval_interval_samples``."""
        batches = math.ceil(self.eval_every_data_fraction * int(self.dataset["train_samples"]) / global_batch_size)
        return max(1, batches) * global_batch_size

    def first_eval_samples(self, global_batch_size: int) -> int:
        """The first evaluation: the first grid point at or after ``floor((eval.first_samples +
        eval.first_samples_per_global_batch * GBS) / eval.first_samples_divisor)`` samples (defaults 0,
        0 and 1: the grid's first point when the spec says nothing). dlrmv4's rules set it at
        ``floor((4480 * GBS + 135331840) / 3)``, the reference sweep's earliest convergence less two
        blocks; the integers keep it exact."""
        ev = self._eval
        interval = self.eval_interval_samples(global_batch_size)
        at_least = (int(ev.get("first_samples", 0)) + int(ev.get("first_samples_per_global_batch", 0)) * global_batch_size
                    ) // int(ev.get("first_samples_divisor", 1))
        return max(1, -(-at_least // interval)) * interval

    @property
    def epoch_num_origin(self) -> int:
        """The ``epoch_num`` the benchmark's logs (and RCPs) give the start of training: 0, or 1 for
        MLPerf's dlrm, whose reference counts epochs from one."""
        return int(self._eval.get("epoch_num_origin", 0))

    @property
    def eval_batch_size(self) -> int:
        return int(self._eval["batch_size"])

    @property
    def max_epochs(self) -> float:
        return float(self._training("max_epochs", "epoch limit"))

    @property
    def required_runs(self) -> int:
        return int(self._training("required_runs", "required training runs"))

    @property
    def max_non_converged_runs(self) -> int:
        return int(self._training("max_non_converged_runs", "training runs that may not converge"))

    @property
    def reference_hyperparameters(self) -> dict[str, Any]:
        return dict(self._training("reference_hyperparameters", "training hyperparameters"))

    @property
    def tunable_hyperparameters(self) -> frozenset[str]:
        return frozenset(self._training("tunable_hyperparameters", "training hyperparameters"))

    @functools.cached_property
    def model(self) -> ModelSpec:
        """The DLRM as data (``harness.reference.models.from_spec.dlrm_config`` builds the reference's
        config); an HSTU spec's model is ``raw["model"]``, read by ``HSTUConfig.from_spec``."""
        if self.family is not ModelFamily.DLRM:
            raise HarnessError(f"benchmark {self.name}: a {self.family.value} model is not a DLRM", ErrorCategory.BAD_INPUT)
        return ModelSpec.from_raw(self.raw["model"], self.dataset)

    @property
    def embedding_optimizer(self) -> EmbeddingOptimizer:
        """The optimizer fused into the tables' backward (Adagrad for a DLRM, row-wise for HSTU, unless said)."""
        default = EmbeddingOptimizer.ADAGRAD if self.family is ModelFamily.DLRM else EmbeddingOptimizer.ROWWISE_ADAGRAD
        return EmbeddingOptimizer(self.raw["model"].get("embedding_optimizer", default.value))


def benchmark_names(suite: Suite | None = None) -> list[str]:
    """The shipped benchmarks' names, sorted: every suite's, or only ``suite``'s (what reads training
    results, scores or RCPs asks for :attr:`Suite.TRAINING`)."""
    files = _DIR.iterdir()
    names = sorted(f.name.removesuffix(".yaml") for f in files if f.name.endswith(".yaml"))
    return names if suite is None else [n for n in names if load_benchmark(n).suite is suite]


def spec_from_dict(raw: Any, *, what: str) -> BenchmarkSpec:
    """Validate ``raw`` against the benchmark schema and the model's own constraints."""
    validate(raw, "benchmark", what=what)
    spec = BenchmarkSpec(raw=raw)
    if spec.family is ModelFamily.DLRM:
        _ = spec.model  # raises a HarnessError for an inconsistent architecture
    # (an HSTU architecture is checked by the reference's HSTUConfig.from_spec, when the run set is planned)
    if spec.suite is Suite.TRAINING:  # an inference spec has no hyperparameters (the schema allows none)
        check_hyperparameters(spec.reference_hyperparameters, what=what)
        check_sparse_optimizer(spec, spec.reference_hyperparameters, what=what)
    return spec


def check_sparse_optimizer(spec: BenchmarkSpec, hp: dict[str, Any], *, what: str) -> None:
    """Refuse an ``opt_sparse_name`` that is not the tables' optimizer the model names."""
    named = {"RowWiseAdagrad": EmbeddingOptimizer.ROWWISE_ADAGRAD}.get(hp.get("opt_sparse_name", ""))
    if "opt_sparse_name" in hp and named is not spec.embedding_optimizer:
        raise HarnessError(f"{what}: opt_sparse_name {hp['opt_sparse_name']!r} is not the model's embedding_optimizer "
                           f"{spec.embedding_optimizer.value!r}", ErrorCategory.BAD_INPUT)


@functools.cache
def load_benchmark(name: str) -> BenchmarkSpec:
    """The shipped benchmark ``name``, or the spec file at path ``name`` (``*.yaml``)."""
    if name.endswith((".yaml", ".yml")):
        return _load_file(Path(name))
    path = _DIR.joinpath(f"{name}.yaml")
    if not path.is_file():
        raise unknown_name("benchmark", name, benchmark_names(), hint=" (or give the path of a benchmark .yaml file)")
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
