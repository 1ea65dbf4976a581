"""The queue's stage registry on its own, with stages defined here (none of anb's): a chain runs
in registration order, a follow-up takes its stage's priority hook, a result is published once
accepted, and a :class:`JobError` is retried only when it says it is transient. Third-party
stages join through the ``anb.stages`` entry points."""
from __future__ import annotations

import json

import pytest

from anb.collect_throughput.queue import stages as queue_stages
from anb.jobs import stages
from anb.jobs.errors import JobError
from anb.jobs.queue import open_queue
from anb.jobs.stages import Stage, StageContext, chain, register_stage
from anb.jobs.worker import Worker


class Flaky(JobError):
    def __init__(self, message: str, transient: bool):
        super().__init__(message)
        self._transient = transient

    @property
    def transient(self) -> bool:
        return self._transient


def fetch(job, ctx):
    if job.arch.startswith("down"):
        raise Flaky(f"{job.arch}: link down", transient=True)
    if job.arch.startswith("broken"):
        raise Flaky(f"{job.arch}: bad firmware", transient=False)
    return {"size": len(job.arch)}


def build(job, ctx):
    return {"built": job.arch}


def after_fetch(result):
    return 100 + result["size"]


def write(job, result, out):
    (out / f"{job.arch}.json").write_text(json.dumps(result))


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(stages, "STAGES", {})
    register_stage(Stage("fetch", 5, False, f"{__name__}:fetch"))
    register_stage(Stage("build", 7, True, f"{__name__}:build", publish=f"{__name__}:write",
                         follow_priority=f"{__name__}:after_fetch"))
    return stages.STAGES


def test_toy_stages_run_through_the_registry(registry, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    ctx = StageContext(store=tmp_path / "store", out=out, devices={"dev": object()})
    with open_queue(str(tmp_path / "q.db"), create=True) as q:
        q.submit([chain(a, "dev", ["build", "fetch"], max_attempts=2)
                  for a in ("ok", "down", "broken")])
        assert {j.stage for j in q.jobs()} == {"fetch"}  # registration order, not given order
        stats = Worker(q, ["fetch", "build"], ctx, "w", poll_seconds=0.05).run(idle_exit=True)
        jobs = {(j.arch, j.stage): j for j in q.jobs()}
    assert (stats.done, stats.failed, stats.retried) == (2, 2, 1)
    assert jobs["ok", "build"].priority == 102  # the hook: 100 + len("ok")
    assert json.loads((out / "ok.json").read_text()) == {"built": "ok"}  # published once
    assert [p.name for p in out.iterdir()] == ["ok.json"]  # fetch has no publish hook
    assert (jobs["down", "fetch"].state, jobs["down", "fetch"].attempts) == ("failed", 2)
    assert (jobs["broken", "fetch"].state, jobs["broken", "fetch"].attempts) == ("failed", 1)
    assert jobs["broken", "fetch"].last_error == "broken: bad firmware"


def test_unknown_stages_name_the_registered_ones(registry):
    with pytest.raises(ValueError, match=r"stage='measure' is invalid; allowed: \['build', "
                                         r"'fetch'\]"):
        chain("a", "dev", ["measure"])


def test_installed_packages_add_stages_through_entry_points(tmp_path, monkeypatch):
    (tmp_path / "anb_flash_plugin.py").write_text(
        "from anb.jobs.stages import Stage, register_stage\n"
        "def register():\n"
        "    register_stage(Stage('flash', 40, True, 'anb_flash_plugin:run'))\n")
    info = tmp_path / "anb_flash_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: anb-flash-plugin\n"
                                   "Version: 1.0\n")
    (info / "entry_points.txt").write_text("[anb.stages]\nflash = anb_flash_plugin:register\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(stages, "STAGES", {})
    queue_stages.register_stages.__wrapped__()  # uncached: this process registered already
    assert list(stages.STAGES) == ["export", "convert", "measure", "accuracy", "flash"]
    assert stages.get_stage("flash").needs_device


def test_the_device_stages_keep_their_chain(monkeypatch):
    monkeypatch.setattr(stages, "STAGES", {})
    queue_stages.register_stages.__wrapped__()
    spec = chain("a", "d", ["accuracy", "measure", "export", "convert"])
    assert (spec.stage, spec.next_stages) == ("export", ("convert", "measure", "accuracy"))
