"""The compiled dot interaction of bf16 vectors (harness/reference/models/_dotinteraction.c) against the torch
path it replaces (the concatenations and ``_PairwiseDots`` of harness/reference/models/dlrm.py)."""

import pytest
import torch

from harness.reference.models import dotkernel
from harness.reference.models.dlrm import InteractionArch, _PairwiseDots

# every test on two threads (conftest.py): the kernel splits the samples among them (at least 64 samples
# a thread: the smaller shapes run on one)
pytestmark = [pytest.mark.skipif(dotkernel.compiled() is None,
                                 reason="the compiled dot interaction was not built (no compiler or OpenMP)"),
              pytest.mark.usefixtures("two_threads")]


# (batch, features, dim): the small config's; an even count of vectors; dims that are not a multiple of 32
# (another packing) or of 64 (a part block); fewer samples than a thread's share
SHAPES = [(300, 26, 64), (130, 3, 128), (70, 5, 16), (9, 2, 2), (1, 26, 64)]


def _inputs(batch, features, dim, seed, integers=False):
    g = torch.Generator().manual_seed(seed)
    width = dim + (features + 1) * features // 2

    def draw(*shape):
        if integers:  # small integers: every product and sum exact, so any order of additions gives the same bits
            return torch.randint(-3, 4, shape, generator=g).float()
        # magnitudes 2**-8 .. 2**8 apart: the partial sums lose bits often, so another order shows
        return torch.randn(*shape, generator=g) * 2.0 ** torch.randint(-8, 9, shape, generator=g)

    return (draw(batch, dim).bfloat16(), draw(batch, features, dim).bfloat16(), draw(batch, width).bfloat16())


def _torch_path(dense, sparse, grad_out):
    arch = InteractionArch(sparse.shape[1])
    d, s = dense.clone().requires_grad_(), sparse.clone().requires_grad_()
    z = torch.cat([d.unsqueeze(1), s], dim=1)
    out = torch.cat([d, _PairwiseDots.apply(z, arch.pairs, arch.mirror)], dim=1)
    out.backward(grad_out)
    return out.detach(), d.grad, s.grad


def _compiled(dense, sparse, grad_out, plain=False):
    return (dotkernel.forward(dense, sparse, plain), *dotkernel.backward(dense, sparse, grad_out, plain))


@pytest.mark.parametrize("shape", SHAPES)
def test_exact_sums_are_the_torch_path_bit_for_bit(shape):
    """With every sum exact the order of additions cannot matter: the output and both gradients are the
    torch path's, bit for bit (the pairs' order, the symmetric gradient, the dense vector's two parts)."""
    dense, sparse, grad_out = _inputs(*shape, seed=sum(shape), integers=True)
    for got, want in zip(_compiled(dense, sparse, grad_out), _torch_path(dense, sparse, grad_out)):
        assert got.dtype == torch.bfloat16 and got.shape == want.shape
        assert torch.equal(got, want)


@pytest.mark.parametrize("shape", SHAPES)
def test_rounded_sums_are_within_a_bf16_rounding_of_the_exact_ones(shape):
    """Random values: each result as close to the exact (fp64) value as the torch path's, give or take a
    bf16 rounding step; and the instruction and the plain loop make the same additions (bit for bit)."""
    dense, sparse, grad_out = _inputs(*shape, seed=7 + sum(shape))
    got, want = _compiled(dense, sparse, grad_out), _torch_path(dense, sparse, grad_out)
    d, s = dense.double().requires_grad_(), sparse.double().requires_grad_()
    z = torch.cat([d.unsqueeze(1), s], dim=1)
    n = z.shape[1]
    rows, cols = torch.triu_indices(n, n, offset=1)
    out = torch.cat([d, (z @ z.transpose(1, 2))[:, rows, cols]], dim=1)
    out.backward(grad_out.double())
    for g, w, exact in zip(got, want, (out.detach(), d.grad, s.grad)):
        step = exact.abs().clamp_min(1e-30) * 2.0**-7  # one bf16 rounding step at the value
        assert ((g.double() - exact).abs() <= (w.double() - exact).abs() + step).all()
    if dotkernel.bf16_instruction():
        for a, b in zip(got, _compiled(dense, sparse, grad_out, plain=True)):
            assert torch.equal(a, b)


def test_the_model_takes_the_compiled_path_for_bf16_and_torch_for_fp32(monkeypatch):
    """InteractionArch routes bf16 CPU inputs to the compiled pass (its autograd gives the kernel's
    gradients) and fp32 ones to torch's operations."""
    dense, sparse, grad_out = _inputs(64, 26, 64, seed=3)
    arch = InteractionArch(26)
    d, s = dense.clone().requires_grad_(), sparse.clone().requires_grad_()
    out = arch(d, s)
    out.backward(grad_out)
    fwd, gd, gs = _compiled(dense, sparse, grad_out)
    assert torch.equal(out, fwd) and torch.equal(d.grad, gd) and torch.equal(s.grad, gs)
    calls = []
    monkeypatch.setattr(dotkernel, "forward", lambda *a: calls.append(a))
    arch(dense.float(), sparse.float())
    assert not calls and not dotkernel.applies(dense.float(), sparse.float())
    assert not dotkernel.applies(dense[:, :63], sparse[:, :, :63])  # an odd dim: torch's path


def test_it_refuses_what_it_does_not_take():
    dense, sparse, grad_out = _inputs(4, 3, 8, seed=1)
    with pytest.raises(ValueError, match="bf16 CPU"):
        dotkernel.forward(dense.float(), sparse)
    with pytest.raises(ValueError, match="output gradient has shape"):
        dotkernel.backward(dense, sparse, grad_out[:, :-1])
