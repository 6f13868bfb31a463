"""HSTU's pointwise attention (Zhai et al., 2024) over a jagged batch of users' sequences.

Per head, with ``q, k`` of ``attention_dim`` values and ``v`` of ``linear_dim`` values per position,
user ``u``'s output at position ``i`` is::

    out_i = sum_j  mask_u(i, j) * silu(alpha * <q_i, k_j>) / n * v_j        alpha = 1 / sqrt(attention_dim)

``silu`` is pointwise (no softmax: the weights are not normalised over ``j``) and ``n`` is one number
for the whole batch, ``max_seq_len``: the reference (``pytorch_hstu_mha`` and its Triton kernel in
mlcommons/training ``recommendation_v4``) divides by the padded length of the batch, which its model
computes as the batch's longest history + the batch's most candidates + the contextual tokens, not
by each user's own length. The caller passes it (:func:`batch_max_seq_len`).

The mask, for a user of ``L`` positions whose last ``T`` are candidates and whose first ``c`` are
contextual tokens (``c`` as the attention is told; the reference's ranker tells it 0, so its
contextual tokens are ordinary history for the mask, see :mod:`harness.reference.models.hstu`):

* a history position ``i`` sees ``j <= i`` (itself and the past), never a candidate;
* a candidate sees the whole history (contextual tokens included) and itself, not another candidate;
* a contextual token (``i < c``) sees every contextual and history position, not the candidates,
  and every position sees it.

This is the reference's ``_get_valid_attn_mask`` (causal, target-aware, with contextual tokens, no
``max_attn_len``), restated: it ranks position ``p`` as ``max(p - s, 0)`` with ``s = max(c - 1, 0)``,
caps the rank at the history's end ``m = L - s - T`` (so all candidates share rank ``m``), and lets
``i`` see ``j`` when ``rank_i > rank_j``, when ``i == j``, or when ``rank_i == 0 < c`` and
``rank_j < m``. Padding is never seen.

Two paths compute it. :func:`plain_attention` is the math written out on the padded
``[B, H, n, n]`` form, in the inputs' type, with the mask built from the rank rule (the rules in
words hold on the layouts the model builds; the rank rule, the reference's own, on every layout,
also those with fewer positions than contextual tokens and candidates); it is the test oracle,
and like the reference's plain path it loses precision in bf16 on long sequences (it sums
``n`` bf16 terms). :func:`jagged_attention` is the fast path: users sorted by length and grouped
into buckets, each bucket padded only to its own longest user, rows taken a block at a time; a row
block that holds no contextual token needs only the columns before its end (everything later is in
its future or another candidate), so the causal half is never computed; the mask of a block comes
from comparing the ranks of its rows and columns, and no ``L x L`` mask per user is built. It
computes in fp32 whatever the inputs' type (bf16/fp16 inputs are widened per block, the output
rounded once at the end), so it is the safe accumulation the reference gets from its kernel.

Tolerances (``tests/reference/models/test_hstu_attention.py``): in fp32 the two paths agree within
``atol 1e-5`` (forward and the gradients of ``q, k, v``; they differ only in summation order); in
bf16, ``jagged_attention`` is within ``2**-7`` (one bf16 rounding of a value below 2) times
``max |out|`` of the fp32 result on the same inputs, and the plain bf16 path is no closer.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

#: rows of a block of :func:`jagged_attention` (each block's scores are ``G x H x rows x cols``)
ROW_BLOCK = 128


def batch_max_seq_len(history_lengths: torch.Tensor, candidate_lengths: torch.Tensor, contextual: int) -> int:
    """The reference's divisor ``n`` for a batch: the longest history + the most candidates + the
    contextual tokens (the padded length its model gives the attention)."""
    if history_lengths.numel() == 0:
        return max(contextual, 1)
    return int(history_lengths.max()) + int(candidate_lengths.max()) + int(contextual)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offsets: torch.Tensor,
           num_candidates: torch.Tensor, max_seq_len: int) -> torch.Tensor:
    if q.dim() != 3 or k.shape != q.shape or v.dim() != 3 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"q, k must be [N, H, A] and v [N, H, V]; got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    lengths = offsets[1:] - offsets[:-1]
    if int(offsets[-1]) != q.shape[0] or num_candidates.shape != lengths.shape:
        raise ValueError("offsets and num_candidates do not describe q's rows")
    if lengths.numel() and int(lengths.max()) > max_seq_len:
        raise ValueError(f"a sequence of {int(lengths.max())} positions is longer than max_seq_len {max_seq_len}")
    return lengths


def _rank_mask(lengths: torch.Tensor, num_candidates: torch.Tensor, contextual: int, n: int) -> torch.Tensor:
    """bool ``[B, n, n]``: the reference's rank rule (the module's docstring) position by position,
    padding never seen. On every layout a user can have, also those with fewer positions than
    contextual tokens and candidates, where the rules in words stop describing it."""
    i = torch.arange(n).view(1, n, 1)
    j = torch.arange(n).view(1, 1, n)
    length = lengths.view(-1, 1, 1)
    candidates = num_candidates.view(-1, 1, 1)
    rank_i, m = _ranks(i, length, candidates, contextual)
    rank_j, _ = _ranks(j, length, candidates, contextual)
    sees = (rank_i > rank_j) | (i == j)
    if contextual > 0:
        sees = sees | ((rank_i == 0) & (rank_j < m))
    return (i < length) & (j < length) & sees


def _pad(x: torch.Tensor, offsets: torch.Tensor, n: int) -> torch.Tensor:
    """Jagged ``[N, H, D]`` -> zero-padded ``[B, H, n, D]``."""
    b = offsets.numel() - 1
    out = x.new_zeros(b, n, x.shape[1], x.shape[2])
    for u in range(b):
        start, end = int(offsets[u]), int(offsets[u + 1])
        out[u, : end - start] = x[start:end]
    return out.transpose(1, 2)


def plain_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offsets: torch.Tensor,
                    num_candidates: torch.Tensor, max_seq_len: int, *, contextual: int = 0,
                    alpha: float | None = None) -> torch.Tensor:
    """HSTU attention written out on the padded form (the oracle of :func:`jagged_attention`).

    Args:
        q, k: ``[N, H, A]`` per position and head, users' sequences one after another.
        v: ``[N, H, V]``.
        offsets: int64 ``[B + 1]``: where each user's positions start, and the end.
        num_candidates: int64 ``[B]``: the candidates at the end of each user's sequence.
        max_seq_len: ``n``, the padded length and the divisor (:func:`batch_max_seq_len`).
        contextual: the leading positions of each sequence that are contextual tokens for the mask.
        alpha: the scale of ``<q, k>``; default ``1 / sqrt(A)``.

    Returns:
        ``[N, H, V]`` in the inputs' type, computed in it.
    """
    lengths = _check(q, k, v, offsets, num_candidates, max_seq_len)
    alpha = 1.0 / math.sqrt(q.shape[2]) if alpha is None else alpha
    n = max_seq_len
    qp, kp, vp = _pad(q, offsets, n), _pad(k, offsets, n), _pad(v, offsets, n)  # [B, H, n, *]
    scores = F.silu(torch.einsum("bhid,bhjd->bhij", qp, kp) * alpha) / n
    scores = scores * _rank_mask(lengths, num_candidates, contextual, n).unsqueeze(1).to(scores.dtype)
    out = torch.einsum("bhij,bhjd->bhid", scores, vp).transpose(1, 2)  # [B, n, H, V]
    valid = torch.arange(n).view(1, n) < lengths.view(-1, 1)
    return out[valid]


def _ranks(position: torch.Tensor, length: torch.Tensor, candidates: torch.Tensor, contextual: int
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each position's rank for the mask and the rank ``m`` of its user's candidates (see the
    module's docstring); ``position``, ``length`` and ``candidates`` broadcast together."""
    shift = max(contextual - 1, 0)
    m = length - shift - candidates
    return torch.minimum((position - shift).clamp(min=0), m), m


def _buckets(lengths: torch.Tensor) -> list[torch.Tensor]:
    """Users grouped for :func:`jagged_attention`: sorted by length, a new group whenever the next
    user is over 1.25x (and 16 positions) longer than the group's first, so padding stays small."""
    order = torch.argsort(lengths, stable=True)
    groups: list[list[int]] = []
    first = -1
    for u in order.tolist():
        length = int(lengths[u])
        if not groups or length > max(first * 1.25, first + 16):
            groups.append([])
            first = length
        groups[-1].append(u)
    return [torch.tensor(g, dtype=torch.int64) for g in groups]


def jagged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offsets: torch.Tensor,
                     num_candidates: torch.Tensor, max_seq_len: int, *, contextual: int = 0,
                     alpha: float | None = None, row_block: int = ROW_BLOCK) -> torch.Tensor:
    """:func:`plain_attention`'s result computed by blocks over the jagged batch, in fp32.

    Same arguments and result as :func:`plain_attention` (``[N, H, V]`` in the inputs' type);
    ``row_block`` is the rows per block. Differentiable by autograd (each block keeps its scores
    for the backward pass: ``G x H x row_block x cols`` values at a time, not ``B x H x n x n``).
    """
    lengths = _check(q, k, v, offsets, num_candidates, max_seq_len)
    alpha = 1.0 / math.sqrt(q.shape[2]) if alpha is None else alpha
    dtype = q.dtype
    compute = torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype
    heads, dv = v.shape[1], v.shape[2]
    total = q.shape[0]
    # a zero row at the end stands for padding
    qz, kz, vz = (torch.cat([x, x.new_zeros(1, heads, x.shape[2])]) for x in (q, k, v))
    pieces, rows_of = [], []
    for users in _buckets(lengths):
        length, cand = lengths[users], num_candidates[users]
        width = int(length.max())
        if width == 0:
            continue
        pos = torch.arange(width).view(1, -1)
        real = pos < length.view(-1, 1)  # [G, W]
        index = torch.where(real, offsets[users].view(-1, 1) + pos, torch.full_like(pos, total))
        gq, gk, gv = (x.index_select(0, index.reshape(-1)).view(*index.shape, heads, -1).transpose(1, 2).to(compute)
                      for x in (qz, kz, vz))  # [G, H, W, *]
        rank, m = _ranks(pos, length.view(-1, 1), cand.view(-1, 1), contextual)  # [G, W], [G, 1]
        blocks = [_block(gq, gk, gv, rank, m, real, start, min(start + row_block, width), contextual, alpha,
                         max_seq_len) for start in _block_starts(width, contextual, row_block)]
        out = torch.cat(blocks, dim=2).transpose(1, 2)  # [G, W, H, V]
        pieces.append(out[real])
        rows_of.append(index[real])
    if not pieces:
        return v.new_zeros(total, heads, dv)
    rows = torch.cat(rows_of)
    inverse = torch.empty_like(rows)
    inverse[rows] = torch.arange(rows.numel())
    return torch.cat(pieces).index_select(0, inverse).to(dtype)


def _block_starts(width: int, contextual: int, row_block: int) -> list[int]:
    """Where the row blocks start: the contextual tokens (which see the whole history) alone in the
    first block, then ``row_block`` rows at a time."""
    head = min(contextual, width)
    return ([0] if head else []) + list(range(head, width, row_block))


def _block(gq: torch.Tensor, gk: torch.Tensor, gv: torch.Tensor, rank: torch.Tensor, m: torch.Tensor,
           real: torch.Tensor, start: int, end: int, contextual: int, alpha: float, n: int) -> torch.Tensor:
    """Rows ``start .. end - 1`` of a group: ``[G, H, rows, V]``. A block without contextual rows
    needs only the columns before ``end`` (later ones are its future or other candidates)."""
    if start < contextual:
        end = min(end, contextual)
        cols = gk.shape[2]
    else:
        cols = end
    row_rank, col_rank = rank[:, start:end, None], rank[:, None, :cols]  # [G, R, 1], [G, 1, C]
    i = torch.arange(start, end).view(1, -1, 1)
    j = torch.arange(cols).view(1, 1, -1)
    sees = (row_rank > col_rank) | (i == j)
    if contextual:
        sees |= (row_rank == 0) & (col_rank < m.view(-1, 1, 1))
    sees &= real[:, None, :cols] & real[:, start:end, None]
    scores = torch.matmul(gq[:, :, start:end], gk[:, :, :cols].transpose(2, 3))
    weights = F.silu(scores * alpha) * (sees.unsqueeze(1).to(scores.dtype) / n)
    return torch.matmul(weights, gv[:, :, :cols])
