"""CPU int8 (onnxruntime static QDQ quantization) and the quantization effect report, for real."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pandas as pd
import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.collect_throughput.backends.onnxruntime_backend import float_onnx
from anb.collect_throughput.digits import digits_images
from anb.collect_throughput.measure import measure
from anb.collect_throughput.protocol import load_device
from anb.collect_throughput.quant_report import cosine, sqnr_db
from anb.collect_throughput.quantize import quantize_int8, run_model
from anb.searchspace.sampler import Sampler

ARCH = Sampler(5).sample(1)[0]
runner = CliRunner()


def test_digits_split_is_deterministic_and_disjoint():
    x_train, y_train = digits_images(32, "train")
    x_test, y_test = digits_images(32, "test")
    assert x_train.shape[1:] == (3, 32, 32) and len(y_train) + len(y_test) == 1797
    assert np.array_equal(digits_images(32, "test")[1], y_test)
    assert -1.0 <= x_test.min() and x_test.max() <= 1.0
    with pytest.raises(ValueError, match="split='val'"):
        digits_images(32, "val")


def test_static_int8_model_is_qdq_per_channel_and_close_to_float(tmp_path):
    calibration, _ = digits_images(64, "train")
    float_path = float_onnx(ARCH, tmp_path, 64)
    int8_path = quantize_int8(float_path, tmp_path / "int8.onnx", calibration[:32])
    ops = [n.op_type for n in onnx.load(str(int8_path)).graph.node]
    assert ops.count("QuantizeLinear") > 10 and ops.count("DequantizeLinear") > 10
    weight_scales = [i for i in onnx.load(str(int8_path)).graph.initializer
                     if i.name.endswith("_scale") and len(i.dims) == 1 and i.dims[0] > 1]
    assert weight_scales  # per-channel scales
    images, _ = digits_images(64, "test")
    f, q = run_model(float_path, images[:16]), run_model(int8_path, images[:16])
    assert f.shape == q.shape == (16, 1000)
    assert cosine(f, q) > 0.5 and not np.array_equal(f, q)


@pytest.mark.parametrize("arch", [ARCH, *Sampler(6).sample(2)], ids=str)
def test_int8_device_measures_and_records_scheme(arch, tmp_path):
    config = load_device("cpu-int8", {"resolution": 64, "calibration_images": 16,
                                      "stopping": {"budget_seconds": 0.3}})
    latency = next(p for p in config.protocols if p.kind == "latency")
    m = measure(arch, latency, tmp_path)
    entry = m.to_perf_entry()
    assert m.key == "latency_cpu-int8" and entry["precision"] == "int8" and m.value > 0
    q = entry["quantization"]
    assert q["format"] == "QDQ" and q["calibration_images"] == 16
    assert 0.0 <= q["top1_agreement_vs_fp32"] <= 1.0
    assert list(tmp_path.glob("*_int8_*.onnx"))


def test_sqnr_and_cosine():
    x = np.linspace(-1, 1, 100)
    assert sqnr_db(x, x) == float("inf") and cosine(x, x) == pytest.approx(1.0)
    assert sqnr_db(x, x + 0.1 * np.sign(x)) == pytest.approx(
        10 * np.log10(np.sum(x**2) / np.sum((0.1 * np.sign(x)) ** 2)))
    assert cosine(x, -x) == pytest.approx(-1.0)


def test_quant_report_cli_writes_table_plot_and_summary(tmp_path):
    result = runner.invoke(app, ["quant-report", str(ARCH), "--out", str(tmp_path),
                                 "--eval-images", "60", "--calibration", "32"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "layers.csv")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (tmp_path / "layers.png").read_bytes()[:4] == b"\x89PNG"
    assert len(table) == summary["layers"] > 20
    assert {"Conv", "Relu"} <= set(table["op_type"])
    assert table["cosine"].between(-1, 1.0000001).all()
    flagged = table.loc[table["below_threshold"], "tensor"].tolist()
    assert flagged == summary["layers_below_threshold"]
    assert ((table["cosine"] < 0.99) | (table["sqnr_db"] < 20)).sum() == len(flagged)
    assert summary["float_top1"] == pytest.approx(summary["torch_top1"], abs=2.0)
    assert summary["float_top1"] > 15  # the fitted network classifies (chance is 10 %)
    assert summary["top1_drop_pp"] == pytest.approx(summary["float_top1"] - summary["int8_top1"])
    bad = runner.invoke(app, ["quant-report", "e7k3", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and bad.output.startswith("error:")
