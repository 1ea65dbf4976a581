"""Host stages (no device needed): ONNX -> DLC, NHWC raw inputs + input list, quantization,
graph and encodings. QNN: the converter takes the same quantization options."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from anb.collect_throughput.targets.qualcomm.config import Quantization
from anb.collect_throughput.targets.qualcomm.parse import parse_dlc_info
from anb.collect_throughput.targets.qualcomm.tools import find_tool, run_tool
from anb.io import atomic_write_bytes, atomic_write_text


def to_nhwc(x: np.ndarray) -> np.ndarray:
    """NCHW -> NHWC (the device's layout); other ranks unchanged."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if x.ndim == 4 else x


def to_nchw(x: np.ndarray) -> np.ndarray:
    """NHWC -> NCHW (ONNX's layout); other ranks unchanged."""
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if x.ndim == 4 else x


def write_raw_inputs(images: np.ndarray, folder: str | Path, prefix: str = "input",
                     ) -> list[Path]:
    """One float32 NHWC raw file per NCHW image (batch 1 each), ``<prefix>_<i>.raw``."""
    images = np.asarray(images, dtype=np.float32)
    if images.ndim != 4:
        raise ValueError(f"images must be NCHW (4-D); got shape {images.shape}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return [atomic_write_bytes(folder / f"{prefix}_{i}.raw", to_nhwc(img[None]).tobytes())
            for i, img in enumerate(images)]


def write_input_list(paths: Sequence[str | Path], list_path: str | Path) -> Path:
    """An input list: one raw file path per line (paths as the tool will see them)."""
    if not paths:
        raise ValueError("an input list needs at least one raw file")
    return atomic_write_text(list_path, "".join(f"{p}\n" for p in paths))


def convert_argv(sdk: str, onnx_path: Path, out_path: Path,
                 quantization: Quantization | None = None, input_list: Path | None = None,
                 ) -> list[str]:
    """The ONNX conversion command (SNPE: DLC; QNN: model source, quantized when given)."""
    if sdk == "snpe":
        return [find_tool("snpe", "convert"), "--input_network", str(onnx_path),
                "--output_path", str(out_path)]
    argv = [find_tool("qnn", "convert"), "--input_network", str(onnx_path),
            "--output_path", str(out_path)]
    if quantization is not None:
        if input_list is None:
            raise ValueError("QNN quantization needs a calibration input list")
        argv += ["--input_list", str(input_list)] + _quant_flags(quantization, qnn=True)
    return argv


def _quant_flags(q: Quantization, qnn: bool = False) -> list[str]:
    flags = ["--use_per_channel_quantization"] if q.per_channel else []
    if qnn:
        return flags + ["--act_bw", str(q.act_bitwidth), "--bias_bw", str(q.bias_bitwidth),
                        "--act_quantizer", q.act_quantizer]
    return flags + ["--act_bitwidth", str(q.act_bitwidth), "--bias_bitwidth",
                    str(q.bias_bitwidth), "--act_quantizer", q.act_quantizer]


def quantize_argv(dlc: Path, input_list: Path, out_path: Path, q: Quantization) -> list[str]:
    """``snpe-dlc-quantize`` with the config's options
    (docs/background/devices.md, "Conversion and quantisation on the host")."""
    return [find_tool("snpe", "quantize"), "--input_dlc", str(dlc), "--input_list",
            str(input_list), "--output_dlc", str(out_path)] + _quant_flags(q)


def convert(onnx_path: str | Path, dlc_path: str | Path, timeout: float = 3600) -> Path:
    """``snpe-onnx-to-dlc``: a float DLC from a static-shape ONNX model."""
    onnx_path, dlc_path = Path(onnx_path), Path(dlc_path)
    if not onnx_path.is_file():
        raise FileNotFoundError(f"ONNX model {onnx_path} does not exist")
    run_tool(convert_argv("snpe", onnx_path, dlc_path), timeout)
    if not dlc_path.is_file():
        raise RuntimeError(f"snpe-onnx-to-dlc reported success but wrote no {dlc_path}")
    return dlc_path


def quantize(dlc: str | Path, input_list: str | Path, out_path: str | Path, q: Quantization,
             timeout: float = 3600) -> Path:
    """``snpe-dlc-quantize`` calibrated on the raw tensors of ``input_list``."""
    lines = [ln for ln in Path(input_list).read_text().splitlines() if ln.strip()]
    missing = [ln for ln in lines if not Path(ln.split(":=")[-1]).is_file()]
    if missing:
        raise FileNotFoundError(f"input list {input_list}: raw file(s) missing: {missing[:3]}")
    run_tool(quantize_argv(Path(dlc), Path(input_list), Path(out_path), q), timeout)
    return Path(out_path)


def dlc_info(dlc: str | Path, timeout: float = 600) -> pd.DataFrame:
    """``snpe-dlc-info -i model.dlc``: one row per layer with its output encoding."""
    return parse_dlc_info(run_tool([find_tool("snpe", "info"), "-i", str(dlc)], timeout))
