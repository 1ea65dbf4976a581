"""Host-side DPU op check: the space's networks are FPGA-safe by construction."""
from __future__ import annotations

import pytest
from torch import nn

from anb.collect_throughput.quantization.dpu_check import (
    assert_dpu_safe,
    dpu_violations,
    unsupported_modules,
)
from anb.searchspace.arch import EFFICIENTNET_B0
from anb.searchspace.model import build_model
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE


@pytest.mark.slow
@pytest.mark.parametrize("arch", [EFFICIENTNET_B0, *Sampler(4, space=ANB_SPACE).sample(3)], ids=str)
def test_sampled_relu_hardsigmoid_networks_are_dpu_safe(arch):
    assert dpu_violations(build_model(arch, space=ANB_SPACE)) == []


@pytest.mark.slow
def test_silu_sigmoid_variant_and_softmax_are_rejected():
    violations = dpu_violations(build_model(EFFICIENTNET_B0, activation="silu", space=ANB_SPACE))
    assert any("SiLU" in v for v in violations) and any("Sigmoid" in v for v in violations)
    assert any(v.startswith("onnx ") and v.endswith("Sigmoid") for v in violations)
    with pytest.raises(ValueError, match="not DPU-safe"):
        assert_dpu_safe(build_model(EFFICIENTNET_B0, activation="silu", space=ANB_SPACE))
    assert unsupported_modules(nn.Sequential(nn.Conv2d(3, 8, 3), nn.Softmax(dim=1))) == \
        ["1: Softmax"]
