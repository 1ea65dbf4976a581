"""An FPGA board as a measurement target: ``anb measure <fpga-config>`` pushes fpga_code/board and
the compiled models over ``local://``, runs ``run_dpu.py --stand-in`` in batch mode (the
onnxruntime int8 stand-in where a board runs ``vart``) and pulls the records back; errors say
what kind of config was given and what is allowed."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.collect_throughput.backends.int8_quantize import quantize_int8
from anb.collect_throughput.backends.onnxruntime_backend import float_onnx
from anb.collect_throughput.targets.devices import load_target
from anb.collect_throughput.targets.fpga import FpgaTarget
from anb.collect_throughput.timing.digits import digits_images
from anb.records import load_records, validate_record
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE

ARCHS = Sampler(11, space=ANB_SPACE).sample(2)
RES = 32
KEYS = ("latency_zcu102", "throughput_zcu102")


@pytest.fixture(scope="module")
def xmodels(tmp_path_factory) -> Path:
    """Compiled models as the host lays them out; each is the stand-in's int8 ONNX."""
    work = tmp_path_factory.mktemp("fpga-models")
    calibration, _ = digits_images(RES, "train")
    root = work / "build"
    for i, arch in enumerate(ARCHS):
        target = root / f"{arch.id}.xmodel" if i == 0 else root / arch.id / f"{arch.id}.xmodel"
        target.parent.mkdir(parents=True, exist_ok=True)
        quantize_int8(float_onnx(arch, work, RES,
                                 space=ANB_SPACE), target, calibration[:8], scheme="dpu")
    return root


def _config(tmp_path: Path, xmodels: Path, name: str = "zcu102", fpga_extra: str = "",
            remote_extra: str = "") -> Path:
    config = tmp_path / f"{name}-board.toml"
    config.write_text(f"""kind = "fpga"
name = "{name}"
[fpga]
xmodels = "{xmodels}"
resolution = {RES}
budget = 0.3
images_per_round = 8
stand_in = true
{fpga_extra}
[remote]
transport = "local://"
python = "{sys.executable}"
workdir = "{tmp_path / 'board'}"
{remote_extra}
""")
    return config


def _measure(config: Path, out: Path, archs=ARCHS, *more: str):
    return CliRunner().invoke(app, ["measure", str(config), "--archs", ",".join(map(str, archs)),
                                    "--out", str(out), "--no-progress", *more])


@pytest.mark.slow
def test_anb_measure_runs_the_fpga_board_runner_and_resumes(tmp_path, xmodels):
    """Bug class: an FPGA board outside ``anb measure`` (issue 27: "use run_dpu.py yourself"),
    records that do not reach the host, a board folder left behind, or a resumed run that
    re-measures finished architectures."""
    config = _config(tmp_path, xmodels)
    result = _measure(config, tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "zcu102: measured 2, skipped 0 (already done), failed 0" in result.output
    for arch in ARCHS:
        record = json.loads((tmp_path / "out" / "zcu102" / f"{arch.id}.json").read_text())
        assert validate_record(record, space=ANB_SPACE).id == arch.id
        for key in KEYS:
            entry = record["platform_perf"][key]
            assert entry["environment"]["transport"] == "local://"
            assert entry["environment"]["board_runtime"] == "run_dpu"
            assert "OrtStandInRunner" in entry["environment"]["stand_in"]  # never a DPU figure
            assert entry["resolution"] == RES
            # the DPU runner process's memory and CPU use while it was timed (issue 27 item 7)
            samples = entry["utilisation"]["samples"]
            assert entry["peak_rss_bytes"] == entry["utilisation"]["peak_rss_bytes"] >= \
                max(s["rss_bytes"] for s in samples) > 0
            assert entry["utilisation"]["mean_process_cpu_percent"] is not None
        assert record["platform_perf"]["throughput_zcu102"]["threads"] == 5  # the board's
    assert list((tmp_path / "board").iterdir()) == []  # the job folder is removed
    before = (tmp_path / "out" / "zcu102" / f"{ARCHS[0].id}.json").read_text()
    result = _measure(config, tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "measured 0, skipped 2 (already done)" in result.output
    assert (tmp_path / "out" / "zcu102" / f"{ARCHS[0].id}.json").read_text() == before
    assert len(load_records(tmp_path / "out", space=ANB_SPACE)) == 2  # anb merge reads them


@pytest.mark.slow
def test_a_missing_compiled_model_fails_that_architecture_only(tmp_path, xmodels):
    extra = Sampler(12, space=ANB_SPACE).sample(1)[0]
    config = _config(tmp_path, xmodels)
    result = _measure(config, tmp_path / "out", [extra, ARCHS[0]], "--keep-going")
    assert result.exit_code == 1, result.output
    assert "measured 1, skipped 0 (already done), failed 1" in result.output
    result = _measure(config, tmp_path / "out2", [extra])
    assert result.exit_code == 2
    assert f"no {extra.id}.xmodel or {extra.id}/{extra.id}.xmodel under {xmodels}" in \
        result.output


@pytest.mark.slow
def test_the_queue_interface_measures_one_architecture(tmp_path, xmodels):
    target = load_target(_config(tmp_path, xmodels), space=ANB_SPACE.name)
    assert isinstance(target, FpgaTarget) and target.keys == KEYS
    job = target.measure_job(ARCHS[1], tmp_path / "work")
    assert set(job["values"]) == set(KEYS)
    assert job["latency_ms"] == job["record"]["platform_perf"]["latency_zcu102"]["latency_mean"]
    assert job["latency_ms"] > 0


@pytest.mark.parametrize("name,fpga_extra,remote_extra,options,message", [
    ("zcu999", "", "", [], "name='zcu999' is invalid; allowed: a board run_dpu.py knows "
                           "['vck190', 'zcu102']"),
    ("zcu102", "colour = 1", "", [], "fpga.colour=1 is unknown; allowed: ["),
    ("zcu102", "", 'runtime = "resident"', [],
     "remote.runtime='resident' is invalid for an FPGA board"),
    ("zcu102", 'fpga_code = "/nowhere"', "", [], "fpga.fpga_code: no board/run_dpu.py under "
                                                 "['/nowhere']"),
    ("zcu102", "", "", ["--batch", "4"], "override batch=4 is invalid; allowed for an FPGA "
                                         "board: resolution, threads, budget"),
    ("zcu102", "", "", ["--space", "nasbench201"], "search space 'nasbench201' is invalid"),
])
def test_fpga_config_errors_name_the_kind_and_what_is_allowed(tmp_path, xmodels, name,
                                                              fpga_extra, remote_extra, options,
                                                              message):
    config = _config(tmp_path, xmodels, name, fpga_extra, remote_extra)
    archs = ["sample:1"] if "--space" in options else [ARCHS[0]]
    result = CliRunner().invoke(app, ["measure", str(config), "--archs", str(archs[0]), "--out",
                                      str(tmp_path / "out"), "--no-progress", *options])
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert "(an FPGA board config (tables [fpga] and [remote]))" in output
    assert message in output
    assert not (tmp_path / "board").exists() or list((tmp_path / "board").iterdir()) == []
