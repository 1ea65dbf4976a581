"""One way to queue work (:func:`anb.collect_throughput.queue.stages.job_specs`): every entry
that queues measure jobs (``anb queue submit`` with a plan's ``archs.csv``, ``anb adapt
--suggest --submit``, a measured search's :class:`~anb.nas.measured.QueueMeasurer`) queues
jobs of a non-default space (nasbench201) that a real worker measures in that space (onnxruntime
on this CPU at 32 px, short budgets), and the builder's bad input is one clear error."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.collect_throughput.queue.stages import job_specs, make_context, submit_jobs
from anb.jobs.queue import open_queue
from anb.jobs.worker import Worker
from anb.searchspace.registry import get_space
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE

DEVICE = Path(__file__).parent / "data" / "cpu-ort-32.toml"
NAME = "cpu-ort-32"
KEY = f"throughput_{NAME}"
NB201 = get_space("nasbench201")
runner = CliRunner()


def _invoke(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _work(url: str, out: Path) -> dict[str, dict]:
    """Run a real worker of the device on the queue until it is empty; the records it wrote,
    by file stem."""
    ctx = make_context(out.parent / "store", out, [str(DEVICE)])
    with open_queue(url) as q:
        stats = Worker(q, ["measure"], ctx, "w", poll_seconds=0.05).run(idle_exit=True)
        assert stats.failed == 0, [j.last_error for j in q.jobs()]
    return {p.stem: json.loads(p.read_text()) for p in (out / NAME).glob("*.json")}


def _check_records(records: dict[str, dict], archs: list[str]) -> None:
    """One nasbench201 record per architecture, named by its id, measured at 32 px."""
    ids = {NB201.arch(a).id: a for a in archs}
    assert set(records) == set(ids)
    for arch_id, record in records.items():
        assert record["space"] == "nasbench201" and NB201.arch(record).id == arch_id
        assert record["platform_perf"][KEY]["protocol"]["space"] == "nasbench201"


@pytest.mark.slow
def test_a_plan_queued_by_queue_submit_is_measured_in_its_space(tmp_path):
    """``anb plan`` queues nothing itself: its archs.csv names its space, so ``anb queue
    submit --archs plan/archs.csv`` (no --space) queues jobs a worker measures in it.
    Catches: archs.csv without its space (the submit parses them as anb-mnasnet and fails),
    and a builder that drops the space from the payload (measured as anb-mnasnet)."""
    plan = tmp_path / "plan"
    _invoke("plan", "--space", "nasbench201", "--out", str(plan), "--batch", "2", "--pool", "50")
    archs = [line.split(",")[0] for line in (plan / "archs.csv").read_text().splitlines()[1:]]
    url = str(tmp_path / "q.db")
    out = _invoke("queue", "submit", "--archs", str(plan / "archs.csv"), "--device", str(DEVICE),
                  "--queue", url)
    assert "queued 2 job(s)" in out
    _check_records(_work(url, tmp_path / "results"), archs)


@pytest.mark.slow
def test_adapt_submit_queues_the_base_spaces_jobs(tmp_path):
    """Catches: ``anb adapt --suggest K --submit`` on a nasbench201 base queueing jobs a worker
    parses in the default space (the job payload without the space)."""
    from anb.surrogates import save
    from tests.integration_helpers import nasbench201_bench

    base = tmp_path / "base"
    save(nasbench201_bench(rows=300), base)
    url = str(tmp_path / "q.db")
    result = runner.invoke(app, ["adapt", "--device", str(DEVICE), "--base", str(base),
                                 "--suggest", "2", "--candidates", "100", "--submit",
                                 "--queue", url])
    assert result.exit_code == 0, result.output
    archs = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert len(archs) == 2 and f"queued 2 measure job(s) on {DEVICE}" in result.output
    _check_records(_work(url, tmp_path / "results"), archs)


@pytest.mark.slow
def test_queue_measurer_measures_its_space_with_a_real_worker(tmp_path):
    """Catches: a measured search's queue jobs without their space (measured as anb-mnasnet)
    or their device's table (a worker without that config could not load it)."""
    from anb.nas.measured import QueueMeasurer

    url = str(tmp_path / "q.db")
    out = tmp_path / "results"
    worker = Worker(open_queue(url), ["measure"],
                    make_context(tmp_path / "store", out, [str(DEVICE)]), name="w",
                    poll_seconds=0.05)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    measurer = QueueMeasurer(url, str(DEVICE), [KEY], NB201, poll_seconds=0.05)
    archs = Sampler(2, space=NB201).sample(2)
    try:
        futures = measurer.submit(archs)
        values = [f.result(timeout=300) for f in futures]
    finally:
        worker.stop.set()
        measurer.close()
        thread.join()
    with open_queue(url) as q:
        assert {j.payload["device_config"]["name"] for j in q.jobs()} == {NAME}
    records = {p.stem: json.loads(p.read_text()) for p in (out / NAME).glob("*.json")}
    _check_records(records, [str(a) for a in archs])
    for arch, value in zip(archs, values, strict=True):
        assert value[KEY] == records[arch.id]["platform_perf"][KEY]["throughput_mean"]


def test_jobs_carry_space_device_table_and_stages(tmp_path):
    """Catches: a payload without its space or device table, the default space written out,
    stages left in the given order, or an architecture of another space accepted."""
    archs = [str(a) for a in Sampler(0, space=NB201).sample(2)]
    specs = job_specs(archs, [str(DEVICE)], NB201, ["measure", "convert"], priority=7)
    assert [(s.arch, s.device, s.stage, s.next_stages, s.priority) for s in specs] == [
        (a, NAME, "convert", ("measure",), 7) for a in archs]
    assert all(s.payload["space"] == "nasbench201" for s in specs)
    assert specs[0].payload["device_config"]["name"] == NAME
    (default,) = job_specs([str(Sampler(0, space=ANB_SPACE).sample(1)[0])], ["cpu-ort"], ANB_SPACE)
    assert set(default.payload) == {"device_config"}
    with pytest.raises(ValueError, match=r"architecture 'e1k3l1' is not of search space "
                                         r"'nasbench201': nasbench201: cannot parse"):
        job_specs(["e1k3l1"], ["cpu-ort"], NB201)
    with pytest.raises(ValueError, match=r"stages=\[\] is invalid; allowed: one or more of "
                                         r"\['export', 'convert', 'measure', 'accuracy'"):
        job_specs(archs, ["cpu-ort"], NB201, [])
    with pytest.raises(ValueError, match="the accuracy stage needs what to score"):
        job_specs(archs, ["cpu-ort"], NB201, ["measure", "accuracy"])
    with pytest.raises(ValueError, match=r"--device 'no-such-board'"):
        job_specs(archs, ["no-such-board"], NB201)


def test_a_queue_refuses_another_spaces_jobs_from_any_entry(tmp_path):
    """Catches: a submit path (the API's, not only the command's) that mixes spaces in one
    queue."""
    from anb.surrogates.adapt.api import submit

    url = str(tmp_path / "q.db")
    archs = [str(a) for a in Sampler(0, space=NB201).sample(2)]
    assert submit(archs, "cpu-ort", url, NB201) == (2, 0)
    assert submit(archs, "cpu-ort", url, NB201) == (0, 2)
    other = job_specs([str(Sampler(0, space=ANB_SPACE).sample(1)[0])], ["cpu-ort"], ANB_SPACE)
    with open_queue(url) as q, pytest.raises(ValueError, match=r"the queue's job #1 is in "
                                             r"search space 'nasbench201', but 'anb-mnasnet'"):
        submit_jobs(q, other)
    with open_queue(url) as q:
        assert len(q.jobs()) == 2
