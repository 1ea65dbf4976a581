"""The FPGA board runner (``fpga_code/board``), driven for real through the onnxruntime int8
stand-in (``OrtStandInRunner``) where the board would use ``vart.Runner``: timing, fixed thread
counts, jobs in flight, and the batch mode over a folder of compiled models (issue 12 item 5)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from anb.collect_throughput.backends.int8_quantize import quantize_int8, run_model
from anb.collect_throughput.backends.onnxruntime_backend import float_onnx
from anb.collect_throughput.records.merge import load_results, merge_records
from anb.collect_throughput.timing.digits import digits_images
from anb.records import validate_record
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "fpga_code" / "board"))
sys.path.insert(0, str(REPO / "fpga_code" / "host"))

import board_core  # noqa: E402
import compile_xmodel  # noqa: E402
import dpu_timing  # noqa: E402
import run_dpu  # noqa: E402
from ort_runner import OrtStandInRunner  # noqa: E402

ARCHS = Sampler(9, space=ANB_SPACE).sample(3)
ARCH = ARCHS[0]
RES = 64
FAST = {"warmup": {"min_steps": 2, "window": 1, "tolerance": 0.5, "max_steps": 5,
                   "max_seconds": 2.0},
        "stopping": {"min_reps": 3, "max_reps": 5, "rel_ci": 0.5, "confidence": 0.95,
                     "trim": 0.1, "budget_seconds": 0.3, "min_rep_seconds": 0.0,
                     "drift_window": 2}}


@pytest.fixture(autouse=True)
def fast_rules(monkeypatch):
    """Short warm-up and stopping rules (the board's own are the reference's; see
    tests/test_throughput_reference.py)."""
    monkeypatch.setattr(board_core, "WARMUP", FAST["warmup"])
    monkeypatch.setattr(board_core, "STOPPING", FAST["stopping"])


@pytest.fixture(scope="module")
def int8_model(tmp_path_factory):
    work = tmp_path_factory.mktemp("fpga")
    calibration, _ = digits_images(RES, "train")
    return quantize_int8(float_onnx(ARCH, work, RES, space=ANB_SPACE), work / "int8.onnx",
                         calibration[:16],
                         scheme="dpu")


@pytest.fixture(scope="module")
def images():
    return digits_images(RES, "test")[0][:8]


def test_prescale_saturates_and_rounds():
    x = np.array([0.0, 0.24, -0.26, 10.0, -10.0], dtype=np.float32)
    assert dpu_timing.prescale(x, 4).tolist() == [0, 4, -4, 127, -128]
    assert dpu_timing.prescale(x, 4).dtype == np.int8


def test_board_warmup_runs_at_least_its_minimum_steps():
    """Catches: the FPGA board's warm-up ignoring its minimum step count (a no-op step is
    stable from the second step; min_steps=4 must still run exactly 4)."""
    rules = {**FAST, "warmup": {**FAST["warmup"], "min_steps": 4, "tolerance": 1e9,
                                "max_steps": 50, "max_seconds": 60.0}}
    _, warm, _, _ = board_core.run_loop(lambda: time.sleep(1e-4), rules)
    assert len(warm) == 4


@pytest.mark.slow
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


@pytest.mark.slow
def test_throughput_uses_the_boards_fixed_threads_and_keeps_jobs_in_flight(int8_model, images):
    made = []

    def make_runner():
        made.append(OrtStandInRunner(int8_model, 2, RES))
        return made[-1]

    entry = dpu_timing.measure_throughput(make_runner, images, "zcu102", {}, in_flight=3,
                                          images_per_round=60, resolution=RES)
    assert len(made) == 5 and entry["threads"] == 5  # ZCU102: 5 threads, no sweep
    assert all(r.max_queued == 3 for r in made)  # three jobs queued on every runner
    assert entry["in_flight"] == 3 and entry["protocol"]["threads"] == 5
    assert "thread_sweep" not in entry
    made.clear()
    vck = dpu_timing.measure_throughput(make_runner, images, "vck190", {}, in_flight=1,
                                        images_per_round=24, resolution=RES)
    assert vck["threads"] == 6 and all(r.max_queued == 1 for r in made)


def test_throughput_is_every_threads_images_over_the_round_time(int8_model, images,
                                                                 monkeypatch):
    """Catches: FPGA images/s divided by the thread count (or counting one thread's jobs).

    A FIXED-CLOCK stand-in for ``board_core.run_loop`` runs the real threaded step once and
    reports every round as 0.5 s; a ZCU102 round is 5 threads x 6 jobs x native batch 2 = 60
    images, so the entry must say exactly 120 images/s and 0.5 / 30 s per native batch."""
    calls = []

    def fixed_clock_loop(step, proto):
        step()
        calls.append(proto)
        return [0.5] * 3, [0.5], 1, "converged"

    monkeypatch.setattr(board_core, "run_loop", fixed_clock_loop)
    make = lambda: OrtStandInRunner(int8_model, 2, RES)  # noqa: E731
    entry = dpu_timing.measure_throughput(make, images, "zcu102", {}, images_per_round=60,
                                          resolution=RES)
    assert len(calls) == 1 and calls[0]["threads"] == 5 and calls[0]["batch"] == 2
    assert (entry["threads"], entry["jobs_per_thread"], entry["images_per_round"]) == (5, 6, 60)
    assert entry["raw_times_s"] == [0.5 / 30] * 3
    assert entry["throughput_mean"] == pytest.approx(120.0, rel=1e-12)
    assert entry["throughput_median"] == pytest.approx(120.0, rel=1e-12)


def test_sweep_is_an_option_and_one_protocol_whatever_wins(int8_model, images):
    make = lambda: OrtStandInRunner(int8_model, 2, RES)  # noqa: E731
    a = dpu_timing.measure_throughput(make, images, "vck190", {}, images_per_round=8,
                                      resolution=RES)
    b = dpu_timing.measure_throughput(make, images, "vck190", {}, sweep=(1, 2),
                                      images_per_round=8, resolution=RES)
    assert set(b["thread_sweep"]) == {"1", "2"}
    assert b["throughput_mean"] == max(b["thread_sweep"].values())
    assert b["protocol"]["threads"] == [1, 2]
    assert b["protocol_fingerprint"] != a["protocol_fingerprint"]


def test_runner_errors_in_worker_threads_propagate(int8_model, images):
    class Broken(OrtStandInRunner):
        def wait(self, job):
            raise RuntimeError("DPU timeout")

    runner = Broken(int8_model, 1, RES)
    step = dpu_timing.threaded_round([runner], [[dpu_timing.io_buffers(runner, images)]], 2)
    with pytest.raises(RuntimeError, match="DPU timeout"):
        step()


def _xmodel_folder(root, int8_model, archs):
    """Compiled models as the host writes them; here each is the stand-in's int8 ONNX."""
    root.mkdir()
    for i, arch in enumerate(archs):
        target = root / f"{arch.id}.xmodel" if i % 2 == 0 else root / arch.id / f"{arch.id}.xmodel"
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(Path(int8_model).read_bytes())
    return root


def _stand_in_factory(batch):
    calls = []

    def factory(xmodel):
        calls.append(xmodel)
        return lambda: OrtStandInRunner(xmodel, batch, RES)

    factory.calls = calls
    return factory


@pytest.mark.slow
def test_batch_mode_walks_the_folder_skips_finished_and_survives_failures(int8_model, tmp_path):
    folder = _xmodel_folder(tmp_path / "xmodels", int8_model, ARCHS[:2])  # none for ARCHS[2]
    listing = tmp_path / "archs.txt"
    listing.write_text("\n".join(map(str, ARCHS)) + "\n")
    out = tmp_path / "results"
    argv = ["--device", "zcu102", "--out", str(out), "--xmodels", str(folder), "--archs",
            str(listing), "--resolution", str(RES), "--images-per-round", "20"]
    assert run_dpu.main(argv, runner_factory=_stand_in_factory(1)) == 1  # one had no xmodel
    records = {p.stem: json.loads(p.read_text()) for p in (out / "zcu102").glob("*.json")}
    assert set(records) == {a.id for a in ARCHS[:2]}
    assert not list((out / "zcu102").glob(".*.tmp"))
    for arch in ARCHS[:2]:
        record = records[arch.id]
        assert validate_record(record, space=ANB_SPACE).id == arch.id
        thr, lat = (record["platform_perf"][k] for k in ("throughput_zcu102", "latency_zcu102"))
        assert thr["threads"] == 5 and lat["threads"] == 1 and lat["in_flight"] == 1
        assert thr["unit"] == "images/s" and lat["unit"] == "ms" and lat["batch"] == 1
    before = {k: v["platform_perf"]["latency_zcu102"]["measured_at"] for k, v in records.items()}
    factory = _stand_in_factory(1)
    assert run_dpu.main(argv, runner_factory=factory) == 1
    again = {p.stem: json.loads(p.read_text()) for p in (out / "zcu102").glob("*.json")}
    assert {k: v["platform_perf"]["latency_zcu102"]["measured_at"]
            for k, v in again.items()} == before  # finished architectures were skipped
    # another protocol (thread count) is not finished work
    assert run_dpu.main(argv[:6] + ["--archs", str(listing), "--threads", "2", "--resolution",
                                    str(RES), "--images-per-round", "20"],
                        runner_factory=_stand_in_factory(1)) == 1
    again = {p.stem: json.loads(p.read_text()) for p in (out / "zcu102").glob("*.json")}
    assert all(r["platform_perf"]["throughput_zcu102"]["threads"] == 2 for r in again.values())
    merged, report = merge_records([], load_results([out], space=ANB_SPACE), space=ANB_SPACE)
    assert len(merged) == 2 and set(report.protocols) == {"latency_zcu102", "throughput_zcu102"}


def test_single_mode_and_bad_arguments(int8_model, tmp_path, capsys):
    out = tmp_path / "r"
    assert run_dpu.main(["--device", "vck190", "--out", str(out)]) == 2
    assert "give --xmodel with --arch" in capsys.readouterr().err
    code = run_dpu.main(["--device", "vck190", "--out", str(out), "--xmodel", str(int8_model),
                         "--arch", str(ARCH), "--resolution", str(RES), "--images-per-round",
                         "12"], runner_factory=_stand_in_factory(6))
    assert code == 0
    record = json.loads((out / "vck190" / f"{ARCH.id}.json").read_text())
    assert record["platform_perf"]["latency_vck190"]["batch"] == 6  # VCK190's native batch
    assert record["platform_perf"]["throughput_vck190"]["threads"] == 6


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
