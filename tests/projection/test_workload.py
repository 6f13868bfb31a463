"""The counted work of a DLRM agrees with the reference model itself: torch's FLOP counter over its
forward pass, and its dense parameters."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from harness.errors import ErrorCategory, HarnessError
from harness.projection.workload import NUM_DENSE, benchmark_workload, dlrm_workload
from harness.reference.models.dlrm import DLRM
from harness.reference.models.from_spec import dlrm_config
from harness.rules.specs import ModelSpec, load_benchmark


def _model(name: str) -> tuple[ModelSpec, DLRM]:
    spec = load_benchmark(name)
    config = dlrm_config(spec)
    # small tables: the dense part and the pooled vectors' shapes do not depend on the rows
    small = config.__class__(**{**config.__dict__, "table_rows": tuple(min(r, 100) for r in config.table_rows)})
    return spec.model, DLRM(small)


@pytest.mark.parametrize("name", ["dlrm", "dlrm_dcnv2", "dlrm_synthetic"])
def test_forward_flops_and_dense_parameters_are_the_reference_models(name):
    model_spec, model = _model(name)
    work = dlrm_workload(model_spec)
    batch = 4
    dense = torch.rand(batch, NUM_DENSE)
    sparse = torch.randint(0, 3, (batch, sum(model_spec.pooling)))  # every table has 3 rows or more
    with FlopCounterMode(display=False) as counter:
        model(dense, sparse)
    assert work.forward_flops_per_sample * batch == counter.get_total_flops()
    assert work.dense_parameters == sum(p.numel() for p in model.dense_parameters())


def test_dcnv2_by_hand():
    work = benchmark_workload(load_benchmark("dlrm_dcnv2"))
    bottom = 13 * 512 + 512 * 256 + 256 * 128
    cross = 3 * 2 * 3456 * 512
    top = 3456 * 1024 + 1024 * 1024 + 1024 * 512 + 512 * 256 + 256
    assert work.forward_flops_per_sample == 2 * (bottom + cross + top)  # 32.06 MFLOP a sample
    assert work.training_flops_per_sample == 3 * work.forward_flops_per_sample
    assert work.embedding_output_elements == 26 * 128


def test_an_hstu_benchmark_is_not_implemented_yet():
    with pytest.raises(HarnessError) as err:
        benchmark_workload(load_benchmark("dlrmv4"))
    assert err.value.category is ErrorCategory.NOT_IMPLEMENTED and "not implemented" in str(err.value)
