"""CPU int8 (onnxruntime static QDQ quantization) and the quantization effect report, for real."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from typer.testing import CliRunner

import anb
from anb.cli import app
from anb.collect_throughput.backends.int8_quantize import cosine, quantize_int8, run_model, sqnr_db
from anb.collect_throughput.backends.onnxruntime_backend import float_onnx
from anb.collect_throughput.targets.local import measure
from anb.collect_throughput.timing.digits import digits_images, top1
from anb.collect_throughput.timing.protocol import load_device
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE

ARCH = Sampler(5, space=ANB_SPACE).sample(1)[0]
runner = CliRunner()


def test_digits_split_is_deterministic_and_disjoint():
    x_train, y_train = digits_images(32, "train")
    x_test, y_test = digits_images(32, "test")
    assert x_train.shape[1:] == (3, 32, 32) and len(y_train) + len(y_test) == 1797
    assert np.array_equal(digits_images(32, "test")[1], y_test)
    assert -1.0 <= x_test.min() and x_test.max() <= 1.0
    with pytest.raises(ValueError, match="split='val'"):
        digits_images(32, "val")


def test_digits_are_the_trainers_images_and_split():
    """One digits loader: the throughput stage's train/test parts are the trainer's train/val
    images (the same pixels, rescaled to [-1, 1]) and split (80/20, 1437 + 360)."""
    import torch

    from anb.collect_accuracy.config import load_config
    from anb.collect_accuracy.data import make_loaders

    config = load_config(None, ["--kind", "digits", "--image_size", "32", "--val_res", "32",
                                "--val_batch_size", "400", "--crop_ratio", "1"])
    loaders = make_loaders(config, 0, 1, torch.device("cpu"))
    (x_val, y_val), = list(loaders.val())
    x_test, y_test = digits_images(32, "test")
    assert len(y_test) == 360 and len(digits_images(32, "train")[1]) == 1437
    assert np.array_equal(y_test, y_val.numpy())
    pixels = (x_test + 1.0) * 127.5  # back to the trainer's uint8 values
    trainer = x_val.numpy() * np.array([0.229, 0.224, 0.225])[:, None, None] * 255 \
        + np.array([0.485, 0.456, 0.406])[:, None, None] * 255
    np.testing.assert_allclose(pixels, trainer, atol=1e-3)


@pytest.fixture(scope="module")
def arch_models(tmp_path_factory) -> tuple[Path, Path]:
    """ARCH's fp32 model at 64 px and its default-scheme int8 model (32 calibration images),
    shared read-only by the tests below."""
    work = tmp_path_factory.mktemp("arch64")
    calibration, _ = digits_images(64, "train")
    float_path = float_onnx(ARCH, work, 64, space=ANB_SPACE)
    return float_path, quantize_int8(float_path, work / "int8.onnx", calibration[:32])


@pytest.mark.slow
def test_static_int8_model_is_qdq_per_channel_and_close_to_float(arch_models):
    float_path, int8_path = arch_models
    ops = [n.op_type for n in onnx.load(str(int8_path)).graph.node]
    assert ops.count("QuantizeLinear") > 10 and ops.count("DequantizeLinear") > 10
    weight_scales = [i for i in onnx.load(str(int8_path)).graph.initializer
                     if i.name.endswith("_scale") and len(i.dims) == 1 and i.dims[0] > 1]
    assert weight_scales  # per-channel scales
    images, _ = digits_images(64, "test")
    f, q = run_model(float_path, images[:16]), run_model(int8_path, images[:16])
    assert f.shape == q.shape == (16, 1000)
    assert cosine(f, q) > 0.5 and not np.array_equal(f, q)


@pytest.mark.slow
@pytest.mark.parametrize("arch", [ARCH, *Sampler(6, space=ANB_SPACE).sample(2)], ids=str)
def test_int8_device_measures_and_records_scheme(arch, tmp_path):
    config = load_device("cpu-int8", {"resolution": 64, "calibration_images": 16,
                                      "stopping": {"budget_seconds": 0.3}}, space=ANB_SPACE.name)
    latency = next(p for p in config.protocols if p.kind == "latency")
    m = measure(arch, latency, tmp_path)
    entry = m.to_perf_entry()
    assert m.key == "latency_cpu-int8" and entry["precision"] == "int8" and m.value > 0
    q = entry["quantization"]
    assert q["format"] == "QDQ" and q["calibration_images"] == 16
    assert q["scheme"] == "u8s8" and q["weights"] == "random initialisation"
    assert "top1_agreement_vs_fp32" not in q and q["logits_sqnr_db_vs_fp32"] > 10
    assert list(tmp_path.glob("*_int8_u8s8_*.onnx"))


B0 = "e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"


def _fused_ops(path, tmp_path) -> list[str]:
    """The op types onnxruntime runs for a QDQ model once its QDQ groups are fused."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "fused.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return [n.op_type for n in onnx.load(str(tmp_path / "fused.onnx")).graph.node]


@pytest.mark.slow
def test_cpu_int8_scheme_is_u8s8_and_onnxruntime_fuses_all_of_it(tmp_path):
    """Issue 23 item 5: int8 activations (S8S8) left Relu, the residual Adds, the SE Muls and
    the convolutions beside the Adds in float between Q/DQ pairs, slower than fp32 on x86; the
    cpu-int8 device quantizes uint8 activations x int8 per-channel weights, which onnxruntime
    fuses into QLinear kernels throughout (the speed itself: benchmarks/int8_vs_fp32.py)."""
    from onnx import numpy_helper

    from anb.searchspace.arch import Arch

    protocols = load_device("cpu-int8", space=ANB_SPACE.name).protocols
    assert {p.quantization for p in protocols} == {"u8s8"}
    # the scheme is fingerprinted: results under the old scheme are not mixed with these
    assert all(p.fingerprint != p.replace(quantization="per-channel").fingerprint
               for p in protocols)
    calibration, _ = digits_images(64, "train")
    float_path = float_onnx(Arch.from_string(B0, ANB_SPACE), tmp_path, 64, space=ANB_SPACE)
    path = quantize_int8(float_path, tmp_path / "u8s8.onnx", calibration[:16],
                         protocols[0].quantization)
    model = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    q_zero_points = [inits[n.input[2]] for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert q_zero_points and all(z.dtype == np.uint8 for z in q_zero_points)  # activations
    weights = [n for n in model.graph.node if n.op_type == "DequantizeLinear"
               and inits.get(n.input[0], np.zeros(0, np.int32)).dtype == np.int8]
    assert len(weights) > 50  # every Conv (depthwise included) and the classifier
    assert all(not inits[n.input[2]].any() for n in weights)  # symmetric
    assert sum(inits[n.input[1]].size > 1 for n in weights) > 50  # per output channel
    ops = _fused_ops(path, tmp_path)
    assert ops.count("QLinearConv") == 81 and ops.count("QLinearAdd") == 9
    assert not {"Conv", "Relu", "Add", "Mul"} & set(ops), sorted(set(ops))
    old = quantize_int8(float_path, tmp_path / "s8s8.onnx", calibration[:16], "per-channel")
    assert "Conv" in _fused_ops(old, tmp_path)  # what the test tells apart


SMALL = "e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1"


@pytest.mark.slow
def test_a_float_model_is_preprocessed_once_a_process(tmp_path, monkeypatch):
    """Catches: onnxruntime's pre-processing (symbolic shape inference, seconds a network)
    run again for a float model already pre-processed (a report quantizes the export it has
    just pre-processed; a mixed-precision sweep quantizes it once per K), or a model whose
    weights live in a file beside it served from that cache (its bytes are not the model)."""
    import onnxruntime.quantization.shape_inference as shape_inference

    from anb.collect_throughput.backends import int8_quantize

    calls = []
    real = shape_inference.quant_pre_process
    monkeypatch.setattr(shape_inference, "quant_pre_process",
                        lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    int8_quantize._preprocessed.cache_clear()
    float_path = float_onnx(SMALL, tmp_path, 32, space=ANB_SPACE)
    prepared = int8_quantize.preprocess_float(float_path, tmp_path / "prep.onnx")
    copy = tmp_path / "copy" / "float.onnx"  # the same model under another name
    copy.parent.mkdir()
    copy.write_bytes(float_path.read_bytes())
    calibration, _ = digits_images(32, "train")
    nodes = [n.name for n in onnx.load(str(prepared)).graph.node]
    for scheme in ("u8s8", "dpu"):
        quantize_int8(copy, tmp_path / f"{scheme}.onnx", calibration[:4], scheme,
                      exclude=nodes[-1:])  # names of the one pre-processing
    assert len(calls) == 1
    external = tmp_path / "external" / "float.onnx"
    external.parent.mkdir()
    onnx.save(onnx.load(str(float_path)), str(external), save_as_external_data=True,
              size_threshold=0, location="weights.bin")
    again = int8_quantize.preprocess_float(external, tmp_path / "prep_external.onnx")
    assert len(calls) == 2  # pre-processed where its weights are
    assert [n.name for n in onnx.load(str(again)).graph.node] == nodes


def test_sqnr_and_cosine():
    x = np.linspace(-1, 1, 100)
    assert sqnr_db(x, x) == float("inf") and cosine(x, x) == pytest.approx(1.0)
    assert sqnr_db(x, x + 0.1 * np.sign(x)) == pytest.approx(
        10 * np.log10(np.sum(x**2) / np.sum((0.1 * np.sign(x)) ** 2)))
    assert cosine(x, -x) == pytest.approx(-1.0)


@pytest.mark.slow
def test_quant_report_cli_writes_table_plot_and_summary(tmp_path):
    result = runner.invoke(app, ["quant-report", str(ARCH), "--out", str(tmp_path),
                                 "--eval-images", "60", "--calibration", "32"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "layers.csv")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (tmp_path / "layers.png").read_bytes()[:4] == b"\x89PNG"
    assert len(table) == summary["layers"] > 20
    assert summary["anb_version"] == anb.__version__
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


def _scales(path) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    names = {n.input[1] for n in model.graph.node
             if n.op_type in ("QuantizeLinear", "DequantizeLinear")}
    return {n: numpy_helper.to_array(inits[n]) for n in names}


def _zero_points(path) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    names = {n.input[2] for n in model.graph.node
             if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 2}
    return {n: numpy_helper.to_array(inits[n]) for n in names}


@pytest.mark.slow
def test_dpu_scheme_is_per_tensor_power_of_two_and_close_to_float(arch_models, tmp_path):
    """Issue 12 item 6: the DPU's fix_point scheme (symmetric: every zero-point 0), beside the
    per-channel one."""
    calibration, _ = digits_images(64, "train")
    float_path, per_channel_path = arch_models
    dpu = quantize_int8(float_path, tmp_path / "dpu.onnx", calibration[:32], scheme="dpu")
    scales = _scales(dpu)
    assert len(scales) > 20
    for name, scale in scales.items():
        assert scale.size == 1, name  # one scale per tensor, weights included
        exponent = np.log2(float(scale.ravel()[0]))
        assert exponent == np.round(exponent), (name, scale)  # 2**-fix_point
    zero_points = _zero_points(dpu)
    assert len(zero_points) > 20
    for name, zero_point in zero_points.items():
        assert not zero_point.any(), (name, zero_point)  # symmetric: 0 for every tensor
    per_channel = _scales(per_channel_path)
    assert any(s.size > 1 for s in per_channel.values())
    images, _ = digits_images(64, "test")
    f, q = run_model(float_path, images[:16]), run_model(dpu, images[:16])
    assert sqnr_db(f, q) > 10  # weights re-quantized to the rounded scales (else ~ -10 dB)
    with pytest.raises(ValueError, match="scheme='fix'"):
        quantize_int8(float_path, tmp_path / "x.onnx", calibration[:4], scheme="fix")


def test_dpu_scales_are_rounded_up_to_a_power_of_two_and_weights_requantized():
    """Catches: the DPU's power-of-two scale rounded to nearest (or down) instead of up.

    Scales 0.3 and 0.7 round to 0.25 / 0.5 but go up to 0.5 / 1.0 (a scale rounded down would
    clip the calibrated range); the int8 weights behind a scale are re-quantized by
    old / new (0.6): [100, -50, 127] -> [60, -30, 76]."""
    from onnx import TensorProto, helper, numpy_helper

    from anb.collect_throughput.backends.int8_quantize import power_of_two_scales

    inits = [numpy_helper.from_array(np.array([100, -50, 127], dtype=np.int8), "w"),
             numpy_helper.from_array(np.array(0.3, dtype=np.float32), "w_scale"),
             numpy_helper.from_array(np.array(0, dtype=np.int8), "w_zp"),
             numpy_helper.from_array(np.array(0.7, dtype=np.float32), "a_scale"),
             numpy_helper.from_array(np.array(0, dtype=np.int8), "a_zp")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "a_scale", "a_zp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "a_scale", "a_zp"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["wf"]),
             helper.make_node("Add", ["xd", "wf"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], inits)
    model = helper.make_model(graph)
    assert power_of_two_scales(model) == 2
    after = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    assert float(after["w_scale"]) == 0.5 and float(after["a_scale"]) == 1.0
    assert after["w"].tolist() == [60, -30, 76] and after["w"].dtype == np.int8
    assert after["w_scale"].dtype == np.float32


def _image_folder(root, classes=4, per_class=12, size=40, width=None):
    from PIL import Image

    rng = np.random.default_rng(0)
    width = width or size
    for c in range(classes):
        (root / f"n{c:04d}").mkdir(parents=True)
        for i in range(per_class):
            colour = np.zeros((size, width, 3), dtype=np.uint8)
            colour[..., c % 3] = 40 * (c + 1)
            noise = rng.integers(0, 40, (size, width, 3), dtype=np.uint8)
            Image.fromarray(colour + noise).save(root / f"n{c:04d}" / f"img_{i:03d}.png")
    return root


def test_stratified_sample_covers_every_class_and_is_seeded(tmp_path):
    from anb.collect_throughput.timing.inputs import calibration_and_eval

    folder = _image_folder(tmp_path / "val", classes=5, per_class=10)
    calib, evaluated = calibration_and_eval(folder, 10, 15, seed=3)
    assert sorted({y for _, y in evaluated}) == [0, 1, 2, 3, 4]
    assert [sum(y == c for _, y in evaluated) for c in range(5)] == [3] * 5
    assert {y for _, y in calib} == {0, 1, 2, 3, 4}
    assert not {f for f, _ in calib} & {f for f, _ in evaluated}
    assert calibration_and_eval(folder, 10, 15, seed=3) == (calib, evaluated)
    assert calibration_and_eval(folder, 10, 15, seed=4)[1] != evaluated


def _trainer_val_images(items, resolution, crop_ratio=0.875):
    """The trainer's validation transform, spelt out: centre crop of ``crop_ratio`` x the short
    side resized to ``resolution`` (FolderDataset, val), then the trainer's normalisation."""
    import torch

    from anb.collect_accuracy.data import normalise
    from anb.collect_accuracy.imagefolder import FolderDataset

    data = FolderDataset([f for f, _ in items], [y for _, y in items], False, resolution,
                         crop_ratio, 0)
    x = torch.from_numpy(np.stack([data[i][0] for i in range(len(data))])).permute(0, 3, 1, 2)
    return normalise(x).contiguous()


def _trained_model(folder, resolution=32):
    """A 1000-class network of ARCH with BatchNorm statistics re-estimated on the folder and a
    classifier fitted to its 4 classes (through the trainer's transform): near 100 % top-1
    there, where a fresh initialisation is at chance or below (its argmax falls on any of
    1000 classes)."""
    import torch
    from sklearn.linear_model import LogisticRegression

    from anb.collect_throughput.timing.inputs import labelled_files
    from anb.searchspace.model import build_model

    torch.manual_seed(1)
    model = build_model(ARCH, space=ANB_SPACE)
    items = [(f, label) for label, files in enumerate(labelled_files(folder)) for f in files]
    x = _trainer_val_images(items, resolution)
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = None  # cumulative average over the pass
    with torch.no_grad():
        model.train()(x)
        features = model.eval().pool(model.forward_features(x)).flatten(1).numpy()
    labels = np.asarray([y for _, y in items])
    mean, std = features.mean(0), features.std(0) + 1e-6
    probe = LogisticRegression(C=1.0, max_iter=2000).fit((features - mean) / std, labels)
    weight = probe.coef_ / std
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.fill_(-10.0)
        model.classifier.weight[:4] = torch.from_numpy(weight.astype(np.float32))
        model.classifier.bias[:4] = torch.from_numpy(
            (probe.intercept_ - weight @ mean).astype(np.float32))
    return model


def _checkpoint_top1(model, folder, resolution, evaluation, calibration=8, seed=0):
    """Top-1 (%) of ``model`` on the images quant-report evaluates (same sample, same
    trainer's transform)."""
    import torch

    from anb.collect_throughput.timing.inputs import calibration_and_eval

    _, items = calibration_and_eval(folder, calibration, evaluation, seed)
    with torch.no_grad():
        logits = model(_trainer_val_images(items, resolution)).numpy()
    return top1(logits, np.asarray([y for _, y in items]))


@pytest.fixture(scope="module")
def trained_on_folder(tmp_path_factory):
    """``(folder, model, top1)``: an image folder, the network fitted to it
    (:func:`_trained_model`) and its top-1 on the 16 images the reports below score; shared
    read-only."""
    folder = _image_folder(tmp_path_factory.mktemp("trained") / "val")
    model = _trained_model(folder)
    return folder, model, _checkpoint_top1(model, folder, 32, 16)


@pytest.mark.slow
def test_quant_report_scores_trained_weights_on_an_image_folder(trained_on_folder, tmp_path):
    """A trainer checkpoint + an image folder; the FPGA target uses the DPU scheme. The
    report's top-1 is the checkpoint's own on the same images (a fresh network's is not)."""
    import torch

    from anb.searchspace.model import build_model

    folder, model, expected = trained_on_folder
    torch.manual_seed(2)
    fresh = _checkpoint_top1(build_model(ARCH, space=ANB_SPACE).eval(), folder, 32, 16)
    assert expected >= 90 and fresh <= 50  # the checkpoint differs clearly from an init
    torch.save({"format": 1, "model": {f"module.{k}": v for k, v in model.state_dict().items()},
                "epoch": 1}, tmp_path / "ckpt.pt")
    result = runner.invoke(app, ["quant-report", str(ARCH), "--out", str(tmp_path / "r"),
                                 "--weights", str(tmp_path / "ckpt.pt"), "--images", str(folder),
                                 "--resolution", "32", "--calibration", "8",
                                 "--eval-images", "16"])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["scheme"] == "dpu" and summary["agreement_meaningful"] is True
    assert summary["weights"].startswith("trained weights") and "note:" not in result.output
    assert summary["eval_images"] == 16 and "4 classes" in summary["dataset"]
    assert "trainer's validation transform" in summary["preprocessing"]
    # the loaded weights are the checkpoint's: its top-1, in torch and in the float ONNX model
    assert summary["torch_top1"] == expected and summary["float_top1"] == expected
    cpu = runner.invoke(app, ["quant-report", str(ARCH), "--out", str(tmp_path / "c"),
                              "--images", str(folder), "--resolution", "32", "--target", "cpu",
                              "--calibration", "8", "--eval-images", "8"])
    assert cpu.exit_code == 0, cpu.output
    random_summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert random_summary["scheme"] == "u8s8"
    assert random_summary["agreement_meaningful"] is False and "note:" in cpu.output
    bad = runner.invoke(app, ["quant-report", str(ARCH), "--out", str(tmp_path / "b"),
                              "--weights", str(tmp_path / "ckpt.pt")])
    assert bad.exit_code == 2 and "needs --images: an image folder" in bad.output


@pytest.mark.slow
def test_quant_report_reads_an_artifact_folder_and_refuses_another_architecture(
        trained_on_folder, tmp_path):
    """The trainer's wandb artifact (weights.pt + record.json) gives the weights and names the
    architecture; weights of another architecture are refused, naming both."""
    import torch

    folder, model, expected = trained_on_folder
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    torch.save(model.state_dict(), artifact / "weights.pt")
    record = {"provenance": {"arch": str(ARCH), "arch_id": ARCH.id}}
    (artifact / "record.json").write_text(json.dumps(record))
    args = ["--weights", str(artifact), "--images", str(folder), "--resolution", "32",
            "--calibration", "8", "--eval-images", "16"]
    result = runner.invoke(app, ["quant-report", str(ARCH), "--out", str(tmp_path / "r"), *args])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["weights"] == f"trained weights from {artifact}"
    assert summary["torch_top1"] == expected >= 90

    other = next(a for a in Sampler(7, space=ANB_SPACE).sample(5) if a.id != ARCH.id)
    bad = runner.invoke(app, ["quant-report", str(other), "--out", str(tmp_path / "b"), *args])
    assert bad.exit_code == 2 and bad.output.startswith("error:")
    message = " ".join(bad.output.split())
    assert str(artifact) in message and "record.json" in message
    assert f"trained for {ARCH}" in message and f"asked for {other}" in message
    assert not (tmp_path / "b").exists()


def test_quant_report_preprocesses_images_as_the_trainers_validation(tmp_path):
    """Images are scored as the trainer validated them (short side at resolution / 0.875,
    centre crop), not as the GPU timing inputs are built (short side at the resolution)."""
    import torch

    from anb.collect_accuracy.config import load_config
    from anb.collect_accuracy.data import make_loaders
    from anb.collect_accuracy.imagefolder import scan
    from anb.collect_throughput.quantization.quant_report import eval_inputs
    from anb.collect_throughput.timing.inputs import preprocess_image

    folder = _image_folder(tmp_path / "val", classes=2, per_class=3, size=40, width=56)
    paths, labels, _ = scan(folder)
    config = load_config(None, ["--kind", "folder", "--train_path", str(folder), "--val_path",
                                str(folder), "--num_workers", "0", "--val_res", "32",
                                "--val_batch_size", "8", "--batch_size", "2"])
    assert config["trainval"]["crop_ratio"] == 0.875
    (trainer_x, trainer_y), = list(make_loaders(config, 0, 1, torch.device("cpu")).val())
    x, y = eval_inputs(list(zip(paths, labels, strict=True)), 32)
    assert x.dtype == np.float32 and x.shape == (6, 3, 32, 32)
    assert np.array_equal(x, trainer_x.numpy()) and np.array_equal(y, trainer_y.numpy())
    assert np.array_equal(x[:1], _trainer_val_images([(paths[0], 0)], 32).numpy())
    # the GPU timing path keeps its own geometry (no crop margin): not the same pixels
    assert not np.allclose(x[0], preprocess_image(paths[0], 32), atol=1e-3)
