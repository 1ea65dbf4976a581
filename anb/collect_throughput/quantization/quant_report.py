"""Quantization effect report: where an architecture's int8 network departs from its float one.

For one architecture, with trained weights scored on an image folder (or, without weights, a
random backbone whose agreement figures mean nothing, flagged as such): export, quantize under
the target's scheme (``dpu`` for FPGA targets, ``u8s8`` for the CPU;
:mod:`anb.collect_throughput.backends.int8_quantize`), run the float and int8 networks on the same
test images and compare every layer's output tensor (onnxruntime's QDQ debugging tools): cosine
similarity and SQNR (dB) of the int8 activation against the float one (cumulative error up to that
layer) and of the tensor just before/after its own quantize-dequantize pair (local error). Reports
the output drop (top-1 of both networks, logits cosine/SQNR, top-1 agreement) and the layers below
the thresholds; writes ``layers.csv``, ``summary.json`` and ``layers.png``.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from anb.collect_throughput.backends.int8_quantize import (
    SCHEMES,
    ArrayReader,
    cosine,
    preprocess_float,
    quantize_int8,
    run_model,
    sqnr_db,
)
from anb.collect_throughput.defaults import COS_THRESHOLD, SQNR_THRESHOLD_DB
from anb.collect_throughput.timing.digits import digits_images, fit_digits, top1
from anb.collect_throughput.timing.inputs import calibration_and_eval
from anb.io import atomic_write, atomic_write_json
from anb.outputs import Kind, has_files
from anb.preprocessing import VAL_CROP_RATIO, normalise, val_image
from anb.searchspace.arch import Arch, as_arch
from anb.searchspace.onnx_export import export_onnx
from anb.searchspace.space import ANB_SPACE
from anb.version import __version__


def layer_table(float_path: Path, int8_path: Path, images: np.ndarray) -> pd.DataFrame:
    """One row per matched activation tensor, in graph order (see module docstring)."""
    import onnx
    from onnxruntime.quantization.qdq_loss_debug import (
        collect_activations,
        create_activation_matching,
        modify_model_output_intermediate_tensors,
    )

    with tempfile.TemporaryDirectory(prefix="anb-qdebug-") as tmp:
        aug_float, aug_int8 = Path(tmp) / "float_aug.onnx", Path(tmp) / "int8_aug.onnx"
        modify_model_output_intermediate_tensors(str(float_path), str(aug_float))
        modify_model_output_intermediate_tensors(str(int8_path), str(aug_int8))
        float_acts = collect_activations(str(aug_float), ArrayReader(images))
        int8_acts = collect_activations(str(aug_int8), ArrayReader(images))
    matched = create_activation_matching(int8_acts, float_acts)
    rows = []
    for index, node in enumerate(onnx.load(str(float_path)).graph.node):
        for name in node.output:
            m = matched.get(name)
            if not m or "float" not in m:
                continue
            ref, q = np.concatenate(m["float"]), np.concatenate(m["post_qdq"])
            pre = np.concatenate(m["pre_qdq"])
            rows.append({"order": index, "tensor": name, "op_type": node.op_type,
                         "node": node.name, "cosine": cosine(ref, q), "sqnr_db": sqnr_db(ref, q),
                         "local_sqnr_db": sqnr_db(pre, q), "numel": int(ref.size)})
    if not rows:
        raise RuntimeError(f"no activation of {float_path} matched one of {int8_path}")
    return pd.DataFrame(rows)


def plot_layers(table: pd.DataFrame, path: Path, cos_threshold: float, sqnr_threshold: float,
                title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(8, len(table) * 0.12), 6), sharex=True)
    x = np.arange(len(table))
    bad = (table["cosine"] < cos_threshold) | (table["sqnr_db"] < sqnr_threshold)
    ax1.plot(x, table["sqnr_db"], ".-", lw=0.8, label="SQNR vs float (cumulative)")
    ax1.plot(x, table["local_sqnr_db"], ".", ms=3, alpha=0.6, label="SQNR of own QDQ (local)")
    ax1.axhline(sqnr_threshold, color="r", ls="--", lw=0.8)
    ax1.set_ylabel("SQNR (dB)")
    ax1.legend(fontsize=7)
    ax2.plot(x, table["cosine"], ".-", lw=0.8)
    ax2.scatter(x[bad], table["cosine"][bad], color="r", s=12, zorder=3, label="below threshold")
    ax2.axhline(cos_threshold, color="r", ls="--", lw=0.8)
    ax2.set_ylabel("cosine similarity")
    ax2.set_xlabel("layer output (graph order)")
    ax2.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
    return path


TARGET_SCHEMES = {"fpga": "dpu", "cpu": "u8s8"}
#: The report folder ``anb quant-report`` writes (see :mod:`anb.outputs`).
REPORT = Kind("quant-report", "an anb quant-report", has_files("layers.csv", "summary.json"),
              replaceable=True)
"""The int8 scheme each kind of target runs (FPGA DPUs: per-tensor power-of-two scales)."""


def load_weights(path: str | Path) -> tuple[dict, str | None]:
    """``(state_dict, arch string or None)`` from the trainer's checkpoint (``{"format",
    "arch", "model", ...}``), its wandb artifact folder (``weights.pt`` + ``record.json``) or
    a plain ``state_dict`` file."""
    import torch

    path = Path(path)
    arch = None
    if path.is_dir():
        record = path / "record.json"
        if record.exists():
            arch = json.loads(record.read_text())["provenance"]["arch"]
        path = path / "weights.pt"
    if not path.is_file():
        raise ValueError(f"weights={str(path)!r} does not exist; give a trainer checkpoint, an "
                         "artifact folder (weights.pt + record.json) or a state_dict file")
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "model" in state and "format" in state:
        arch = state.get("arch") or arch  # the trainer's checkpoint names its architecture
        state = state["model"]
    if not isinstance(state, dict):
        raise ValueError(f"weights={str(path)!r} holds no state_dict")
    prefixes = ("module.", "_orig_mod.")
    clean = {}
    for key, value in state.items():
        for prefix in prefixes:
            key = key[len(prefix):] if key.startswith(prefix) else key
        clean[key] = value
    return clean, arch


def eval_inputs(items: list, resolution: int, crop_ratio: float = VAL_CROP_RATIO,
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: the ``(file, label)`` items through the trainer's validation transform, which
    trained weights were scored with (:func:`anb.preprocessing.val_image`: centre crop of
    ``crop_ratio`` x the short side, i.e. the short side at ``resolution / crop_ratio``,
    resized to ``resolution``, bilinear; then :func:`anb.preprocessing.normalise`); NCHW
    float32. Not the GPU timing inputs
    (:func:`anb.collect_throughput.timing.inputs.preprocess_image`, no crop margin)."""
    labels = np.asarray([y for _, y in items], dtype=np.int64)
    if not items:
        return np.zeros((0, 3, resolution, resolution), dtype=np.float32), labels
    hwc = np.stack([val_image(f, resolution, crop_ratio) for f, _ in items])
    return np.ascontiguousarray(normalise(hwc).transpose(0, 3, 1, 2)), labels


def quant_report(arch: Arch | str, out: str | Path, resolution: int = 32, calibration: int = 64,
                 eval_images: int = 100, cos_threshold: float = COS_THRESHOLD,
                 sqnr_threshold: float = SQNR_THRESHOLD_DB,
                 seed: int = 0, scheme: str = "dpu", weights: str | Path | None = None,
                 images: str | Path | None = None, crop_ratio: float = VAL_CROP_RATIO,
                 ) -> dict[str, Any]:
    """Write the report for ``arch`` into ``out``; return the summary.

    With ``weights`` (trained, see :func:`load_weights`) and ``images`` (class sub-folders,
    sampled across all classes with ``seed``) the accuracy change is that of the trained
    network; the folder's images (calibration and evaluation alike) go through the trainer's
    validation transform (:func:`eval_inputs`, ``crop_ratio``). Without weights the backbone
    is random (a linear probe fitted on digits, or nothing on a folder): the summary says
    ``agreement_meaningful: false``.
    """
    import torch

    from anb.searchspace.model import build_model

    arch = as_arch(arch, ANB_SPACE)
    if resolution < 32:
        raise ValueError(f"resolution={resolution} is invalid; allowed: an integer >= 32")
    if not 0 < crop_ratio <= 1:
        raise ValueError(f"crop_ratio={crop_ratio} is invalid; allowed: a number in (0, 1]")
    if scheme not in SCHEMES:
        raise ValueError(f"scheme={scheme!r} is invalid; allowed: {sorted(SCHEMES)}")
    if weights is not None and images is None:
        raise ValueError("weights need images: give an image folder (class sub-folders) to "
                         "score the trained network on")
    out = Path(out)
    if weights is not None:
        state, trained_arch = load_weights(weights)
        if trained_arch is not None and as_arch(trained_arch, ANB_SPACE).id != arch.id:
            raise ValueError(f"weights={str(weights)!r} were trained for {trained_arch} "
                             f"(its record.json), but the report was asked for {arch}: give "
                             "the architecture the weights belong to")
        model = build_model(arch, space=ANB_SPACE).eval()
        model.load_state_dict(state)
        source = f"trained weights from {weights}"
    elif images is not None:
        model = build_model(arch, space=ANB_SPACE).eval()
        source = "random initialisation"
    else:
        model = fit_digits(arch, resolution, seed)
        source = "random backbone + linear probe fitted on digits"
    if images is not None:
        calib_items, eval_items = calibration_and_eval(images, calibration, eval_images, seed)
        x_train, _ = eval_inputs(calib_items, resolution, crop_ratio)
        x_test, y_test = eval_inputs(eval_items, resolution, crop_ratio)
        dataset = f"image folder {images} ({len(set(y_test.tolist()))} classes in the sample)"
        preprocessing = (f"trainer's validation transform: centre crop {crop_ratio} of the short "
                         f"side, resized to {resolution} px, ImageNet mean/std")
    else:
        x_train, _ = digits_images(resolution, "train")
        x_test, y_test = digits_images(resolution, "test")
        x_test, y_test = x_test[:eval_images], y_test[:eval_images]
        dataset = "sklearn digits (8x8 upscaled)"
        preprocessing = f"digits upscaled to {resolution} px, [-1, 1]"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="anb-qreport-") as tmp:
        raw = export_onnx(model, Path(tmp) / "float_raw.onnx", resolution=resolution)
        float_path = preprocess_float(raw, Path(tmp) / "float.onnx")
        int8_path = quantize_int8(raw, Path(tmp) / "int8.onnx", x_train[:calibration], scheme)
        float_logits, int8_logits = run_model(float_path, x_test), run_model(int8_path, x_test)
        with torch.no_grad():
            torch_logits = model(torch.from_numpy(x_test)).numpy()
        table = layer_table(float_path, int8_path, x_test[:16])
    table["below_threshold"] = ((table["cosine"] < cos_threshold)
                                | (table["sqnr_db"] < sqnr_threshold))
    summary = {
        "anb_version": __version__, "arch": str(arch), "arch_id": arch.id,
        "resolution": resolution,
        "scheme": scheme, **{f"scheme_{k}": v for k, v in SCHEMES[scheme].items()},
        "weights": source, "agreement_meaningful": weights is not None, "dataset": dataset,
        "preprocessing": preprocessing,
        "calibration_images": int(min(calibration, len(x_train))),
        "eval_images": int(len(y_test)),
        "float_top1": top1(float_logits, y_test), "int8_top1": top1(int8_logits, y_test),
        "torch_top1": top1(torch_logits, y_test),
        "top1_agreement": float(np.mean(float_logits.argmax(1) == int8_logits.argmax(1))),
        "logits_cosine": cosine(float_logits, int8_logits),
        "logits_sqnr_db": sqnr_db(float_logits, int8_logits),
        "layers": int(len(table)), "cos_threshold": cos_threshold,
        "sqnr_threshold_db": sqnr_threshold,
        "layers_below_threshold": table.loc[table["below_threshold"], "tensor"].tolist(),
        # pandas-stubs type idxmin()'s label as any Hashable, which .loc[] does not take
        "worst_layer": table.loc[table["sqnr_db"].idxmin(), "tensor"],  # type: ignore[index]
    }
    summary["top1_drop_pp"] = summary["float_top1"] - summary["int8_top1"]
    atomic_write(out / "layers.csv", lambda tmp: table.to_csv(tmp, index=False))
    atomic_write_json(out / "summary.json", summary)
    plot_layers(table, out / "layers.png", cos_threshold, sqnr_threshold,
                f"{arch} [{scheme}]  top-1 {summary['float_top1']:.1f} -> "
                f"{summary['int8_top1']:.1f} %")
    return summary
