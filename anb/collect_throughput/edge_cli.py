"""``anb quant-layers`` and ``anb measure-qualcomm`` (registered on the root app)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer

from anb.cli_support import check_finite, fail
from anb.collect_throughput.defaults import COS_THRESHOLD, SQNR_THRESHOLD_DB
from anb.preprocessing import MAX_IMAGES
from anb.searchspace.base import MAX_RESOLUTION

#: The most layers --worst flags: more than any network of the spaces has (a space's deepest
#: network has well under a thousand quantized layers).
MAX_WORST = 1000


def parse_keep_float(text: str) -> list[int]:
    """``--keep-float 1,2,4`` -> ``[1, 2, 4]`` (each K >= 0)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = [-1]
    if any(v < 0 for v in values):
        fail(f"--keep-float {text!r} is invalid; allowed: comma-separated integers >= 0 "
             "(how many of the worst layers to keep float, e.g. 1,2,4)")
    return values


def quant_layers_cmd(
    archs: str | None = typer.Argument(None, help="Architectures: dataset path, text file, "
                                       "'sample:N[:seed]' or comma-separated strings (random "
                                       "backbones fitted to digits); with --weights, the one "
                                       "architecture they belong to (default: the checkpoint's)."),
    path: str = typer.Option("cpu-int8", "--path", help="cpu-int8 | dpu | a Qualcomm device "
                             "config (configs/devices/qualcomm/*.toml name or path)."),
    out: Path = typer.Option(..., "--out", help="Report folder."),
    weights: Path | None = typer.Option(None, "--weights", help="Trained weights: the "
                                        "trainer's checkpoint, its artifact folder or a "
                                        "state_dict (needs --images)."),
    onnx_file: Path | None = typer.Option(None, "--onnx", help="Your own ONNX image "
                                          "classifier, any architecture (needs --images)."),
    images_dir: Path | None = typer.Option(None, "--images", help="Real images: class "
                                           "sub-folders (labelled: top-1 is reported) or "
                                           "images directly in the folder (unlabelled)."),
    keep_float: str = typer.Option("", "--keep-float", help="Mixed precision sweep: keep the "
                                   "K worst layers float, for each K given (e.g. 1,2,4)."),
    resolution: int | None = typer.Option(None, min=32, max=MAX_RESOLUTION,
                                          help="Image size (>= 32; default 32, an ONNX "
                                          "model's own input size)."),
    calibration: int = typer.Option(64, min=1, max=MAX_IMAGES, help="Calibration images."),
    images: int = typer.Option(16, "--compare-images", min=1, max=MAX_IMAGES,
                               help="Images compared layer by layer."),
    eval_images: int = typer.Option(200, min=1, max=MAX_IMAGES,
                                    help="Images scored per model of the mixed-precision "
                                    "sweep (with --weights/--onnx)."),
    cos_threshold: float = typer.Option(COS_THRESHOLD, min=-1.0, max=1.0,
                                        help="Flag layers with cosine below this."),
    sqnr_threshold: float = typer.Option(SQNR_THRESHOLD_DB,
                                         help="Flag layers with SQNR (dB) below this."),
    worst: int = typer.Option(5, min=1, max=MAX_WORST,
                               help="Flag this many layers that lose most SQNR."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even when it "
                                   "holds something other than an anb quant-layers report."),
) -> None:
    """Per-layer quantization effect (cosine, SQNR, max abs error) of a quantized path; with
    --weights or --onnx and --images, of a trained model on real images, with per-layer times
    and a mixed-precision sweep (--keep-float)."""
    from anb.collect_throughput.quantization.layerwise import CPU_PATHS, REPORT, layerwise
    from anb.collect_throughput.targets.qualcomm.config import QUALCOMM_DIR
    from anb.outputs import replace_folder

    shipped = sorted(p.stem for p in QUALCOMM_DIR.glob("*.toml"))
    if path not in CPU_PATHS and path not in shipped and not Path(path).is_file():
        fail(f"--path {path!r} is invalid; allowed: {sorted(CPU_PATHS)}, a Qualcomm device "
             f"config {shipped} or a TOML file")
    if (resolution is not None and resolution < 32) or images < 1 or calibration < 1 \
            or worst < 0 or eval_images < 1:
        fail("--resolution must be >= 32, --compare-images, --calibration and --eval-images "
             f">= 1, --worst >= 0 (got {resolution}, {images}, {calibration}, {eval_images}, "
             f"{worst})")
    check_finite("--sqnr-threshold", sqnr_threshold)
    ks = parse_keep_float(keep_float)
    real = weights is not None or onnx_file is not None
    if weights is not None and onnx_file is not None:
        fail("--weights and --onnx are exclusive: give the trainer's weights of a search-space "
             "architecture or an ONNX model, not both")
    if real and images_dir is None:
        fail("--weights/--onnx need --images: a folder of real images to compare the layers on")
    if not real and (images_dir is not None or ks):
        fail("--images and --keep-float need a trained model: give --weights or --onnx")
    if onnx_file is not None and archs is not None:
        fail(f"--onnx is the model: drop the ARCHS argument ({archs!r})")
    if not real and archs is None:
        fail("give ARCHS (random backbones fitted to digits), or --weights/--onnx with --images")
    if real and path not in CPU_PATHS:
        fail(f"--path {path!r}: --weights/--onnx are checked on {sorted(CPU_PATHS)}")
    try:
        with replace_folder(out, REPORT, overwrite) as tmp:
            if real:
                result = _real_report(archs, weights, onnx_file, images_dir, resolution, path,
                                      tmp, calibration=calibration, images=images,
                                      eval_images=eval_images, cos_threshold=cos_threshold,
                                      sqnr_threshold=sqnr_threshold, worst=worst,
                                      keep_float=ks)
            else:
                from anb.collect_throughput.arch_lists import read_arch_list
                from anb.searchspace.space import ANB_SPACE

                result = layerwise(read_arch_list(str(archs), space=ANB_SPACE), path, tmp,
                                   resolution=resolution or 32, calibration=calibration,
                                   images=images, cos_threshold=cos_threshold,
                                   sqnr_threshold=sqnr_threshold, worst=worst)
    except (ValueError, FileNotFoundError) as err:
        fail(err)
    for s in result["models"]:
        typer.echo(f"{s.get('arch') or s.get('model')}: {len(s['layers_below_threshold'])} of "
                   f"{s['layers']} layers below threshold; worst {s['worst_layers'][:1]}")
        for row in s.get("mixed_precision", []):
            typer.echo(f"  {row['precision']:5} keep_float={row['keep_float']}: top-1 "
                       f"{row['top1']} agreement {row['agreement']:.1f} % logits SQNR "
                       f"{row['logits_sqnr_db']} dB latency {row['latency_ms']:.3f} ms")
    if result.get("by_layer_type"):
        top = result["by_layer_type"][0]
        typer.echo(f"layer type losing most: {top['op_type']} ({top['mean_sqnr_drop_db']:.2f} "
                   f"dB per layer) -> {out}")
    for arch_id, message in result["failed"].items():
        typer.echo(f"failed {arch_id}: {message}", err=True)
    if result["failed"]:
        raise typer.Exit(1)


def _real_report(arch: str | None, weights: Path | None, onnx_file: Path | None,
                 images_dir: Path | None, resolution: int | None, path: str, out: Path,
                 **options: Any) -> dict:
    """The report of one trained model (``--weights`` or ``--onnx``) on ``images_dir``."""
    import tempfile

    from anb.collect_throughput.quantization.layerwise import model_report, write_summary
    from anb.collect_throughput.quantization.real_model import from_onnx, from_weights

    if images_dir is None or not images_dir.is_dir():
        raise ValueError(f"--images {str(images_dir)!r} is not a folder")
    with tempfile.TemporaryDirectory(prefix="anb-quant-model-") as tmp:
        model = (from_weights(weights, arch, resolution or 32, Path(tmp)) if weights is not None
                 else from_onnx(onnx_file or Path(), resolution, Path(tmp)))
        summary, table = model_report(model, path, out, images_dir, **options)
    return write_summary(out, path, {model.model_id: table}, [summary], {})


def measure_qualcomm_cmd(
    device: str = typer.Argument(..., help="Qualcomm device config name or TOML path."),
    archs: str = typer.Option(..., "--archs", help="As for 'anb measure'."),
    out: Path = typer.Option(..., "--out", help="Results folder (<out>/<device>/<arch_id>.json)."),
    workdir: Path | None = typer.Option(None, help="Scratch folder for models."),
    transport: str | None = typer.Option(None, help="Override the config's transport: "
                                            "adb://SERIAL, ssh://user@host or local://."),
) -> None:
    """Measure architectures on a Qualcomm board (SNPE): throughput, latency, per-layer times
    (as 'anb measure DEVICE', with a transport override)."""
    from anb.collect_throughput.arch_lists import read_arch_list
    from anb.collect_throughput.records.folder import RESULTS
    from anb.collect_throughput.targets.base import RunSettings
    from anb.collect_throughput.targets.qualcomm.config import load_qualcomm_device
    from anb.collect_throughput.targets.qualcomm.stages import QualcommTarget
    from anb.collect_throughput.transports import check_url
    from anb.outputs import exclusive, prepare_folder
    from anb.searchspace.space import ANB_SPACE

    try:
        config = load_qualcomm_device(device)
        if transport is not None:
            check_url(transport, config.name)  # before any folder or model
            config = dataclasses.replace(config, transport=transport)
        target = QualcommTarget(config)
        arch_list = read_arch_list(archs, space=ANB_SPACE)
        with exclusive(prepare_folder(out, RESULTS), "anb measure-qualcomm", per_host=True):
            summary = target.measure(arch_list, out, RunSettings(workdir=workdir,
                                                                 keep_going=True))
    except (ValueError, FileNotFoundError) as err:
        fail(err)
    for arch_id, message in summary.failed.items():
        typer.echo(f"failed {arch_id}: {message}", err=True)
    typer.echo(f"{config.name}: measured {len(summary.measured)}, skipped "
               f"{len(summary.skipped)} (already done), failed {len(summary.failed)} -> "
               f"{Path(out) / config.name}")
    if summary.failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("quant-layers")(quant_layers_cmd)
    app.command("measure-qualcomm")(measure_qualcomm_cmd)
