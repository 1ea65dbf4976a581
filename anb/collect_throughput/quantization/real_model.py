"""What ``anb quant-layers --weights/--onnx --images`` checks: a trained model as an ONNX file
and real images from a folder.

- ``--weights``: the trainer's checkpoint, its artifact folder (``weights.pt`` +
  ``record.json``) or a ``state_dict`` (:func:`.quant_report.load_weights`) of a search-space
  architecture, exported at the given resolution;
- ``--onnx``: any ONNX image classifier (NCHW float input, first output the logits); nodes
  without a name get one (``<op_type>_<index>``), the resolution is its input's.

Images: a labelled folder (``<root>/<class>/<image>``; labels are the sorted class folders'
indices, as the trainer numbers them) or an unlabelled one (images directly in ``<root>``),
through the trainer's validation transform (:func:`.quant_report.eval_inputs`); calibration
and evaluation images are disjoint.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from anb.collect_throughput.quantization.quant_report import eval_inputs, load_weights
from anb.collect_throughput.timing.inputs import IMAGE_SUFFIXES, calibration_and_eval
from anb.io import atomic_write


@dataclass
class RealModel:
    """A float ONNX model to check: where it is, a folder-safe id, what it came from, its
    resolution and, for a search-space network, the architecture string and the torch model."""

    path: Path
    model_id: str
    source: str
    resolution: int
    arch: str | None = None
    torch_model: object | None = None


def from_weights(weights: str | Path, arch: str | None, resolution: int, folder: Path,
                 ) -> RealModel:
    """Build ``arch`` (default: the one the checkpoint names), load ``weights``, export it."""
    from anb.searchspace.arch import as_arch
    from anb.searchspace.model import build_model
    from anb.searchspace.onnx_export import export_onnx
    from anb.searchspace.space import ANB_SPACE

    if not Path(weights).exists():
        raise ValueError(f"--weights {str(weights)!r} does not exist; give the trainer's "
                         "checkpoint, its artifact folder or a state_dict file")
    state, trained = load_weights(weights)
    if arch is None and trained is None:
        raise ValueError(f"--weights {str(weights)!r} names no architecture (a plain "
                         "state_dict): give the architecture as the ARCHS argument")
    if (arch is not None and trained is not None
            and as_arch(arch, ANB_SPACE).id != as_arch(trained, ANB_SPACE).id):
        raise ValueError(f"--weights {str(weights)!r} were trained for {trained}, not {arch}")
    parsed = as_arch(arch or trained, ANB_SPACE)
    classes = state["classifier.weight"].shape[0] if "classifier.weight" in state else 1000
    model = build_model(parsed, num_classes=classes, space=ANB_SPACE).eval()
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise ValueError(f"--weights {str(weights)!r} do not fit {parsed}: {err}") from err
    path = export_onnx(model, folder / "float_raw.onnx", resolution=resolution)
    return RealModel(path, parsed.id, f"trained weights from {weights}", resolution,
                     str(parsed), model)


def from_onnx(file: str | Path, resolution: int | None, folder: Path) -> RealModel:
    """A user's ONNX model, its unnamed nodes named; ``resolution`` must match a static one."""
    import onnx

    file = Path(file)
    if not file.is_file():
        raise ValueError(f"--onnx {str(file)!r} is not a file")
    try:
        model = onnx.load(str(file))
        onnx.checker.check_model(model)
    except Exception as err:  # any parse or check failure is the user's file
        raise ValueError(f"--onnx {str(file)!r} is not a valid ONNX model: {err}") from err
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    if len(dims) != 4 or dims[1] != 3:
        raise ValueError(f"--onnx {str(file)!r}: input {model.graph.input[0].name!r} has shape "
                         f"{dims}; allowed: NCHW with 3 (RGB) channels")
    static = dims[2] if dims[2] == dims[3] and dims[2] > 0 else None
    if static and resolution and static != resolution:
        raise ValueError(f"--onnx {str(file)!r} takes {static} px images, not --resolution "
                         f"{resolution}")
    if not (static or resolution):
        raise ValueError(f"--onnx {str(file)!r} has no fixed square input size: give "
                         "--resolution")
    for i, node in enumerate(model.graph.node):
        node.name = node.name or f"{node.op_type}_{i}"
    path = atomic_write(folder / "float_raw.onnx", lambda t: onnx.save(model, str(t)))
    model_id = re.sub(r"[^A-Za-z0-9._-]", "_", file.stem) or "model"
    return RealModel(path, model_id, f"ONNX model {file}", int(static or resolution or 0))


def folder_images(folder: str | Path, calibration: int, evaluation: int, resolution: int,
                  seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(calibration, evaluation, labels or None)``: NCHW float32 arrays of disjoint images
    of ``folder`` (labelled: class-stratified; unlabelled: a seeded shuffle)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"--images {str(folder)!r} is not a folder")
    if any(p.is_dir() for p in folder.iterdir()):
        calib, evaluated = calibration_and_eval(folder, calibration, evaluation, seed)
        x_calib, _ = eval_inputs(calib, resolution)
        x_eval, labels = eval_inputs(evaluated, resolution)
        if len(x_calib) == 0:
            raise ValueError(f"--images {str(folder)!r}: no image is left for calibration "
                             f"after {len(x_eval)} evaluation images")
        return x_calib, x_eval, labels
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if len(files) < 2:
        raise ValueError(f"--images {str(folder)!r} holds {len(files)} images {IMAGE_SUFFIXES}"
                         "; need at least 2 (calibration and evaluation), directly in it or in "
                         "class sub-folders")
    order = np.random.default_rng(seed).permutation(len(files))
    n_eval = min(evaluation, len(files) - 1)
    picked = [files[i] for i in order]
    x_eval, _ = eval_inputs([(f, 0) for f in picked[:n_eval]], resolution)
    x_calib, _ = eval_inputs([(f, 0) for f in picked[n_eval:n_eval + calibration]],
                             resolution)
    return x_calib, x_eval, None
