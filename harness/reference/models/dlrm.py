"""The reference DLRM (Naumov et al., 2019), with the dot or the DCNv2 interaction.

::

    dense x (B x 13) --> DenseArch (bottom MLP) --> d (B x D) --------------+
                                                                            |
    sparse ids (B x L) --> SparseArch (embedding bags) --> e (B x F x D) ---+--> interaction --> OverArch --> logit (B)
                                                                                (dot | dcn)     (top MLP)

* ``dot``: the DLRM paper's interaction. With ``z = [d, e_1 .. e_F]`` (``F + 1`` vectors),
  the output is ``d`` concatenated with ``<z_i, z_j>`` for all ``i < j``:
  ``D + (F + 1) F / 2`` features.
* ``dcn``: DCNv2's low-rank cross network (Wang et al., 2021) on ``x0 = concat(d, e)``
  (``(F + 1) D`` features), as MLPerf's ``dlrm_dcnv2``:
  ``x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l`` with ``V_l`` of rank ``r``.

The bottom MLP has a ReLU after every layer (its last width must be ``D``); the top MLP has
a ReLU after every layer but the last, which outputs one logit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

from harness.reference.data.batches import NUM_DENSE, Batch
from harness.reference.models import dotkernel
from harness.reference.models.embeddings import (
    FusedEmbeddingCollection,
    GroupedEmbeddingCollection,
    SparseOptimizerConfig,
)
from harness.rules.specs import (  # the spec's own enum and check
    Interaction,
    check_architecture,
)


@dataclass(frozen=True)
class DLRMConfig:
    """The architecture. Sizes are layer widths after the input, e.g. ``bottom_mlp=(512, 256, 64)``.

    ``embedding_dims`` gives each table its own dimension (as Neo's largest models have, 64 to
    256); ``None`` gives every table ``embedding_dim``. Tables of several dimensions need the DCN
    interaction (the dot interaction takes the dot products of equal-length vectors); the bottom
    MLP ends at ``embedding_dim`` for the dot interaction, at any width for DCN.
    """

    table_rows: tuple[int, ...]
    embedding_dim: int
    pooling: tuple[int, ...]
    bottom_mlp: tuple[int, ...]
    top_mlp: tuple[int, ...]
    interaction: Interaction = Interaction.DOT
    dcn_layers: int = 3
    dcn_rank: int = 512
    num_dense: int = NUM_DENSE
    embedding_dims: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        check_architecture(self)  # the spec's own check: a spec and its config refuse alike

    @property
    def num_sparse(self) -> int:
        return len(self.table_rows)

    @property
    def dims(self) -> tuple[int, ...]:
        """Each table's embedding dimension."""
        return self.embedding_dims if self.embedding_dims is not None else (self.embedding_dim,) * self.num_sparse

    @property
    def uniform_dims(self) -> bool:
        return len(set(self.dims)) <= 1

    @property
    def interaction_width(self) -> int:
        """Width of the interaction's output, the top MLP's input."""
        f, d = self.num_sparse, self.embedding_dim
        if self.interaction is Interaction.DOT:
            return d + (f + 1) * f // 2
        return self.bottom_mlp[-1] + sum(self.dims)


def _mlp(in_features: int, widths: Sequence[int], *, relu_last: bool, device) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, width in enumerate(widths):
        layers.append(nn.Linear(in_features, width, device=device))
        if relu_last or i < len(widths) - 1:
            layers.append(nn.ReLU())
        in_features = width
    return nn.Sequential(*layers)


class DenseArch(nn.Module):
    """The bottom MLP."""

    def __init__(self, num_dense: int, widths: Sequence[int], device=None):
        super().__init__()
        self.mlp = _mlp(num_dense, widths, relu_last=True, device=device)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        """``B x num_dense`` -> ``B x D``."""
        return self.mlp(dense)


class SparseArch(nn.Module):
    """The embedding bags of all categorical features."""

    def __init__(self, embeddings: FusedEmbeddingCollection | GroupedEmbeddingCollection):
        super().__init__()
        # the tables as built; a session may put them behind a cache on the SSD tier
        # (harness.reference.tiered.TieredEmbeddingCollection), which looks them up the same way
        self.embeddings: nn.Module = embeddings

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        """``B x L`` per-table ids -> ``B x F x D`` pooled embeddings (tables of one dimension), or
        ``B x sum(dims)``, each table's vector after the previous one's (several dimensions)."""
        return self.embeddings(sparse)


class _PairwiseDots(torch.autograd.Function):
    """``<z_i, z_j>`` for the pairs ``i < j`` listed (flattened) in ``pairs``.

    Autograd would differentiate ``bmm(z, z^T)`` through both operands (two batched
    matmuls); since ``d<z_i, z_j>/dz`` is symmetric, one suffices:
    ``grad_z = (G + G^T) z`` with ``G`` the ``(F+1) x (F+1)`` gradient of the dots.

    ``G + G^T`` is gathered, not added: entry ``(i, j)`` of it is the gradient of pair
    ``(min(i, j), max(i, j))``, zero on the diagonal (``mirror`` lists, per entry, that pair's
    column of the gradient, or the zero column appended after the last). Both directions use
    ``gather`` with an expanded index, several times faster in bf16 than ``index_select`` over
    the second dimension, and no ``B x n x n`` sum is made.
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor, pairs: torch.Tensor, mirror: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(z, mirror)
        dots = torch.bmm(z, z.transpose(1, 2)).flatten(1)
        return torch.gather(dots, 1, pairs.expand(dots.shape[0], -1))

    @staticmethod
    def backward(ctx, grad_dots: torch.Tensor):
        z, mirror = ctx.saved_tensors
        n = z.shape[1]
        padded = torch.nn.functional.pad(grad_dots, (0, 1))
        g = torch.gather(padded, 1, mirror.expand(padded.shape[0], -1)).view(-1, n, n)
        if g.dtype == z.dtype:
            return torch.bmm(g, z), None, None
        # under autocast the forward's bmm ran in the gradient's type (fp32 tables' vectors beside bf16
        # dense ones): its backward too, the result in z's type, as autograd's cast would give it
        return torch.bmm(g, z.to(g.dtype)).to(z.dtype), None, None


class InteractionArch(nn.Module):
    """DLRM's pairwise dot-product interaction."""

    def __init__(self, num_sparse: int, device=None):
        super().__init__()
        n = num_sparse + 1
        rows, cols = torch.triu_indices(n, n, offset=1)
        pairs = rows * n + cols
        mirror = torch.full((n * n,), pairs.numel(), dtype=torch.int64)  # the diagonal: the zero column
        mirror[pairs] = mirror[cols * n + rows] = torch.arange(pairs.numel())
        self.register_buffer("pairs", pairs.to(device), persistent=False)
        self.register_buffer("mirror", mirror.to(device), persistent=False)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """``B x D`` and ``B x F x D`` -> ``B x (D + (F + 1) F / 2)``.

        Example::

            arch = InteractionArch(num_sparse=3)
            arch(torch.rand(2, 8), torch.rand(2, 3, 8)).shape  # torch.Size([2, 14])
        """
        if dotkernel.applies(dense, sparse):
            return cast(torch.Tensor, _CompiledDots.apply(dense, sparse))
        z = torch.cat([dense.unsqueeze(1), sparse], dim=1)
        return torch.cat([dense, _PairwiseDots.apply(z, self.pairs, self.mirror)], dim=1)


class _CompiledDots(torch.autograd.Function):
    """The interaction of bf16 vectors on a CPU in one compiled pass each way
    (:mod:`~harness.reference.models.dotkernel`): the same output and gradients as the concatenations
    and :class:`_PairwiseDots` within a bf16 rounding (its sums in one fixed order; where torch's batched
    matmul sums in that order too, as with AVX512-BF16 without AMX, bit for bit)."""

    @staticmethod
    def forward(ctx, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(dense, sparse)
        return dotkernel.forward(dense, sparse)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        dense, sparse = ctx.saved_tensors
        return dotkernel.backward(dense, sparse, grad_out)


class InteractionDCNArch(nn.Module):
    """DCNv2's low-rank cross network over the concatenated dense and sparse vectors."""

    def __init__(self, in_features: int, num_layers: int, rank: int, device=None):
        super().__init__()
        self.v = nn.ModuleList(nn.Linear(in_features, rank, bias=False, device=device) for _ in range(num_layers))
        self.w = nn.ModuleList(nn.Linear(rank, in_features, bias=True, device=device) for _ in range(num_layers))

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """``B x D`` and ``B x F x D`` (or ``B x sum(dims)``) -> ``B x (D + sum(dims))``."""
        x0 = torch.cat([dense, sparse.flatten(1)], dim=1)
        x = x0
        for v, w in zip(self.v, self.w):
            x = x0 * w(v(x)) + x
        return x


class OverArch(nn.Module):
    """The top MLP, ending in one logit."""

    def __init__(self, in_features: int, widths: Sequence[int], device=None):
        super().__init__()
        self.mlp = _mlp(in_features, widths, relu_last=False, device=device)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """``B x in_features`` -> ``B`` logits."""
        return self.mlp(features).squeeze(1)


class DLRM(nn.Module):
    """DenseArch + SparseArch + interaction + OverArch.

    Args:
        config: the architecture.
        sparse_optimizer: the optimizer fused into the embeddings' backward (``None`` for
            inference); the dense parameters are optimised by a torch optimizer over
            :meth:`dense_parameters`.
        device: ``torch.device("meta")`` builds the model without allocating memory.
        seed: the seed of the embedding tables' initial weights (the dense layers take torch's
            generator, which building the tables does not touch).
        embedding_device: where the tables are built (default ``device``); ``"meta"`` describes
            them without memory, for a sharded run whose ranks make only their own shards.
        table_dtype: the tables' storage type (fp32, bf16 or fp16; see
            :mod:`harness.reference.models.numerics`). The dense layers' weights are fp32 (the master
            weights), whatever the precision they compute in.
    """

    def __init__(self, config: DLRMConfig, sparse_optimizer: SparseOptimizerConfig | None = None, device=None, *,
                 seed: int = 0, embedding_device=None, table_dtype: torch.dtype = torch.float32):
        super().__init__()
        self.config = config
        self.dense_arch = DenseArch(config.num_dense, config.bottom_mlp, device=device)
        tables_device = device if embedding_device is None else embedding_device
        if config.uniform_dims:
            tables: FusedEmbeddingCollection | GroupedEmbeddingCollection = FusedEmbeddingCollection(
                config.table_rows, config.embedding_dim, config.pooling, optimizer=sparse_optimizer,
                device=tables_device, seed=seed, dtype=table_dtype,
            )
        else:
            tables = GroupedEmbeddingCollection(config.table_rows, config.dims, config.pooling,
                                                optimizer=sparse_optimizer, device=tables_device, seed=seed,
                                                dtype=table_dtype)
        self.sparse_arch = SparseArch(tables)
        if config.interaction is Interaction.DOT:
            self.interaction: nn.Module = InteractionArch(config.num_sparse, device=device)
        else:
            self.interaction = InteractionDCNArch(config.interaction_width, config.dcn_layers, config.dcn_rank, device)
        self.over_arch = OverArch(config.interaction_width, config.top_mlp, device=device)

    def dense_parameters(self) -> list[nn.Parameter]:
        """Every parameter but the embedding tables (which have their fused optimizer)."""
        tables = {id(p) for p in self.sparse_arch.parameters()}
        return [p for p in self.parameters() if id(p) not in tables]

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """Click logits.

        Args:
            dense: ``B x 13`` float32 dense features.
            sparse: ``B x L`` int64 per-table ids (``L = sum(pooling)``).

        Returns:
            ``B`` logits (apply a sigmoid for click probabilities).

        Example::

            cfg = DLRMConfig(table_rows=(10, 20), embedding_dim=4, pooling=(1, 1),
                             bottom_mlp=(8, 4), top_mlp=(8, 1))
            DLRM(cfg)(torch.rand(3, 13), torch.tensor([[1, 2], [3, 4], [5, 6]])).shape  # torch.Size([3])
        """
        d = self.dense_arch(dense)
        e = self.sparse_arch(sparse)
        return self.over_arch(self.interaction(d, e))

    # what the training engine asks of any model: its loss and its predictions on a batch
    def batch_loss(self, batch: Batch) -> torch.Tensor:
        """Binary cross-entropy with logits over the batch's samples, their mean."""
        return nn.functional.binary_cross_entropy_with_logits(self(batch.dense, batch.sparse), batch.labels)

    def batch_scores(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits, labels)``, ``B`` each: what an AUC is computed over."""
        return self(batch.dense, batch.sparse), batch.labels
