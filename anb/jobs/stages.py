"""Job stages and their handlers: export -> convert -> measure -> accuracy.

A stage is a name, a default priority, whether it needs the device (a worker takes it only for
devices it reaches) and a handler ``f(job, ctx) -> result``. Host-only stages (export, convert)
run on any worker; ``measure`` and ``accuracy`` run where the device is. Default priorities are
the reference practice's (REFERENCE.md section 7: conversion + quantization 20, device benchmark
30, accuracy 60 scaled by the model's measured latency so quicker models go first); export, which
the reference folds into conversion, shares its 20.

Models travel through the *store*, a folder every worker of a stage chain can read (the same
host, or a shared filesystem): each stage prepares what the next needs there under the names
the back-ends cache by, so a later stage finds the file instead of rebuilding it (and rebuilds
it, correctly, where the store is not shared). A handler's result is JSON; ``result["record"]``
(measure) is the per-architecture record, written to ``<out>/<device>/<arch_id>.json`` by
:func:`publish` once the queue accepted the result, so it is written exactly once.

Devices of either kind of config work here (:func:`anb.collect_throughput.driver.load_target`
tells them apart): ``measure`` runs the device's target, so a Qualcomm SNPE config
(``configs/devices/qualcomm/*.toml``) is measured on its board by
:func:`~anb.collect_throughput.qualcomm.stages.measure_qualcomm` through its transport, and its
per-layer table (``result["files"]``) is published beside the record. A Qualcomm device's host
stages (export, DLC conversion, quantization) run inside its ``measure`` job; the separate
export/convert/accuracy stages are for protocol configs.

Add a stage with :func:`register_stage` (``handler`` is ``"module:function"``, imported when
first used).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anb.jobs.queue import Job, JobSpec

PRIORITY_CONVERT = 20
PRIORITY_MEASURE = 30
PRIORITY_ACCURACY = 60
ORDER = ("export", "convert", "measure", "accuracy")


@dataclass(frozen=True)
class Stage:
    name: str
    priority: int
    needs_device: bool
    handler: str  # "module:function"


STAGES: dict[str, Stage] = {
    "export": Stage("export", PRIORITY_CONVERT, False, "anb.jobs.stages:run_export"),
    "convert": Stage("convert", PRIORITY_CONVERT, False, "anb.jobs.stages:run_convert"),
    "measure": Stage("measure", PRIORITY_MEASURE, True, "anb.jobs.stages:run_measure"),
    "accuracy": Stage("accuracy", PRIORITY_ACCURACY, True, "anb.jobs.stages:run_accuracy"),
}


def register_stage(stage: Stage) -> None:
    """Add or replace a stage (e.g. a vendor's ``convert``)."""
    STAGES[stage.name] = stage


def get_stage(name: str) -> Stage:
    if name not in STAGES:
        raise ValueError(f"stage={name!r} is invalid; allowed: {sorted(STAGES)}")
    return STAGES[name]


def handler(name: str) -> Callable[[Job, StageContext], dict[str, Any]]:
    module, func = get_stage(name).handler.split(":")
    return getattr(importlib.import_module(module), func)


@dataclass
class StageContext:
    """What a handler may use: the job's device config, the store, the results folder."""

    store: Path
    out: Path | None = None
    devices: dict[str, Any] = field(default_factory=dict)
    """Device configs (:class:`~anb.collect_throughput.protocol.DeviceConfig` or
    :class:`~anb.collect_throughput.qualcomm.config.QualcommDevice`) this worker was started
    with, by name; others come from the job's payload or the shipped configs."""

    def device(self, job: Job):
        from anb.collect_throughput.driver import load_any_device

        if job.device in self.devices:
            return self.devices[job.device]
        if "device_config" in job.payload:
            return load_any_device(job.payload["device_config"])
        return load_any_device(job.device)

    def target(self, job: Job):
        """The job's device as a :class:`~anb.collect_throughput.driver.MeasureTarget`."""
        from anb.collect_throughput.driver import as_target

        return as_target(self.device(job))

    def protocol_device(self, job: Job):
        """The job's device for the stages that run its protocols one by one (export, convert,
        accuracy); a clear error for a Qualcomm device."""
        device = self.device(job)
        if not hasattr(device, "protocols"):
            raise ValueError(f"device {device.name!r} is a Qualcomm {device.sdk.upper()} device: "
                             f"stage {job.stage!r} is not run separately for it (its measure "
                             "stage exports, converts, quantizes and measures); queue 'measure'")
        return device

    def store_dir(self, job: Job) -> Path:
        path = Path(self.store) / job.device
        path.mkdir(parents=True, exist_ok=True)
        return path


def chain(arch: str, device: str, stages: list[str], priority: int | None = None,
          max_attempts: int = 3, payload: dict[str, Any] | None = None) -> JobSpec:
    """The first job of ``stages`` (in :data:`ORDER`); the rest follow as each finishes."""
    for s in stages:
        get_stage(s)
    ordered = sorted(stages, key=lambda s: ORDER.index(s) if s in ORDER else len(ORDER))
    first = ordered[0]
    return JobSpec(arch=arch, device=device, stage=first,
                   priority=get_stage(first).priority if priority is None else priority,
                   max_attempts=max_attempts, payload=dict(payload or {}),
                   next_stages=tuple(ordered[1:]))


def accuracy_priority(latency_ms: float | None) -> int:
    """Accuracy jobs of quicker models first: 60 plus the measured latency in whole ms."""
    return PRIORITY_ACCURACY + (int(round(latency_ms)) if latency_ms is not None else 0)


def follow_up(job: Job, result: dict[str, Any]) -> JobSpec | None:
    """The next stage of ``job``'s chain (None at its end); a bumped chain (priority 0) stays
    at the front."""
    if not job.next_stages:
        return None
    nxt = job.next_stages[0]
    if job.priority == 0:
        priority = 0
    elif nxt == "accuracy":
        priority = accuracy_priority(result.get("latency_ms"))
    else:
        priority = get_stage(nxt).priority
    return JobSpec(arch=job.arch, device=job.device, stage=nxt, priority=priority,
                   max_attempts=job.max_attempts, payload=job.payload,
                   next_stages=job.next_stages[1:])


# -- handlers -----------------------------------------------------------------------------------
def run_export(job: Job, ctx: StageContext) -> dict[str, Any]:
    """Export the fp32 ONNX model at the device's resolution into the store."""
    from anb.collect_throughput.backends.onnxruntime_backend import float_onnx
    from anb.searchspace.arch import as_arch

    device = ctx.protocol_device(job)
    arch = as_arch(job.arch)
    path = float_onnx(arch, ctx.store_dir(job), device.protocols[0].resolution)
    return {"model": str(path), "bytes": path.stat().st_size}


def _prepare(job: Job, ctx: StageContext) -> list[tuple[str, Path, dict]]:
    from anb.collect_throughput.backends import get_backend
    from anb.searchspace.arch import as_arch

    device = ctx.protocol_device(job)
    arch = as_arch(job.arch)
    out = []
    for protocol in device.protocols:
        if device.remote:
            from anb.collect_throughput.remote import get_runtime, remote_spec

            path, extra = get_runtime(remote_spec(device).runtime).model(
                arch, protocol, ctx.store_dir(job))
        else:
            backend = get_backend(protocol.backend)
            if not hasattr(backend, "model_path"):
                out.append((protocol.key, Path(), {"converted": False}))
                continue
            path, extra = backend.model_path(arch, protocol, ctx.store_dir(job))
        out.append((protocol.key, path, extra))
    return out


def run_convert(job: Job, ctx: StageContext) -> dict[str, Any]:
    """The model each protocol runs (e.g. int8 quantization), prepared in the store."""
    return {"models": {key: {"model": str(path), **extra}
                       for key, path, extra in _prepare(job, ctx)}}


def run_measure(job: Job, ctx: StageContext) -> dict[str, Any]:
    """Measure the device's keys for the job's architecture with the device's target
    (protocols on its board or on this host; a Qualcomm device on its board over its
    transport), models prepared in the store."""
    from anb.searchspace.arch import as_arch

    arch = as_arch(job.arch)
    return ctx.target(job).measure_job(arch, ctx.store_dir(job))


def run_accuracy(job: Job, ctx: StageContext) -> dict[str, Any]:
    """On-device agreement with the host: the device's model run on the digits test images
    (on the board, or here), against the fp32 model in onnxruntime on this host: top-1
    agreement, cosine similarity and max abs error of the logits."""
    import numpy as np

    from anb.collect_throughput.backends.onnxruntime_backend import float_onnx
    from anb.collect_throughput.digits import digits_images
    from anb.collect_throughput.quantize import run_model
    from anb.searchspace.arch import as_arch

    device = ctx.protocol_device(job)
    arch = as_arch(job.arch)
    protocol = device.protocols[0]
    images, _ = digits_images(protocol.resolution, "test")
    images = np.ascontiguousarray(images[:64], dtype=np.float32)
    reference = run_model(float_onnx(arch, ctx.store_dir(job), protocol.resolution), images)
    (_, path, _), = _prepare(job, ctx)[:1]
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
    A listed file this host cannot see (a store not shared with it) is skipped."""
    record = result.get("record")
    if out is None or record is None:
        return None
    import functools
    import logging
    import shutil

    from anb.collect_throughput.driver import read_result, result_path
    from anb.io import atomic_write, atomic_write_json
    from anb.searchspace.arch import as_arch

    path = result_path(out, job.device, as_arch(job.arch))
    for name in result.get("files") or []:
        source = Path(name)
        if source.is_file():
            atomic_write(path.parent / source.name, functools.partial(shutil.copyfile, source))
        else:
            logging.getLogger(__name__).warning("job %d: %s is not on this host; not copied",
                                                job.id, source)
    old = read_result(path)
    if old is not None:
        old["platform_perf"].update(record["platform_perf"])
        record = old
    atomic_write_json(path, record)
    return path
