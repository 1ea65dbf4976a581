"""The CUDA back-end. On a machine without CUDA the GPU-only tests skip; the protocol, the
options and the timing loop they share run here through the same PyTorch back-end on the CPU."""
from __future__ import annotations

import pytest
import torch

from anb.collect_throughput.backends import get_backend
from anb.collect_throughput.backends.cuda import CudaBackend, driver_version
from anb.collect_throughput.measure import measure
from anb.collect_throughput.protocol import load_device
from anb.searchspace.sampler import Sampler

ARCH = Sampler(21).sample(1)[0]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
FAST = {"resolution": 64, "batch": 4, "stopping": {"budget_seconds": 0.5, "min_reps": 5},
        "warmup": {"max_seconds": 5.0}}


def test_gpu_config_is_the_reference_protocol():
    (thr, lat) = sorted(load_device("a100").protocols, key=lambda p: p.kind, reverse=True)
    assert thr.kind == "throughput" and thr.batch == 128 and lat.batch == 1
    assert thr.backend == "cuda" and thr.precision == "fp16" and thr.layout == "channels_last"
    assert thr.cudnn_benchmark and thr.inputs == "synthetic"
    assert isinstance(get_backend("cuda"), CudaBackend)


def test_gpu_protocol_runs_through_the_same_loop_on_cpu(tmp_path):
    """Every option of the GPU protocol except the device, with a CPU-synchronised clock."""
    config = load_device("a100", {**FAST, "precision": "bf16"})
    protocol = next(p for p in config.protocols if p.kind == "throughput")
    m = measure(ARCH, protocol.replace(backend="torch"), tmp_path)
    assert m.key == "throughput_a100" and m.value > 0 and m.protocol["layout"] == "channels_last"
    assert m.protocol["cudnn_benchmark"] is True and m.extra["warmup_stop_reason"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_cuda_backend_says_why_it_cannot_run(tmp_path):
    protocol = next(iter(load_device("a100", FAST).protocols))
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        CudaBackend().prepare(ARCH, protocol, tmp_path)


@needs_cuda
@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp32"])
def test_cuda_measurement_and_environment(precision, tmp_path):
    config = load_device("a100", {**FAST, "precision": precision})
    for protocol in config.protocols:
        m = measure(ARCH, protocol, tmp_path)
        env = m.environment
        assert m.value > 0 and env["device_name"] and env["cuda"] and env["torch"]
        assert env["cudnn_benchmark"] is True
        assert len(m.times_s) >= 3


@needs_cuda
def test_cuda_event_clock_measures_device_time():
    from anb.collect_throughput.backends.cuda import CudaEventClock

    a = torch.randn(2048, 2048, device="cuda")
    clock = CudaEventClock()
    clock.start()
    for _ in range(10):
        a = a @ a / 2048
    elapsed = clock.stop()
    assert elapsed > 0
    assert driver_version() is not None
