"""Quality on the target: a trained network run on a labelled image folder on the device.

The network is the trainer's (its checkpoint, its artifact folder ``weights.pt`` +
``record.json``, a ``state_dict`` file, or a folder of ``<arch_id>.pt`` checkpoints) or a
user's ONNX model. Images come from an ImageFolder tree (``<root>/<class>/<image>``, classes
sorted: index = label) through the trainer's validation transform
(:func:`~anb.collect_throughput.quantization.quant_report.eval_inputs`); a class-stratified sample
is scored, a disjoint one calibrates int8 models.

The device runs the model through its own path, its target's ``outputs``: this host's back-end
(:class:`~anb.collect_throughput.targets.local.LocalTarget`: ``onnxruntime``,
``onnxruntime-int8``, ``openvino``, ``openvino-int8``: int8 models quantized under the
protocol's scheme, as the back-end builds them), a board over ``[remote]``
(:class:`~anb.collect_throughput.targets.remote.RemoteTarget`: ssh, adb, local, resident TCP), or
a Qualcomm SoC through its SDK stages (DLC converted and quantized, ``snpe-net-run`` outputs).
The host's reference is the fp32 model in onnxruntime here. The entry
(:func:`score`) holds top-1/top-5 against the labels, the host's, and the agreement with the
host (top-1 agreement, logits cosine); it is stored in the record's ``quality`` section under
the device's name (:mod:`anb.records`).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anb.collect_throughput.defaults import QUALITY_IMAGES
from anb.collect_throughput.targets.devices import as_target
from anb.collect_throughput.targets.local import onnx_outputs
from anb.collect_throughput.targets.protocol_target import ProtocolTarget
from anb.collect_throughput.timing.protocol import DeviceConfig, Protocol
from anb.io import atomic_write_json
from anb.preprocessing import VAL_CROP_RATIO
from anb.searchspace.arch import Arch, as_arch
from anb.searchspace.space import ANB_SPACE
from anb.version import __version__

#: Back-ends whose device model quality runs here: name -> precision of the model it runs.
LOCAL_BACKENDS = {"onnxruntime": "fp32", "onnxruntime-int8": "int8", "openvino": "fp32",
                  "openvino-int8": "int8"}


@dataclass
class Source:
    """The trained network: ``weights`` (see module docstring) or ``onnx`` (a file)."""

    weights: Path | None = None
    onnx: Path | None = None

    def __post_init__(self) -> None:
        if (self.weights is None) == (self.onnx is None):
            raise ValueError("give the trained network: trainer weights (--weights) or an ONNX "
                             "model (--onnx), one of the two")
        path = self.weights or self.onnx
        assert path is not None
        if not Path(path).exists():
            kind = "weights" if self.weights else "onnx"
            raise ValueError(f"{kind}={str(path)!r} does not exist")

    def describe(self) -> str:
        return f"trained weights {self.weights}" if self.weights else f"ONNX model {self.onnx}"

    def as_dict(self) -> dict[str, str]:
        return {"weights": str(self.weights)} if self.weights else {"onnx": str(self.onnx)}

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> Source:
        return cls(Path(data["weights"]) if "weights" in data else None,
                   Path(data["onnx"]) if "onnx" in data else None)


@dataclass
class Images:
    """The scored sample (``x``, labels ``y``), the calibration sample and the folder's
    classes."""

    folder: Path
    x: np.ndarray
    y: np.ndarray
    calibration: np.ndarray
    classes: list[str]


def load_images(folder: str | Path, resolution: int, count: int = QUALITY_IMAGES,
                calibration: int = 64, seed: int = 0, crop_ratio: float = VAL_CROP_RATIO) -> Images:
    """``count`` class-stratified images of ``folder`` (fewer where the folder holds fewer
    than ``count`` + ``calibration``) and ``calibration`` others, through the trainer's
    validation transform at ``resolution``. A missing folder, one without class
    sub-folders or with an empty class is an error naming it."""
    from anb.collect_throughput.quantization.quant_report import eval_inputs
    from anb.collect_throughput.timing.inputs import (
        IMAGE_SUFFIXES,
        calibration_and_eval,
        labelled_files,
    )

    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"images={str(folder)!r} is not a folder; allowed: an image folder "
                         "with one sub-folder of images per class (<root>/<class>/<image>)")
    classes = sorted(d.name for d in folder.iterdir() if d.is_dir())
    if not classes:
        raise ValueError(f"images={str(folder)!r} has no class sub-folders; allowed: "
                         "<root>/<class>/<image>")
    empty = [c for c in classes if not any(f.suffix.lower() in IMAGE_SUFFIXES
                                           for f in (folder / c).rglob("*"))]
    if empty:
        raise ValueError(f"images={str(folder)!r}: class folder(s) {empty[:5]} hold no images "
                         f"{list(IMAGE_SUFFIXES)}; allowed: <root>/<class>/<image> with at "
                         "least one image per class")
    if count < 1:
        raise ValueError(f"count={count} is invalid; allowed: an integer >= 1")
    total = sum(map(len, labelled_files(folder)))
    if total <= calibration:
        raise ValueError(f"images={str(folder)!r} holds {total} images; the device's int8 "
                         f"model needs {calibration} to calibrate and at least one more to "
                         "score")
    count = min(count, total - calibration)
    calib_items, eval_items = calibration_and_eval(folder, calibration, count, seed)
    x, y = eval_inputs(eval_items, resolution, crop_ratio)
    c, _ = eval_inputs(calib_items, resolution, crop_ratio)
    return Images(folder, x, y, c, classes)


def device_resolution(device: Any, arch: Any) -> int:
    """The input size ``device`` runs ``arch`` at (a Qualcomm device's static one)."""
    from anb.collect_throughput.timing.network import measured_resolution

    if isinstance(device, DeviceConfig):
        return measured_resolution(device.protocols[0], arch)
    return int(device.resolution)


def calibration_count(device: Any) -> int:
    """How many images calibrate ``device``'s int8 model (0: it runs fp32)."""
    if isinstance(device, DeviceConfig):
        protocol = device.protocols[0]
        return protocol.calibration_images if LOCAL_BACKENDS.get(protocol.backend) == "int8" \
            else 0
    return int(getattr(device.quantization, "calibration_images", 0))


def resolve_weights(weights: Path, arch: Arch) -> Path:
    """The file (or artifact folder) of ``arch``'s weights: ``weights`` itself, or, for a
    folder of checkpoints (the trainer's ``checkpoints/``), its ``<arch_id>.pt``."""
    if weights.is_dir() and not (weights / "weights.pt").is_file():
        path = weights / f"{arch.id}.pt"
        if not path.is_file():
            raise ValueError(f"weights={str(weights)!r} holds no {path.name} (the checkpoint of "
                             f"{arch}) and no weights.pt; allowed: a checkpoint, an artifact "
                             "folder or a folder of <arch_id>.pt checkpoints")
        return path
    return weights


def trained_network(arch: Arch, weights: Path, num_classes: int) -> Any:
    """The network of ``arch`` with the trained ``weights`` loaded (eval mode). Weights of
    another architecture (their checkpoint or record names it, or their tensors do not fit)
    or of another number of classes are an error naming both."""
    import torch

    from anb.collect_throughput.quantization.quant_report import load_weights
    from anb.searchspace.model import build_model

    path = resolve_weights(weights, arch)
    state, trained = load_weights(path)
    if trained is None and path.is_file():
        saved = torch.load(path, map_location="cpu", weights_only=True)
        trained = saved.get("arch") if isinstance(saved, dict) else None
    if trained is not None and as_arch(trained, ANB_SPACE).id != arch.id:
        raise ValueError(f"weights={str(path)!r} were trained for {trained}, not for {arch}: "
                         "give the weights of the architecture measured")
    model = build_model(arch, num_classes=num_classes, space=ANB_SPACE).eval()
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        first = str(err).splitlines()[1].strip() if "\n" in str(err) else str(err)
        raise ValueError(f"weights={str(path)!r} do not fit {arch} with {num_classes} classes "
                         f"(the image folder's): {first}") from None
    return model


def float_model(arch: Arch, source: Source, num_classes: int, resolution: int,
                workdir: Path, dynamic: bool = True) -> Path:
    """The trained network as a fp32 ONNX model in ``workdir`` (a user's ONNX is used as it
    is)."""
    from anb.searchspace.onnx_export import export_onnx

    if source.onnx is not None:
        return source.onnx
    assert source.weights is not None
    model = trained_network(arch, source.weights, num_classes)
    return export_onnx(model, workdir / f"{arch.id}_trained_fp32_r{resolution}.onnx",
                       resolution=resolution, dynamic=dynamic)


def device_model(float_path: Path, protocol: Protocol, calibration: np.ndarray,
                 workdir: Path) -> tuple[Path, dict[str, Any]]:
    """The model the protocol's back-end runs: the fp32 model, or its static int8 (QDQ)
    model quantized under ``protocol.quantization`` on ``calibration``."""
    from anb.collect_throughput.backends.int8_quantize import SCHEMES, quantize_int8

    precision = LOCAL_BACKENDS.get(protocol.backend)
    if precision is None:
        raise ValueError(f"device {protocol.device!r}: backend={protocol.backend!r} has no "
                         f"quality path; allowed: {sorted(LOCAL_BACKENDS)} (or a Qualcomm "
                         "device)")
    if precision == "fp32":
        return float_path, {}
    path = workdir / f"{float_path.stem}_int8_{protocol.quantization}_c{len(calibration)}.onnx"
    quantize_int8(float_path, path, calibration, protocol.quantization)
    return path, {"quantization": {"scheme": protocol.quantization,
                                   **SCHEMES[protocol.quantization],
                                   "calibration_images": int(len(calibration)),
                                   "calibration_source": "the image folder (disjoint sample)"}}


def top_k(logits: np.ndarray, labels: np.ndarray, k: int) -> float:
    """Top-``k`` accuracy (%) of ``logits`` against ``labels``."""
    k = min(k, logits.shape[1])
    best = np.argsort(-logits, axis=1)[:, :k]
    return float(100.0 * np.mean((best == labels[:, None]).any(axis=1)))


def score(logits: np.ndarray, host: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """Top-1/top-5 of the device's and the host's logits, top-1 agreement and per-image
    logits cosine between them."""
    a = host.reshape(len(labels), -1).astype(np.float64)
    b = logits.reshape(len(labels), -1).astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cos = np.sum(a * b, 1) / np.maximum(norms, np.finfo(np.float64).tiny)
    return {"top1": top_k(b, labels, 1), "top5": top_k(b, labels, 5),
            "host_top1": top_k(a, labels, 1), "host_top5": top_k(a, labels, 5),
            "top1_agreement": float(np.mean(a.argmax(1) == b.argmax(1))),
            "logits_cosine_mean": float(cos.mean()), "logits_cosine_min": float(cos.min()),
            "max_abs_error": float(np.abs(a - b).max()), "images": int(len(labels))}


def _entry(scores: dict[str, Any], images: Images, source: Source, resolution: int,
           **facts: Any) -> dict[str, Any]:
    return {**scores, "classes": len(images.classes), "dataset": str(images.folder),
            "resolution": resolution, "model": source.describe(),
            "reference": "fp32 ONNX in onnxruntime on the host", "anb_version": __version__,
            **facts}


def protocol_target(device: DeviceConfig) -> ProtocolTarget:
    """The target of a protocol config: where its outputs are computed."""
    target = as_target(device)
    assert isinstance(target, ProtocolTarget)
    return target


def quality_protocol(device: DeviceConfig, arch: Arch | str, source: Source, images: Images,
                     workdir: Path) -> dict[str, Any]:
    """The quality entry of ``arch``'s trained network on a protocol-config device (its
    first protocol's back-end, locally or on its board)."""
    arch = as_arch(arch, ANB_SPACE)
    protocol = device.protocols[0]
    resolution = int(images.x.shape[-1])
    float_path = float_model(arch, source, len(images.classes), resolution, workdir)
    host = onnx_outputs(float_path, images.x)
    model, facts = device_model(float_path, protocol, images.calibration, workdir)
    target = protocol_target(device)
    logits = target.outputs(protocol, model, images.x)
    return _entry(score(logits, host, images.y), images, source, resolution,
                  backend=protocol.backend, precision=protocol.precision,
                  where=target.where, **facts)


def quality_qualcomm(device: Any, arch: Arch | str, source: Source, images: Images,
                     workdir: Path, transport: Any = None) -> dict[str, Any]:
    """The quality entry on a Qualcomm device: the trained network converted (and quantized,
    calibrated on the folder's calibration sample) to a DLC with the SDK's host tools, run by
    ``snpe-net-run`` on the board through its transport, its ``logits`` pulled back."""
    from anb.collect_throughput.targets.qualcomm import host as qc_host
    from anb.collect_throughput.targets.qualcomm.device import DeviceStages, open_device_transport
    from anb.collect_throughput.targets.qualcomm.stages import build_dlc

    arch = as_arch(arch, ANB_SPACE)
    if source.weights is None:
        raise ValueError(f"device {device.name!r} (Qualcomm): give trainer --weights; an ONNX "
                         "model is not converted for it in this build")
    resolution = int(images.x.shape[-1])
    if resolution != device.resolution:
        raise ValueError(f"device {device.name!r} runs {device.resolution} px (a static DLC) "
                         f"but the images are at {resolution} px; give --resolution "
                         f"{device.resolution} or a config at the network's resolution")
    model = trained_network(arch, source.weights, len(images.classes))
    dlc, onnx_path = build_dlc(arch, device, workdir / "dlc", images.calibration, model=model)
    host = onnx_outputs(onnx_path, images.x)
    stages = DeviceStages(device, transport or open_device_transport(device),
                          tag=f"{arch.id}-quality")
    try:
        remote, listing, _ = stages.prepare(dlc, qc_host.write_raw_inputs(images.x,
                                                                          workdir / "raw"))
        stages.net_run(remote, listing)
        shape = (1, len(images.classes))
        logits = np.concatenate([stages.pull_outputs({"logits": shape}, i,
                                                     workdir / "out" / str(i))["logits"]
                                 for i in range(len(images.x))])
    finally:
        stages.cleanup()
    return _entry(score(logits, host, images.y), images, source, resolution,
                  backend=f"{device.sdk}-{device.runtime}", precision=device.precision,
                  where="board", protocol=device.as_dict())


def measure_quality(device: Any, arch: Arch | str, source: Source, images: Images,
                    workdir: str | Path | None = None, transport: Any = None,
                    ) -> dict[str, Any]:
    """The quality entry of ``arch`` on ``device`` (a protocol config or a Qualcomm one);
    models are built in ``workdir`` (default: a scratch folder)."""
    with tempfile.TemporaryDirectory(prefix="anb-quality-", dir=workdir) as tmp:
        if isinstance(device, DeviceConfig):
            return quality_protocol(device, arch, source, images, Path(tmp))
        return quality_qualcomm(device, arch, source, images, Path(tmp), transport)


def measure_quality_archs(device: Any, archs: list[Any], out: str | Path, source: Source,
                          folder: str | Path, count: int = QUALITY_IMAGES,
                          workdir: str | Path | None = None,
                          transport: Any = None) -> dict[str, dict[str, Any]]:
    """Quality of each of ``archs`` on ``device`` written into ``<out>/<device>/<arch_id>.json``
    (:func:`write_quality`); returns arch id -> entry. The image folder is checked first."""
    done: dict[str, dict[str, Any]] = {}
    loaded: dict[int, Images] = {}
    for arch in archs:
        resolution = device_resolution(device, arch)
        if resolution not in loaded:
            loaded[resolution] = load_images(folder, resolution, count,
                                             calibration_count(device))
        entry = measure_quality(device, arch, source, loaded[resolution], workdir, transport)
        write_quality(out, device.name, arch, entry)
        done[as_arch(arch, ANB_SPACE).id] = entry
    return done


def quality_record(arch: Arch | str, device: str, entry: dict[str, Any],
                   record: dict[str, Any] | None = None) -> dict[str, Any]:
    """``record`` (default: a new one of ``arch``) with ``entry`` as its ``quality`` of
    ``device``."""
    from anb.collect_throughput.timing.result import arch_record

    arch = as_arch(arch, ANB_SPACE)
    out = record if record is not None else arch_record(arch, [], tool="anb measure --quality",
                                                        space=ANB_SPACE)
    out.setdefault("quality", {})[device] = entry
    return out


def write_quality(out: str | Path, device: str, arch: Arch | str,
                  entry: dict[str, Any]) -> Path:
    """Add ``entry`` to ``<out>/<device>/<arch_id>.json`` (created when missing; its timing
    entries kept), atomically."""
    from anb.collect_throughput.records.folder import read_result, result_path

    arch = as_arch(arch, ANB_SPACE)
    path = result_path(out, device, arch)
    record = quality_record(arch, device, entry, read_result(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_json(path, record)
