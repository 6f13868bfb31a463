"""MLPerf Inference ``dlrm-v3``, served here: its twin's data and model, the model trained and kept, a
request's cost, and the requests in the order the benchmark issues them.

**What is served.** ``dlrm-v3`` is an HSTU ranker (docs/dlrmv3.md) whose
item table alone is 1e9 rows of 512 fp16 (1 TB) and whose trained checkpoint and dataset are
downloads this project cannot make; its reference needs CUDA. So, as the training benchmarks do,
``harness infer --benchmark dlrm-v3`` trains its own model on its own twin of the reference's
streaming generator (:mod:`harness.reference.data.dlrmv3_streams`) at sizes this machine holds
(:data:`TWIN_DATA`, :data:`TWIN_MODEL`; every output says so), and serves the twin's inference
timestamps. The official sizes are planned by ``harness plan --benchmark dlrm-v3``.

**The model** is the project's HSTU ranker (:mod:`harness.reference.models.hstu`, held equal to
MLPerf Training's ``dlrmv4`` reference), with ``dlrm-v3``'s tables mapped onto it: its per-event
tables ``item_id`` (history items and candidates) and ``item_category_id`` are the ranker's item and
artist slots; ``dlrm-v3`` has no third per-event feature, so the album slot is a table of one row
(a learned constant); the contextual token is ``user_id`` (the ranker's ``uid``). An event's action
is its rating's integer part (1 to 5; 0, unknown, on candidates), what the reference encodes as
``item_weights`` (``action_weights[int(rating) - 1]``, one set bit per event): the same information,
one learned vector per action. Every event's timestamp is 1, as the reference's reader gives
(``get_timestamp_uih``), so the time encoding is one bucket and recency is told by position.

**Training** (:func:`trained_model`): the twin's training timestamps in time order (the users of a
timestamp in a seeded order), Adam on the dense part and row-wise Adagrad fused into the tables'
backward, fp32, one pass; the eval slot (every user's ``num_eval_candidates`` candidates after the
training timestamps) is scored at the end. The model, its item frequencies (what the SSD variants'
caches start with) and how it was trained are kept in a folder and reused by the same command.

**A request** is a user active at an inference timestamp: its history (every earlier slot) and its
``num_inference_candidates`` candidates, scored target-aware: one sequence ``[user, history,
candidates]`` per request, in which history positions see only the past and each candidate sees the
history and itself (:mod:`harness.reference.models.hstu_attention`), so the history's projections,
attention and layers are computed once per request, shared by every candidate
(:func:`request_cost` counts both ways). The attention's divisor is the request's own length, so a
request's scores do not depend on which requests are served with it.

**Requests in time order** (:class:`RequestLog`): the benchmark's queries must be issued in time
order (MLPerf Inference rules, FAQ; the reference's ``StreamingQuerySampler`` ignores LoadGen's
sample index and walks timestamps in order, a response carrying ``(ts_idx, query_idx)``). The twin's
requests are generated once, in that order (a timestamp's active users in increasing id, as the
reference's ``requests_per_ts.csv`` lists them), and kept compactly in the model folder.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from harness.errors import ErrorCategory, HarnessError
from harness.files import replace_atomic, write_atomic
from harness.inference.config import AGAIN
from harness.reference.data.dlrmv3_streams import Split, StreamingGenerator, StreamingRequests, StreamingSpec
from harness.reference.data.event_batch import UNKNOWN_ACTION, EventBatch
from harness.reference.models.hstu import HSTUConfig, HSTURanker, sparse_optimizer
from harness.reference.models.hstu_attention import jagged_attention
from harness.rules.auc import roc_auc

MLPERF_MODEL = "dlrm-v3"  # the benchmark's name in LoadGen's mlperf.conf and the results layout
MODEL_FILE, META_FILE, FREQ_FILE, REQUESTS_FILE = "model.pt", "model.json", "item-uses.npy", "requests.npz"

# The twin: the reference generator's laws (every other parameter its official value) at sizes two
# cores train in about a minute and serve within the Server bound: 2,048 users, 200,000 items in 16
# categories, 20 timestamps (18 training, 2 inference), about 14 items a user meets per slot (the
# official 100), 8 candidates per training sample (32), and the official 2,048 candidates per request.
TWIN_DATA = StreamingSpec(num_users=2048, num_items=200_000, num_categories=16, num_timestamps=20,
                          avg_samples_per_item=3, num_eval_candidates=8, num_inference_candidates=2048,
                          max_seq_len=4096, max_num_candidates=8, max_num_candidates_inference=2048)
# dlrm-v3's architecture (5 layers, 4 heads of 128, d 512) at d 64, 2 layers, 2 heads of 32
TWIN_MODEL: dict[str, Any] = {"embedding_dim": 64, "num_layers": 2, "num_heads": 2, "attention_dim": 32, "linear_dim": 32,
                  "input_dropout": 0.0, "linear_dropout": 0.0, "time_buckets": 64, "preprocessor_hidden_dim": 64,
                  "head_hidden_dim": 64}
# the official architecture (DLRMV3.md §1: configs.py:48-60, dlrm_hstu.py:66, :208-210), for the cost
OFFICIAL_MODEL: dict[str, Any] = {"embedding_dim": 512, "num_layers": 5, "num_heads": 4, "attention_dim": 128, "linear_dim": 128,
                      "time_buckets": 2048, "preprocessor_hidden_dim": 256, "head_hidden_dim": 512}
ACTIONS = 6  # 0 (unknown: candidates) and int(rating) 1..5
TRAIN_BATCH = 64  # users (rows) per training step
LEARNING_RATE = 2e-3
EVAL_USERS = 1024  # users whose eval slot scores the trained model
_S_TRAIN_ORDER = 97 << 20  # counter_rng stream of the training order (apart from dlrmv3_streams' 96 << 20)


def model_config(data: StreamingSpec = TWIN_DATA, model: dict[str, Any] | None = None) -> HSTUConfig:
    """The HSTU ranker for ``data`` (the module's docstring maps dlrm-v3's tables onto it)."""
    return HSTUConfig(**(TWIN_MODEL if model is None else model), max_sequence_length=data.max_seq_len,
                      item_rows=data.num_items, artist_rows=data.num_categories, album_rows=1,
                      users=data.num_users, actions=ACTIONS, contextual=("uid",))


# ---------------------------------------------------------------------------------- requests -> batches
def event_batch(rows: StreamingRequests) -> EventBatch:
    """The ranker's batch of ``rows``: per row its history then its candidates (see the module's docstring)."""
    hl, cl = rows.history_lengths.astype(np.int64), rows.candidate_lengths.astype(np.int64)
    lengths = hl + cl
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    n = int(lengths.sum())
    hist_at = np.repeat(starts, hl) + (np.arange(int(hl.sum())) - np.repeat(np.cumsum(hl) - hl, hl))
    cand_at = np.repeat(starts + hl, cl) + (np.arange(int(cl.sum())) - np.repeat(np.cumsum(cl) - cl, cl))
    item, cat, action = (np.zeros(n, dtype=np.int64) for _ in range(3))
    item[hist_at], item[cand_at] = rows.history_item_ids, rows.candidate_item_ids
    cat[hist_at], cat[cand_at] = rows.history_category_ids, rows.candidate_category_ids
    action[hist_at] = np.clip(rows.history_ratings.astype(np.int64), 1, ACTIONS - 1)  # the reader's .long()
    action[cand_at] = UNKNOWN_ACTION
    c = int(cl.sum())
    t = torch.from_numpy
    return EventBatch(uid=t(rows.users.astype(np.int64)), history_lengths=t(hl), candidate_lengths=t(cl),
                      item=t(item), artist=t(cat), album=torch.zeros(n, dtype=torch.int64), action=t(action),
                      timestamp=torch.ones(n, dtype=torch.int64),
                      labels=t(rows.candidate_labels.astype(np.float32)), label_mask=torch.ones(c, dtype=torch.bool),
                      cross=torch.zeros(len(rows), 0, dtype=torch.int64))


# ---------------------------------------------------------------------------------- the model kept
@dataclass(frozen=True)
class TrainedRanker:
    """The model served and how it was trained."""

    path: Path
    seed: int
    steps: int
    samples: int
    auc: float  # on the eval slot of EVAL_USERS users
    train_s: float
    reused: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "path": str(self.path)}


def train_order(data: StreamingSpec, seed: int) -> Iterator[tuple[int, np.ndarray]]:
    """The training timestamps in order, each with its active users in a seeded order."""
    gen = StreamingGenerator(data)
    rng = np.random.default_rng([seed, _S_TRAIN_ORDER])
    for ts in range(data.train_timestamps):
        users = gen.active_users(ts)
        yield ts, users[rng.permutation(users.size)]


def train(data: StreamingSpec, config: HSTUConfig, seed: int, progress: Callable[[str], None],
          steps: int | None = None) -> tuple[HSTURanker, np.ndarray, int, int]:
    """One pass over the training timestamps (at most ``steps`` steps); the model, the item ids'
    uses (history and candidates) over the samples trained on, the steps and the samples."""
    gen = StreamingGenerator(data)
    model = HSTURanker(config, sparse_optimizer(config, LEARNING_RATE), seed=seed)
    dense = torch.optim.Adam(model.dense_parameters(), lr=LEARNING_RATE, betas=(0.95, 0.999), eps=1e-8)
    uses = np.zeros(data.num_items, dtype=np.int64)
    step = samples = 0
    model.train()
    t0 = time.perf_counter()
    for ts, users in train_order(data, seed):
        for lo in range(0, users.size, TRAIN_BATCH):
            if steps is not None and step >= steps:
                return model, uses, step, samples
            rows = gen.train_samples(users[lo : lo + TRAIN_BATCH], ts)
            batch = event_batch(rows)
            uses += np.bincount(batch.item.numpy(), minlength=data.num_items)
            model.set_step(step)
            loss = model.batch_loss(batch)
            dense.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.dense_parameters(), 1.0)
            dense.step()
            step, samples = step + 1, samples + len(rows)
        progress(f"  timestamp {ts}: {step} steps, {samples} samples, loss {float(loss.detach()):.4f} "
                 f"({time.perf_counter() - t0:.0f} s)")
    return model, uses, step, samples


@torch.no_grad()
def eval_auc(model: HSTURanker, data: StreamingSpec, users: int = EVAL_USERS, batch: int = 256) -> float:
    """The AUC over the eval slot's candidates of the first ``users`` users."""
    gen = StreamingGenerator(data)
    model.eval()
    scores, labels = [], []
    ids = np.arange(min(users, data.num_users), dtype=np.int64)
    for lo in range(0, ids.size, batch):
        b = event_batch(gen.eval_samples(ids[lo : lo + batch]))
        scores.append(model(b).numpy())
        labels.append(b.labels.numpy())
    return roc_auc(np.concatenate(labels), np.concatenate(scores))


def trained_model(model_dir: Path, *, seed: int, steps: int | None, progress: Callable[[str], None],
                  data: StreamingSpec = TWIN_DATA,
                  config: HSTUConfig | None = None) -> tuple[TrainedRanker, dict[str, torch.Tensor], np.ndarray]:
    """The twin's model trained from ``seed``: loaded from ``model_dir`` when it is there, else trained
    and saved there (``model.pt``, ``item-uses.npy``; ``model.json`` last). Returns it, its state
    (tables without optimizer state) and the item ids' uses in training."""
    config = config or model_config(data)
    meta_path, model_path = model_dir / META_FILE, model_dir / MODEL_FILE
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
            state = torch.load(model_path, map_location="cpu", weights_only=True)
            uses = np.load(model_dir / FREQ_FILE)
            model = TrainedRanker(path=model_path, seed=int(meta["seed"]), steps=int(meta["steps"]),
                                  samples=int(meta["samples"]), auc=float(meta["auc"]),
                                  train_s=float(meta["train_s"]), reused=True)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, EOFError) as err:
            first = (str(err).strip().splitlines() or [""])[0]
            raise HarnessError(f"{model_dir}: not a saved dlrm-v3 model ({type(err).__name__}: {first}); remove it "
                               f"to train again", ErrorCategory.BAD_INPUT) from None
        if meta.get("twin") != repr((data, config)):
            raise HarnessError(f"{model_dir} holds a dlrm-v3 model of other sizes than this command's twin: give "
                               f"another --model-dir, or remove it", ErrorCategory.BAD_INPUT)
        if (model.seed, meta.get("steps_requested")) != (seed, steps):
            raise HarnessError(f"{model_dir} holds a dlrm-v3 model of seed {model.seed} ({meta.get('steps_requested')} "
                               f"steps asked), not of seed {seed} ({steps}): give another --model-dir, or remove it",
                               ErrorCategory.BAD_INPUT)
        progress(f"reusing the model in {model_dir}: {model.steps} steps, eval AUC {model.auc:.5f}")
        return model, state, uses
    progress(f"training the dlrm-v3 twin, seed {seed} (one pass over its {data.train_timestamps} training "
             f"timestamps{'' if steps is None else f', at most {steps} steps'}) ...")
    t0 = time.perf_counter()
    net, uses, done, samples = train(data, config, seed, progress, steps)
    auc = eval_auc(net, data)
    state = {k: v.detach().clone() for k, v in net.state_dict().items() if not k.endswith("optimizer_state")}
    model = TrainedRanker(path=model_path, seed=seed, steps=done, samples=samples, auc=auc,
                          train_s=time.perf_counter() - t0)
    progress(f"trained: {done} steps, {samples} samples in {model.train_s:.0f} s; eval AUC {auc:.5f}")
    replace_atomic(model_path, lambda tmp: torch.save(state, tmp), doing="saving the trained model", then=AGAIN)
    replace_atomic(model_dir / FREQ_FILE, lambda tmp: _write_npy(tmp, uses), doing="saving the item frequencies",
                   then=AGAIN)
    meta = {k: v for k, v in model.to_dict().items() if k not in ("path", "reused")}
    write_atomic(meta_path, json.dumps({**meta, "steps_requested": steps, "twin": repr((data, config))}, indent=1)
                 + "\n", then=AGAIN)
    return model, state, uses


def request_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offsets: torch.Tensor,
                      num_candidates: torch.Tensor, max_seq_len: int, *, contextual: int = 0,
                      alpha: float | None = None) -> torch.Tensor:
    """:func:`~harness.reference.models.hstu_attention.jagged_attention` (same arguments and result, fp32)
    computed as inference can: per request, its history causally (the jagged path on the history
    alone: a history position never sees a candidate), then every candidate at once against the
    history's keys and values, plus its own (it sees the history and itself, no other candidate):
    ``C x (c + H)`` scores instead of the jagged path's blocks over ``(c + H + C)`` columns. With
    contextual tokens that the mask treats apart (``contextual`` > 0) it is the jagged path."""
    if contextual or torch.is_grad_enabled():
        return jagged_attention(q, k, v, offsets, num_candidates, max_seq_len, contextual=contextual, alpha=alpha)
    alpha = 1.0 / math.sqrt(q.shape[2]) if alpha is None else alpha
    out = torch.empty(q.shape[0], v.shape[1], v.shape[2], dtype=torch.float32)
    for u in range(offsets.numel() - 1):
        start, end, cands = int(offsets[u]), int(offsets[u + 1]), int(num_candidates[u])
        mid = end - cands
        if mid > start:
            out[start:mid] = jagged_attention(q[start:mid], k[start:mid], v[start:mid],
                                              torch.tensor([0, mid - start]), torch.zeros(1, dtype=torch.int64),
                                              max_seq_len).float()
        if cands:
            qc, kc, vc = (x[mid:end].float() for x in (q, k, v))  # [C, H, *]
            kh, vh = k[start:mid].float(), v[start:mid].float()  # [L, H, *]
            scores = torch.einsum("chd,lhd->hcl", qc * alpha, kh)  # [H, C, L]: scaled on the smaller side
            history = torch.einsum("hcl,lhd->chd", F.silu(scores, inplace=True), vh)
            own = F.silu((qc * kc).sum(-1, keepdim=True) * alpha) * vc  # [C, H, V]
            out[mid:end] = (history + own) / max_seq_len
    return out.to(v.dtype)


def _write_npy(path: Path, values: np.ndarray | dict[str, np.ndarray]) -> None:
    """``values`` to ``path`` exactly (``np.save`` alone appends ``.npy`` to a name without it): one
    array as ``.npy``, named arrays as ``.npz``."""
    with open(path, "wb") as f:
        if isinstance(values, dict):
            np.savez(f, **values)  # type: ignore[arg-type]  # numpy's stub types **kwds as allow_pickle
        else:
            np.save(f, values, allow_pickle=False)


def inference_model(state: dict[str, torch.Tensor], config: HSTUConfig | None = None) -> HSTURanker:
    """The trained model for inference: no optimizer, eval mode, fp32, its layers' attention
    :func:`request_attention`."""
    net = HSTURanker(config or model_config())
    for layer in net.layers:
        layer.attention = request_attention  # type: ignore[assignment]  # an attribute holding a function
    missing, unexpected = net.load_state_dict(state, strict=False)
    bad = [k for k in missing if not k.endswith("optimizer_state")] + list(unexpected)
    if bad:
        raise HarnessError(f"the saved model does not fit the dlrm-v3 twin ({bad[0]}); remove it to train again",
                           ErrorCategory.BAD_INPUT)
    return net.eval()


# ---------------------------------------------------------------------------------- requests, in time order
@dataclass(frozen=True, eq=False)
class RequestLog:
    """The inference requests in issue order (timestamps in order, a timestamp's active users in
    increasing id), jagged and compact: request ``r`` is ``(ts[r], query[r])`` (``query``: its index
    within its timestamp), user ``users[r]``, history ``h[r]:h[r + 1]`` of the history arrays,
    candidates ``c[r]:c[r + 1]``."""

    ts: np.ndarray  # int32 [R]
    query: np.ndarray  # int32 [R]
    users: np.ndarray  # int64 [R]
    history_offsets: np.ndarray  # int64 [R + 1]
    candidate_offsets: np.ndarray  # int64 [R + 1]
    history_items: np.ndarray  # int32
    history_categories: np.ndarray  # int16
    history_ratings: np.ndarray  # int8: int(rating)
    candidate_items: np.ndarray  # int32
    candidate_categories: np.ndarray  # int16
    candidate_labels: np.ndarray  # int8

    def __len__(self) -> int:
        return int(self.ts.size)

    @classmethod
    def generate(cls, data: StreamingSpec = TWIN_DATA, chunk: int = 128) -> RequestLog:
        gen = StreamingGenerator(data)
        parts: list[StreamingRequests] = []
        ts_list, query = [], []
        for ts in range(data.train_timestamps, data.num_timestamps):
            users = gen.active_users(ts)
            ts_list.append(np.full(users.size, ts, dtype=np.int32))
            query.append(np.arange(users.size, dtype=np.int32))
            parts += [gen.requests(users[lo : lo + chunk], ts) for lo in range(0, users.size, chunk)]

        def cat(name: str, dtype: Any) -> np.ndarray:
            return np.concatenate([getattr(p, name) for p in parts]).astype(dtype)

        hl, cl = cat("history_lengths", np.int64), cat("candidate_lengths", np.int64)
        return cls(ts=np.concatenate(ts_list), query=np.concatenate(query), users=cat("users", np.int64),
                   history_offsets=np.concatenate([[0], np.cumsum(hl)]).astype(np.int64),
                   candidate_offsets=np.concatenate([[0], np.cumsum(cl)]).astype(np.int64),
                   history_items=cat("history_item_ids", np.int32),
                   history_categories=cat("history_category_ids", np.int16),
                   history_ratings=cat("history_ratings", np.int8),
                   candidate_items=cat("candidate_item_ids", np.int32),
                   candidate_categories=cat("candidate_category_ids", np.int16),
                   candidate_labels=cat("candidate_labels", np.int8))

    def save(self, path: Path) -> None:
        arrays = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        replace_atomic(path, lambda tmp: _write_npy(tmp, arrays), doing="saving the requests", then=AGAIN)

    @classmethod
    def load(cls, path: Path) -> RequestLog:
        with np.load(path) as z:
            return cls(**{f.name: z[f.name] for f in dataclasses.fields(cls)})

    @classmethod
    def kept(cls, model_dir: Path, data: StreamingSpec = TWIN_DATA) -> RequestLog:
        """The requests saved in ``model_dir``, generated and saved first when they are not there."""
        path = model_dir / REQUESTS_FILE
        if path.is_file():
            return cls.load(path)
        log = cls.generate(data)
        log.save(path)
        return log

    def history_lengths(self) -> np.ndarray:
        return np.diff(self.history_offsets)

    def candidate_lengths(self) -> np.ndarray:
        return np.diff(self.candidate_offsets)

    def batch(self, requests: np.ndarray) -> EventBatch:
        """The ranker's batch of requests ``requests`` (indices), in that order."""
        h, c = self.history_offsets, self.candidate_offsets
        hl, cl = h[requests + 1] - h[requests], c[requests + 1] - c[requests]
        hi = np.repeat(h[requests] - np.concatenate([[0], np.cumsum(hl)[:-1]]), hl) + np.arange(int(hl.sum()))
        ci = np.repeat(c[requests] - np.concatenate([[0], np.cumsum(cl)[:-1]]), cl) + np.arange(int(cl.sum()))
        rows = StreamingRequests(
            split=Split.INFERENCE, users=self.users[requests], timestamps=self.ts[requests].astype(np.int64),
            history_lengths=hl, history_item_ids=self.history_items[hi].astype(np.int64),
            history_ratings=self.history_ratings[hi].astype(np.float64),
            history_category_ids=self.history_categories[hi].astype(np.int64),
            history_action_weights=np.zeros(hi.size, dtype=np.int64), history_action_timestamps=np.ones(hi.size, np.int64),
            history_source_timestamps=np.zeros(hi.size, dtype=np.int64), query_times=np.ones(requests.size, np.int64),
            candidate_lengths=cl, candidate_item_ids=self.candidate_items[ci].astype(np.int64),
            candidate_ratings=np.zeros(ci.size), candidate_category_ids=self.candidate_categories[ci].astype(np.int64),
            candidate_labels=self.candidate_labels[ci].astype(np.int64))
        return event_batch(rows)


@torch.no_grad()
def score_request(model: HSTURanker, batch: EventBatch, events: torch.Tensor | None = None) -> torch.Tensor:
    """One request's candidate probabilities (a batch of one request; ``events``: its sequence rows
    already looked up, else looked up here). The attention's divisor is the request's own length."""
    if events is None:
        events = model.embeddings(model.sequence_ids(batch))
    contextual = model.contextual_embeddings(model.contextual_ids(batch))
    return torch.sigmoid(model.dense_forward(batch, events, contextual))


# ---------------------------------------------------------------------------------- a request's cost
@dataclass(frozen=True)
class RequestCost:
    """What one request costs: FLOPs (multiply-adds x 2) computed target-aware, once per request,
    against one sequence per candidate (history + that candidate), and the table bytes it looks up."""

    history: int
    candidates: int
    shared_flops: float
    per_candidate_flops: float
    lookup_rows: int
    lookup_bytes: int

    @property
    def saving(self) -> float:
        return self.per_candidate_flops / self.shared_flops

    def describe(self, what: str) -> str:
        return (f"{what}: a request of {self.history:,} history items and {self.candidates:,} candidates costs "
                f"{self.shared_flops / 1e9:,.3g} GFLOP computed once per request (target-aware: the history shared "
                f"by every candidate), against {self.per_candidate_flops / 1e9:,.3g} GFLOP as one sequence per "
                f"candidate ({self.saving:,.0f}x); it looks up {self.lookup_rows:,} table rows, "
                f"{self.lookup_bytes / 1e6:,.3g} MB")


def request_cost(config: HSTUConfig, history: int, candidates: int, row_bytes: int) -> RequestCost:
    """:class:`RequestCost` of a request of ``history`` items and ``candidates`` candidates under
    ``config`` (linear layers, attention with the target-aware mask, the candidates' item MLP and head;
    norms and activations not counted), each table row ``row_bytes``."""
    d, p, hh = config.embedding_dim, config.preprocessor_hidden_dim, config.head_hidden_dim
    h, a, lin, ctx = config.num_heads, config.attention_dim, config.linear_dim, config.num_contextual

    def mlp(*dims: int) -> float:
        return sum(2.0 * x * y for x, y in itertools.pairwise(dims))

    per_event = mlp(d, p, d) + mlp(2 * d, p, d) + mlp(config.action_embedding_dim, p, d)
    per_token_layer = 2.0 * d * h * (2 * lin + 2 * a) + 2.0 * 3 * h * lin * d
    per_candidate_out = mlp(3 * d, hh, d) + mlp(d, hh, 1)
    pair = 2.0 * h * (a + lin)  # one query-key pair: q.k and the weighted v

    def flops(hist: int, cands: int) -> float:
        tokens = ctx + hist + cands
        # position i of the context and history sees i + 1 keys; a candidate sees ctx + hist + 1
        pairs = (ctx + hist) * (ctx + hist + 1) / 2 + cands * (ctx + hist + 1)
        return ((hist + cands) * per_event + ctx * 2.0 * d * d
                + config.num_layers * (tokens * per_token_layer + pairs * pair) + cands * per_candidate_out)

    rows = 2 * (history + candidates) + 1 + ctx  # item and category rows per event, the album row, the user
    return RequestCost(history=history, candidates=candidates, shared_flops=flops(history, candidates),
                       per_candidate_flops=candidates * flops(history, 1), lookup_rows=rows,
                       lookup_bytes=rows * row_bytes)


def official_cost(history: int = 6700, candidates: int = 2048) -> RequestCost:
    """The official model's cost of a request of DLRMV3.md's estimated ~6.4-7k history items, its
    rows 512 fp16 (1 KB)."""
    data = StreamingSpec()
    config = HSTUConfig(**OFFICIAL_MODEL, max_sequence_length=data.max_seq_len, item_rows=data.num_items,
                        artist_rows=data.num_categories, album_rows=1, users=10_000_000, actions=ACTIONS,
                        contextual=("uid",), position_rows=data.max_seq_len + 2)
    return request_cost(config, history, candidates, row_bytes=2 * 512)


def mean_cost(log: RequestLog, config: HSTUConfig, row_bytes: int) -> RequestCost:
    """The cost of the twin's mean request."""
    return request_cost(config, round(float(log.history_lengths().mean())),
                        round(float(log.candidate_lengths().mean())), row_bytes)
