"""The HSTU ranker: its config from a spec, shapes, the masked loss, training on a learnable signal,
determinism, the fused tables' sparse updates, and the two attention paths agreeing."""

from __future__ import annotations

import pytest
import torch

from harness.errors import HarnessError
from harness.reference.data.event_batch import UNKNOWN_ACTION, EventBatch
from harness.reference.models.embeddings import SparseOptimizerConfig
from harness.reference.models.hstu import HSTUConfig, HSTURanker, sparse_optimizer
from harness.rules.specs import EmbeddingOptimizer

MODEL = {"family": "hstu", "embedding_dim": 8, "num_layers": 2, "num_heads": 2, "attention_dim": 4,
         "linear_dim": 4, "max_sequence_length": 32, "input_dropout": 0.0, "linear_dropout": 0.0,
         "time_buckets": 16, "contextual": ["uid"], "embedding_optimizer": "rowwise_adagrad",
         "preprocessor_hidden_dim": 8, "head_hidden_dim": 8}
DATASET = {"item_rows": 40, "artist_rows": 10, "album_rows": 20, "users": 12, "actions": 4}


def _config(**overrides) -> HSTUConfig:
    return HSTUConfig.from_spec({**MODEL, **overrides}, DATASET)


def make_batch(seed: int, users: int = 4, max_history: int = 8, cross_rows: tuple[int, ...] = ()) -> EventBatch:
    """Users' histories then 1-3 candidates; a candidate is listened when its item is even (the signal);
    an id in each of the crosses of ``cross_rows`` rows."""
    g = torch.Generator().manual_seed(seed)
    cross = torch.stack([torch.randint(0, r, (users,), generator=g) for r in cross_rows], dim=1) if cross_rows else (
        torch.zeros((users, 0), dtype=torch.int64))
    history = torch.randint(0, max_history + 1, (users,), generator=g)
    candidates = torch.randint(1, 4, (users,), generator=g)
    n = int((history + candidates).sum())
    item = torch.randint(0, DATASET["item_rows"], (n,), generator=g)
    batch = EventBatch(uid=torch.randint(0, DATASET["users"], (users,), generator=g), history_lengths=history,
                       candidate_lengths=candidates, item=item, artist=item % DATASET["artist_rows"],
                       album=item % DATASET["album_rows"], action=torch.zeros(n, dtype=torch.int64),
                       timestamp=torch.zeros(n, dtype=torch.int64), labels=torch.zeros(0), label_mask=torch.zeros(0),
                       cross=cross)
    is_candidate = batch.is_candidate()
    action = torch.randint(1, DATASET["actions"], (n,), generator=g).masked_fill(is_candidate, UNKNOWN_ACTION)
    step = torch.randint(0, 4000, (n,), generator=g)
    timestamp = torch.cat([torch.cumsum(step[s:e], 0) for s, e in zip(batch.offsets()[:-1], batch.offsets()[1:])])
    labels = (item[is_candidate] % 2 == 0).float()
    mask = torch.rand(labels.shape, generator=g) < 0.8
    mask[0] = True
    out = EventBatch(**{**batch.__dict__, "action": action, "timestamp": timestamp, "labels": labels,
                        "label_mask": mask})
    out.check()
    return out


def _model(seed: int = 0, lr: float = 0.05, **kwargs) -> HSTURanker:
    config = _config()
    return HSTURanker(config, sparse_optimizer(config, lr), seed=seed, **kwargs)


def test_config_from_spec_reads_every_key_and_refuses_unknown_ones():
    config = _config()
    assert (config.embedding_dim, config.num_layers, config.num_heads, config.attention_dim, config.linear_dim) == (
        8, 2, 2, 4, 4)
    assert config.contextual == ("uid",) and config.embedding_optimizer is EmbeddingOptimizer.ROWWISE_ADAGRAD
    assert (config.item_rows, config.users, config.actions) == (40, 12, 4)
    with pytest.raises(HarnessError, match="unknown keys"):
        HSTUConfig.from_spec({**MODEL, "softmax": True}, DATASET)
    with pytest.raises(HarnessError, match="lacks"):
        HSTUConfig.from_spec(MODEL, {k: v for k, v in DATASET.items() if k != "actions"})
    with pytest.raises(HarnessError, match="family"):
        HSTUConfig.from_spec({**MODEL, "family": "dlrm"}, DATASET)


@pytest.mark.parametrize("contextual", [[], ["uid"]])
def test_forward_gives_one_logit_per_candidate(contextual):
    config = _config(contextual=contextual)
    model = HSTURanker(config, sparse_optimizer(config, 0.01))
    batch = make_batch(1)
    logits = model(batch)
    assert logits.shape == (int(batch.candidate_lengths.sum()),) and logits.dtype == torch.float32
    assert torch.isfinite(logits).all()


def test_a_candidate_logit_depends_on_its_own_user_only():
    model = _model().eval()
    batch = make_batch(2)
    base = model(batch)
    item = batch.item.clone()
    item[: int(batch.lengths[0])] = (item[: int(batch.lengths[0])] + 1) % DATASET["item_rows"]  # user 0's events
    moved = model(EventBatch(**{**batch.__dict__, "item": item}))
    first = int(batch.candidate_lengths[0])
    assert not torch.equal(moved[:first], base[:first])
    assert torch.equal(moved[first:], base[first:])


def test_loss_ignores_unlabelled_candidates():
    model = _model()
    batch = make_batch(3)
    logits = model(batch)
    flipped = EventBatch(**{**batch.__dict__, "labels": torch.where(batch.label_mask, batch.labels, 1 - batch.labels)})
    assert torch.equal(model.loss(batch, logits), model.loss(flipped, logits))
    m = batch.label_mask
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits[m], batch.labels[m])
    torch.testing.assert_close(model.loss(batch, logits), expected)
    none = EventBatch(**{**batch.__dict__, "label_mask": torch.zeros_like(m)})
    assert float(model.loss(none, logits).detach()) == 0.0


def test_training_lowers_the_loss():
    torch.manual_seed(0)
    model = _model(lr=0.1)
    adam = torch.optim.Adam(model.dense_parameters(), lr=3e-3)
    batch = make_batch(4, users=6)
    losses = []
    for step in range(6):
        model.set_step(step)
        loss = model.loss(batch, model(batch))
        adam.zero_grad()
        loss.backward()
        adam.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0], losses


def test_same_seed_same_logits_bit_for_bit():
    batch = make_batch(5)
    assert torch.equal(_model(seed=7).eval()(batch), _model(seed=7).eval()(batch))
    assert not torch.equal(_model(seed=7).eval()(batch), _model(seed=8).eval()(batch))
    state = torch.random.get_rng_state()
    _model(seed=7)
    assert torch.equal(torch.random.get_rng_state(), state), "building the model drew from torch's global generator"


def test_only_the_rows_a_batch_touches_are_updated():
    model = _model()
    batch = make_batch(6)
    # every candidate labelled: an unlabelled candidate's item gets a zero gradient (and so no change)
    batch = EventBatch(**{**batch.__dict__, "label_mask": torch.ones_like(batch.label_mask)})
    before = [t.weight.detach().clone() for t in model.tables()]
    model.loss(batch, model(batch)).backward()
    rows = model.embeddings.table_rows
    touched = [torch.cat([batch.item, batch.artist + rows[0], batch.album + rows[0] + rows[1]]), batch.uid]
    for table, old, ids in zip(model.tables(), before, touched):
        changed = (table.weight.detach() != old).any(dim=1)
        expected = torch.zeros_like(changed)
        expected[ids] = True
        assert torch.equal(changed, expected)
        assert table.weight.grad is None
    assert all(p.grad is not None for p in model.dense_parameters())


def test_set_learning_rate_reaches_both_tables():
    model = _model()
    model.set_learning_rate(0.5)
    assert all(t.optimizer.learning_rate == 0.5 for t in model.tables())
    assert not {id(p) for p in model.dense_parameters()} & {id(p) for p in model.tables().parameters()}


@pytest.mark.parametrize("contextual_attention", ["causal", "full"])
def test_plain_and_jagged_attention_give_the_same_logits(contextual_attention):
    config = _config(contextual_attention=contextual_attention)
    batch = make_batch(7)
    jagged = HSTURanker(config, sparse_optimizer(config, 0.01), attention="jagged").eval()(batch)
    plain = HSTURanker(config, sparse_optimizer(config, 0.01), attention="plain").eval()(batch)
    torch.testing.assert_close(jagged, plain, atol=1e-5, rtol=0)


def test_bf16_tables_train():
    config = _config()
    model = HSTURanker(config, SparseOptimizerConfig(kind=config.embedding_optimizer, learning_rate=0.05),
                       dtype=torch.bfloat16)
    batch = make_batch(8)
    before = model.embeddings.weight.detach().clone()
    model.set_step(0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(batch)
    model.loss(batch, logits).backward()
    assert model.embeddings.weight.dtype == torch.bfloat16
    assert not torch.equal(model.embeddings.weight.detach(), before)


def test_the_dense_gradients_repeat_bit_for_bit_on_two_threads():
    """The position, time and action tables' gradients are summed in index order (index_select's
    backward), not by parallel atomic adds (advanced indexing's index_put_ with accumulate, which
    made two runs of the same seed at 2 threads part by rounding): one batch of dlrmv4_synthetic's
    size (thousands of events, so the backward runs in parallel), its backward five times."""
    from harness.reference.data.events import open_event_streams
    from harness.reference.models.from_spec import hstu_config
    from harness.rules.specs import load_benchmark

    spec = load_benchmark("dlrmv4_synthetic")
    batch = next(iter(open_event_streams(spec.dataset).train_batches(512)))
    model = HSTURanker(hstu_config(spec), None, seed=3)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        grads = []
        for _ in range(5):
            model.zero_grad(set_to_none=True)
            model.batch_loss(batch).backward()
            grads.append([p.grad.clone() for p in (model.position_embeddings, model.time_embeddings,
                                                   model.action_embeddings)])
    finally:
        torch.set_num_threads(threads)
    assert int(batch.lengths.sum()) > 4096
    for other in grads[1:]:
        assert all(torch.equal(a, b) for a, b in zip(grads[0], other))


def _ref_layer_norm(x: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
    """The reference's pytorch_layer_norm (ops/pytorch/pt_layer_norm.py, PR #889): fp32 in, fp32 out."""
    return torch.nn.functional.layer_norm(x.float(), norm.normalized_shape, norm.weight.float(), norm.bias.float(),
                                          norm.eps)


def test_the_norms_compute_in_fp32_under_bf16_as_the_references():
    """Under bf16 autocast the swish LayerNorm and an STU layer's norm, multiply, concatenation and
    dropout run in fp32 and are rounded once (the reference's pytorch_swish_layer_norm and
    pytorch_norm_mul_dropout), bit for bit against those recipes restated here."""
    from harness.reference.models.hstu import STULayer, SwishLayerNorm
    from harness.reference.models.hstu_attention import batch_max_seq_len

    g = torch.Generator().manual_seed(0)
    swish = SwishLayerNorm(16)
    torch.nn.init.normal_(swish.norm.weight, generator=g)
    x = torch.randn(64, 16, generator=g).to(torch.bfloat16)
    expected = (x.float() * torch.sigmoid(_ref_layer_norm(x, swish.norm))).to(torch.bfloat16)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(swish(x), expected)
        # a LayerNorm given bf16 activations: fp32 arithmetic with its fp32 affine, one rounding at the end
        norm = swish.norm
        assert torch.equal(norm(x), _ref_layer_norm(x, norm).to(torch.bfloat16))

    config = _config()
    layer = STULayer(config).eval()
    lengths, candidates = torch.tensor([5, 3, 7]), torch.tensor([1, 2, 1])
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    n = batch_max_seq_len(lengths - candidates, candidates, 0)
    x = torch.randn(int(lengths.sum()), config.embedding_dim, generator=g)
    hv, hq, h = layer.heads * layer.linear_dim, layer.heads * layer.attention_dim, layer.heads
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        ours = layer(x, offsets, candidates, n, 0)
        normed = _ref_layer_norm(x, layer.input_norm).to(x.dtype)
        u, v, q, k = torch.split(layer.uvqk(normed), [hv, hv, hq, hq], dim=1)
        u = torch.nn.functional.silu(u)
        a = layer.attention(q.reshape(-1, h, layer.attention_dim), k.reshape(-1, h, layer.attention_dim),
                            v.reshape(-1, h, layer.linear_dim), offsets, candidates, n).reshape(-1, hv)
        u32, a32 = u.float(), a.float()
        y = torch.cat([u32, a32, u32 * _ref_layer_norm(a32, layer.output_norm)], dim=1).to(u.dtype)
        expected = x + layer.output(y)
    assert torch.equal(ours, expected)


CROSSES = [{"name": "user_x_artist", "keys": ["uid", "artist_id"], "rows": 30, "salt": 0},
           {"name": "item_x_hour", "keys": ["item_id", "hour_of_day"], "rows": 50, "salt": 0}]


def test_each_contextual_feature_is_a_token_of_its_own_table_in_the_models_order():
    """uid and the dataset's crosses, each one row of its own table (the model's contextual order, not the
    dataset's), each through a projection of its own: a user's cross id moves that user's logits only."""
    config = HSTUConfig.from_spec({**MODEL, "contextual": ["item_x_hour", "user_x_artist", "uid"]},
                                  {**DATASET, "cross_features": CROSSES})  # neither the dataset's order nor sorted
    model = HSTURanker(config, sparse_optimizer(config, 0.05)).eval()
    assert config.num_contextual == 3 and list(model.contextual_embeddings.table_rows) == [50, 30, 12]
    assert model.contextual_weight.shape == (3, 8, 8)
    batch = make_batch(9, cross_rows=(30, 50))
    ids = model.contextual_ids(batch)
    assert torch.equal(ids, torch.stack([batch.cross[:, 1], batch.cross[:, 0], batch.uid], dim=1))
    base = model(batch)
    first = int(batch.candidate_lengths[0])
    for j, rows in enumerate((30, 50)):
        cross = batch.cross.clone()
        cross[0, j] = (cross[0, j] + 1) % rows
        moved = model(EventBatch(**{**batch.__dict__, "cross": cross}))
        assert not torch.equal(moved[:first], base[:first]) and torch.equal(moved[first:], base[first:])
    # the rows a batch touches in each contextual table are its ids there, and only they move
    batch = EventBatch(**{**batch.__dict__, "label_mask": torch.ones_like(batch.label_mask)})
    model.train()
    before = model.contextual_embeddings.weight.detach().clone()
    model.set_step(0)
    model.loss(batch, model(batch)).backward()
    offsets = torch.tensor([0, 50, 80])
    expected = torch.zeros(92, dtype=torch.bool)
    expected[(ids + offsets).reshape(-1)] = True
    assert torch.equal((model.contextual_embeddings.weight.detach() != before).any(dim=1), expected)
    with pytest.raises(HarnessError, match=r"contextual features .* from \['uid', 'user_x_artist', 'item_x_hour'\]"):
        HSTUConfig.from_spec({**MODEL, "contextual": ["uid", "user_x_album"]}, {**DATASET, "cross_features": CROSSES})


def test_the_initialisation_is_the_references():
    """Xavier normal for the preprocessor's linears (hstu_transducer.py: no uniform draw reaches past
    sqrt(6 / fan)), Xavier uniform for the STU, item and head linears; the position table of
    position_buckets rows in +-sqrt(1 / rows), the time table of time_buckets + 1 rows in
    +-sqrt(1 / time_buckets)."""
    config = HSTUConfig.from_spec({**MODEL, "embedding_dim": 64, "preprocessor_hidden_dim": 64, "head_hidden_dim": 64,
                                   "attention_dim": 32, "linear_dim": 32, "position_buckets": 512,
                                   "time_buckets": 8}, DATASET)
    model = HSTURanker(config, None, seed=1)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            fan = module.in_features + module.out_features
            w = module.weight.detach()
            uniform = (6.0 / fan) ** 0.5
            if name.startswith("preprocessor."):
                assert float(w.abs().max()) > uniform, name  # beyond any Xavier uniform draw
                assert abs(float(w.std()) / (2.0 / fan) ** 0.5 - 1) < 0.15, name
            else:
                assert float(w.abs().max()) <= uniform and float(w.abs().max()) > 0.9 * uniform, name
            assert module.bias is None or not module.bias.any()
    assert model.position_embeddings.shape == (512, 64) and model.time_embeddings.shape == (9, 64)
    for table, rows in ((model.position_embeddings, 512), (model.time_embeddings, 8)):
        bound = (1.0 / rows) ** 0.5  # the largest of its draws comes within 0.1% of it, past sqrt(1 / (rows + 1))
        assert max(0.999 * bound, (1.0 / (rows + 1)) ** 0.5) < float(table.detach().abs().max()) <= bound
    with pytest.raises(HarnessError, match="cannot hold every recency"):
        HSTUConfig.from_spec({**MODEL, "position_buckets": 32}, DATASET)
