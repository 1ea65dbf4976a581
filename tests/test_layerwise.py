"""Per-layer quantization effect: the CPU int8 path for real, the Qualcomm device path through
the SNPE STAND-INS (tests/standins/snpe, onnxruntime behind the SDK's flags and file formats)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import anb
from anb.cli import app
from anb.collect_throughput.quantization.layerwise import (
    by_layer_type,
    compare_layers,
    flag,
    layer_report,
    layerwise,
)
from tests.cli_helpers import range_refused
from tests.qualcomm_helpers import ARCH, CountingLocal

SMALL = dict(calibration=16, images=4)


def test_metrics_exact_on_known_errors():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 4, 3, 3)), rng.standard_normal((2, 4, 3, 3))
    layers = [{"order": 0, "node": "n0", "op_type": "Conv", "inputs": ["x"], "outputs": ["a"]},
              {"order": 1, "node": "n1", "op_type": "Relu", "inputs": ["a"], "outputs": ["b"]}]
    noise = 0.1 * a
    table = compare_layers(layers, {"a": a, "b": b}, {"a": a + noise, "b": b})
    assert table.loc[0, "sqnr_db"] == pytest.approx(20.0)  # |a|^2 / |0.1 a|^2 = 100
    assert table.loc[0, "cosine"] == pytest.approx(1.0)
    assert table.loc[0, "max_abs_err"] == pytest.approx(np.abs(noise).max())
    assert table.loc[1, "sqnr_db"] == np.inf and table.loc[1, "cosine"] == 1.0
    flagged = flag(table, 0.99, 25.0, worst=1)
    assert flagged["below_threshold"].tolist() == [True, False]
    with pytest.raises(ValueError, match="NCHW/NHWC"):
        compare_layers(layers, {"a": a}, {"a": a.transpose(0, 2, 3, 1)})


def test_summary_by_layer_type_ranks_the_lossiest_type():
    t1 = pd.DataFrame({"tensor": ["c1", "r1"], "op_type": ["Conv", "Relu"],
                       "sqnr_drop_db": [3.0, -1.0], "sqnr_db": [20.0, 21.0],
                       "cosine": [0.99, 0.995], "worst": [True, False],
                       "below_threshold": [False, False]})
    t2 = t1.assign(sqnr_drop_db=[1.0, 0.5])
    out = by_layer_type({"m1": t1, "m2": t2})
    assert out["op_type"].tolist() == ["Conv", "Relu"]
    columns = ["layers", "models", "mean_sqnr_drop_db", "flagged"]
    assert out.loc[0, columns].tolist() == [2, 2, 2.0, 2]


@pytest.mark.slow
def test_cpu_int8_report_for_real(tmp_path):
    result = layerwise([ARCH, "e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1"], "cpu-int8",
                       tmp_path, worst=3, **SMALL)
    assert not result["failed"] and len(result["models"]) == 2
    for summary in result["models"]:
        folder = tmp_path / summary["arch_id"]
        table = pd.read_csv(folder / "layers.csv")
        assert table["worst"].sum() == 3
        worst = table.loc[table["worst"], "sqnr_drop_db"].min()
        assert (table.loc[~table["worst"], "sqnr_drop_db"].fillna(-np.inf) <= worst).all()
        assert "logits" in table["tensor"].tolist(), "the network output is compared too"
        # u8s8 fuses the stem's Conv and Relu: the int8 network holds the Relu's output only
        assert table.loc[0, "tensor"] == "/stem/stem.2/Relu_output_0"
        assert table.loc[0, "sqnr_db"] > 25, \
            "the first int8 conv is close to float (a layout or matching error would not be)"
        assert table.loc[1:, "sqnr_drop_db"].notna().all(), "fused layers: drop from their inputs"
        html = (folder / "layers.html").read_text()
        assert "../plotly.min.js" in html
        assert summary["worst_layers"][0].replace("/", "\\u002f") in html  # JSON-escaped
    types = pd.read_csv(tmp_path / "by_layer_type.csv")
    assert {"Conv", "Relu", "Add", "Gemm"} <= set(types["op_type"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["path"] == "cpu-int8" and summary["anb_version"] == anb.__version__
    assert all(m["anb_version"] == anb.__version__ for m in summary["models"])


@pytest.mark.slow
def test_device_path_through_snpe_standins(sdk_path, tmp_path):
    config = tmp_path / "snpe-dsp-32.toml"
    config.write_text('name = "snpe-dsp-32"\nsdk = "snpe"\nruntime = "dsp"\nresolution = 32\n'
                      f'remote_dir = "{tmp_path / "board"}"\n[quantization]\n'
                      'calibration_images = 16\n')
    board = CountingLocal()
    summary, table = layer_report(ARCH, str(config), tmp_path / "out", transport=board, **SMALL)
    assert any("--debug" in c for c in board.commands)
    assert len(table) > 40 and "logits" in table["tensor"].tolist()
    assert table.loc[0, "sqnr_db"] > 25, "device outputs pulled NHWC and turned NCHW"
    assert summary["path"] == str(config) and len(summary["worst_layers"]) == 5


def test_cli_bad_path_and_resolution():
    runner = CliRunner()
    result = runner.invoke(app, ["quant-layers", ARCH, "--path", "dspp", "--out", "x"])
    assert result.exit_code == 2 and "--path 'dspp' is invalid" in result.output
    result = runner.invoke(app, ["quant-layers", ARCH, "--resolution", "8", "--out", "x"])
    assert result.exit_code == 2 and range_refused(result.output, "--resolution", ">=", "32")


@pytest.mark.slow
def test_dpu_scheme_loses_more_than_per_channel_for_real(tmp_path):
    from anb.collect_throughput.backends.int8_quantize import SCHEMES
    from anb.collect_throughput.quantization.layerwise import CPU_PATHS

    assert set(CPU_PATHS.values()) <= set(SCHEMES)
    _, per_channel = layer_report(ARCH, "cpu-int8", tmp_path / "pc", **SMALL)
    _, dpu = layer_report(ARCH, "dpu", tmp_path / "dpu", **SMALL)
    # the DPU scheme keeps every layer output; u8s8 fuses Conv+Relu, so it holds a subset
    assert set(per_channel["tensor"]) < set(dpu["tensor"])
    # per-tensor power-of-two weight scales are coarser than per-channel float ones: the first
    # convolution (its input is exact in both) already shows it
    stem = dpu.set_index("tensor").loc["/stem/stem.2/Relu_output_0", "sqnr_db"]
    assert stem < per_channel.loc[0, "sqnr_db"] - 3


@pytest.mark.slow
def test_digits_network_is_fitted_once_a_process_and_every_call_gets_a_copy(monkeypatch):
    import torch

    import anb.searchspace.model as model_module
    from anb.collect_throughput.timing.digits import fit_digits
    from anb.searchspace import as_arch
    from anb.searchspace.space import ANB_SPACE

    built = []
    build_model = model_module.build_model
    monkeypatch.setattr(model_module, "build_model",
                        lambda *a, **k: built.append(a[0]) or build_model(*a, **k))
    first = fit_digits(as_arch(ARCH, ANB_SPACE))
    weights = {k: v.clone() for k, v in first.state_dict().items()}
    with torch.no_grad():
        first.classifier.weight.zero_()
    second = fit_digits(as_arch(ARCH, ANB_SPACE))  # an equal architecture, another object
    assert len(built) <= 1, "the second call fits again"
    assert second is not first
    assert all(torch.equal(v, weights[k]) for k, v in second.state_dict().items()), \
        "a caller's change to its network reached the next caller"
