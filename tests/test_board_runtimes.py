"""The board runner's OpenVINO and TVM runtimes, measured for real over ``local://`` (the
transport to this machine) through ``anb measure``; their outputs against the host back-ends';
clear errors for a back-end the runtime cannot run, a bad ``tvm_target`` and a missing runtime."""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from anb.collect_throughput.board import RUNNER
from anb.collect_throughput.records.anchors import anchor_path, read_anchor_rows
from anb.collect_throughput.targets.remote import RemoteSpec, RemoteTarget, remote_spec
from anb.collect_throughput.timing.protocol import device_from_mapping
from anb.searchspace.arch import Arch
from anb.searchspace.space import ANB_SPACE
from tests.board_helpers import board_config

# every kind of op of the space (expansion, 5x5 depthwise, squeeze-excite) in few distinct
# kernels: TVM compiles it in half the time a sampled architecture takes
ARCH = Arch.from_string("e6k5l1se-" + "-".join(["e1k3l1"] * 6), ANB_SPACE)


def _runner_module():
    spec = types.ModuleType("anb_board_runner")
    exec(compile(RUNNER.read_text(), str(RUNNER), "exec"), spec.__dict__)
    return spec


def _config(tmp_path: Path, backend: str, runtime: str, extra: str = "") -> Path:
    return board_config(tmp_path, f"board-{backend}", {
        "transport": "local://", "runtime": runtime, "python": sys.executable,
        "workdir": str(tmp_path / "board")}, backend, extra)


def _measure(tmp_path: Path, config: Path) -> dict:
    from typer.testing import CliRunner

    from anb.cli import app

    # ARCH is its own anchor: the anchor block runs on the board too, without compiling
    # the default anchors (the largest network of the space). The models stay in
    # tmp_path/models, where the tests compare the board's outputs: each is built once.
    result = CliRunner().invoke(app, ["measure", str(config), "--archs", str(ARCH), "--out",
                                      str(tmp_path / "out"), "--anchors", str(ARCH),
                                      "--workdir", str(tmp_path / "models"), "--keep-work",
                                      "--no-progress"])
    assert result.exit_code == 0, result.output
    name = config.stem
    anchors = read_anchor_rows(anchor_path(tmp_path / "out", name))
    assert [(a["arch_id"], a["key"]) for a in anchors] == [(ARCH.id, f"latency_{name}")]
    record = json.loads((tmp_path / "out" / name / f"{ARCH.id}.json").read_text())
    assert list(record["platform_perf"]) == [f"latency_{name}"]  # the latency kind only
    entry = record["platform_perf"][f"latency_{name}"]
    samples = entry["utilisation"]["samples"]
    assert samples and entry["peak_rss_bytes"] == entry["utilisation"]["peak_rss_bytes"] >= \
        max(s["rss_bytes"] for s in samples) > 0
    assert entry["environment"]["transport"] == "local://"
    assert [p.name for p in (tmp_path / "board").iterdir()] == [".board.lock"]  # cleaned up
    return entry


def _images(n: int = 4) -> np.ndarray:
    return np.random.default_rng(1).uniform(-1, 1, (n, 3, 32, 32)).astype(np.float32)


@pytest.mark.slow
@pytest.mark.isolated
def test_anb_measure_on_an_openvino_board(tmp_path):
    """Catches: the board running onnxruntime (or OpenVINO with other settings) for an
    OpenVINO device, the runtime's version missing from the record, outputs that differ
    from the host back-end's."""
    import openvino as ov

    from anb.collect_throughput.backends.onnxruntime_backend import float_onnx
    from anb.collect_throughput.backends.openvino_backend import cpu_config
    from anb.collect_throughput.targets.local import onnx_outputs, openvino_outputs
    from anb.collect_throughput.timing.protocol import load_device

    config = _config(tmp_path, "openvino", "openvino")
    entry = _measure(tmp_path, config)
    env = entry["environment"]
    assert (env["board_runtime"], env["runtime"]) == ("openvino", "openvino")
    assert env["runtime_version"] == env["libraries"]["openvino"] == ov.get_version()
    assert env["openvino_settings"] == {k: str(v) for k, v in cpu_config(1).items()}
    assert "onnxruntime" not in env["libraries"]
    device = load_device(str(config), space=ANB_SPACE.name)
    model = float_onnx(ARCH, tmp_path / "models", 32, space=ANB_SPACE)
    images = _images()
    board = RemoteTarget(device).outputs(device.protocols[0], model, images)
    assert board.shape == (4, 1000)
    assert np.array_equal(board, openvino_outputs(model, images, 1))
    assert np.allclose(board, onnx_outputs(model, images), rtol=1e-3, atol=1e-4)


def _host_tvm_outputs(library: Path, images: np.ndarray) -> np.ndarray:
    import tvm
    from tvm import relax

    main = relax.VirtualMachine(tvm.runtime.load_module(str(library)), tvm.cpu())["main"]
    return np.stack([main(tvm.runtime.tensor(images[i:i + 1])).numpy()
                     for i in range(len(images))]).reshape(len(images), -1)


@pytest.mark.slow
@pytest.mark.isolated
def test_anb_measure_on_a_tvm_board(tmp_path):
    """Catches: the board's library compiled for the host's default target instead of the
    ``[remote] tvm_target``, the TVM facts or runtime version missing from the record, board
    outputs that differ from the same library run on the host (or from the ONNX model)."""
    import tvm

    from anb.collect_throughput.backends.onnxruntime_backend import float_onnx
    from anb.collect_throughput.targets.local import onnx_outputs
    from anb.collect_throughput.timing.protocol import load_device

    config = _config(tmp_path, "tvm", "tvm", 'tvm_target = {kind = "llvm", mcpu = "x86-64"}\n')
    entry = _measure(tmp_path, config)
    env = entry["environment"]
    assert (env["board_runtime"], env["runtime"]) == ("tvm", "tvm")
    assert env["runtime_version"] == env["libraries"]["tvm"] == tvm.__version__
    assert entry["tvm_target"] == {"kind": "llvm", "mcpu": "x86-64", "num-cores": 1}
    assert entry["tvm_version"] == tvm.__version__ and entry["tvm_tuning"] == "none"
    device = load_device(str(config), space=ANB_SPACE.name)
    model = float_onnx(ARCH, tmp_path / "models", 32, space=ANB_SPACE)
    images = _images(2)
    board = RemoteTarget(device).outputs(device.protocols[0], model, images)
    (library,) = (tmp_path / "models").glob("*_tvm_*.so")  # compiled once, for batch 1
    assert np.array_equal(board, _host_tvm_outputs(library, images))
    assert np.allclose(board, onnx_outputs(model, images), rtol=1e-3, atol=1e-4)


def test_runtime_and_backend_must_match(tmp_path):
    """Catches: an onnxruntime back-end sent to an OpenVINO board (or TVM options on another
    runtime) accepted and measured as something it is not."""
    from typer.testing import CliRunner

    from anb.cli import app

    result = CliRunner().invoke(app, ["measure", str(_config(tmp_path, "onnxruntime",
                                                             "openvino")),
                                      "--archs", str(ARCH), "--out", str(tmp_path / "out"),
                                      "--no-progress"])
    assert result.exit_code == 2
    assert ("device 'board-onnxruntime': backend='onnxruntime' cannot run on a board with the "
            "openvino runtime; allowed: ['openvino', 'openvino-int8']") in result.output
    assert not (tmp_path / "out" / "board-onnxruntime").exists()
    device = device_from_mapping({"kind": "remote", "name": "b", "backend": "tvm",
                                  "resolution": 32,
                                  "latency": {"batch": 1}, "clock": "wall",
                                  "remote": {"transport": "local://", "runtime": "tvm"}},
                                 space=ANB_SPACE.name)
    assert remote_spec(device).tvm_target is None  # the host's own target
    base = {"transport": "local://"}
    with pytest.raises(ValueError, match=r"remote.tvm_target is given with "
                                         r"remote.runtime='onnxruntime'; allowed: only with "
                                         r"runtime 'tvm' or 'resident'"):
        RemoteSpec.from_mapping("pi", {**base, "tvm_target": {"kind": "llvm"}})
    with pytest.raises(ValueError, match=r"remote.tvm_target=\{'kind': 'cuda'\} is invalid; "
                                         r"allowed: an LLVM target table"):
        RemoteSpec.from_mapping("pi", {**base, "runtime": "tvm", "tvm_target": {"kind": "cuda"}})
    with pytest.raises(ValueError, match=r"remote.tvm_cc=3 is invalid"):
        RemoteSpec.from_mapping("pi", {**base, "runtime": "tvm", "tvm_cc": 3})


def test_runner_names_the_missing_runtime(monkeypatch):
    """Catches: a board without OpenVINO/TVM failing with a bare ImportError traceback instead
    of a ``missing`` error naming what to install; an unknown runtime accepted."""
    runner = _runner_module()
    for module, install in (("openvino", "install numpy and openvino there"),
                            ("tvm", "install numpy and the Apache TVM runtime")):
        monkeypatch.setitem(sys.modules, module, None)  # import of it raises ImportError
        with pytest.raises(runner.BoardError, match=install) as err:
            runner.load_runtime(module)
        assert (err.value.step, err.value.kind) == ("import_runtime", "missing")
    with pytest.raises(runner.BoardError, match=r"runtime='snpe' is invalid; allowed: "
                                                r"onnxruntime, openvino, tvm") as err:
        runner.load_runtime("snpe")
    assert err.value.kind == "command"


@pytest.mark.slow
@pytest.mark.isolated
def test_a_resident_board_runs_openvino_for_an_openvino_device(tmp_path):
    """Catches: the resident server ignoring the ``runtime`` of a RUN request (timing
    onnxruntime for an OpenVINO device) or the host not sending it."""
    from anb.collect_throughput.backends.onnxruntime_backend import float_onnx
    from anb.collect_throughput.targets.local import openvino_outputs
    from anb.collect_throughput.targets.remote import RemoteTarget
    from tests.test_resident_target import server

    with server(tmp_path) as (_, port):
        device = device_from_mapping({
            "kind": "remote", "name": "resident-ov", "backend": "openvino", "resolution": 32,
            "threads": 1,
            "latency": {"batch": 1}, "stopping": {"budget_seconds": 0.3, "min_reps": 5},
            "remote": {"transport": f"tcp://127.0.0.1:{port}", "runtime": "resident",
                       "token_file": str(tmp_path / "token")}}, space=ANB_SPACE.name)
        (m,) = RemoteTarget(device).measurements(ARCH, tmp_path / "store")
        model = float_onnx(ARCH, tmp_path / "models", 32, space=ANB_SPACE)
        images = _images(2)
        board = RemoteTarget(device).outputs(device.protocols[0], model, images)
    env = m.environment
    assert (env["board_runtime"], env["runtime"]) == ("resident", "openvino")
    assert "openvino_settings" in env and "ort_providers" not in env
    assert m.extra["peak_rss_bytes"] > 0 and len(m.times_s) >= 3
    assert np.array_equal(board, openvino_outputs(model, images, 1))
