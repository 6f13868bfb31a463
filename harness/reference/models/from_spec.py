"""The reference's model config from a benchmark spec's torch-free model description.

``harness/rules/`` describes a benchmark's model as data (:class:`harness.rules.specs.ModelSpec`)
and never imports torch; this is the one place that turns that description into the
reference's :class:`~harness.reference.models.dlrm.DLRMConfig` and its embeddings' optimizer kind.
"""

from __future__ import annotations

from harness.reference.models.embeddings import SparseOptimizerKind
from harness.reference.models.dlrm import DLRMConfig
from harness.rules.specs import BenchmarkSpec, ModelSpec


def _model(spec: BenchmarkSpec | ModelSpec) -> ModelSpec:
    return spec.model if isinstance(spec, BenchmarkSpec) else spec


def dlrm_config(spec: BenchmarkSpec | ModelSpec) -> DLRMConfig:
    """The architecture of a benchmark (or of its ``model``) as the reference's config."""
    m = _model(spec)
    return DLRMConfig(
        table_rows=m.table_rows,
        embedding_dim=m.embedding_dim,
        pooling=m.pooling,
        bottom_mlp=m.bottom_mlp,
        top_mlp=m.top_mlp,
        interaction=m.interaction,
        dcn_layers=m.dcn_layers,
        dcn_rank=m.dcn_rank,
        embedding_dims=m.embedding_dims,
    )


def sparse_optimizer_kind(spec: BenchmarkSpec | ModelSpec) -> SparseOptimizerKind:
    """The fused optimizer of the embedding tables the spec names (``adagrad`` unless it says otherwise)."""
    return _model(spec).embedding_optimizer  # one enum: SparseOptimizerKind is EmbeddingOptimizer
