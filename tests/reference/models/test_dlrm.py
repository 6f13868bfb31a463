"""The reference DLRM's shapes and arithmetic."""

import pytest
import torch

from harness.errors import HarnessError
from harness.reference.models.dlrm import DLRM, DLRMConfig, Interaction, InteractionArch, InteractionDCNArch


def _config(interaction=Interaction.DOT, pooling=(1, 2, 1)):
    return DLRMConfig(
        table_rows=(10, 20, 30), embedding_dim=4, pooling=pooling, bottom_mlp=(8, 4), top_mlp=(6, 1),
        interaction=interaction, dcn_layers=2, dcn_rank=3,
    )


@pytest.mark.parametrize("interaction", list(Interaction))
def test_forward_gives_one_logit_per_sample(interaction):
    model = DLRM(_config(interaction))
    out = model(torch.rand(5, 13), torch.tensor([[1, 2, 3, 4]] * 5))
    assert out.shape == (5,)
    assert torch.isfinite(out).all()


def test_dot_interaction_is_the_pairwise_dot_products():
    arch = InteractionArch(num_sparse=2)
    d, e = torch.rand(1, 3), torch.rand(1, 2, 3)
    out = arch(d, e)
    z = [d[0], e[0, 0], e[0, 1]]
    expected = torch.cat([d[0], torch.stack([z[0] @ z[1], z[0] @ z[2], z[1] @ z[2]])])
    assert torch.allclose(out[0], expected)


def test_dcn_layer_is_the_low_rank_cross():
    arch = InteractionDCNArch(in_features=6, num_layers=1, rank=2)
    d, e = torch.rand(2, 2), torch.rand(2, 2, 2)
    x0 = torch.cat([d, e.flatten(1)], dim=1)
    expected = x0 * arch.w[0](arch.v[0](x0)) + x0
    assert torch.allclose(arch(d, e), expected)


def test_builds_on_meta_device():
    cfg = DLRMConfig(
        table_rows=(40_000_000,) * 26, embedding_dim=128, pooling=(1,) * 26, bottom_mlp=(512, 256, 128),
        top_mlp=(1024, 1024, 512, 256, 1), interaction=Interaction.DCN, dcn_layers=3, dcn_rank=512,
    )
    model = DLRM(cfg, device="meta")
    assert model.sparse_arch.embeddings.weight.shape == (26 * 40_000_000, 128)
    assert all(p.is_meta for p in model.parameters())


def test_bad_architecture_is_a_clear_error():
    with pytest.raises(HarnessError, match="bottom MLP must end at the embedding dimension 4"):
        DLRMConfig(table_rows=(1,), embedding_dim=4, pooling=(1,), bottom_mlp=(8, 5), top_mlp=(1,))


def test_dot_interaction_gradient_equals_autograd_through_bmm():
    torch.manual_seed(0)
    arch = InteractionArch(num_sparse=4)
    d = torch.rand(3, 5, requires_grad=True)
    e = torch.rand(3, 4, 5, requires_grad=True)
    upstream = torch.randn(3, 5 + 10)
    arch(d, e).backward(upstream)
    ours = (d.grad.clone(), e.grad.clone())
    d.grad, e.grad = None, None
    z = torch.cat([d.unsqueeze(1), e], dim=1)
    rows, cols = torch.triu_indices(5, 5, offset=1)
    reference = torch.cat([d, torch.bmm(z, z.transpose(1, 2))[:, rows, cols]], dim=1)
    reference.backward(upstream)
    assert torch.allclose(ours[0], d.grad, atol=1e-6) and torch.allclose(ours[1], e.grad, atol=1e-6)


def test_dot_interaction_backward_under_autocast_with_fp32_tables():
    """bf16 dense vectors beside fp32 embeddings (a user's fp32 tables under bf16 autocast): the
    forward's dots run in bf16, and the backward gives each input its gradient in its own type, close
    to autograd's through the same bmm (it raised a dtype error before)."""
    torch.manual_seed(0)
    arch = InteractionArch(num_sparse=4)
    d = torch.rand(3, 8).to(torch.bfloat16).requires_grad_()
    e = torch.rand(3, 4, 8, requires_grad=True)
    upstream = torch.randn(3, 8 + 10).to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = arch(d, e)
    out.backward(upstream)
    assert d.grad.dtype == torch.bfloat16 and e.grad.dtype == torch.float32
    ours = (d.grad.float(), e.grad.clone())
    d.grad, e.grad = None, None
    rows, cols = torch.triu_indices(5, 5, offset=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = torch.cat([d.unsqueeze(1), e], dim=1)
        reference = torch.cat([d, torch.bmm(z, z.transpose(1, 2))[:, rows, cols]], dim=1)
    reference.backward(upstream)
    assert torch.allclose(ours[0], d.grad.float(), rtol=0.02, atol=0.02)
    assert torch.allclose(ours[1], e.grad, rtol=0.02, atol=0.02)
