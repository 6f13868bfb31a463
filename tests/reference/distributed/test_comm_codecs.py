"""Quantized communication codecs: exact byte counts, bounded error, determinism, any backend."""

from __future__ import annotations

import pytest
import torch

from harness.errors import HarnessError
from harness.reference.distributed.comm_codecs import Codec, CommConfig, decode, encode, wire_bytes

# Worst relative error per codec, against the row's largest magnitude (int8: its range).
BOUND = {Codec.FP32: 0.0, Codec.FP16: 2**-11, Codec.BF16: 2**-8, Codec.FP8: 2**-4, Codec.INT8: 0.5 / 255}


@pytest.mark.parametrize("codec", list(Codec))
def test_round_trip_error_is_within_the_codecs_bound(codec):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 48, generator=g) * torch.logspace(-3, 3, 64).unsqueeze(1)
    data = encode(x, codec)
    assert data.dtype == torch.uint8 and data.numel() == wire_bytes(codec, 64, 48)
    y = decode(data, codec, 64, 48)
    scale = (x.amax(1) - x.amin(1)) if codec is Codec.INT8 else x.abs().amax(1)
    err = ((y - x).abs().amax(1) / scale).max().item()
    assert err <= BOUND[codec] * 1.0001, err
    if codec is Codec.FP32:
        assert torch.equal(x, y)


@pytest.mark.parametrize("codec", list(Codec))
def test_encoding_is_deterministic_and_handles_constant_and_zero_rows(codec):
    x = torch.zeros(3, 5)
    x[1] = 2.5
    x[2] = torch.arange(5.0)
    assert torch.equal(encode(x, codec), encode(x.clone(), codec))
    y = decode(encode(x, codec), codec, 3, 5)
    assert torch.equal(y[0], x[0]) and torch.allclose(y[1], x[1], rtol=0.07)


def test_bytes_shrink_as_promised_and_lowest_precision_is_named_as_mlperf_does():
    sizes = {c: wire_bytes(c, 1000, 128) for c in Codec}
    assert sizes[Codec.FP32] == 2 * sizes[Codec.FP16] == 2 * sizes[Codec.BF16]
    assert sizes[Codec.FP8] < sizes[Codec.FP16] / 1.9 and sizes[Codec.INT8] < sizes[Codec.FP16] / 1.85  # per-row scale/bias
    assert CommConfig(Codec.FP16, Codec.BF16).lowest_precision() == "fp16"
    assert CommConfig(backward=Codec.BF16).lowest_precision() == "bfloat16"
    assert CommConfig(allreduce=Codec.INT8).lowest_precision() == "int8"


def test_wrong_payloads_are_refused():
    with pytest.raises(ValueError):
        decode(torch.zeros(7, dtype=torch.uint8), Codec.FP16, 2, 2)
    with pytest.raises(ValueError):
        encode(torch.zeros(4), Codec.FP16)


def test_codecs_from_a_run_configs_names_round_trip_and_refuse_unknown_ones():
    config = CommConfig.from_names({"forward": "fp16", "backward": "int8"})
    assert config == CommConfig(forward=Codec.FP16, backward=Codec.INT8)
    assert CommConfig.from_names(config.to_names()) == config
    assert CommConfig.from_names(None) == CommConfig()
    for bad in ({"forward": "fp7"}, {"sideways": "fp16"}):
        with pytest.raises(HarnessError, match="unknown codec"):
            CommConfig.from_names(bad)


def test_the_traffic_model_uses_the_codecs_wire_sizes():
    from harness.reference.planner.traffic import wire_bytes as projected

    for codec in Codec:
        for rows, cols in ((1, 1), (7, 64), (512, 13)):
            assert projected(codec, rows, cols) == wire_bytes(codec, rows, cols), codec


def test_wire_bytes_of_a_forward_block():
    # what one rank sends per shard of 8 columns for 256 samples
    assert wire_bytes(Codec.FP32, 256, 8) == 256 * 8 * 4
    assert wire_bytes(Codec.INT8, 256, 8) == 256 * (8 + 8)
    assert wire_bytes(Codec.FP8, 256, 8) == 256 * (8 + 4)
