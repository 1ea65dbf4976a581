"""The FPGA board runner's threading/timing logic, driven for real through the onnxruntime
int8 stand-in (``OrtStandInRunner``) where the board would use ``vart.Runner``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from anb.collect_throughput.backends.onnxruntime_backend import float_onnx
from anb.collect_throughput.digits import digits_images
from anb.collect_throughput.protocol import Protocol, StoppingRule, WarmupRule
from anb.collect_throughput.quantize import quantize_int8, run_model
from anb.collect_throughput.result import arch_record
from anb.records import validate_record
from anb.searchspace.sampler import Sampler

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "fpga_code" / "board"))
sys.path.insert(0, str(REPO / "fpga_code" / "host"))

import compile_xmodel  # noqa: E402
import dpu_timing  # noqa: E402
from ort_runner import OrtStandInRunner  # noqa: E402

ARCH = Sampler(9).sample(1)[0]
RES = 64
RULES = dict(warmup=WarmupRule(max_steps=10, max_seconds=2),
             stopping=StoppingRule(min_reps=5, max_reps=20, budget_seconds=0.5,
                                   min_rep_seconds=0.0))


@pytest.fixture(scope="module")
def int8_model(tmp_path_factory):
    work = tmp_path_factory.mktemp("fpga")
    calibration, _ = digits_images(RES, "train")
    path = quantize_int8(float_onnx(ARCH, work, RES), work / "int8.onnx", calibration[:16])
    return path


@pytest.fixture(scope="module")
def images():
    return digits_images(RES, "test")[0][:8]


def test_prescale_saturates_and_rounds():
    x = np.array([0.0, 0.24, -0.26, 10.0, -10.0], dtype=np.float32)
    assert dpu_timing.prescale(x, 4).tolist() == [0, 4, -4, 127, -128]
    assert dpu_timing.prescale(x, 4).dtype == np.int8


def test_stand_in_runner_matches_the_int8_model(int8_model, images):
    runner = OrtStandInRunner(int8_model, batch=2, resolution=RES)
    (inp,), (out,) = runner.get_input_tensors(), runner.get_output_tensors()
    assert inp.dims == (2, RES, RES, 3) and out.dims == (2, 1000)
    inputs, outputs = dpu_timing.io_buffers(runner, images)
    assert inputs[0].dtype == np.int8 and inputs[0].shape == (2, RES, RES, 3)
    runner.wait(runner.execute_async(inputs, outputs))
    logits = outputs[0].astype(np.float32) * 2.0 ** -out.get_attr("fix_point")
    reference = run_model(int8_model, (inputs[0].astype(np.float32) * 2.0 ** -inp.get_attr(
        "fix_point")).transpose(0, 3, 1, 2))
    assert np.abs(logits - np.clip(reference, -128 * 2.0 ** -out.fix, 127 * 2.0 ** -out.fix)
                  ).max() <= 2.0 ** -out.fix  # one output quantization step
    with pytest.raises(ValueError, match="native batch of 2"):
        dpu_timing.io_buffers(runner, images[:1])


def test_latency_and_throughput_sweep_write_the_shared_record(int8_model, images, tmp_path):
    env = {"device_name": "stand-in (onnxruntime int8)"}
    base = dict(device="zcu102", backend="vart", precision="int8", resolution=RES, **RULES)
    lat = dpu_timing.measure_latency(OrtStandInRunner(int8_model, 1, RES), images,
                                     Protocol(kind="latency", batch=1, **base), str(ARCH),
                                     ARCH.id, env)
    made = []

    def make_runner():
        made.append(OrtStandInRunner(int8_model, 2, RES))
        return made[-1]

    thr = dpu_timing.measure_throughput(make_runner, images, Protocol(kind="throughput", batch=2,
                                                                      **base),
                                        str(ARCH), ARCH.id, env, thread_counts=(1, 2),
                                        images_per_round=8)
    assert len(made) == 3  # one runner per thread, per sweep point
    assert all(r.next_id > 0 for r in made)  # every thread's own runner ran jobs
    assert made[1].next_id == made[2].next_id  # the 2-thread rounds split the jobs evenly
    assert set(thr.extra["thread_sweep"]) == {"1", "2"}
    assert thr.extra["threads"] in (1, 2)
    assert thr.value == max(thr.extra["thread_sweep"].values())
    assert lat.key == "latency_zcu102" and lat.value > 0 and lat.extra["threads"] == 1
    record = arch_record(ARCH, [lat, thr], tool="fpga_code/run_dpu.py")
    assert validate_record(record).id == ARCH.id
    entry = record["platform_perf"]["throughput_zcu102"]
    assert entry["precision"] == "int8" and entry["unit"] == "images/s"
    assert entry["throughput_mean"] == pytest.approx(thr.value)


def test_runner_errors_in_worker_threads_propagate(int8_model, images):
    class Broken(OrtStandInRunner):
        def wait(self, job):
            raise RuntimeError("DPU timeout")

    runner = Broken(int8_model, 1, RES)
    step = dpu_timing.threaded_round([runner], [dpu_timing.io_buffers(runner, images)], 2)
    with pytest.raises(RuntimeError, match="DPU timeout"):
        step()


def test_compile_checks_the_dpu_subgraph_count(tmp_path, monkeypatch):
    """``vai_c_xir`` is a stand-in script here (Vitis AI is not installable): the parsing and the
    loud failure on more than one DPU subgraph run for real."""
    log = "[UNILOG][INFO] Total device subgraph number 4, DPU subgraph number 1\n"
    assert compile_xmodel.dpu_subgraph_count(log) == 1
    with pytest.raises(ValueError, match="no 'DPU subgraph number'"):
        compile_xmodel.dpu_subgraph_count("nothing")
    cmd = compile_xmodel.compile_command(Path("m_int.xmodel"), "vck190", Path("o"), "n")
    assert cmd[:3] == ["vai_c_xir", "-x", "m_int.xmodel"] and "DPUCVDX8G" in cmd[4]
    with pytest.raises(ValueError, match="board='u50'"):
        compile_xmodel.compile_command(Path("m"), "u50", Path("o"), "n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "vai_c_xir"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    for count, ok in ((1, True), (3, False)):
        fake.write_text(f"#!/bin/sh\necho 'Total device subgraph number 5, DPU subgraph number "
                        f"{count}'\n")
        fake.chmod(0o755)
        if ok:
            assert compile_xmodel.compile_for(Path("m"), "zcu102", tmp_path / "o", "n").name == \
                "n.xmodel"
        else:
            with pytest.raises(RuntimeError, match="3 DPU subgraphs"):
                compile_xmodel.compile_for(Path("m"), "zcu102", tmp_path / "o", "n")
    result = subprocess.run([sys.executable, str(REPO / "fpga_code/host/compile_xmodel.py"),
                             "--xmodel", "m", "--board", "zcu102", "--out", str(tmp_path / "c"),
                             "--name", "n"], capture_output=True, text=True,
                            env={**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert result.returncode == 1 and result.stderr.startswith("error: 3 DPU subgraphs")
