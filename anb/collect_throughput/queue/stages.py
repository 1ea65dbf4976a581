"""The queue's stages for device measurement: export -> convert -> measure -> accuracy.

Host-only stages (export, convert) run on any worker; ``measure`` and ``accuracy`` run where the
device is. Default priorities are the reference practice's (docs/background/devices.md, "Remote
benchmarking queue (Archai)": conversion + quantization 20, device benchmark 30, accuracy 60 scaled
by the model's measured latency so quicker models go first); export, which the reference folds into
conversion, shares its 20. :func:`register_stages` adds them to the queue's registry
(:mod:`anb.jobs.stages`).

Models travel through the *store*, a folder every worker of a stage chain can read (the same
host, or a shared filesystem): each stage prepares what the next needs there under the names
the back-ends cache by, so a later stage finds the file instead of rebuilding it (and rebuilds
it, correctly, where the store is not shared). A handler's result is JSON; ``result["record"]``
(measure) is the per-architecture record, written to ``<out>/<device>/<arch_id>.json`` by
:func:`publish` once the queue accepted the result, so it is written exactly once.

Devices of either kind of config work here (:mod:`anb.collect_throughput.targets.devices` tells them
apart): ``convert`` and ``measure`` run the device's target (``prepare_job``, ``measure_job``), so a
Qualcomm SNPE config (``configs/devices/qualcomm/*.toml``) has its DLC converted and quantized by
``convert`` on any worker with the SDK's host tools (no board), and is measured on its board by
:func:`~anb.collect_throughput.targets.qualcomm.stages.measure_qualcomm` through its transport,
which finds that DLC in the store (or builds it when queued without ``convert``); its per-layer
table (``result["files"]``) is published beside the record. The separate export stage is for
protocol configs; ``accuracy`` scores a trained network on an image folder on any device
(:mod:`anb.collect_throughput.quantization.quality`; the job's ``payload["quality"]``) and publishes
the ``quality`` entry into the same record.

Every job anb queues is built by :func:`job_specs` (``anb queue submit``, ``anb adapt --submit``,
a measured search's queue) and queued by :func:`submit_jobs`. A job of a search space other
than ``anb-mnasnet`` names it in its payload (``"space"``); every stage reads the architecture
in that space (:func:`job_arch`) and measures ``space.build(arch)`` on its task's input
(:mod:`anb.collect_throughput.timing.network`). A Qualcomm device runs ``anb-mnasnet`` only; its job
of another space fails with an error naming the space.
"""
from __future__ import annotations

import functools
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from anb.collect_throughput.defaults import QUALITY_IMAGES
from anb.collect_throughput.records.folder import check_results_space, read_result, result_path
from anb.collect_throughput.targets.base import MeasureTarget
from anb.collect_throughput.targets.devices import as_target, device_table, load_any_device
from anb.collect_throughput.timing.network import require_images
from anb.collect_throughput.timing.protocol import DeviceConfig, for_space
from anb.io import atomic_write, atomic_write_json
from anb.jobs.queue import Job, JobQueue, JobSpec
from anb.jobs.stages import Stage, StageContext, chain, register_stage
from anb.plugins import entry_point_targets, import_target
from anb.searchspace.base import Space
from anb.searchspace.registry import DEFAULT_SPACE, check_same_space, get_space

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
          follow_priority=f"{__name__}:accuracy_priority", publish=f"{__name__}:publish"),
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
    (names or TOML paths; a protocol config or a Qualcomm SNPE one, see
    :mod:`anb.collect_throughput.targets.devices`)."""
    register_stages()
    configs = {}
    for spec in devices:
        config = load_any_device(spec, space=DEFAULT_SPACE)  # a job's space: for_space
        configs[config.name] = config
    return StageContext(store=Path(store), out=Path(out) if out else None, devices=configs)


def job_specs(archs: Sequence[Any], devices: Sequence[str], space: Space,
              stages: Sequence[str] = ("measure",), priority: int | None = None,
              max_attempts: int = 3, quality: dict[str, Any] | None = None) -> list[JobSpec]:
    """The jobs that run ``stages`` (in the registry's order) on every architecture of
    ``space`` (strings or archs, checked to be of ``space``) x device (a config name or TOML
    path). Each job carries its device's table (any worker can load the device), ``space``
    unless the default, and for the accuracy stage ``quality`` (:func:`quality_payload`)."""
    register_stages()
    if not stages:
        raise ValueError(f"stages={list(stages)!r} is invalid; allowed: one or more of "
                         f"{[s.name for s in STAGES]}")
    if "accuracy" in stages and quality is None:
        raise ValueError("the accuracy stage needs what to score (quality_payload: an image "
                         "folder and a trained network)")
    payload: dict[str, Any] = {} if space.name == DEFAULT_SPACE else {"space": space.name}
    if quality is not None:
        payload["quality"] = quality
    texts = []
    for arch in archs:
        try:
            texts.append(str(space.arch(arch)))
        except ValueError as err:
            raise ValueError(f"architecture {str(arch)!r} is not of search space "
                             f"{space.name!r}: {err}") from None
    tables = [device_table(d) for d in devices]
    return [chain(text, name, list(stages), priority, max_attempts,
                  {"device_config": table, **payload})
            for name, table in tables for text in texts]


def submit_jobs(q: JobQueue, specs: Sequence[JobSpec]) -> list[int]:
    """Queue ``specs`` (:func:`job_specs`); returns the ids added (a job already queued for
    the same architecture, device and stage is kept). A queue holds one space's jobs: specs of
    another space than its stored jobs' are refused, naming both."""
    for job in q.jobs(limit=1):
        for space in dict.fromkeys(payload_space(spec.payload) for spec in specs):
            check_same_space(space, job_space_name(job), f"the queue's job #{job.id}")
    return q.submit(specs)


def payload_space(payload: dict[str, Any]) -> str:
    """The search space a job's payload names (the default when it names none)."""
    return str(payload.get("space", DEFAULT_SPACE))


def job_space_name(job: Job) -> str:
    return payload_space(job.payload)


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
        device = load_any_device(job.payload.get("device_config", job.device),
                                 space=DEFAULT_SPACE)
    space = job_space_name(job)
    if isinstance(device, DeviceConfig):
        return for_space(device, space)
    if space != DEFAULT_SPACE:
        raise ValueError(f"device {device.name!r} (a Qualcomm {device.sdk.upper()} device) "
                         f"measures search space {DEFAULT_SPACE!r} only; job #{job.id} is of "
                         f"space {space!r}")
    return device


def job_target(job: Job, ctx: StageContext) -> MeasureTarget:
    """The job's device as a :class:`~anb.collect_throughput.targets.base.MeasureTarget`."""
    return as_target(job_device(job, ctx))


def protocol_device(job: Job, ctx: StageContext) -> DeviceConfig:
    """The job's device for the stage that runs its protocols one by one (export); a clear
    error for a Qualcomm device."""
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
                      space=job_space(job))
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


def quality_payload(images: str | Path, weights: str | Path | None = None,
                    onnx: str | Path | None = None, count: int = QUALITY_IMAGES,
                    resolution: int | None = None) -> dict[str, Any]:
    """What an accuracy job carries (``payload["quality"]``): the image folder, the trained
    network (:class:`~anb.collect_throughput.quantization.quality.Source`: checked to exist), the
    number of images scored and the resolution (None: the device's)."""
    from anb.collect_throughput.quantization.quality import Source

    source = Source(Path(weights).resolve() if weights else None,
                    Path(onnx).resolve() if onnx else None)
    if not Path(images).is_dir():
        raise ValueError(f"images={str(images)!r} is not a folder; allowed: an image folder "
                         "with one sub-folder of images per class")
    return {"images": str(Path(images).resolve()), **source.as_dict(), "count": count,
            "resolution": resolution}


def run_accuracy(job: Job, ctx: StageContext) -> dict[str, Any]:
    """The trained network's quality on the device
    (:mod:`anb.collect_throughput.quantization.quality`): the job's ``payload["quality"]``
    (:func:`quality_payload`) names the image folder and the network; run through the device's own
    path (its back-end here, its board, a Qualcomm device's SDK stages). ``result["record"]`` holds
    the ``quality`` entry, published with the device's record (:func:`publish`)."""
    from anb.collect_throughput.quantization.quality import (
        Source,
        calibration_count,
        device_resolution,
        load_images,
        measure_quality,
        quality_record,
    )

    spec = job.payload.get("quality")
    if not spec:
        raise ValueError(f"job #{job.id}: the accuracy stage needs a trained network and an "
                         "image folder; submit with --images DIR and --weights PATH (or --onnx "
                         "FILE)")
    device = job_device(job, ctx)
    if isinstance(device, DeviceConfig):
        require_images(device.protocols[0], "the accuracy stage (an image folder)")
    arch = job_arch(job)
    images = load_images(spec["images"], spec.get("resolution") or device_resolution(device, arch),
                         spec.get("count", QUALITY_IMAGES), calibration_count(device))
    entry = measure_quality(device, arch, Source.from_dict(spec), images, ctx.store_dir(job))
    return {"record": quality_record(arch, job.device, entry),
            **{k: entry[k] for k in ("top1", "host_top1", "top1_agreement", "logits_cosine_min",
                                     "max_abs_error", "images")}}


def publish(job: Job, result: dict[str, Any], out: Path | None) -> Path | None:
    """Write a measure or accuracy result's record to ``<out>/<device>/<arch_id>.json``,
    adding its ``platform_perf`` and ``quality`` entries to a record already there, and copy
    the files it lists (``result["files"]``, e.g. a Qualcomm per-layer table) beside it
    (atomic; call after the queue accepted the result). A listed file this host cannot see (a
    store not shared with it) is skipped; a results folder holding another space's records is
    refused (naming both)."""
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
        if record.get("quality"):
            old.setdefault("quality", {}).update(record["quality"])
        record = old
    atomic_write_json(path, record)
    return path
