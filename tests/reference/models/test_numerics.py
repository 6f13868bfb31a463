"""Reduced precision: stochastic rounding of 16-bit tables, and the dense layers under autocast."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import TrainingSession
from harness.reference.models.embeddings import FusedEmbeddingCollection, SparseOptimizerConfig
from harness.reference.models.numerics import (
    TableLayout,
    column_multipliers,
    fused_layout,
    row_keys,
    stochastic_round,
    torch_dtype,
)
from harness.rules.precision import Precision, parse_precision
from harness.rules.specs import load_benchmark

HALF = [torch.bfloat16, torch.float16]


def rounded_many(value: float, dtype: torch.dtype, count: int, cols: int = 16) -> torch.Tensor:
    """``value`` rounded at ``count`` steps (each its own bits), ``count x cols`` fp32."""
    keys = torch.cat([row_keys(3, step, torch.tensor([2]), torch.tensor([11])) for step in range(count)])
    values = torch.full((count, cols), value, dtype=torch.float32)
    return stochastic_round(values, dtype, keys, column_multipliers(0, cols)).float()


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("value", [0.1234567, -0.0312345, 3.3e-6, -7.77e-7, 1.0 + 1e-4])
def test_rounding_is_unbiased_and_lands_on_a_neighbour(dtype, value):
    """The mean of many roundings is the fp32 value within its expected error (fp16's subnormal
    range included), and every rounding is one of the two 16-bit values around it."""
    got = rounded_many(value, dtype, 2048)
    x = torch.tensor(value, dtype=torch.float32)
    lo = x.to(dtype).float()
    hi = torch.nextafter(x.to(dtype), torch.tensor(float("inf") if lo < x else float("-inf"), dtype=dtype)).float()
    assert set(got.unique().tolist()) <= {float(lo), float(hi)}
    gap = abs(float(hi - lo))
    p = abs(float(x - lo)) / gap  # the probability of landing on hi
    # a Bernoulli mean of n draws: standard error gap * sqrt(p (1 - p) / n); allow 5 of them
    n = got.numel()
    assert abs(float(got.double().mean()) - value) <= 5 * gap * (p * (1 - p) / n) ** 0.5 + gap * 2**-15
    assert 0 < float((got == float(hi)).double().mean()) < 1  # it does round both ways


def test_round_to_nearest_would_lose_small_updates_that_stochastic_rounding_keeps():
    """1000 updates of a quarter unit in the last place: nearest rounding never moves the weight,
    stochastic rounding moves it by about 250 units."""
    w0 = torch.tensor([[1.0]])
    ulp = float(torch.nextafter(w0.to(torch.bfloat16), torch.tensor(2.0, dtype=torch.bfloat16)).float() - 1.0)
    nearest = stochastic = w0.to(torch.bfloat16)
    for step in range(1000):
        nearest = (nearest.float() + ulp / 4).to(torch.bfloat16)
        stochastic = stochastic_round(stochastic.float() + ulp / 4, torch.bfloat16,
                                      row_keys(0, step, torch.tensor([0]), torch.tensor([0])), column_multipliers(0, 1))
    assert float(nearest) == 1.0
    assert abs(float(stochastic) - (1.0 + 250 * ulp)) < 40 * ulp


def test_the_bits_depend_only_on_seed_step_table_row_and_column():
    """The same element rounds alike whatever batch it is in, in which order, and in which
    layout (a fused weight of whole tables, or a row/column shard of one); another seed, step,
    table, row or column draws other bits."""
    fused = fused_layout(seed=5, table_ids=(0, 1, 2), table_rows=(10, 20, 30))
    # table 1's rows 4 and 7 are fused rows 14 and 17; a row-wise shard of table 1 from row 3,
    # columns 2.. of it
    shard = TableLayout.of_shard(seed=5, table=1, rows=10, row_offset=3, col_offset=2)
    values = torch.full((2, 6), 0.3)
    from_fused = fused.round(values.clone(), torch.bfloat16, torch.tensor([14, 17]), step=9)[:, 2:]
    from_shard = shard.round(values[:, 2:].clone(), torch.bfloat16, torch.tensor([1, 4]), step=9)
    assert torch.equal(from_fused, from_shard)
    alone = fused.round(values[1:].clone(), torch.bfloat16, torch.tensor([17]), step=9)
    assert torch.equal(alone, fused.round(values.clone(), torch.bfloat16, torch.tensor([14, 17]), step=9)[1:])
    keys = fused.keys(torch.tensor([14]), 9)
    assert keys.shape == (1, 1)
    others = [fused_layout(6, (0, 1, 2), (10, 20, 30)).keys(torch.tensor([14]), 9), fused.keys(torch.tensor([14]), 10),
              fused.keys(torch.tensor([15]), 9), fused.keys(torch.tensor([44]), 9)]
    assert all(int(k) != int(keys) for k in others)
    assert not torch.equal(column_multipliers(0, 4), column_multipliers(1, 4))


def test_a_16_bit_table_stores_half_the_bytes_and_follows_the_fp32_update():
    """A bf16 collection's weight is half the fp32 one's bytes, its optimizer state fp32; one
    step's update is the fp32 collection's update, each value rounded to a neighbour."""
    kw = dict(table_rows=[50, 70], dim=8, pooling=[1, 2], optimizer=SparseOptimizerConfig(learning_rate=0.1), seed=4)
    full, half = FusedEmbeddingCollection(**kw), FusedEmbeddingCollection(**kw, dtype=torch.bfloat16)
    assert half.weight.element_size() * 2 == full.weight.element_size() and half.optimizer_state.dtype == torch.float32
    full.weight.data.copy_(half.weight.float())  # the same start
    ids = torch.tensor([[3, 5, 9], [3, 60, 1]])
    for coll in (full, half):
        coll.set_step(7)
        (coll(ids).float() * torch.arange(16.0).view(1, 2, 8)).sum().backward()
    moved = (full.weight != half.weight.float()).any(dim=1)
    assert moved.any()
    f, h = full.weight.detach(), half.weight.detach()
    down, up = f.to(torch.bfloat16).float(), h.float()
    neighbours = (torch.nextafter(f.to(torch.bfloat16), torch.full_like(f, float("inf")).to(torch.bfloat16)).float(),
                  torch.nextafter(f.to(torch.bfloat16), torch.full_like(f, float("-inf")).to(torch.bfloat16)).float())
    assert bool(((up == down) | (up == neighbours[0]) | (up == neighbours[1])).all())
    assert torch.equal(full.optimizer_state, half.optimizer_state)


class MatmulDtypes(TorchDispatchMode):
    """The dtypes of every matrix multiply dispatched."""

    OPS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear"}

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[str, torch.dtype]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in self.OPS:
            self.seen.append((name, args[0].dtype))
        return func(*args, **(kwargs or {}))


def session(precision: str, seed: int = 1) -> TrainingSession:
    spec = load_benchmark("dlrm_synthetic")
    hp = {**spec.reference_hyperparameters, "global_batch_size": 256}
    return TrainingSession(RunConfig.offline(spec.raw, hp, seed, precision=precision))


@pytest.fixture(scope="module")
def batches() -> list:
    s = session("fp32")
    feed = s.batches(until=6)
    out = list(feed)
    feed.close()
    return out


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_every_matrix_multiply_of_a_16_bit_step_runs_in_16_bits(precision, batches):
    """Forward and backward of a bf16 (fp16) step: no matrix multiply falls back to fp32, the
    master weights stay fp32, and the loss is fp32."""
    s = session(precision)
    with MatmulDtypes() as mode:
        loss = s.step(batches[0])
    assert mode.seen and {d for _, d in mode.seen} == {torch_dtype(precision)}, mode.seen
    assert loss.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in s.model.dense_parameters())
    assert s.model.sparse_arch.embeddings.weight.dtype == torch_dtype(precision)
    with MatmulDtypes() as fp32:
        session("fp32").step(batches[0])
    assert {d for _, d in fp32.seen} == {torch.float32}


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_16_bit_session_is_deterministic_and_learns(precision, batches):
    """Same seed, same batches: the same losses and tables, bit for bit; the loss falls."""
    runs = []
    for _ in range(2):
        s = session(precision)
        losses = [float(s.step(b)) for b in batches]
        runs.append((losses, s.model.sparse_arch.embeddings.weight.detach().clone()))
    assert runs[0][0] == runs[1][0] and torch.equal(runs[0][1], runs[1][1])
    assert runs[0][0][-1] < runs[0][0][0]


def test_a_precision_is_one_of_three_names():
    assert parse_precision("BF16") is Precision.BF16 and Precision.FP16.bytes_per_element == 2
    with pytest.raises(Exception, match="fp32, bf16, fp16"):
        parse_precision("fp8")
