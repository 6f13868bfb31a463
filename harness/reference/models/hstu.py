"""The HSTU ranker of MLPerf's ``dlrmv4`` (Zhai et al., "Actions Speak Louder than Words", 2024),
written from the paper and the description of mlcommons/training ``recommendation_v4``.

::

    per event: item, artist, album ids --> sequence tables (fused, row-wise Adagrad in backward)
        x = content_mlp(item) + additional_mlp([artist, album]) + action_mlp(action embedding)
    per user:  uid, the 7 hashed crosses --> contextual tables --> one linear per contextual token
    sequence  = [contextual tokens, history, candidates]            (jagged, B users)
        x * sqrt(D) + position(recency) + time(bucket of the gap to the user's last event), dropout
        --> num_layers x STU:
              u, v, q, k = split(LayerNorm(x) W + b);  u = silu(u)
              a = attention(q, k, v)                    (pointwise SiLU, target-aware causal mask)
              x = x + dropout([u, a, u * LayerNorm(a)]) W_out
        --> each candidate's row: LayerNorm, times item_mlp([item, artist, album]) of the candidate
        --> head MLP --> one logit per candidate

Each ``*_mlp`` is the reference's ``Linear -> SwishLayerNorm -> Linear -> LayerNorm`` (SwishLayerNorm
``x * sigmoid(LayerNorm(x))``); the head is ``Linear -> SwishLayerNorm -> Linear(1)``. Positions
count back from the end of the history (the latest event is ``c + 1``, every candidate ``c``, the
``c`` contextual tokens ``0 .. c - 1``), as the reference's positional encoder does, in a table of
``position_buckets`` rows (the reference's 8,192, ``modules/dlrm_hstu.py`` line 208). Time buckets are
``floor(f(gap / 60 s))`` with ``f = sqrt`` (the reference's default, which its ranker uses) or ``log``,
clipped to ``[0, time_buckets]``; contextual tokens have timestamp 0.

The contextual tokens are the model's ``contextual`` features, in order: ``uid`` and the dataset's
hashed crosses (``dataset.cross_features``, ids hashed by the data set as the reference hashes them:
:mod:`harness.reference.data.crosses`), each one row of a table of its own, projected by a linear of
its own, as the reference's ``contextual_feature_to_max_length`` (uid, then the 7 crosses, one each).

The initialisation is the reference's: the STU layers' projections Xavier uniform (``modules/stu.py``),
every other linear of the transducer (the content, artist-album and action MLPs) Xavier normal
(``modules/hstu_transducer.py`` lines 82-91, over the preprocessor's Xavier uniform), the item MLP
and the head Xavier uniform (``init_mlp_weights_optional_bias``), biases zero; the contextual
projections normal with std ``sqrt(2 / (2 D))``; the position table uniform in
``+-sqrt(1 / position_buckets)``, the time table (``time_buckets + 1`` rows) in
``+-sqrt(1 / time_buckets)`` (``modules/positional_encoder.py``); action vectors normal (std 0.1).

What differs from the reference, and why:

* actions are ids (``EventBatch.action``, 0 = unknown on candidates) with one learned vector each,
  where the reference explodes a bitmask of actions into one vector per set bit plus one learned
  vector for every candidate: the same information for one action per event;
* the output postprocessor is a LayerNorm (the reference also feeds hour-of-day and day-of-week
  phases through a linear before it);
* the reference's ranker tells its STU layers that there are no contextual tokens (plain causal
  attention over them); ``contextual_attention: full`` gives them the mask of
  :mod:`~harness.reference.models.hstu_attention` instead (they see all history, all see them).
* one table dimension: the tables' dimension is the model's (``embedding_dim``; both 512 there).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.errors import HarnessError
from harness.reference.data.crosses import cross_features
from harness.reference.data.event_batch import EventBatch
from harness.reference.models.embeddings import FusedEmbeddingCollection, SparseOptimizerConfig
from harness.reference.models.hstu_attention import batch_max_seq_len, jagged_attention, plain_attention
from harness.rules.specs import EmbeddingOptimizer

USER_FEATURE = "uid"  # the contextual feature every EventBatch carries; the others are its crosses
TIME_BUCKETINGS = ("sqrt", "log")
CONTEXTUAL_ATTENTIONS = ("causal", "full")
ATTENTIONS = {"jagged": jagged_attention, "plain": plain_attention}
_LN_EPS = 1e-6  # the STU layers' LayerNorms, as the reference
_MLP_LN_EPS = 1e-5


@dataclass(frozen=True)
class HSTUConfig:
    """The ranker's architecture and table sizes (:meth:`from_spec` documents the spec keys)."""

    embedding_dim: int
    num_layers: int
    num_heads: int
    attention_dim: int
    linear_dim: int
    max_sequence_length: int
    item_rows: int
    artist_rows: int
    album_rows: int
    users: int
    actions: int
    input_dropout: float = 0.2
    linear_dropout: float = 0.1
    time_buckets: int = 2048
    time_bucketing: str = "sqrt"
    contextual: tuple[str, ...] = ("uid",)
    contextual_attention: str = "causal"
    cross_features: tuple[tuple[str, int], ...] = ()  # the dataset's crosses (name, rows), in EventBatch.cross order
    position_rows: int | None = None  # rows of the position table (None: what max_sequence_length needs)
    action_embedding_dim: int = 8
    preprocessor_hidden_dim: int = 256
    head_hidden_dim: int = 512
    embedding_optimizer: EmbeddingOptimizer = EmbeddingOptimizer.ROWWISE_ADAGRAD

    def __post_init__(self) -> None:
        for name in ("embedding_dim", "num_layers", "num_heads", "attention_dim", "linear_dim",
                     "max_sequence_length", "item_rows", "artist_rows", "album_rows", "users", "actions",
                     "time_buckets", "action_embedding_dim", "preprocessor_hidden_dim", "head_hidden_dim"):
            if int(getattr(self, name)) < 1:
                raise HarnessError(f"hstu model: {name} must be at least 1, not {getattr(self, name)}")
        for name in ("input_dropout", "linear_dropout"):
            if not 0.0 <= float(getattr(self, name)) < 1.0:
                raise HarnessError(f"hstu model: {name} must lie in [0, 1), not {getattr(self, name)}")
        known = [USER_FEATURE, *(name for name, _ in self.cross_features)]
        unknown = [c for c in self.contextual if c not in known]
        if unknown or len(set(self.contextual)) != len(self.contextual):
            raise HarnessError(f"hstu model: contextual features {list(self.contextual)}: each at most once, "
                               f"from {known} (uid and the dataset's cross_features)")
        if self.position_rows is not None and self.position_rows < self.max_sequence_length + self.num_contextual + 1:
            raise HarnessError(f"hstu model: position_buckets {self.position_rows} cannot hold every recency of "
                               f"{self.max_sequence_length} events and {self.num_contextual} contextual tokens "
                               f"(at least {self.max_sequence_length + self.num_contextual + 1})")
        if self.time_bucketing not in TIME_BUCKETINGS:
            raise HarnessError(f"hstu model: time_bucketing {self.time_bucketing!r} is not one of {list(TIME_BUCKETINGS)}")
        if self.contextual_attention not in CONTEXTUAL_ATTENTIONS:
            raise HarnessError(f"hstu model: contextual_attention {self.contextual_attention!r} is not one of "
                               f"{list(CONTEXTUAL_ATTENTIONS)}")

    @property
    def num_contextual(self) -> int:
        return len(self.contextual)

    @property
    def position_buckets(self) -> int:
        """Rows of the position table: ``position_rows``, by default every recency of a sequence of
        ``max_sequence_length`` events after the contextual tokens."""
        return self.position_rows or self.max_sequence_length + self.num_contextual + 1

    @property
    def contextual_tables(self) -> tuple[str, ...]:
        """The contextual collection's tables: :attr:`contextual`, or an unused uid table when it is
        empty (the collection is never empty; the planner counts the same tables)."""
        return self.contextual or (USER_FEATURE,)

    @property
    def contextual_rows(self) -> list[int]:
        """Rows of each of :attr:`contextual_tables`."""
        rows = {USER_FEATURE: self.users, **dict(self.cross_features)}
        return [rows[c] for c in self.contextual_tables]

    def contextual_ids(self, batch: EventBatch) -> torch.Tensor:
        """The contextual tables' ids of a batch, one row per user: ``[B, len(contextual_tables)]``
        (the uid, or a cross's column of ``batch.cross``, in :attr:`contextual_tables`' order)."""
        column = {name: j for j, (name, _) in enumerate(self.cross_features)}
        if batch.cross.shape[1] != len(self.cross_features):
            raise HarnessError(f"hstu model: the batch carries {batch.cross.shape[1]} cross features, the model's "
                               f"dataset {len(self.cross_features)}")
        return torch.stack([batch.uid if c == USER_FEATURE else batch.cross[:, column[c]]
                            for c in self.contextual_tables], dim=1)

    _MODEL_KEYS = ("embedding_dim", "num_layers", "num_heads", "attention_dim", "linear_dim",
                   "max_sequence_length", "input_dropout", "linear_dropout", "time_buckets", "time_bucketing",
                   "contextual", "contextual_attention", "action_embedding_dim", "preprocessor_hidden_dim",
                   "head_hidden_dim", "embedding_optimizer", "position_buckets")
    _DATASET_KEYS = ("item_rows", "artist_rows", "album_rows", "users", "actions")

    @classmethod
    def from_spec(cls, model: Mapping[str, Any], dataset: Mapping[str, Any]) -> HSTUConfig:
        """The config of a benchmark spec's ``model`` and ``dataset`` sections.

        ``model``: ``family: hstu``; required ``embedding_dim`` (tables and layers), ``num_layers``,
        ``num_heads``, ``attention_dim`` (q/k per head), ``linear_dim`` (u/v per head),
        ``max_sequence_length``; optional ``input_dropout`` (0.2), ``linear_dropout`` (0.1),
        ``time_buckets`` (2048), ``time_bucketing`` (``sqrt`` | ``log``), ``contextual`` (``[uid]``; also
        the names of the dataset's ``cross_features``), ``position_buckets`` (the position table's rows; by
        default what ``max_sequence_length`` and the contextual tokens need),
        ``contextual_attention`` (``causal`` as the reference's ranker | ``full``),
        ``action_embedding_dim`` (8), ``preprocessor_hidden_dim`` (256), ``head_hidden_dim`` (512),
        ``embedding_optimizer`` (``rowwise_adagrad``). ``dataset``: ``item_rows``, ``artist_rows``,
        ``album_rows``, ``users``, ``actions`` (action ids, 0 = unknown included), ``cross_features``
        (optional); other dataset keys are the dataset's own. A model key not listed is refused.
        """
        if model.get("family") != "hstu":
            raise HarnessError(f"hstu model: the spec's model family is {model.get('family')!r}, not 'hstu'")
        unknown = sorted(set(model) - set(cls._MODEL_KEYS) - {"family"})
        if unknown:
            raise HarnessError(f"hstu model: unknown keys {unknown}; known: {list(cls._MODEL_KEYS)}")
        missing = [k for k in ("embedding_dim", "num_layers", "num_heads", "attention_dim", "linear_dim",
                               "max_sequence_length") if k not in model]
        missing += [k for k in cls._DATASET_KEYS if k not in dataset]
        if missing:
            raise HarnessError(f"hstu model: the spec lacks {missing}")
        values: dict[str, Any] = {k: model[k] for k in cls._MODEL_KEYS if k in model}
        values.update({k: int(dataset[k]) for k in cls._DATASET_KEYS})
        if "contextual" in values:
            values["contextual"] = tuple(values["contextual"])
        if "position_buckets" in values:
            values["position_rows"] = int(values.pop("position_buckets"))
        values["cross_features"] = tuple((c.name, c.rows) for c in cross_features(dataset))
        if "embedding_optimizer" in values:
            try:
                values["embedding_optimizer"] = EmbeddingOptimizer(values["embedding_optimizer"])
            except ValueError:
                raise HarnessError(f"hstu model: embedding_optimizer {values['embedding_optimizer']!r} is not one of "
                                   f"{[e.value for e in EmbeddingOptimizer]}") from None
        return cls(**values)


class FP32LayerNorm(nn.LayerNorm):
    """A LayerNorm computed in fp32 whatever its input's type, the result in the input's type: the
    reference's ``pytorch_layer_norm`` (``ops/pytorch/pt_layer_norm.py``). In fp32, ``nn.LayerNorm``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            return F.layer_norm(x.float(), self.normalized_shape, self.weight.float(), self.bias.float(),
                                self.eps).to(x.dtype)


class SwishLayerNorm(nn.Module):
    """``x * sigmoid(LayerNorm(x))``, in fp32 whatever the input's type (the reference's
    ``pytorch_swish_layer_norm``), the result in the input's type."""

    def __init__(self, dim: int, eps: float = _MLP_LN_EPS):
        super().__init__()
        self.norm = FP32LayerNorm(dim, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.sigmoid(self.norm(x32))).to(x.dtype)


def _projection(in_features: int, hidden: int, out_features: int) -> nn.Sequential:
    """``Linear -> SwishLayerNorm -> Linear -> LayerNorm``: the reference's embedding MLPs."""
    return nn.Sequential(nn.Linear(in_features, hidden), SwishLayerNorm(hidden), nn.Linear(hidden, out_features),
                         FP32LayerNorm(out_features, eps=_MLP_LN_EPS))


class STULayer(nn.Module):
    """One HSTU layer over a jagged ``[N, D]`` sequence (see the module's diagram)."""

    def __init__(self, config: HSTUConfig, attention: str = "jagged"):
        super().__init__()
        d, h = config.embedding_dim, config.num_heads
        self.heads, self.attention_dim, self.linear_dim = h, config.attention_dim, config.linear_dim
        self.input_norm = FP32LayerNorm(d, eps=_LN_EPS)
        self.uvqk = nn.Linear(d, h * (2 * config.linear_dim + 2 * config.attention_dim))
        self.output_norm = FP32LayerNorm(h * config.linear_dim, eps=_LN_EPS)
        self.output = nn.Linear(3 * h * config.linear_dim, d, bias=False)
        self.dropout = config.linear_dropout
        self.attention = ATTENTIONS[attention]

    def forward(self, x: torch.Tensor, offsets: torch.Tensor, num_candidates: torch.Tensor, max_seq_len: int,
                contextual: int) -> torch.Tensor:
        """``[N, D]`` -> ``[N, D]``; ``offsets`` ``[B + 1]``, ``num_candidates`` ``[B]``; ``max_seq_len``
        the attention's divisor; ``contextual`` the leading tokens of each sequence the mask treats as
        contextual."""
        hv, hq = self.heads * self.linear_dim, self.heads * self.attention_dim
        u, v, q, k = torch.split(self.uvqk(self.input_norm(x)), [hv, hv, hq, hq], dim=1)
        u = F.silu(u)
        a = self.attention(q.reshape(-1, self.heads, self.attention_dim), k.reshape(-1, self.heads, self.attention_dim),
                           v.reshape(-1, self.heads, self.linear_dim), offsets, num_candidates, max_seq_len,
                           contextual=contextual).reshape(-1, hv)
        # the norm, the multiply, the concatenation and the dropout in fp32, then the activations' type
        # (the reference's pytorch_norm_mul_dropout, ops/pytorch/pt_hstu_linear.py)
        u32, a32 = u.float(), a.float()
        y = torch.cat([u32, a32, u32 * self.output_norm(a32)], dim=1)
        return x + self.output(F.dropout(y, self.dropout, self.training).to(u.dtype))


class HSTURanker(nn.Module):
    """The HSTU ranker: one logit per candidate of an :class:`EventBatch`.

    Args:
        config: the architecture and table sizes.
        sparse_optimizer: the optimizer fused into the tables' backward (``None``: frozen tables);
            its kind should be ``config.embedding_optimizer``. Dense parameters are for a torch
            optimizer over :meth:`dense_parameters`.
        seed: the tables' initial weights (:func:`~harness.reference.models.embeddings.initial_weights`
            of tables 0-2: item, artist, album; 3: uid) and the dense layers' (a ``torch.Generator``
            seeded by it; the global generator is not touched).
        attention: ``"jagged"`` (the fast path) or ``"plain"`` (the padded oracle).
        dtype: the tables' storage type (fp32, bf16, fp16), as
            :class:`~harness.reference.models.embeddings.FusedEmbeddingCollection` takes it.
        device: where the model lives.
        embedding_device: where the tables are built (default ``device``); ``"meta"`` describes
            them without memory, for a sharded run whose ranks make only their shards
            (:mod:`harness.reference.distributed.hstu`).
    """

    def __init__(self, config: HSTUConfig, sparse_optimizer: SparseOptimizerConfig | None = None, *, seed: int = 0,
                 attention: str = "jagged", dtype: torch.dtype = torch.float32, device=None, embedding_device=None):
        super().__init__()
        if attention not in ATTENTIONS:
            raise HarnessError(f"hstu attention {attention!r} is not one of {list(ATTENTIONS)}")
        self.config, self.attention = config, attention
        # torch's layers draw their default initialisation from the global generator: keep it as it
        # was (the dense weights come from a generator of their own, below)
        with torch.random.fork_rng(devices=[]):
            self._build(sparse_optimizer, seed, dtype, device if embedding_device is None else embedding_device)
        self._init_dense(torch.Generator().manual_seed(int(seed)))
        if device is not None:  # the dense part (and the tables, unless only described)
            self._apply(lambda t: t if t.is_meta else t.to(device))

    def _build(self, sparse_optimizer: SparseOptimizerConfig | None, seed: int, dtype: torch.dtype, device) -> None:
        c, d = self.config, self.config.embedding_dim
        attention = self.attention
        self.embeddings = FusedEmbeddingCollection([c.item_rows, c.artist_rows, c.album_rows], d, [1, 1, 1],
                                                   optimizer=sparse_optimizer, device=device, seed=seed,
                                                   table_ids=(0, 1, 2), dtype=dtype)
        tables = c.contextual_rows
        self.contextual_embeddings = FusedEmbeddingCollection(tables, d, [1] * len(tables), optimizer=sparse_optimizer,
                                                              device=device, seed=seed,
                                                              table_ids=tuple(range(3, 3 + len(tables))), dtype=dtype)
        self.action_embeddings = nn.Parameter(torch.empty(c.actions, c.action_embedding_dim))
        self.preprocessor = nn.ModuleDict({
            "content": _projection(d, c.preprocessor_hidden_dim, d),
            "additional": _projection(2 * d, c.preprocessor_hidden_dim, d),
            "action": _projection(c.action_embedding_dim, c.preprocessor_hidden_dim, d)})
        self.contextual_weight = nn.Parameter(torch.empty(c.num_contextual, d, d))
        self.contextual_bias = nn.Parameter(torch.empty(c.num_contextual, d))
        self.position_embeddings = nn.Parameter(torch.empty(c.position_buckets, d))
        self.time_embeddings = nn.Parameter(torch.empty(c.time_buckets + 1, d))
        self.layers = nn.ModuleList(STULayer(c, attention) for _ in range(c.num_layers))
        self.output_norm = FP32LayerNorm(d, eps=_MLP_LN_EPS)
        self.item_mlp = _projection(3 * d, c.head_hidden_dim, d)
        self.head = nn.Sequential(nn.Linear(d, c.head_hidden_dim), SwishLayerNorm(c.head_hidden_dim),
                                  nn.Linear(c.head_hidden_dim, 1))

    @torch.no_grad()
    def _init_dense(self, g: torch.Generator) -> None:
        """The reference's initialisation (the module's docstring), drawn from ``g`` in the modules'
        order: the preprocessor's linears Xavier normal, every other linear Xavier uniform, biases
        zero, norms one and zero; action vectors normal (std 0.1), contextual projections normal (std
        ``sqrt(2 / (2 D))``) with zero biases; the position table uniform in ``+-sqrt(1 / rows)``, the
        time table in ``+-sqrt(1 / time_buckets)``."""
        normal = {id(m) for m in self.preprocessor.modules()}
        for module in self.modules():
            if isinstance(module, nn.Linear):
                fan = module.in_features + module.out_features
                if id(module) in normal:
                    module.weight.normal_(0.0, math.sqrt(2.0 / fan), generator=g)
                else:
                    bound = math.sqrt(6.0 / fan)
                    module.weight.uniform_(-bound, bound, generator=g)
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
        c = self.config
        self.action_embeddings.normal_(0.0, 0.1, generator=g)
        self.contextual_weight.normal_(0.0, math.sqrt(2.0 / (2 * c.embedding_dim)), generator=g)
        self.contextual_bias.zero_()
        for table, rows in ((self.position_embeddings, c.position_buckets), (self.time_embeddings, c.time_buckets)):
            bound = math.sqrt(1.0 / rows)
            table.uniform_(-bound, bound, generator=g)

    def tables(self) -> nn.ModuleList:
        """The fused tables: the per-event sequence tables and the contextual (uid) table."""
        return nn.ModuleList([self.embeddings, self.contextual_embeddings])

    def dense_parameters(self) -> list[nn.Parameter]:
        """Every parameter but the fused tables' (which their own optimizer updates in backward)."""
        tables = {id(p) for p in self.tables().parameters()}
        return [p for p in self.parameters() if id(p) not in tables]

    def set_learning_rate(self, lr: float) -> None:
        for table in (self.embeddings, self.contextual_embeddings):  # tables(), typed
            table.set_learning_rate(lr)

    def set_step(self, step: int, grad_unscale: float | None = None) -> None:
        for table in (self.embeddings, self.contextual_embeddings):
            table.set_step(step, grad_unscale)

    def forward(self, batch: EventBatch) -> torch.Tensor:
        """One logit per candidate, in the batch's candidate order: ``[C]``.

        Example::

            cfg = HSTUConfig(embedding_dim=8, num_layers=1, num_heads=2, attention_dim=4, linear_dim=4,
                             max_sequence_length=16, item_rows=10, artist_rows=5, album_rows=6, users=3,
                             actions=3)
            HSTURanker(cfg)(batch).shape  # torch.Size([batch.candidate_lengths.sum()])
        """
        events = self.embeddings(self.sequence_ids(batch))
        contextual = self.contextual_embeddings(self.contextual_ids(batch)) if self.config.num_contextual else None
        return self.dense_forward(batch, events, contextual)

    @staticmethod
    def sequence_ids(batch: EventBatch) -> torch.Tensor:
        """The sequence tables' ids of a batch, one row per event: ``[N, 3]`` (item, artist, album)."""
        return torch.stack([batch.item, batch.artist, batch.album], dim=1)

    def contextual_ids(self, batch: EventBatch) -> torch.Tensor:
        """The contextual tables' ids of a batch, one row per user (:meth:`HSTUConfig.contextual_ids`)."""
        return self.config.contextual_ids(batch)

    def dense_forward(self, batch: EventBatch, events: torch.Tensor, contextual: torch.Tensor | None,
                      max_seq_len: int | None = None) -> torch.Tensor:
        """:meth:`forward` from the tables' vectors on: ``events`` ``[N, 3, D]`` (the rows of
        :meth:`sequence_ids`), ``contextual`` ``[B, num_contextual, D]`` (of :meth:`contextual_ids`;
        None without contextual tokens). ``max_seq_len``: the attention's divisor, by default the batch's
        (:func:`~harness.reference.models.hstu_attention.batch_max_seq_len`); a sharded run passes
        the global batch's, so that its ranks compute what one process computes."""
        c = self.config
        ctx = c.num_contextual
        events = events.float()  # [N, 3, D]
        pre = self.preprocessor
        x = (pre["content"](events[:, 0]) + pre["additional"](events[:, 1:].flatten(1))
             + pre["action"](self.action_embeddings.index_select(0, batch.action)))
        lengths = batch.lengths + ctx
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])
        event_rows, contextual_rows = self._sequence_rows(batch, offsets)
        timestamps = torch.zeros(int(offsets[-1]), dtype=torch.int64).index_copy(0, event_rows, batch.timestamp)
        if ctx:
            assert contextual is not None
            contextual = contextual.float()  # [B, ctx, D]: feature j through its own linear j
            tokens = torch.baddbmm(self.contextual_bias.unsqueeze(1), contextual.transpose(0, 1),
                                   self.contextual_weight).transpose(0, 1).reshape(-1, c.embedding_dim)  # [B * ctx, D]
            order = torch.empty(int(offsets[-1]), dtype=torch.int64)
            order[contextual_rows] = torch.arange(contextual_rows.numel())
            order[event_rows] = torch.arange(event_rows.numel()) + contextual_rows.numel()
            x = torch.cat([tokens, x]).index_select(0, order)
        x = x * math.sqrt(c.embedding_dim) + self._encodings(offsets, lengths, batch.candidate_lengths, timestamps)
        x = F.dropout(x, c.input_dropout, self.training)
        if max_seq_len is None:
            max_seq_len = batch_max_seq_len(batch.history_lengths, batch.candidate_lengths, ctx)
        attend = ctx if c.contextual_attention == "full" else 0
        for layer in self.layers:
            x = layer(x, offsets, batch.candidate_lengths, max_seq_len, attend)
        candidates = batch.is_candidate()
        user = self.output_norm(x.index_select(0, event_rows[candidates]).float())
        item = self.item_mlp(events[candidates].flatten(1))
        return self.head(user * item).squeeze(1).float()

    def _sequence_rows(self, batch: EventBatch, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Where the batch's events and the contextual tokens sit in the sequences (``[N]``, ``[B * ctx]``)."""
        ctx = self.config.num_contextual
        lengths = batch.lengths
        user_of_event = torch.repeat_interleave(torch.arange(batch.users), lengths)
        position = torch.arange(int(lengths.sum())) - torch.repeat_interleave(batch.offsets()[:-1], lengths)
        event_rows = offsets[:-1][user_of_event] + ctx + position
        contextual_rows = (offsets[:-1].view(-1, 1) + torch.arange(ctx).view(1, -1)).reshape(-1)
        return event_rows, contextual_rows

    def _encodings(self, offsets: torch.Tensor, lengths: torch.Tensor, num_candidates: torch.Tensor,
                   timestamps: torch.Tensor) -> torch.Tensor:
        """Position (recency) plus time-bucket encodings of every row of the sequences: ``[N', D]``."""
        c = self.config
        ctx = c.num_contextual
        user = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
        position = torch.arange(int(offsets[-1])) - offsets[:-1][user]
        history_end = (lengths - num_candidates)[user]  # contextual tokens + history
        recency = history_end - torch.minimum(position, history_end) + ctx
        recency = torch.where(position < ctx, position, recency).clamp(max=c.position_buckets - 1)
        query_time = timestamps[offsets[1:] - 1][user]  # the user's last event's (its last candidate's)
        gap = (query_time - timestamps).double().clamp(min=1e-6) / 60.0
        scaled = gap.sqrt() if c.time_bucketing == "sqrt" else gap.log()
        bucket = scaled.clamp(min=0).long().clamp(max=c.time_buckets)
        # index_select, not t[idx]: its backward (index_add_) sums each row's gradients in index order
        # on any number of threads, where advanced indexing's (index_put_ with accumulate) adds them
        # atomically in parallel: two runs of the same seed at 2 threads parted by rounding
        return self.position_embeddings.index_select(0, recency) + self.time_embeddings.index_select(0, bucket)

    def loss(self, batch: EventBatch, logits: torch.Tensor) -> torch.Tensor:
        """Binary cross-entropy with logits over the candidates that carry a label, their mean (0 when
        none does); in fp32."""
        mask = batch.label_mask
        if not bool(mask.any()):
            return logits.float().sum() * 0.0
        return F.binary_cross_entropy_with_logits(logits.float()[mask], batch.labels.float()[mask])

    # what the training engine asks of any model: its loss and its predictions on a batch
    def batch_loss(self, batch: EventBatch) -> torch.Tensor:
        """:meth:`loss` of the batch's logits."""
        return self.loss(batch, self(batch))

    def batch_scores(self, batch: EventBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits, labels)`` of the candidates that carry a label: what an AUC is computed over."""
        mask = batch.label_mask
        return self(batch)[mask], batch.labels[mask]


def sparse_optimizer(config: HSTUConfig, learning_rate: float, eps: float = 1e-8) -> SparseOptimizerConfig:
    """The fused optimizer the config names, at ``learning_rate``."""
    return dataclasses.replace(SparseOptimizerConfig(kind=config.embedding_optimizer), learning_rate=learning_rate,
                               eps=eps)
