"""``anb measure``, ``anb merge`` and ``anb quant-report`` (registered on the root app)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from anb.cli_support import check_finite, fail, space_option
from anb.collect_throughput.defaults import (
    ANCHOR_EVERY,
    COS_THRESHOLD,
    SQNR_THRESHOLD_DB,
)
from anb.collect_throughput.quality_options import (
    images_option,
    onnx_option,
    quality_images_option,
    weights_option,
)
from anb.preprocessing import MAX_IMAGES
from anb.searchspace.base import MAX_RESOLUTION
from anb.searchspace.cli import cli_space

#: The largest throughput batch a command takes (at 224 px its float input alone is 2.5 GB).
MAX_BATCH = 4096


def _overrides(resolution: int | None, batch: int | None, threads: int | None,
               clock: str | None, budget: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in (("resolution", resolution), ("batch", batch), ("threads", threads),
                        ("clock", clock)):
        if value is not None:
            out[name] = value
    if budget is not None:
        out["stopping"] = {"budget_seconds": budget}
    return out


def measure_cmd(
    device: str = typer.Argument(..., help="Device config: a shipped name (configs/devices/"
                                 "*.toml, configs/devices/qualcomm/*.toml), an installed "
                                 "package's, or a TOML path."),
    archs: str = typer.Option(..., "--archs", help="Dataset path, text file of architecture "
                              "strings, 'sample:N[:seed]' or comma-separated strings (an "
                              "architecture listed twice is measured once)."),
    out: Path = typer.Option(..., "--out", help="Results folder (<out>/<device>/<arch_id>.json)."),
    shard: str = typer.Option("0/1", "--shard", help="Shard 'i/k' of the architecture list."),
    resolution: int | None = typer.Option(None, min=1, max=MAX_RESOLUTION,
                                          help="Override the input resolution (default: "
                                          "the config's for anb-mnasnet, else each "
                                          "architecture's own, e.g. 32 for nasbench201)."),
    batch: int | None = typer.Option(None, min=1, max=MAX_BATCH,
                                     help="Override the throughput batch size."),
    threads: int | None = typer.Option(None, min=1, help="Override the pinned thread count."),
    clock: str | None = typer.Option(None, help="Override the clock: wall | cpu."),
    budget: float | None = typer.Option(None, min=1e-3, help="Override the timing budget (s)."),
    workdir: Path | None = typer.Option(None, help="Cache for exported models."),
    keep_going: bool = typer.Option(False, help="Record failing architectures and go on."),
    interleave: int = typer.Option(1, min=1, help="Time blocks of this many architectures "
                                   "round-robin (robust ranks on a shared machine)."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
    keep_work: bool = typer.Option(False, "--keep-work", help="Keep each architecture's "
                                   "exported models in the work folder (default: deleted once "
                                   "measured)."),
    anchors: str = typer.Option("default", help="Anchor architectures re-measured at the start "
                                "and every --anchor-every architectures: 'default' "
                                "(anb-mnasnet: EfficientNet-B0, smallest, largest; another "
                                "space: all-first and all-last choices), 'none' or "
                                "comma-separated strings."),
    anchor_every: int = typer.Option(ANCHOR_EVERY, min=1,
                                     help="Architectures between anchor sessions."),
    space: str | None = space_option("search space (default: the one an --archs dataset "
                                     "names, else anb-mnasnet)"),
    report: bool = typer.Option(False, "--report", help="Also write a report of each "
                                "architecture measured (HTML + PNG: time per step over the "
                                "run, CPU and memory use, quality where measured) to "
                                "<out>/<device>/reports/."),
    quality: bool = typer.Option(False, "--quality", help="Score a trained network (--weights "
                                 "or --onnx) on --images on the device instead of timing: "
                                 "top-1/top-5 and agreement with the host's fp32 output, "
                                 "stored in the record's 'quality' section."),
    images: Path | None = images_option("--quality"),
    weights: Path | None = weights_option("--quality"),
    onnx: Path | None = onnx_option("--quality"),
    quality_images: int = quality_images_option("--quality"),
) -> None:
    """Measure latency/throughput of architectures of a search space on a device of any kind
    (this host, a board over SSH, ADB or TCP, a Qualcomm SoC, a plug-in's; resumable,
    shardable); the records name the space. With --quality, the trained network's accuracy on
    the device."""
    from anb.collect_throughput.arch_lists import read_arch_list, shard_of
    from anb.collect_throughput.records.anchors import parse_anchors
    from anb.collect_throughput.records.folder import RESULTS
    from anb.collect_throughput.targets.base import RunSettings
    from anb.collect_throughput.targets.devices import load_target
    from anb.collect_throughput.targets.protocol_target import Schedule, scheduled
    from anb.extras import require
    from anb.outputs import exclusive, prepare_folder
    from anb.records import detect_space

    spec = cli_space(space, detect_space(archs), f"--archs {archs!r}")
    try:
        target = load_target(device, _overrides(resolution, batch, threads, clock, budget),
                             space=spec.name)
        arch_list = shard_of(read_arch_list(archs, spec), shard)
        if quality or images or weights or onnx:
            _quality(target.config, arch_list, out, images, weights, onnx, quality_images,
                     workdir, quality)
            return
        anchor_archs = parse_anchors(anchors, spec)
        target.check()
        require("torch", "measure", what="`anb measure`")  # before the folder is made
        # one measure per folder and machine: two would time the same designs on the same cores
        with exclusive(prepare_folder(out, RESULTS), "anb measure", per_host=True):
            target = scheduled(target, Schedule(interleave, anchor_archs, anchor_every))
            summary = target.measure(arch_list, out, RunSettings(workdir, progress, keep_going,
                                                                 keep_work))
            if report:
                from anb.collect_throughput.records.run_report import write_reports

                write_reports(Path(out) / target.name, summary.measured)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        fail(err)
    typer.echo(f"{target.name}: measured {len(summary.measured)}, skipped "
               f"{len(summary.skipped)} (already done), failed {len(summary.failed)} -> "
               f"{Path(out) / target.name}")
    if report:
        typer.echo(f"reports: {len(summary.measured)} -> {Path(out) / target.name / 'reports'}"
                   "/index.html")
    if summary.failed:
        raise typer.Exit(1)


def _quality(device: Any, archs: list, out: Path, images: Path | None, weights: Path | None,
             onnx: Path | None, count: int, workdir: Path | None, asked: bool) -> None:
    """``anb measure --quality``: each architecture's entry into its record, one line each."""
    from anb.collect_throughput.quantization.quality import Source, measure_quality_archs
    from anb.collect_throughput.records.folder import RESULTS
    from anb.outputs import exclusive, prepare_folder

    if not asked:
        raise ValueError("--images, --weights and --onnx are options of --quality; add "
                         "--quality to score the trained network on the device")
    if images is None:
        raise ValueError("--quality needs --images DIR: a labelled image folder "
                         "(<root>/<class>/<image>)")
    source = Source(weights, onnx)
    with exclusive(prepare_folder(out, RESULTS), "anb measure", per_host=True):
        entries = measure_quality_archs(device, archs, out, source, images, count, workdir)
    for arch_id, e in entries.items():
        typer.echo(f"{device.name}: {arch_id} top-1 {e['top1']:.2f} % (host fp32 "
                   f"{e['host_top1']:.2f} %), top-5 {e['top5']:.2f} %, agreement "
                   f"{100 * e['top1_agreement']:.1f} %, logits cosine "
                   f"{e['logits_cosine_mean']:.4f} on {e['images']} images -> "
                   f"{Path(out) / device.name}")


def merge_cmd(
    results: list[Path] = typer.Argument(..., help="Result folders written by 'anb measure'."),
    out: Path = typer.Option(..., "--out", help="Output folder (records/, dataset.csv/.parquet)."),
    accuracy: Path | None = typer.Option(None, "--accuracy", help="Accuracy dataset "
                                            "(tarball, folder, JSON/JSONL)."),
    on_conflict: str = typer.Option("keep-existing", help="keep-existing | replace | error"),
    allow_mixed_protocols: bool = typer.Option(False, "--allow-mixed-protocols", help="Put "
                                               "results measured under different protocols "
                                               "into one column."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even when it "
                                   "holds something other than an anb merge output."),
    space: str | None = space_option("search space (default: the one --accuracy, else the "
                                     "first result folder, names; else anb-mnasnet)"),
) -> None:
    """Join accuracy and device results of one search space by architecture id; report
    conflicts, gaps, protocols and the anchors' drift (records of another space are refused).
    An unreadable or invalid record is skipped and named, the rest merged, and the exit code
    is 1."""
    from anb.collect_throughput.records.merge import merge
    from anb.records import detect_space

    first = accuracy or (results[0] if results else None)
    spec = cli_space(space, detect_space(first) if first else None, str(first))
    try:
        report = merge(accuracy, results, out, on_conflict, allow_mixed_protocols, overwrite,
                       space=spec)
    except (ValueError, FileNotFoundError) as err:
        fail(err)
    typer.echo(f"merged {report.merged_records} records ({report.accuracy_records} accuracy, "
               f"{report.device_records} device results); added keys {report.keys_added}; "
               f"conflicts {len(report.conflicts)}; device-only {len(report.device_only)}")
    for key, n in sorted(report.gaps.items()):
        typer.echo(f"  gap: {key} missing for {n} architecture(s)")
    for key, fps in sorted(report.protocols.items()):
        if len(fps) > 1:
            typer.echo(f"  mixed protocols (allowed): {key}: {', '.join(fps)}")
    for key, drift in sorted(report.anchor_drift.items()):
        typer.echo(f"  anchors: {key}: {len(drift['sessions'])} session(s), largest drift "
                   f"{100 * drift['max_drift']:.2f} % from the first")
    if report.skipped:
        typer.echo(f"  skipped {len(report.skipped)} unreadable or invalid record(s):")
        for entry in report.skipped[:10]:
            typer.echo(f"    {entry['file']}: {entry['reason']}")
        if len(report.skipped) > 10:
            typer.echo(f"    ... {len(report.skipped) - 10} more in merge_report.json")
    typer.echo(f"-> {out} (report: {Path(out) / 'merge_report.json'})")
    if report.skipped:
        typer.echo(f"incomplete: {len(report.skipped)} record(s) skipped (exit code 1); the "
                   "rest are merged", err=True)
        raise typer.Exit(1)


def quant_report_cmd(
    arch: str = typer.Argument(..., help="Architecture string, e.g. 'e6k5l1-...-e6k5l1se'."),
    out: Path = typer.Option(..., "--out", help="Folder for layers.csv, layers.png, summary.json."),
    weights: Path | None = typer.Option(None, help="Trained weights: the trainer's checkpoint, "
                                           "its artifact folder (weights.pt + record.json) or a "
                                           "state_dict file. Without them the backbone is random."),
    images: Path | None = typer.Option(None, help="Image folder with class sub-folders "
                                          "(e.g. ImageNet val); default: the digits."),
    target: str = typer.Option("fpga", help="fpga (DPU scheme: per-tensor power-of-two scales) "
                               "| cpu (the cpu-int8 device's u8s8: uint8 activations, "
                               "per-channel int8 weights)."),
    resolution: int | None = typer.Option(None, min=1, max=MAX_RESOLUTION,
                                          help="Input size (default 224 with --images, "
                                             "32 on the digits)."),
    calibration: int = typer.Option(150, min=1, max=MAX_IMAGES,
                                    help="Calibration images (the reference used ~150)."),
    eval_images: int = typer.Option(100, min=1, max=MAX_IMAGES,
                                    help="Test images for the accuracy change."),
    seed: int = typer.Option(0, min=0, help="Seed of the class-stratified image sample."),
    cos_threshold: float = typer.Option(COS_THRESHOLD, min=-1.0, max=1.0,
                                        help="Flag layers with cosine below this."),
    sqnr_threshold: float = typer.Option(SQNR_THRESHOLD_DB,
                                         help="Flag layers with SQNR (dB) below this."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even when it "
                                   "holds something other than an anb quant-report."),
) -> None:
    """Per-layer float-vs-int8 agreement and the accuracy change under the target's int8 scheme."""
    from anb.collect_throughput.quantization.quant_report import (
        REPORT,
        TARGET_SCHEMES,
        quant_report,
    )
    from anb.outputs import replace_folder

    if target not in TARGET_SCHEMES:
        fail(f"--target {target!r} is invalid; allowed: {sorted(TARGET_SCHEMES)}")
    check_finite("--sqnr-threshold", sqnr_threshold)
    if weights is not None and not weights.exists():
        fail(f"--weights {str(weights)!r} does not exist")
    if weights is not None and images is None:
        fail(f"--weights {str(weights)!r} needs --images: an image folder (class sub-folders) "
             "to score the trained network on")
    try:
        with replace_folder(out, REPORT, overwrite) as tmp:
            s = quant_report(arch, tmp, resolution or (224 if images else 32), calibration,
                             eval_images, cos_threshold, sqnr_threshold, seed,
                             TARGET_SCHEMES[target], weights, images)
    except (ValueError, RuntimeError) as err:
        fail(err)
    typer.echo(f"{s['arch']} [{s['scheme']}]: top-1 {s['float_top1']:.1f} -> "
               f"{s['int8_top1']:.1f} % (agreement {100 * s['top1_agreement']:.1f} %, logits SQNR "
               f"{s['logits_sqnr_db']:.1f} dB); {len(s['layers_below_threshold'])} of "
               f"{s['layers']} layers below threshold, worst {s['worst_layer']} -> {out}")
    if not s["agreement_meaningful"]:
        typer.echo(f"note: {s['weights']}: these figures say nothing about a trained network's "
                   "int8 accuracy; pass --weights and --images for that")


def register(app: typer.Typer) -> None:
    """Add the throughput commands to the root ``anb`` app."""
    app.command("measure")(measure_cmd)
    app.command("merge")(merge_cmd)
    app.command("quant-report")(quant_report_cmd)
