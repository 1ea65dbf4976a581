"""The queue's stages for device measurement: export -> convert -> measure -> accuracy.

Host-only stages (export, convert) run on any worker; ``measure`` and ``accuracy`` run where the
device is. Default priorities are the reference practice's (REFERENCE.md section 7: conversion +
quantization 20, device benchmark 30, accuracy 60 scaled by the model's measured latency so
quicker models go first); export, which the reference folds into conversion, shares its 20.
:func:`register_stages` adds them to the queue's registry (:mod:`anb.jobs.stages`).

Models travel through the *store*, a folder every worker of a stage chain can read (the same
host, or a shared filesystem): each stage prepares what the next needs there under the names
the back-ends cache by, so a later stage finds the file instead of rebuilding it (and rebuilds
it, correctly, where the store is not shared). A handler's result is JSON; ``result["record"]``
(measure) is the per-architecture record, written to ``<out>/<device>/<arch_id>.json`` by
:func:`publish` once the queue accepted the result, so it is written exactly once.

Devices of either kind of config work here (:mod:`.devices` tells them apart): ``convert`` and
``measure`` run the device's target (``prepare_job``, ``measure_job``), so a Qualcomm SNPE config
(``configs/devices/qualcomm/*.toml``) has its DLC converted and quantized by ``convert`` on any
worker with the SDK's host tools (no board), and is measured on its board by
:func:`~anb.collect_throughput.qualcomm.stages.measure_qualcomm` through its transport, which
finds that DLC in the store (or builds it when queued without ``convert``); its per-layer table
(``result["files"]``) is published beside the record. The separate export and accuracy stages
are for protocol configs.

A job of a search space other than ``anb-mnasnet`` names it in its payload (``"space"``,
:func:`job_payload`); every stage reads the architecture in that space (:func:`job_arch`) and
measures ``space.build(arch)`` on its task's input (:mod:`.network`). A Qualcomm device runs
``anb-mnasnet`` only; its job of another space fails with an error naming the space.
"""
from __future__ import annotations

import functools
import logging
import shutil
from pathlib import Path
from typing import Any

from anb.collect_throughput.devices import as_target, load_any_device
from anb.collect_throughput.driver import (
    ProtocolTarget,
    check_results_space,
    read_result,
    result_path,
)
from anb.collect_throughput.network import measured_resolution, require_images
from anb.collect_throughput.protocol import DeviceConfig, for_space
from anb.collect_throughput.target import MeasureTarget
from anb.io import atomic_write, atomic_write_json
from anb.jobs.queue import Job
from anb.jobs.stages import Stage, StageContext, register_stage
from anb.plugins import entry_point_targets, import_target
from anb.searchspace.base import Space
from anb.searchspace.registry import DEFAULT_SPACE, get_space

log = logging.getLogger(__name__)

PRIORITY_CONVERT = 20
PRIORITY_MEASURE = 30
PRIORITY_ACCURACY = 60
#: Third-party packages add queue stages under this entry-point group: each entry names a
#: function that calls :func:`anb.jobs.stages.register_stage`.
ENTRY_POINTS = "anb.stages"

STAGES = (
    Stage("export", PRIORITY_CONVERT, False, f"{__name__}:run_export"),
    Stage("convert", PRIORITY_CONVERT, False, f"{__name__}:run_convert"),
    Stage("measure", PRIORITY_MEASURE, True, f"{__name__}:run_measure",
          publish=f"{__name__}:publish"),
    Stage("accuracy", PRIORITY_ACCURACY, True, f"{__name__}:run_accuracy",
          follow_priority=f"{__name__}:accuracy_priority"),
)


@functools.cache
def register_stages() -> None:
    """Register :data:`STAGES` with the queue, then the stages of installed packages (the
    ``anb.stages`` entry points); once per process."""
    for stage in STAGES:
        register_stage(stage)
    for target in entry_point_targets(ENTRY_POINTS).values():
        import_target(target)()


def make_context(store: str | Path, out: str | Path | None, devices: list[str]) -> StageContext:
    """The stages registered, and a :class:`StageContext` with the device configs ``devices``
    (names or TOML paths; a protocol config or a Qualcomm SNPE one, see :mod:`.devices`)."""
    register_stages()
    configs = {}
    for spec in devices:
        config = load_any_device(spec)
        configs[config.name] = config
    return StageContext(store=Path(store), out=Path(out) if out else None, devices=configs)


def job_payload(space: Space, device_table: dict[str, Any]) -> dict[str, Any]:
    """What a submitted job carries: its device's table, and its space unless the default."""
    payload: dict[str, Any] = {"device_config": device_table}
    if space.name != DEFAULT_SPACE:
        payload["space"] = space.name
    return payload


def job_space_name(job: Job) -> str:
    return str(job.payload.get("space", DEFAULT_SPACE))


def job_space(job: Job) -> Space:
    """The search space the job's architecture belongs to."""
    return get_space(job_space_name(job))


def job_arch(job: Job) -> Any:
    """The job's architecture, parsed in its space."""
    return job_space(job).arch(job.arch)


def job_device(job: Job, ctx: StageContext) -> Any:
    """The job's device config (this worker's, else the table the job carries, else the
    shipped config of that name) measuring the job's space."""
    if job.device in ctx.devices:
        device = ctx.devices[job.device]
    else:
        device = load_any_device(job.payload.get("device_config", job.device))
    space = job_space_name(job)
    if isinstance(device, DeviceConfig):
        return for_space(device, space)
    if space != DEFAULT_SPACE:
        raise ValueError(f"device {device.name!r} (a Qualcomm {device.sdk.upper()} device) "
                         f"measures search space {DEFAULT_SPACE!r} only; job #{job.id} is of "
                         f"space {space!r}")
    return device


def job_target(job: Job, ctx: StageContext) -> MeasureTarget:
    """The job's device as a :class:`~anb.collect_throughput.target.MeasureTarget`."""
    return as_target(job_device(job, ctx))


def protocol_device(job: Job, ctx: StageContext) -> DeviceConfig:
    """The job's device for the stages that run its protocols one by one (export,
    accuracy); a clear error for a Qualcomm device."""
    device = job_device(job, ctx)
    if not isinstance(device, DeviceConfig):
        raise ValueError(f"device {device.name!r} is a Qualcomm {device.sdk.upper()} device: "
                         f"stage {job.stage!r} is not run for it (its convert stage exports, "
                         "converts and quantizes, its measure stage measures); queue "
                         "'convert,measure'")
    return device


def accuracy_priority(result: dict[str, Any]) -> int:
    """Accuracy jobs of quicker models first: 60 plus the measured latency in whole ms of the
    stage before (its ``latency_ms``)."""
    latency_ms = result.get("latency_ms")
    return PRIORITY_ACCURACY + (int(round(latency_ms)) if latency_ms is not None else 0)


def run_export(job: Job, ctx: StageContext) -> dict[str, Any]:
    """Export the fp32 ONNX model at the device's resolution into the store."""
    from anb.collect_throughput.backends.onnxruntime_backend import float_onnx

    device = protocol_device(job, ctx)
    path = float_onnx(job_arch(job), ctx.store_dir(job), device.protocols[0].resolution,
                      job_space(job))
    return {"model": str(path), "bytes": path.stat().st_size}


def run_convert(job: Job, ctx: StageContext) -> dict[str, Any]:
    """The model each of the device's measurements runs, prepared in the store by its target
    on this host, no device needed (e.g. int8 quantization; a Qualcomm device's DLC
    conversion and quantization with the SDK's host tools)."""
    return job_target(job, ctx).prepare_job(job_arch(job), ctx.store_dir(job))


def run_measure(job: Job, ctx: StageContext) -> dict[str, Any]:
    """Measure the device's keys for the job's architecture with the device's target
    (protocols on its board or on this host; a Qualcomm device on its board over its
    transport), models prepared in the store. A results folder of another space is refused
    before anything is measured."""
    if ctx.out is not None:
        check_results_space(ctx.out, job.device, job_space_name(job))
    return job_target(job, ctx).measure_job(job_arch(job), ctx.store_dir(job))


def run_accuracy(job: Job, ctx: StageContext) -> dict[str, Any]:
    """On-device agreement with the host: the device's model run on the digits test images
    (on the board, or here), against the fp32 model in onnxruntime on this host: top-1
    agreement, cosine similarity and max abs error of the logits. A space whose input is not
    RGB images is refused (naming it)."""
    import numpy as np

    from anb.collect_throughput.backends.onnxruntime_backend import float_onnx
    from anb.collect_throughput.digits import digits_images
    from anb.collect_throughput.quantize import run_model

    device = protocol_device(job, ctx)
    arch = job_arch(job)
    protocol = device.protocols[0]
    require_images(protocol, "the accuracy stage (digits images)")
    resolution = measured_resolution(protocol, arch)
    images, _ = digits_images(resolution, "test")
    images = np.ascontiguousarray(images[:64], dtype=np.float32)
    reference = run_model(float_onnx(arch, ctx.store_dir(job), resolution, job_space(job)),
                          images)
    (_, path, _), = ProtocolTarget(device).prepare_models(arch, ctx.store_dir(job))[:1]
    if device.remote:
        from anb.collect_throughput.remote import device_outputs

        logits = device_outputs(device, protocol, path, images)
    else:
        logits = run_model(path, images)
    a = reference.reshape(len(images), -1).astype(np.float64)
    b = logits.reshape(len(images), -1).astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cosine = np.sum(a * b, 1) / np.maximum(norms, np.finfo(np.float64).tiny)
    return {"top1_agreement": float(np.mean(a.argmax(1) == b.argmax(1))),
            "cosine_min": float(cosine.min()), "cosine_mean": float(cosine.mean()),
            "max_abs_error": float(np.abs(a - b).max()), "images": len(images),
            "model": str(path)}


def publish(job: Job, result: dict[str, Any], out: Path | None) -> Path | None:
    """Write a measure result's record to ``<out>/<device>/<arch_id>.json``, adding its
    entries to a record already there, and copy the files it lists (``result["files"]``, e.g.
    a Qualcomm per-layer table) beside it (atomic; call after the queue accepted the result).
    A listed file this host cannot see (a store not shared with it) is skipped; a results folder
    holding another space's records is refused (naming both)."""
    record = result.get("record")
    if out is None or record is None:
        return None
    check_results_space(out, job.device, job_space_name(job))
    path = result_path(out, job.device, job_arch(job))
    for name in result.get("files") or []:
        source = Path(name)
        if source.is_file():
            atomic_write(path.parent / source.name, functools.partial(shutil.copyfile, source))
        else:
            log.warning("job %d: %s is not on this host; not copied", job.id, source)
    old = read_result(path)
    if old is not None:
        old["platform_perf"].update(record["platform_perf"])
        record = old
    atomic_write_json(path, record)
    return path
