"""Stages: the registry of what a job can be, and how a chain of stages moves on.

A stage is a name, a default priority, whether it needs the device (a worker takes it only for
the devices it reaches) and a handler ``f(job, ctx) -> result`` (JSON). The registry starts
empty: the stages themselves live with the layer that runs them
(:mod:`anb.collect_throughput.queue.stages`: export -> convert -> measure -> accuracy) and are
added with :func:`register_stage` where a worker or the queue CLI is assembled. Hooks are
``"module:function"`` strings, imported when first used.

A job may carry the stages that follow it (:func:`chain`); when it is done the queue adds the
next one (:func:`follow_up`) in the same transaction. Stages of a chain run in the order they
were registered.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anb.jobs.queue import Job, JobSpec


@dataclass(frozen=True)
class Stage:
    name: str
    priority: int
    needs_device: bool
    handler: str
    """``"module:function"``: ``f(job, ctx) -> result``."""
    publish: str | None = None
    """``"module:function"``: ``f(job, result, out)``, called once the queue accepted the
    result (e.g. write it into the results folder ``out``; exactly once per job)."""
    follow_priority: str | None = None
    """``"module:function"``: ``f(result) -> priority`` of this stage queued after another
    one that returned ``result`` (default: :attr:`priority`)."""


STAGES: dict[str, Stage] = {}


def register_stage(stage: Stage) -> None:
    """Add or replace a stage (e.g. a vendor's ``convert``; a replaced stage keeps its place in
    the order)."""
    STAGES[stage.name] = stage


def get_stage(name: str) -> Stage:
    if name not in STAGES:
        raise ValueError(f"stage={name!r} is invalid; allowed: {sorted(STAGES)}")
    return STAGES[name]


def _load(target: str) -> Callable[..., Any]:
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def handler(name: str) -> Callable[[Job, StageContext], dict[str, Any]]:
    return _load(get_stage(name).handler)


def publish(job: Job, result: dict[str, Any], out: Path | None) -> None:
    """Run the publish hook of ``job``'s stage, if it has one."""
    hook = get_stage(job.stage).publish
    if hook is not None:
        _load(hook)(job, result, out)


@dataclass
class StageContext:
    """What a handler may use: the store, the results folder, this worker's devices."""

    store: Path
    """A folder every worker of a chain can read (the same host, or a shared filesystem):
    each stage leaves there what the next needs."""
    out: Path | None = None
    devices: dict[str, Any] = field(default_factory=dict)
    """The devices this worker reaches, by name, as the stages that use them loaded them
    (opaque here: the worker takes device stages only for these names)."""

    def store_dir(self, job: Job) -> Path:
        path = Path(self.store) / job.device
        path.mkdir(parents=True, exist_ok=True)
        return path


def chain(arch: str, device: str, stages: list[str], priority: int | None = None,
          max_attempts: int = 3, payload: dict[str, Any] | None = None) -> JobSpec:
    """The first job of ``stages`` (in registration order); the rest follow as each
    finishes."""
    for s in stages:
        get_stage(s)
    order = list(STAGES)
    ordered = sorted(stages, key=order.index)
    first = ordered[0]
    return JobSpec(arch=arch, device=device, stage=first,
                   priority=get_stage(first).priority if priority is None else priority,
                   max_attempts=max_attempts, payload=dict(payload or {}),
                   next_stages=tuple(ordered[1:]))


def follow_up(job: Job, result: dict[str, Any]) -> JobSpec | None:
    """The next stage of ``job``'s chain (None at its end); a bumped chain (priority 0) stays
    at the front."""
    if not job.next_stages:
        return None
    nxt = get_stage(job.next_stages[0])
    if job.priority == 0:
        priority = 0
    elif nxt.follow_priority is not None:
        priority = _load(nxt.follow_priority)(result)
    else:
        priority = nxt.priority
    return JobSpec(arch=job.arch, device=job.device, stage=nxt.name, priority=priority,
                   max_attempts=job.max_attempts, payload=job.payload,
                   next_stages=job.next_stages[1:])
