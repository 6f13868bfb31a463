"""HSTU attention: the plain path against values worked out by hand, the mask by perturbation, and the
jagged path against the plain one (forward and gradients) in fp32 and bf16."""

from __future__ import annotations

import math

import pytest
import torch

from harness.reference.models.hstu_attention import _rank_mask, batch_max_seq_len, jagged_attention, plain_attention

SILU_0, SILU_1, SILU_2 = 0.0, 0.7310585786300049, 1.7615941559557649  # x * sigmoid(x)


def _offsets(lengths: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])


def test_plain_attention_equals_the_hand_computed_case():
    # one user, one head, dim 2: 2 history events then 2 candidates; alpha = 1/sqrt(2) cancels the
    # sqrt(2) in q, so the scores are the dot products below; n = 4
    q = math.sqrt(2) * torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]]).view(4, 1, 2)
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0], [2.0, 0.0]]).view(4, 1, 2)
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]]).view(4, 1, 2)
    out = plain_attention(q, k, v, torch.tensor([0, 4]), torch.tensor([2]), 4)
    # row 0 sees {0}: score 1; row 1 sees {0, 1}: scores 0, 1;
    # candidate 2 sees {0, 1, 2}: scores 1, 1, 0; candidate 3 sees {0, 1, 3} (not 2): scores 1, 0, 2
    # (row i: the sum over the j it sees of silu(score_ij) * v_j, over n = 4)
    expected = torch.tensor([
        [SILU_1 * 1, SILU_1 * 0],
        [SILU_0 * 1 + SILU_1 * 0, SILU_0 * 0 + SILU_1 * 1],
        [SILU_1 * 1 + SILU_1 * 0 + SILU_0 * 1, SILU_1 * 0 + SILU_1 * 1 + SILU_0 * 1],
        [SILU_1 * 1 + SILU_0 * 0 + SILU_2 * 2, SILU_1 * 0 + SILU_0 * 1 + SILU_2 * -1],
    ]) / 4
    torch.testing.assert_close(out.view(4, 2), expected, atol=1e-6, rtol=0)


def _batch(seed: int, contextual: int, users: int = 5, heads: int = 2, dim_qk: int = 4, dim_v: int = 3,
           dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    history = torch.randint(0, 40, (users,), generator=g)
    history[0] = 0  # a user with no history
    candidates = torch.randint(1, 4, (users,), generator=g)
    lengths = history + candidates + contextual
    n = int(lengths.sum())
    q, k, v = (torch.randn(n, heads, d, generator=g).to(dtype).requires_grad_() for d in (dim_qk, dim_qk, dim_v))
    return q, k, v, _offsets(lengths), candidates, batch_max_seq_len(history, candidates, contextual)


def _grads(out: torch.Tensor, inputs, grad: torch.Tensor):
    return torch.autograd.grad(out, inputs, grad)


@pytest.mark.parametrize("contextual", [0, 2])
@pytest.mark.parametrize("seed", [0, 1])
def test_jagged_equals_plain_in_fp32(seed, contextual):
    q, k, v, offsets, candidates, n = _batch(seed, contextual)
    plain = plain_attention(q, k, v, offsets, candidates, n, contextual=contextual)
    jagged = jagged_attention(q, k, v, offsets, candidates, n, contextual=contextual, row_block=8)
    torch.testing.assert_close(jagged, plain, atol=1e-5, rtol=0)
    grad = torch.randn(plain.shape, generator=torch.Generator().manual_seed(seed + 7))
    for a, b in zip(_grads(jagged, (q, k, v), grad), _grads(plain, (q, k, v), grad)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("contextual", [0, 2])
def test_jagged_in_bf16_is_within_one_rounding_of_fp32(contextual):
    q, k, v, offsets, candidates, n = _batch(3, contextual, dtype=torch.bfloat16)
    wide = [x.detach().float().requires_grad_() for x in (q, k, v)]
    exact = plain_attention(*wide, offsets, candidates, n, contextual=contextual)
    jagged = jagged_attention(q, k, v, offsets, candidates, n, contextual=contextual, row_block=8)
    plain = plain_attention(q, k, v, offsets, candidates, n, contextual=contextual)
    assert jagged.dtype == torch.bfloat16
    scale = float(exact.detach().abs().max())
    jagged_error = float((jagged.float() - exact).detach().abs().max())
    plain_error = float((plain.float() - exact).detach().abs().max())
    assert jagged_error <= 2**-7 * scale
    assert jagged_error <= plain_error + 1e-12
    grad = torch.randn(exact.shape, generator=torch.Generator().manual_seed(9))
    for a, b in zip(_grads(jagged, (q, k, v), grad.bfloat16()), _grads(exact, wide, grad)):
        assert float((a.float() - b).abs().max()) <= 2**-6 * float(b.abs().max())


def _changed_rows(contextual: int, position: int) -> set[int]:
    """The rows of user 1 (of 2) whose output moves when its k and v at ``position`` move."""
    history, candidates = torch.tensor([3, 4]), torch.tensor([2, 3])
    lengths = history + candidates + contextual
    offsets = _offsets(lengths)
    n = batch_max_seq_len(history, candidates, contextual)
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(int(lengths.sum()), 1, 2, generator=g) for _ in range(3))
    base = jagged_attention(q, k, v, offsets, candidates, n, contextual=contextual)
    row = int(offsets[1]) + position
    k2, v2 = k.clone(), v.clone()
    k2[row] += 1.0
    v2[row] += 1.0
    moved = jagged_attention(q, k2, v2, offsets, candidates, n, contextual=contextual)
    plain = plain_attention(q, k2, v2, offsets, candidates, n, contextual=contextual)
    torch.testing.assert_close(moved, plain, atol=1e-6, rtol=0)
    changed = (moved - base).abs().flatten(1).amax(1) > 0
    assert not changed[: int(offsets[1])].any(), "another user's output moved"
    return {int(r) for r in torch.nonzero(changed[int(offsets[1]):]).flatten()}


def test_history_does_not_see_the_future_and_candidates_do_not_see_each_other():
    # user 1: history at 0..3, candidates at 4, 5, 6; no contextual tokens
    assert _changed_rows(0, 2) == {2, 3, 4, 5, 6}  # history 2: itself, later history, every candidate
    assert _changed_rows(0, 5) == {5}  # candidate 5: only itself


def test_contextual_tokens_see_and_are_seen_by_every_position():
    # user 1: contextual 0, 1; history 2..5; candidates 6, 7, 8
    assert _changed_rows(2, 1) == set(range(9))  # a contextual token is seen by all, itself included
    assert _changed_rows(2, 5) == {0, 1, 5, 6, 7, 8}  # the last history event: contextual tokens see it
    assert _changed_rows(2, 7) == {7}  # a candidate is seen by no one else


def _reference_mask(n: int, lengths: torch.Tensor, candidates: torch.Tensor, contextual: int) -> torch.Tensor:
    """The reference's mask, restated here on its own from ``_get_valid_attn_mask`` (mlcommons/training
    PR #889, ``recommendation_v4/generative_recommenders/ops/pytorch/pt_hstu_attention.py``, causal,
    with targets and contextual tokens, no ``max_attn_len``), padding cut off: what the reference's
    zero-padded q, k and v make of it."""
    ids = torch.arange(n).view(1, n)
    max_ids = lengths.view(-1, 1, 1)
    if contextual > 0:
        ids = torch.clamp(ids - contextual + 1, min=0)
        max_ids = max_ids - contextual + 1
    max_ids = max_ids - candidates.view(-1, 1, 1)
    ids = torch.minimum(ids.view(1, 1, n), max_ids)  # torch.clamp(ids, max=max_ids), per user
    row, col = ids.view(-1, n, 1).expand(-1, n, n), ids.view(-1, 1, n).expand(-1, n, n)
    mask = torch.eye(n, dtype=torch.bool).view(1, n, n) | (row - col > 0)
    if contextual > 0:
        mask = mask | ((row == 0) & (col < max_ids))
    real = torch.arange(n).view(1, n, 1) < lengths.view(-1, 1, 1)
    return mask & real & real.transpose(1, 2)


@pytest.mark.parametrize("contextual", [0, 1, 2, 3])
def test_the_oracles_mask_is_the_references_on_every_layout(contextual):
    """Every layout of up to 7 positions and 1-4 candidates, also those with fewer positions than
    contextual tokens plus candidates (which our model never builds): the oracle's mask is the
    reference's, and the jagged path computes what the oracle does."""
    layouts = [(length, c) for length in range(1, 8) for c in range(1, 5) if c <= length]
    lengths = torch.tensor([length for length, _ in layouts])
    candidates = torch.tensor([c for _, c in layouts])
    n = int(lengths.max())
    ours = _rank_mask(lengths, candidates, contextual, n)
    assert torch.equal(ours, _reference_mask(n, lengths, candidates, contextual))
    g = torch.Generator().manual_seed(contextual)
    q, k, v = (torch.randn(int(lengths.sum()), 2, 4, generator=g) for _ in range(3))
    offsets = _offsets(lengths)
    plain = plain_attention(q, k, v, offsets, candidates, n, contextual=contextual)
    jagged = jagged_attention(q, k, v, offsets, candidates, n, contextual=contextual, row_block=3)
    torch.testing.assert_close(jagged, plain, atol=1e-6, rtol=0)

