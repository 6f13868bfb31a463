"""TorchRec's best CPU DLRM, for ``bench/throughput.py`` to time beside the others (imported only
when ``torchrec`` and ``fbgemm_gpu`` import; docs/performance.md, "TorchRec in the same run", says
how to install them).

The model is TorchRec's own (:class:`torchrec.models.dlrm.DLRM` for the dot interaction,
:class:`torchrec.models.dlrm.DLRM_DCN` for DCN: the same layers as the bench's, its own initial
weights) trained as TorchRec trains it, in its fastest configuration measured on this CPU:

* the tables an :class:`~torchrec.EmbeddingBagCollection` sharded by
  :class:`~torchrec.distributed.DistributedModelParallel` on a one-process gloo group
  (127.0.0.1), every table table-wise, FBGEMM's fused kernel (TBE) with its optimizer fused into
  the backward: the bench's optimizer, ``OptimType.EXACT_ADAGRAD`` (one fp32 accumulator per
  value, as the other models' Adagrad) or with ``--sparse-optimizer rowwise_adagrad``
  ``EXACT_ROWWISE_ADAGRAD`` (one per row, as ours then), fp32 tables;
* the dense part (bottom MLP, interaction, top MLP) and the loss under
  ``torch.autocast("cpu", dtype=torch.bfloat16)``, whatever the bench's ``--precision``;
* the dense parameters stepped by ``torch.optim.Adagrad`` as the bench's plain models' are (same
  learning rate and epsilon); DMP wraps them in its default DDP (gloo, one rank).

A step is a user's: zero the dense gradients, forward and loss under autocast, backward (which
updates the tables), the dense optimizer's step. The bench's batches are turned into
:class:`~torchrec.sparse.jagged_tensor.KeyedJaggedTensor` once, before timing, as a TorchRec data
loader hands them over.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import warnings
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from fbgemm_gpu.split_embedding_configs import EmbOptimType as OptimType
from torch import nn
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.embedding_types import EmbeddingComputeKernel
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.sharding_plan import construct_module_sharding_plan, table_wise
from torchrec.distributed.types import ShardingPlan
from torchrec.models.dlrm import DLRM

from harness.reference.data.batches import Batch
from harness.reference.models.dlrm import DLRMConfig, Interaction

try:
    from torchrec.models.dlrm import DLRM_DCN
except ImportError:  # an older TorchRec without the DCN model
    DLRM_DCN = None


def label(rowwise: bool) -> str:
    """The model's line in the bench's output."""
    return f"TorchRec best (TBE fp32 tables + fused {'row-wise ' if rowwise else ''}Adagrad, autocast bf16)"


def unsupported(cfg: DLRMConfig, device: torch.device) -> str | None:
    """Why TorchRec cannot run ``cfg`` on ``device`` here (None where it can)."""
    if device.type != "cpu":
        return f"TorchRec's baseline runs on CPU only (fbgemm-gpu-cpu), not on {device.type}"
    if cfg.interaction is Interaction.DCN and DLRM_DCN is None:
        return "this TorchRec has no DLRM_DCN (the dcnv2 config's DCN interaction)"
    if cfg.interaction not in (Interaction.DOT, Interaction.DCN):
        return f"TorchRec's DLRM models have no {cfg.interaction.value} interaction"
    return None


@contextlib.contextmanager
def quiet():
    """Without TorchRec's and DDP's deprecation warnings (and torch.fx's log line at the first
    forward), which say nothing about the step timed."""
    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        yield


def _process_group() -> None:
    """A one-process gloo group on 127.0.0.1 (reused where one exists)."""
    if dist.is_initialized():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)


def _model(cfg: DLRMConfig) -> nn.Module:
    tables = [
        EmbeddingBagConfig(name=f"t{f}", embedding_dim=cfg.embedding_dim, num_embeddings=rows,
                           feature_names=[f"f{f}"])
        for f, rows in enumerate(cfg.table_rows)
    ]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))  # DMP allocates the shards
    if cfg.interaction is Interaction.DCN:
        return DLRM_DCN(ebc, cfg.num_dense, list(cfg.bottom_mlp), list(cfg.top_mlp), dcn_num_layers=cfg.dcn_layers,
                        dcn_low_rank_dim=cfg.dcn_rank, dense_device=torch.device("cpu"))
    return DLRM(ebc, cfg.num_dense, list(cfg.bottom_mlp), list(cfg.top_mlp), dense_device=torch.device("cpu"))


def keyed(batch: Batch, cfg: DLRMConfig) -> KeyedJaggedTensor:
    """The batch's ids as TorchRec takes them: feature by feature, each sample's ``pooling`` ids."""
    b = batch.sparse.shape[0]
    cols = torch.tensor((0, *cfg.pooling)).cumsum(0).tolist()
    values = torch.cat([batch.sparse[:, cols[f]:cols[f + 1]].reshape(-1) for f in range(len(cfg.pooling))])
    lengths = torch.tensor(cfg.pooling).repeat_interleave(b)
    return KeyedJaggedTensor.from_lengths_sync([f"f{f}" for f in range(len(cfg.pooling))], values, lengths)


def build(cfg: DLRMConfig, lr: float, batches: Sequence[Batch], rowwise: bool = False
          ) -> tuple[nn.Module, Callable[[Batch], None]]:
    """TorchRec's sharded model and its training step over ``batches`` (only these: their ids are
    turned into KeyedJaggedTensors here, once); the tables' fused optimizer Adagrad, or row-wise
    Adagrad with ``rowwise``."""
    _process_group()
    device = torch.device("cpu")
    optimizer = OptimType.EXACT_ROWWISE_ADAGRAD if rowwise else OptimType.EXACT_ADAGRAD
    fused = {"optimizer": optimizer, "learning_rate": lr, "eps": 1e-8}
    sharder = EmbeddingBagCollectionSharder(fused_params=fused)
    model = _model(cfg)
    ebc = model.sparse_arch.embedding_bag_collection
    every_table = {c.name: table_wise(rank=0, compute_kernel=EmbeddingComputeKernel.FUSED.value)
                   for c in ebc.embedding_bag_configs()}
    plan = ShardingPlan({"sparse_arch.embedding_bag_collection": construct_module_sharding_plan(
        ebc, every_table, sharder=sharder, local_size=1, world_size=1, device_type="cpu")})
    with quiet():
        model = DistributedModelParallel(model, device=device, plan=plan, sharders=[sharder])
    fused_names = {name for name, _ in model.fused_optimizer.params.items()}
    dense = [p for name, p in model.named_parameters() if name not in fused_names and p.requires_grad]
    optimizer = torch.optim.Adagrad(dense, lr=lr, eps=1e-8)
    loss_fn = nn.BCEWithLogitsLoss()
    kjts = {id(b): keyed(b, cfg) for b in batches}

    def step(batch: Batch) -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(model(batch.dense, kjts[id(batch)]).squeeze(-1), batch.labels)
        loss.backward()  # the tables' Adagrad runs here, fused into FBGEMM's backward
        optimizer.step()

    return model, step
