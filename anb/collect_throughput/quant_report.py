"""Quantization effect report: where an architecture's int8 network departs from its float one.

For one architecture: fit it to the digits (see :func:`.digits.fit_digits`), export, quantize
(see :mod:`.quantize`), run the float and int8 networks on the same test images and compare
every layer's output tensor (onnxruntime's QDQ debugging tools): cosine similarity and SQNR
(dB) of the int8 activation against the float one (cumulative error up to that layer) and of the
tensor just before/after its own quantize-dequantize pair (local error). Reports the output
drop (top-1 of both networks, logits cosine/SQNR, top-1 agreement) and the layers below the
thresholds; writes ``layers.csv``, ``summary.json`` and ``layers.png``.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from anb.collect_throughput.digits import digits_images, fit_digits, top1
from anb.collect_throughput.quantize import ArrayReader, preprocess_float, quantize_int8, run_model
from anb.io import atomic_write, atomic_write_json
from anb.searchspace.arch import Arch, as_arch
from anb.searchspace.onnx_export import export_onnx


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denom) if denom else float(np.array_equal(a, b))


def sqnr_db(reference: np.ndarray, other: np.ndarray) -> float:
    """10 log10(|reference|^2 / |reference - other|^2); inf when identical."""
    ref = np.ravel(reference).astype(np.float64)
    noise = np.sum((ref - np.ravel(other)) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(ref**2) / noise))


def layer_table(float_path: Path, int8_path: Path, images: np.ndarray) -> pd.DataFrame:
    """One row per matched activation tensor, in graph order (see module docstring)."""
    import onnx
    from onnxruntime.quantization.qdq_loss_debug import (collect_activations,
                                                         create_activation_matching,
                                                         modify_model_output_intermediate_tensors)

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


def quant_report(arch: Arch | str, out: str | Path, resolution: int = 32, calibration: int = 64,
                 eval_images: int = 100, cos_threshold: float = 0.99, sqnr_threshold: float = 20.0,
                 seed: int = 0) -> dict[str, Any]:
    """Write the report for ``arch`` into ``out``; return the summary."""
    import torch

    arch = as_arch(arch)
    if resolution < 32:
        raise ValueError(f"resolution={resolution} is invalid; allowed: an integer >= 32")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model = fit_digits(arch, resolution, seed)
    x_train, _ = digits_images(resolution, "train", seed)
    x_test, y_test = digits_images(resolution, "test", seed)
    x_test, y_test = x_test[:eval_images], y_test[:eval_images]
    with tempfile.TemporaryDirectory(prefix="anb-qreport-") as tmp:
        raw = export_onnx(model, Path(tmp) / "float_raw.onnx", resolution=resolution)
        float_path = preprocess_float(raw, Path(tmp) / "float.onnx")
        int8_path = quantize_int8(raw, Path(tmp) / "int8.onnx", x_train[:calibration])
        float_logits, int8_logits = run_model(float_path, x_test), run_model(int8_path, x_test)
        with torch.no_grad():
            torch_logits = model(torch.from_numpy(x_test)).numpy()
        table = layer_table(float_path, int8_path, x_test[:16])
    table["below_threshold"] = (table["cosine"] < cos_threshold) | (table["sqnr_db"] < sqnr_threshold)
    summary = {
        "arch": str(arch), "arch_id": arch.id, "resolution": resolution,
        "dataset": "sklearn digits (8x8 upscaled), linear-probe network",
        "calibration_images": calibration, "eval_images": int(len(y_test)),
        "float_top1": top1(float_logits, y_test), "int8_top1": top1(int8_logits, y_test),
        "torch_top1": top1(torch_logits, y_test),
        "top1_agreement": float(np.mean(float_logits.argmax(1) == int8_logits.argmax(1))),
        "logits_cosine": cosine(float_logits, int8_logits),
        "logits_sqnr_db": sqnr_db(float_logits, int8_logits),
        "layers": int(len(table)), "cos_threshold": cos_threshold,
        "sqnr_threshold_db": sqnr_threshold,
        "layers_below_threshold": table.loc[table["below_threshold"], "tensor"].tolist(),
        "worst_layer": table.loc[table["sqnr_db"].idxmin(), "tensor"],
    }
    summary["top1_drop_pp"] = summary["float_top1"] - summary["int8_top1"]
    atomic_write(out / "layers.csv", lambda tmp: table.to_csv(tmp, index=False))
    atomic_write_json(out / "summary.json", summary)
    plot_layers(table, out / "layers.png", cos_threshold, sqnr_threshold,
                f"{arch}  top-1 {summary['float_top1']:.1f} -> {summary['int8_top1']:.1f} %")
    return summary
