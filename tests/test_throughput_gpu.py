"""The CUDA back-end. On a machine without CUDA the GPU-only tests skip; the protocol, the
options and the timing loop they share run here through the same PyTorch back-end on the CPU."""
from __future__ import annotations

import pytest
import torch

from anb.collect_throughput.backends import get_backend
from anb.collect_throughput.backends.cuda import CudaBackend, driver_version
from anb.collect_throughput.targets.local import measure
from anb.collect_throughput.timing.protocol import load_device
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE

ARCH = Sampler(21, space=ANB_SPACE).sample(1)[0]
def needs_cuda(test):
    """Runs only on a CUDA GPU: marked ``cuda`` (``-m cuda`` selects these), skipped elsewhere."""
    skip = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
    return pytest.mark.cuda(skip(test))
FAST = {"resolution": 64, "batch": 4, "stopping": {"budget_seconds": 0.5, "min_reps": 5},
        "warmup": {"max_seconds": 5.0}}


def test_gpu_config_is_the_reference_protocol():
    (thr, lat) = sorted(load_device("a100", space=ANB_SPACE.name).protocols,
                        key=lambda p: p.kind, reverse=True)
    assert thr.kind == "throughput" and thr.batch == 128 and lat.batch == 1
    assert thr.backend == "cuda" and thr.precision == "fp16" and thr.layout == "channels_last"
    assert thr.cudnn_benchmark and thr.inputs == "synthetic"
    assert isinstance(get_backend("cuda"), CudaBackend)


def test_gpu_protocol_runs_through_the_same_loop_on_cpu(tmp_path):
    """Every option of the GPU protocol except the device, with a CPU-synchronised clock."""
    config = load_device("a100", {**FAST, "precision": "bf16"}, space=ANB_SPACE.name)
    protocol = next(p for p in config.protocols if p.kind == "throughput")
    m = measure(ARCH, protocol.replace(backend="torch"), tmp_path)
    assert m.key == "throughput_a100" and m.value > 0 and m.protocol["layout"] == "channels_last"
    assert m.protocol["cudnn_benchmark"] is True and m.extra["warmup_stop_reason"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_cuda_backend_says_why_it_cannot_run(tmp_path):
    protocol = next(iter(load_device("a100", FAST, space=ANB_SPACE.name).protocols))
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        CudaBackend().prepare(ARCH, protocol, tmp_path)


@needs_cuda
@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp32"])
def test_cuda_measurement_and_environment(precision, tmp_path):
    config = load_device("a100", {**FAST, "precision": precision}, space=ANB_SPACE.name)
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


def test_cuda_event_clock_synchronises_before_reading(monkeypatch):
    """Catches: a CUDA clock that reads the events before the device finished (no
    ``torch.cuda.synchronize`` before the start event, no ``end.synchronize`` before
    ``elapsed_time``): it would time kernel launches, not the work. A RECORDING STAND-IN for
    ``torch.cuda`` at that boundary (no GPU here) logs the calls in order; ms -> s exactly."""
    from anb.collect_throughput.backends.cuda import CudaEventClock

    calls: list[str] = []

    class RecordingEvent:
        made = 0

        def __init__(self, enable_timing: bool = False):
            assert enable_timing
            self.name = ("begin", "end")[RecordingEvent.made]
            RecordingEvent.made += 1

        def record(self) -> None:
            calls.append(f"{self.name}.record")

        def synchronize(self) -> None:
            calls.append(f"{self.name}.synchronize")

        def elapsed_time(self, other: RecordingEvent) -> float:
            calls.append(f"{self.name}.elapsed_time({other.name})")
            return 250.0  # milliseconds, as torch reports them

    monkeypatch.setattr(torch.cuda, "Event", RecordingEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("cuda.synchronize"))
    clock = CudaEventClock()
    clock.start()
    assert calls == ["cuda.synchronize", "begin.record"]
    assert clock.stop() == 0.25
    assert calls[2:] == ["end.record", "end.synchronize", "begin.elapsed_time(end)"]


def test_gpu_latency_replays_a_cuda_graph_throughput_stays_eager():
    """The released GPU columns are throughput (eager; docs/background/devices.md, "GPU"); anb's
    own batch-1 latency replays a CUDA graph per request (eager latency on an H100 was
    launch-bound: retest Kendall tau 0.51 over 20 designs, pass-to-pass median change 40 %)."""
    for gpu in ("a100", "3090", "h100"):
        kinds = {p.kind: p for p in load_device(gpu, space=ANB_SPACE.name).protocols}
        assert kinds["latency"].cuda_graphs and not kinds["throughput"].cuda_graphs


def test_cuda_graphs_need_the_cuda_backend_without_compile():
    from anb.collect_throughput.timing.protocol import Protocol

    with pytest.raises(ValueError, match="cuda_graphs"):
        Protocol(device="cpu-torch", backend="torch", cuda_graphs=True)
    with pytest.raises(ValueError, match="cuda_graphs"):
        Protocol(device="a100", backend="cuda", precision="fp16", compile=True, cuda_graphs=True)


def test_cuda_graphs_joins_the_fingerprint_only_when_set():
    """Results stored before the field existed keep their fingerprint; graphs vs eager differ."""
    from anb.collect_throughput.timing.protocol import protocol_difference, protocol_fingerprint

    eager = next(p for p in load_device("a100", space=ANB_SPACE.name).protocols
                 if p.kind == "throughput")
    older = {k: v for k, v in eager.as_dict().items() if k != "cuda_graphs"}
    assert eager.fingerprint == protocol_fingerprint(older)
    graphs = eager.replace(cuda_graphs=True)
    assert graphs.fingerprint != eager.fingerprint
    assert protocol_difference(older, graphs.as_dict()) == "cuda_graphs: False -> True"


@needs_cuda
def test_cuda_graph_step_replays_the_network_on_each_batch():
    """Every replay runs the captured forward on the batch copied in (same outputs as eager).
    A random conv layer stands in for the network: a freshly built one's logits are all zero
    (zero-initialised classifier), which could not tell the batches apart."""
    from anb.collect_throughput.backends.cuda import graph_step

    net = torch.nn.Conv2d(3, 8, 3).cuda().half().eval()

    def run(x):
        with torch.inference_mode():
            return net(x)

    batches = [torch.randn(1, 3, 64, 64, device="cuda", dtype=torch.float16) for _ in range(2)]
    outputs = []
    step = graph_step(lambda x: outputs.append(run(x)) or outputs[-1], batches)
    static_out = outputs[-1]  # the graph's output buffer, from the capture
    for expected in (batches[0], batches[1], batches[0]):
        step()
        torch.cuda.synchronize()
        assert torch.allclose(static_out.float(), run(expected).float(), atol=1e-2)
    assert not torch.allclose(run(batches[0]).float(), run(batches[1]).float(), atol=1e-2)


@needs_cuda
def test_cuda_graph_latency_measurement(tmp_path):
    protocol = next(p for p in load_device("a100", FAST, space=ANB_SPACE.name).protocols
                    if p.kind == "latency")
    m = measure(ARCH, protocol, tmp_path)
    assert m.extra["cuda_graphs"] is True and m.protocol["cuda_graphs"] is True
    assert m.value > 0 and len(m.times_s) >= 5
