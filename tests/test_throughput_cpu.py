"""The CPU back-ends (PyTorch eager, onnxruntime) measured for real on sampled architectures."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from anb.collect_throughput.backends import get_backend
from anb.collect_throughput.backends.onnxruntime_backend import float_onnx, ort_session
from anb.collect_throughput.targets.local import measure
from anb.collect_throughput.timing.inputs import image_batches, make_inputs
from anb.collect_throughput.timing.protocol import Protocol, StoppingRule, WarmupRule
from anb.collect_throughput.timing.result import arch_record
from anb.records import records_to_frame, validate_record
from anb.searchspace.model import build_model
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE

# the budget is a ceiling a loaded machine may need (4 reps fitted 0.5 s at load 15); a quiet
# one stops on convergence or max_reps long before it
FAST = dict(resolution=64, warmup=WarmupRule(max_steps=20, max_seconds=2),
            stopping=StoppingRule(min_reps=5, max_reps=30, budget_seconds=5.0,
                                  min_rep_seconds=0.005))
ARCHS = Sampler(7, space=ANB_SPACE).sample(3)


def _protocol(backend: str, kind: str = "latency", **kw) -> Protocol:
    return Protocol(device=f"cpu-{backend.replace('onnxruntime', 'ort')}", backend=backend,
                    kind=kind, **{**FAST, **kw})


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
@pytest.mark.parametrize("arch", ARCHS, ids=str)
def test_backend_measures_a_sampled_architecture(backend, arch, tmp_path):
    m = measure(arch, _protocol(backend, "throughput", batch=2), tmp_path)
    entry = m.to_perf_entry()
    raw = np.asarray(entry["raw_times_s"])
    assert entry["n"] == raw.size >= 5 and (raw > 0).all()
    assert entry["stop_reason"] in ("converged", "budget", "max_reps")
    per_rep = 2 / raw  # images/s of every repetition
    assert per_rep.min() <= entry["throughput_mean"] <= per_rep.max()
    assert entry["throughput_median"] == pytest.approx(np.median(per_rep))
    assert entry["mean_untrimmed"] == pytest.approx(per_rep.mean())
    assert entry["cv"] >= 0 and entry["unit"] == "images/s" and entry["batch"] == 2
    assert entry["protocol"]["backend"] == backend and entry["protocol"]["threads"] == 1
    env = entry["environment"]
    assert env["cpu"] and env["host"] and "torch" in env["libraries"] and env["cpu_count"] >= 1
    assert len(entry["warmup_times_s"]) >= 3


def test_latency_record_validates_and_flattens(tmp_path):
    arch = ARCHS[0]
    ms = [measure(arch, _protocol("onnxruntime", kind), tmp_path) for kind in ("latency",
                                                                               "throughput")]
    record = arch_record(arch, ms, space=ANB_SPACE)
    assert validate_record(record, space=ANB_SPACE).id == arch.id
    assert set(record["platform_perf"]) == {"latency_cpu-ort", "throughput_cpu-ort"}
    lat = record["platform_perf"]["latency_cpu-ort"]
    assert lat["unit"] == "ms"
    assert lat["latency_mean"] == pytest.approx(1e3 * np.sort(lat["raw_times_s"])[
        int(0.1 * lat["n"]): lat["n"] - int(0.1 * lat["n"])].mean())
    frame = records_to_frame([record], space=ANB_SPACE)
    assert frame.loc[0, "latency_cpu-ort"] == pytest.approx(lat["latency_mean"])


def test_onnx_model_is_the_torch_model(tmp_path):
    """What the onnxruntime back-end times computes what the PyTorch network computes."""
    arch = ARCHS[1]
    x = make_inputs(_protocol("onnxruntime", batch=2), arch)[0]
    torch.manual_seed(0)
    got = ort_session(float_onnx(arch, tmp_path, 64,
                                 space=ANB_SPACE), 1).run(["logits"], {"input": x})[0]
    torch.manual_seed(0)
    with torch.no_grad():
        ref = build_model(arch, space=ANB_SPACE).eval()(torch.from_numpy(x)).numpy()
    assert got.shape == (2, 1000)
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)


def test_torch_channels_last_bf16_path_runs_on_cpu(tmp_path):
    """The GPU protocol's options (channels_last, autocast) through the same loop on the CPU."""
    m = measure(ARCHS[2], _protocol("torch", "throughput", batch=2, layout="channels_last",
                                    precision="bf16"), tmp_path)
    assert m.protocol["layout"] == "channels_last" and m.precision == "bf16"
    assert m.value > 0 and len(m.times_s) >= 3  # bf16 is slow on CPU: the budget may stop it


def test_cpu_clock_and_imagenet_inputs(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(5):
        Image.fromarray(rng.integers(0, 255, (90, 120, 3), dtype=np.uint8)).save(
            tmp_path / f"val_{i}.png")
    batches = image_batches(tmp_path, batch=2, resolution=64)
    assert len(batches) == 2 and batches[0].shape == (2, 3, 64, 64)
    assert abs(float(batches[0].mean())) < 3  # normalised
    m = measure(ARCHS[0], _protocol("onnxruntime", "throughput", batch=2, inputs="imagenet",
                                    imagenet_dir=str(tmp_path), clock="cpu"), tmp_path / "w")
    assert m.protocol["inputs"] == "imagenet" and m.protocol["clock"] == "cpu" and m.value > 0
    with pytest.raises(ValueError, match="imagenet_dir"):
        image_batches(tmp_path, batch=50, resolution=64)


def test_backend_rejects_what_it_cannot_run(tmp_path):
    with pytest.raises(ValueError, match="layout='channels_last'"):
        get_backend("onnxruntime").prepare(ARCHS[0], _protocol("onnxruntime",
                                                               layout="channels_last"), tmp_path)
    with pytest.raises(ValueError, match="backend='tensorrt'"):
        get_backend("tensorrt")
