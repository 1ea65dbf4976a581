"""Qualcomm SNPE back-end up to the SDK boundary (docs/background/devices.md,
"Qualcomm SNPE and QNN").

The SDK tools are STAND-INS (tests/standins/snpe/): executables named like the SDK's that
accept its documented flags and print its documented formats; the "DLC" they handle is the
ONNX model (quantized: onnxruntime QDQ) run with onnxruntime, so every number is real. The
board is this machine through the ``local://`` transport.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from anb.collect_throughput.targets.qualcomm import host
from anb.collect_throughput.targets.qualcomm.config import (
    Quantization,
    device_from_mapping,
    load_qualcomm_device,
)
from anb.collect_throughput.targets.qualcomm.device import DeviceStages
from anb.collect_throughput.targets.qualcomm.parse import (
    ParseError,
    parse_diagview_csv,
    parse_dlc_info,
    parse_throughput,
)
from anb.collect_throughput.targets.qualcomm.stages import build_dlc, measure_qualcomm
from anb.collect_throughput.targets.qualcomm.tools import ToolFailed, ToolMissing
from anb.searchspace.arch import as_arch
from anb.searchspace.space import ANB_SPACE
from tests.qualcomm_helpers import ARCH, STANDIN_SECOND, STANDINS, CountingLocal


@pytest.fixture(autouse=True)
def _short_standin_seconds(monkeypatch):
    monkeypatch.setenv("ANB_STANDIN_SNPE_SECOND", STANDIN_SECOND)


def small(device, tmp_path, **changes):
    q = device.quantization and dataclasses.replace(device.quantization, calibration_images=4)
    return dataclasses.replace(device, resolution=32, duration=1, latency_inputs=2,
                               remote_dir=str(tmp_path / "board"), quantization=q, **changes)


def test_shipped_configs_match_reference_section_7():
    dsp = load_qualcomm_device("snpe-dsp")
    assert (dsp.sdk, dsp.runtime, dsp.duration, dsp.perf_profile) == ("snpe", "dsp", 60,
                                                                      "balanced")
    assert dsp.runtime_flag == "--use_dsp"
    assert dsp.quantization == Quantization(per_channel=True, act_bitwidth=8, bias_bitwidth=8,
                                            act_quantizer="tf", calibration_images=64)
    gpu = load_qualcomm_device("snpe-gpu-fp16")
    assert (gpu.runtime_flag, gpu.quantization, gpu.precision) == ("--use_gpu_fp16", None,
                                                                   "fp16")
    assert load_qualcomm_device("qnn-htp").sdk == "qnn"


def test_command_lines_match_reference_section_7(sdk_path, tmp_path):
    q = Quantization(per_channel=True, act_bitwidth=16, bias_bitwidth=32,
                     act_quantizer="enhanced")
    argv = host.quantize_argv(Path("m.dlc"), Path("in.txt"), Path("q.dlc"), q)
    assert Path(argv[0]).name == "snpe-dlc-quantize"
    assert argv[1:] == ["--input_dlc", "m.dlc", "--input_list", "in.txt", "--output_dlc",
                        "q.dlc", "--use_per_channel_quantization", "--act_bitwidth", "16",
                        "--bias_bitwidth", "32", "--act_quantizer", "enhanced"]
    stages = DeviceStages(load_qualcomm_device("snpe-dsp"), CountingLocal(), "a")
    assert stages.throughput_argv("m.dlc", "x.raw") == [
        "snpe-throughput-net-run", "--container", "m.dlc", "--duration", "60", "--use_dsp",
        "--perf_profile", "balanced", "--input_raw", "x.raw"]


@pytest.mark.parametrize("device, flag", [
    ("snpe-dsp", "--use_dsp"), ("snpe-gpu-fp16", "--use_gpu_fp16"), ("cpu", "--use_cpu")])
def test_net_run_command_line_names_the_runtime(device, flag):
    """Catches: ``snpe-net-run`` / ``snpe-throughput-net-run`` issued without the runtime flag
    (the tools then run on the CPU: the DSP column silently becomes CPU latency). The exact
    command lines, one per runtime."""
    config = device_from_mapping({"name": "x", "runtime": "cpu"}) if device == "cpu" \
        else load_qualcomm_device(device)
    stages = DeviceStages(config, CountingLocal(), "a")
    assert stages.net_run_argv("m.dlc", "in.txt") == [
        "snpe-net-run", "--container", "m.dlc", "--input_list", "in.txt", "--output_dir",
        "/data/local/tmp/anb/a/output", flag, "--perf_profile", "balanced", "--profiling_level",
        "detailed", "--use_native_input_files", "--use_native_output_files"]
    assert stages.net_run_argv("m.dlc", "in.txt", debug=True)[-1] == "--debug"
    assert stages.throughput_argv("m.dlc", "x.raw") == [
        "snpe-throughput-net-run", "--container", "m.dlc", "--duration", "60", flag,
        "--perf_profile", "balanced", "--input_raw", "x.raw"]


@pytest.mark.slow
def test_end_to_end_record_layers_and_resume(sdk_path, tmp_path):
    device = small(load_qualcomm_device("snpe-dsp"), tmp_path)
    board = CountingLocal()
    record = measure_qualcomm(ARCH, device, tmp_path / "out", transport=board)
    perf = record["platform_perf"]
    tp, lat = perf["throughput_snpe-dsp"], perf["latency_snpe-dsp"]
    assert tp["unit"] == "images/s" and lat["unit"] == "ms"
    assert tp["throughput_mean"] > 0 and lat["latency_mean"] > 0
    # repeats runs each: mean and sample std of the runs; the last run's log is kept
    assert len(tp["throughput_runs"]) == len(lat["latency_runs"]) == device.repeats == 3
    assert tp["throughput_mean"] == pytest.approx(np.mean(tp["throughput_runs"]))
    assert tp["throughput_std"] == pytest.approx(np.std(tp["throughput_runs"], ddof=1))
    assert lat["latency_std"] == pytest.approx(np.std(lat["latency_runs"], ddof=1))
    assert tp["throughput_std"] > 0 and lat["latency_std"] > 0
    # the SDK tool processes' peak resident memory, read from /proc on the board while they ran
    # (the stand-ins are Python processes: tens of MB)
    assert tp["peak_rss_bytes"] > 5 * 2 ** 20 and lat["peak_rss_bytes"] > 5 * 2 ** 20
    assert lat["latency_runs"][-1] == pytest.approx(lat["diag_totals_us"]["Avg Total Inference "
                                                                         "Time"] / 1e3)
    assert tp["protocol_fingerprint"] == device.fingerprint("throughput") != \
        lat["protocol_fingerprint"]
    assert tp["precision"] == "int8"
    arch_id = as_arch(ARCH, ANB_SPACE).id
    on_disk = json.loads((tmp_path / "out" / "snpe-dsp" / f"{arch_id}.json").read_text())
    assert on_disk["platform_perf"].keys() == perf.keys()
    import pandas as pd

    layers = pd.read_csv(tmp_path / "out" / "snpe-dsp" / tp["layers_file"])
    convs = layers[layers["type"] == "Conv"]
    assert len(convs) >= 7 and (convs["time_us"] > 0).all()
    assert (convs["bitwidth"] == 8).all(), "every Conv carries its 8-bit output encoding"
    assert not (tmp_path / "board").exists() or not any((tmp_path / "board").iterdir())
    n = len(board.commands)
    measure_qualcomm(ARCH, device, tmp_path / "out", transport=board)
    assert len(board.commands) == n, "a measured architecture is skipped"


def test_raw_inputs_are_nhwc_and_outputs_match_onnxruntime(sdk_path, tmp_path):
    from anb.searchspace.onnx_export import run_onnx

    device = small(load_qualcomm_device("snpe-gpu-fp16"), tmp_path)
    dlc, onnx_path = build_dlc(as_arch(ARCH, ANB_SPACE), device, tmp_path / "host")
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    raws = host.write_raw_inputs(x, tmp_path / "raw")
    assert np.array_equal(np.fromfile(raws[1], np.float32), x[1].transpose(1, 2, 0).ravel())
    stages = DeviceStages(device, CountingLocal(), "t")
    model, listing, remote_raws = stages.prepare(dlc, raws)
    assert Path(listing).read_text().splitlines() == remote_raws
    assert [Path(r).read_bytes() for r in remote_raws] == [r.read_bytes() for r in raws]
    stages.net_run(model, listing)
    got = stages.pull_outputs({"logits": (1, 1000)}, 1, tmp_path / "pulled")["logits"]
    np.testing.assert_allclose(got, run_onnx(onnx_path, x[1:2]), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_tool_missing_tool_error_and_no_device(sdk_path, tmp_path, monkeypatch):
    device = small(load_qualcomm_device("snpe-dsp"), tmp_path)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")
    with pytest.raises(ToolMissing, match="snpe-onnx-to-dlc .*SNPE_ROOT"):
        measure_qualcomm(ARCH, device, tmp_path / "out", transport=CountingLocal())
    monkeypatch.setenv("PATH", f"{STANDINS}:{Path(sys.executable).parent}:/usr/bin:/bin")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(ToolFailed, match="snpe-onnx-to-dlc exited 1: .*could not read"):
        host.convert(bad, tmp_path / "bad.dlc")
    monkeypatch.setenv("ANB_STANDIN_SNPE_RUNTIMES", "cpu")
    with pytest.raises(RuntimeError, match="step 'throughput'.*Runtime DSP is not available"):
        measure_qualcomm(ARCH, device, tmp_path / "out", transport=CountingLocal())
    assert not (tmp_path / "out" / "snpe-dsp").exists(), "nothing half-written"


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="runtime='dsp' needs a \\[quantization\\]"):
        device_from_mapping({"name": "x", "runtime": "dsp"})
    with pytest.raises(ValueError, match="act_bitwidth=4 is invalid; allowed: 8 or 16"):
        device_from_mapping({"name": "x", "quantization": {"act_bitwidth": 4}})
    with pytest.raises(ValueError, match="unknown field\\(s\\) \\['durration'\\]"):
        device_from_mapping({"name": "x", "durration": 5})
    with pytest.raises(FileNotFoundError, match="shipped: .*snpe-dsp"):
        load_qualcomm_device("nope")


def test_parsers():
    assert parse_throughput("Total Inferences: 10\nTotal throughput: 123.5 infs/sec\n") == 123.5
    with pytest.raises(ParseError, match="no 'Total throughput"):
        parse_throughput("crashed")
    totals, layers = parse_diagview_csv(
        "Message Name,Layer Id,Layer Name,Layer Type,Time,Unit,Runtime\n"
        "Avg Total Inference Time,,,,2.5,ms,DSP\n"
        "Layer Time,1,conv2,Conv,30,us,DSP\nLayer Time,0,conv1,Conv,0.01,ms,DSP\n")
    assert totals == {"Avg Total Inference Time": 2500.0}
    assert layers["layer"].tolist() == ["conv1", "conv2"]
    assert layers["time_us"].tolist() == [10.0, 30.0]
    # Catches: per-layer times summed across inferences instead of averaged (3 inferences)
    _, layers = parse_diagview_csv(
        "Message Name,Layer Id,Layer Name,Layer Type,Time,Unit,Runtime\n"
        + "".join(f"Layer Time,0,conv1,Conv,{a},us,DSP\nLayer Time,1,conv2,Conv,{b},us,DSP\n"
                  for a, b in ((10, 30), (20, 50), (60, 100))))
    assert layers["layer"].tolist() == ["conv1", "conv2"]
    assert layers["time_us"].tolist() == [30.0, 60.0]
    with pytest.raises(ParseError, match="--csv_format_version 2"):
        parse_diagview_csv("Message Type,Message Name,Message Data,Message Value\n")
    info = parse_dlc_info("| Id | Name | Type |\n| 0 | c | Conv | x | y |\n"
                          "| | | | encoding: bitwidth 16, min -1.5, max 2.0, scale 0.1, "
                          "offset -3 |\n| 1 | r | Relu | y | z |\n")
    assert info.loc[0, ["bitwidth", "min", "max"]].tolist() == [16, -1.5, 2.0]
    assert np.isnan(info.loc[1, "bitwidth"])


def test_shipped_transport_opens_adb_with_the_serial():
    from anb.collect_throughput.targets.qualcomm.device import open_device_transport

    board = open_device_transport(load_qualcomm_device("snpe-dsp"))
    assert board.command(["snpe-net-run", "--version"])[1:3] == ["-s", "qcs-devkit"]


def test_qnn_converter_flags_and_device_stages_refused(sdk_path, tmp_path, monkeypatch):
    qnn_bin = tmp_path / "qnn"
    qnn_bin.mkdir()
    (qnn_bin / "qnn-onnx-converter").write_text("#!/bin/sh\n")  # STAND-IN: only looked up
    (qnn_bin / "qnn-onnx-converter").chmod(0o755)
    monkeypatch.setenv("QNN_SDK_ROOT", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PATH", f"{qnn_bin}:{os.environ['PATH']}")
    q = Quantization(act_bitwidth=16)
    argv = host.convert_argv("qnn", Path("m.onnx"), Path("m.cpp"), q, Path("in.txt"))
    assert argv[1:] == ["--input_network", "m.onnx", "--output_path", "m.cpp", "--input_list",
                        "in.txt", "--use_per_channel_quantization", "--act_bw", "16",
                        "--bias_bw", "8", "--act_quantizer", "tf"]
    with pytest.raises(ValueError, match="sdk='qnn' has no device stages"):
        DeviceStages(load_qualcomm_device("qnn-htp"), CountingLocal(), "t")


@pytest.mark.slow
def test_no_device_on_adb_is_a_transient_error_naming_the_step(sdk_path, tmp_path):
    from anb.collect_throughput.transports import TransportError
    from anb.collect_throughput.transports.adb import AdbTransport

    adb = tmp_path / "adb"  # STAND-IN for adb with no board attached
    adb.write_text("#!/bin/sh\necho \"adb: error: device 'qcs-devkit' not found\" >&2\nexit 1\n")
    adb.chmod(0o755)
    board = AdbTransport("adb://qcs-devkit", "snpe-dsp", {"adb": str(adb)})
    device = small(load_qualcomm_device("snpe-dsp"), tmp_path)
    with pytest.raises(TransportError, match="step 'prepare' \\(unreachable\\).*not found") as err:
        measure_qualcomm(ARCH, device, tmp_path / "out", transport=board)
    assert err.value.transient
    assert not (tmp_path / "out" / "snpe-dsp").exists()


def test_peak_rss_wrapper_reads_the_tools_high_water_mark_and_keeps_its_status():
    """Bug class: a memory figure that is the shell's (a few hundred kB) rather than the
    tool's, or a wrapper that swallows the tool's failure."""
    import subprocess
    import sys

    from anb.collect_throughput.targets.qualcomm.device import peak_rss_bytes, with_peak_rss

    grow = "x = bytearray(150 * 2 ** 20); import time; time.sleep(0.4)"
    proc = subprocess.run(with_peak_rss([sys.executable, "-c", grow]), capture_output=True,
                          text=True)
    assert proc.returncode == 0 and peak_rss_bytes(proc.stderr) > 150 * 2 ** 20
    failed = subprocess.run(with_peak_rss([sys.executable, "-c", "raise SystemExit(3)"]),
                            capture_output=True, text=True)
    assert failed.returncode == 3
    assert peak_rss_bytes("no tag here") is None
