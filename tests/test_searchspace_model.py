"""Model builder: params equal the analytic count, any resolution, ONNX and TorchScript."""
import numpy as np
import pytest
import torch

from anb.searchspace import EFFICIENTNET_B0, SEQ1D_SPACE, Arch, Sampler, count
from anb.searchspace.model import MBConv, build_model, count_parameters
from anb.searchspace.onnx_export import export_onnx, run_onnx
from anb.searchspace.space import ANB_SPACE

ARCHS = Sampler(13, space=ANB_SPACE).sample(4) + [EFFICIENTNET_B0]


@pytest.mark.parametrize("arch", ARCHS, ids=str)
def test_parameter_count_equals_analytic_count(arch):
    assert count_parameters(build_model(arch, space=ANB_SPACE)) == count(arch,
                                                                         space=ANB_SPACE).params
    assert count_parameters(build_model(arch, num_classes=10,
                                        space=ANB_SPACE)) == count(arch, num_classes=10,
                                                                   space=ANB_SPACE).params


@pytest.mark.parametrize("resolution", [64, 97, 160, 192])
def test_forward_runs_at_any_resolution(resolution):
    model = build_model(ARCHS[0], num_classes=10, space=ANB_SPACE).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, resolution, resolution))
    assert out.shape == (2, 10) and torch.isfinite(out).all()


def test_benchmark_activation_is_relu_with_hard_sigmoid_gate_and_silu_is_optional():
    relu = build_model(EFFICIENTNET_B0, space=ANB_SPACE)
    types = {type(m) for m in relu.modules()}
    assert torch.nn.ReLU in types and torch.nn.Hardsigmoid in types
    assert torch.nn.Sigmoid not in types and torch.nn.SiLU not in types
    silu = build_model(EFFICIENTNET_B0, activation="silu", space=ANB_SPACE)
    types = {type(m) for m in silu.modules()}
    assert torch.nn.SiLU in types and torch.nn.Sigmoid in types and torch.nn.ReLU not in types
    with pytest.raises(ValueError, match="unknown activation 'gelu'"):
        build_model(EFFICIENTNET_B0, activation="gelu", space=ANB_SPACE)


def test_residuals_only_where_stride_1_and_same_width():
    model = build_model(EFFICIENTNET_B0, space=ANB_SPACE)
    blocks = [m for m in model.modules() if isinstance(m, MBConv)]
    assert len(blocks) == EFFICIENTNET_B0.depth
    # first layer of every stage changes width (no residual); later layers keep it
    assert [b.residual for b in blocks[:3]] == [False, False, True]


def test_stochastic_depth_only_in_training():
    torch.manual_seed(0)
    model = build_model(EFFICIENTNET_B0, num_classes=10, dropout=0.0, space=ANB_SPACE)
    x = torch.randn(4, 3, 64, 64)
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(x), model(x))
    model.train()
    rates = [m.drop_path.rate for m in model.modules() if isinstance(m, MBConv) and m.residual]
    assert rates == sorted(rates) and 0 < max(rates) < 0.2


def test_onnx_export_matches_torch_in_onnxruntime(tmp_path):
    model = build_model(ARCHS[1], num_classes=10, space=ANB_SPACE).eval()
    path = export_onnx(model, tmp_path / "m.onnx", resolution=96)
    for size in (96, 128):
        x = torch.randn(3, 3, size, size)
        with torch.no_grad():
            want = model(x).numpy()
        got = run_onnx(path, x.numpy())
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert not list(tmp_path.glob(".*.tmp"))


def test_torchscript_trace_matches_eager():
    model = build_model(ARCHS[2], num_classes=10, space=ANB_SPACE).eval()
    x = torch.randn(1, 3, 96, 96)
    traced = torch.jit.trace(model, x)
    y = torch.randn(2, 3, 96, 96)
    with torch.no_grad():
        torch.testing.assert_close(traced(y), model(y))


def test_seq1d_model():
    arch = Arch.from_string("e4k5l2-e1k3l1-e6k3l3-e1k5l1-e4k3l2", SEQ1D_SPACE)
    model = build_model(arch, num_classes=36, in_channels=4, space=SEQ1D_SPACE).eval()
    assert count_parameters(model) == count(arch, num_classes=36, space=SEQ1D_SPACE,
                                            in_channels=4).params
    with torch.no_grad():
        assert model(torch.randn(2, 4, 1000)).shape == (2, 36)
