"""More compiler/runtime stacks measured for real on this CPU: OpenVINO (fp32 and static int8)
and Apache TVM (Relax + LLVM, fp32), each a registered back-end with a shipped device config,
its toolchain recorded in every result, and the same model's outputs as onnxruntime's."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from anb.collect_throughput.backends import get_backend
from anb.collect_throughput.backends.onnxruntime_backend import ort_session
from anb.collect_throughput.targets.base import RunSettings
from anb.collect_throughput.targets.local import LocalTarget
from anb.collect_throughput.targets.protocol_target import Schedule
from anb.collect_throughput.timing.protocol import load_device
from anb.searchspace.arch import Arch
from anb.searchspace.space import ANB_SPACE

pytest.importorskip("openvino")
# every kind of op of the space (expansion, 5x5 depthwise, squeeze-excite) in few distinct
# kernels: TVM compiles it in half the time a sampled architecture takes
ARCH = Arch.from_string("e6k5l1se-" + "-".join(["e1k3l1"] * 6), ANB_SPACE)
FAST = {"resolution": 32, "stopping": {"budget_seconds": 0.3, "min_reps": 3},
        "warmup": {"max_seconds": 1.0}}
pytestmark = pytest.mark.timeout(600)


def _record(device: str, tmp_path: Path) -> dict:
    config = load_device(device, FAST, space=ANB_SPACE.name)
    summary = LocalTarget(config, Schedule(anchors=())).measure(
        [ARCH], tmp_path / "out", RunSettings(workdir=tmp_path / "work", progress=False,
                                              keep_work=True))
    assert summary.measured == [ARCH.id] and not summary.failed
    return json.loads((tmp_path / "out" / device / f"{ARCH.id}.json").read_text())


@pytest.mark.slow
@pytest.mark.isolated
def test_openvino_fp32_measures_and_computes_what_onnxruntime_does(tmp_path):
    """Bug class: the OpenVINO stack silently running bf16 (its default on CPUs with bf16), or
    a different model from the one every other CPU stack measures."""
    import openvino as ov

    from anb.collect_throughput.backends.openvino_backend import compile_cpu

    record = _record("cpu-openvino", tmp_path)
    entry = record["platform_perf"]["latency_cpu-openvino"]
    assert entry["latency_mean"] > 0 and entry["protocol"]["backend"] == "openvino"
    env = entry["environment"]
    assert env["openvino_version"] == ov.get_version()
    assert env["openvino_settings"]["INFERENCE_PRECISION_HINT"] == "f32"
    assert env["openvino_settings"]["INFERENCE_NUM_THREADS"] == "1"
    protocol = load_device("cpu-openvino", FAST, space=ANB_SPACE.name).protocols[0]
    path, _ = get_backend("openvino").model_path(ARCH, protocol, tmp_path / "work")
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    compiled, _ = compile_cpu(path, 1)
    ours = compiled.create_infer_request().infer({0: x})[0]
    ref = ort_session(path, 1).run(None, {"input": x})[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-6 * np.abs(ref).max())


@pytest.mark.slow
@pytest.mark.isolated
def test_openvino_int8_runs_int8_kernels_on_the_cpu_int8_model(tmp_path):
    """Bug class: an int8 protocol whose graph OpenVINO executes in float (the QDQ pairs folded
    away), measured and recorded as int8."""
    from anb.collect_throughput.backends.openvino_backend import compile_cpu

    record = _record("cpu-openvino-int8", tmp_path)
    entry = record["platform_perf"]["latency_cpu-openvino-int8"]
    assert entry["protocol"]["precision"] == "int8"
    assert entry["protocol"]["quantization"] == "u8s8"
    protocol = load_device("cpu-openvino-int8", FAST, space=ANB_SPACE.name).protocols[0]
    path, extra = get_backend("openvino-int8").model_path(ARCH, protocol, tmp_path / "work")
    assert extra["quantization"]["scheme"] == "u8s8"
    compiled, _ = compile_cpu(path, 1)
    precisions = [str(op.get_rt_info()["runtimePrecision"].astype(str))
                  for op in compiled.get_runtime_model().get_ops()
                  if "runtimePrecision" in op.get_rt_info()]
    assert {"i8", "u8"} <= set(precisions)
    fp32 = load_device("cpu-openvino", FAST, space=ANB_SPACE.name).protocols[0]
    fp32_path, _ = get_backend("openvino").model_path(ARCH, fp32, tmp_path / "work")
    compiled_fp32, _ = compile_cpu(fp32_path, 1)
    assert not {"i8", "u8"} & {str(op.get_rt_info()["runtimePrecision"].astype(str))
                               for op in compiled_fp32.get_runtime_model().get_ops()
                               if "runtimePrecision" in op.get_rt_info()}


@pytest.mark.slow
@pytest.mark.isolated
def test_tvm_compiles_once_and_computes_what_onnxruntime_does(tmp_path):
    """Bug class: a TVM build that recompiles on every measurement (minutes per architecture),
    or a lowering that changes the network's outputs."""
    import tvm

    record = _record("cpu-tvm", tmp_path)
    entry = record["platform_perf"]["latency_cpu-tvm"]
    env = entry["environment"]
    assert env["tvm_version"] == tvm.__version__ and env["tvm_tuning"] == "none"
    assert env["tvm_target"]["kind"] == "llvm" and env["tvm_target"]["num-cores"] == 1
    from tvm.target import codegen

    # this CPU's own instruction set, not LLVM's generic x86-64 (no AVX: several times slower)
    assert env["tvm_target"]["mcpu"] == codegen.llvm_get_system_cpu() != "generic"
    libraries = sorted((tmp_path / "work").rglob("*_tvm_*.so"))
    assert len(libraries) == 2  # latency (batch 1) and throughput (batch 8) shapes
    stamps = [p.stat().st_mtime_ns for p in libraries]
    onnx_path = next((tmp_path / "work").rglob(f"{ARCH.id}_fp32.onnx"))
    protocol = load_device("cpu-tvm", FAST, space=ANB_SPACE.name).protocols[0]
    session = get_backend("tvm").prepare(ARCH, protocol, onnx_path.parent)
    assert [p.stat().st_mtime_ns for p in libraries] == stamps  # reused, not rebuilt
    session.step()
    from tvm import relax

    from anb.collect_throughput.backends.tvm_backend import compiled_library

    library, _ = compiled_library(onnx_path, (1, 3, 32, 32), 1, onnx_path.parent)
    assert library in libraries and [p.stat().st_mtime_ns for p in libraries] == stamps
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(library)), tvm.cpu())
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    ours = vm["main"](tvm.runtime.tensor(x)).numpy()
    ref = ort_session(onnx_path, 1).run(None, {"input": x})[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("device", ["cpu-openvino", "cpu-tvm"])
def test_cpu_clock_is_refused_where_inference_runs_on_other_threads(device, tmp_path):
    """Bug class: thread CPU time read on the calling thread while the runtime infers on its
    own threads: every measurement near zero."""
    config = load_device(device, {**FAST, "clock": "cpu"}, space=ANB_SPACE.name)
    with pytest.raises(ValueError, match="clock='cpu' is not run by the .* allowed: \\['wall'\\]"):
        get_backend(config.protocols[0].backend).check(config.protocols[0])
