"""``anb quant-layers`` and ``anb measure-qualcomm`` (registered on the root app)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from anb.cli_support import fail


def quant_layers_cmd(
    archs: str = typer.Argument(..., help="Architectures: dataset path, text file, "
                                "'sample:N[:seed]' or comma-separated strings."),
    path: str = typer.Option("cpu-int8", "--path", help="cpu-int8 | dpu | a Qualcomm device "
                             "config (configs/devices/qualcomm/*.toml name or path)."),
    out: Path = typer.Option(..., "--out", help="Report folder."),
    resolution: int = typer.Option(32, help="Digits image size (>= 32)."),
    calibration: int = typer.Option(64, help="Calibration images."),
    images: int = typer.Option(16, help="Images compared layer by layer."),
    cos_threshold: float = typer.Option(0.99, help="Flag layers with cosine below this."),
    sqnr_threshold: float = typer.Option(20.0, help="Flag layers with SQNR (dB) below this."),
    worst: int = typer.Option(5, help="Flag this many layers that lose most SQNR."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even when it "
                                   "holds something other than an anb quant-layers report."),
) -> None:
    """Per-layer quantization effect (cosine, SQNR, max abs error) of a quantized path."""
    from anb.collect_throughput.driver import read_arch_list
    from anb.collect_throughput.layerwise import CPU_PATHS, REPORT, layerwise
    from anb.collect_throughput.qualcomm.config import QUALCOMM_DIR
    from anb.outputs import replace_folder

    shipped = sorted(p.stem for p in QUALCOMM_DIR.glob("*.toml"))
    if path not in CPU_PATHS and path not in shipped and not Path(path).is_file():
        fail(f"--path {path!r} is invalid; allowed: {sorted(CPU_PATHS)}, a Qualcomm device "
             f"config {shipped} or a TOML file")
    if resolution < 32 or images < 1 or calibration < 1 or worst < 0:
        fail("--resolution must be >= 32, --images and --calibration >= 1, --worst >= 0 "
             f"(got {resolution}, {images}, {calibration}, {worst})")
    try:
        arch_list = read_arch_list(archs)
        with replace_folder(out, REPORT, overwrite) as tmp:
            result = layerwise(arch_list, path, tmp, resolution=resolution,
                               calibration=calibration, images=images,
                               cos_threshold=cos_threshold, sqnr_threshold=sqnr_threshold,
                               worst=worst)
    except (ValueError, FileNotFoundError) as err:
        fail(err)
    for s in result["models"]:
        typer.echo(f"{s['arch']}: {len(s['layers_below_threshold'])} of {s['layers']} layers "
                   f"below threshold; worst {s['worst_layers'][:1]}")
    if result.get("by_layer_type"):
        top = result["by_layer_type"][0]
        typer.echo(f"layer type losing most: {top['op_type']} ({top['mean_sqnr_drop_db']:.2f} "
                   f"dB per layer) -> {out}")
    for arch_id, message in result["failed"].items():
        typer.echo(f"failed {arch_id}: {message}", err=True)
    if result["failed"]:
        raise typer.Exit(1)


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
    from anb.collect_throughput.driver import RESULTS, read_arch_list
    from anb.collect_throughput.qualcomm.config import load_qualcomm_device
    from anb.collect_throughput.qualcomm.stages import QualcommTarget
    from anb.outputs import exclusive, prepare_folder

    try:
        config = load_qualcomm_device(device)
        if transport is not None:
            config = dataclasses.replace(config, transport=transport)
        target = QualcommTarget(config)
        arch_list = read_arch_list(archs)
        with exclusive(prepare_folder(out, RESULTS), "anb measure-qualcomm", per_host=True):
            summary = target.measure(arch_list, out, workdir=workdir, keep_going=True)
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
