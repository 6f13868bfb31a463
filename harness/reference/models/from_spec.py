"""The reference's model from a benchmark spec's torch-free model description.

``harness/rules/`` describes a benchmark's model as data (:class:`harness.rules.specs.ModelSpec` for
a DLRM, the ``model`` section for HSTU) and never imports torch; this is the one place that turns
that description into the reference's model of either family: a
:class:`~harness.reference.models.dlrm.DLRM` or an :class:`~harness.reference.models.hstu.HSTURanker`.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data.events import Action, EventStreamSpec
from harness.reference.models.dlrm import DLRM, DLRMConfig
from harness.reference.models.embeddings import SparseOptimizerConfig, SparseOptimizerKind
from harness.reference.models.hstu import HSTUConfig, HSTURanker
from harness.rules.specs import BenchmarkSpec, ModelFamily, ModelSpec


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


def hstu_config(spec: BenchmarkSpec) -> HSTUConfig:
    """The HSTU ranker's architecture and table sizes of a benchmark spec (checked; one line when not):
    the tables are the event streams' (their defaults included), and the model's sequences are as
    long as the data's."""
    model = spec.raw["model"]
    if spec.dataset["kind"] == "yambda":  # the tables as the spec states them (Yambda's own counts)
        data = {"actions": len(Action), **spec.dataset}
    else:
        data = {k: getattr(EventStreamSpec.from_section(spec.dataset), k) for k in
                ("item_rows", "artist_rows", "album_rows", "users", "actions", "max_sequence_length")}
    if int(model.get("max_sequence_length", 0)) != int(data["max_sequence_length"]):
        raise HarnessError(f"benchmark {spec.name}: the model's max_sequence_length {model.get('max_sequence_length')} "
                           f"is not the data's {data['max_sequence_length']}", ErrorCategory.BAD_INPUT)
    tables: dict[str, Any] = {k: int(data[k]) for k in ("item_rows", "artist_rows", "album_rows", "users", "actions")}
    return HSTUConfig.from_spec(model, {**tables, "cross_features": spec.dataset.get("cross_features", ())})


def sparse_optimizer_kind(spec: BenchmarkSpec | ModelSpec) -> SparseOptimizerKind:
    """The fused optimizer of the embedding tables the spec names (Adagrad for a DLRM, row-wise
    Adagrad for HSTU, unless it says otherwise)."""
    return spec.embedding_optimizer  # one enum: SparseOptimizerKind is EmbeddingOptimizer


def build_model(spec: BenchmarkSpec, sparse_optimizer: SparseOptimizerConfig, *, device: torch.device, seed: int,
                table_dtype: torch.dtype, embedding_device: Any = None) -> DLRM | HSTURanker:
    """The benchmark's model, of its family, with its tables' fused optimizer (``embedding_device``:
    where the tables are described: ``"meta"`` for a sharded run)."""
    if spec.family is ModelFamily.HSTU:
        return HSTURanker(hstu_config(spec), sparse_optimizer, seed=seed, dtype=table_dtype, device=device,
                          embedding_device=embedding_device)
    return DLRM(dlrm_config(spec), sparse_optimizer=sparse_optimizer, device=device, seed=seed,
                embedding_device=embedding_device, table_dtype=table_dtype)
