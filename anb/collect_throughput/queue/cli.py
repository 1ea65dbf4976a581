"""``anb queue submit/status/retry/cancel/bump/results`` and ``anb worker``.

The queue is named by ``--queue`` or ``$ANB_QUEUE``: a SQLite file (one host) or a
``postgresql://`` URL (many hosts). A queue holds the jobs of one search space (``submit
--space``; each job records it and the workers read it back): submitting another space's jobs
to it is refused, naming both.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from anb.cli_support import fail, queue_option, space_option
from anb.collect_throughput.quality_options import (
    images_option,
    onnx_option,
    quality_images_option,
    weights_option,
)
from anb.searchspace.base import Space
from anb.searchspace.cli import cli_space

app = typer.Typer(help="A shared queue of (architecture, device, stage) jobs.",
                  no_args_is_help=True)
QUEUE = queue_option()


def _open(url: str, create: bool = False):
    """The queue at ``url``; only ``submit`` and ``worker`` create a missing SQLite file."""
    from anb.jobs.queue import open_queue

    try:
        return open_queue(url, create)
    except (ValueError, RuntimeError) as err:
        fail(err)


def _archs_path(spec: str) -> Path:
    """``--archs`` as a path: a search's output folder is its ``pareto.csv``."""
    path = Path(spec)
    try:
        if path.is_dir() and (path / "pareto.csv").is_file():
            return path / "pareto.csv"
    except OSError:  # e.g. a long comma-separated list is too long for a file name
        pass
    return path


def _archs(spec: str, space: Space) -> list[str]:
    """Architectures of ``space`` from a search's output (folder with pareto.csv, or a CSV with
    an ``arch`` column) or anything ``anb measure --archs`` reads (file, dataset, sample:N,
    a,b,...)."""
    from anb.collect_throughput.arch_lists import read_arch_list

    path = _archs_path(spec)
    if path.suffix == ".csv" and path.is_file():
        from anb.io import read_csv

        frame = read_csv(path)
        if "arch" in frame.columns:
            return list(dict.fromkeys(str(space.arch(a)) for a in frame["arch"]))
    return [str(a) for a in read_arch_list(spec, space)]


@app.command("submit")
def submit_cmd(
    archs: str = typer.Option(..., "--archs", help="Text file, dataset, search output folder "
                              "or pareto.csv, 'sample:N[:seed]' or comma-separated strings."),
    devices: list[str] = typer.Option(..., "--device", help="Device config name or TOML path "
                                      "(repeat for several)."),
    stages: str = typer.Option("measure", help="Comma-separated: export,convert,measure,accuracy "
                               "(run in that order; each queued when the one before is done)."),
    priority: int | None = typer.Option(None, min=0, help="Priority (lower first; 0 jumps the "
                                           "queue). Default: the first stage's."),
    max_attempts: int = typer.Option(3, min=1, help="Attempts before a job is failed."),
    space: str | None = space_option("search space (default: the one an --archs dataset or "
                                     "search output names, else anb-mnasnet)"),
    images: Path | None = images_option("accuracy stage"),
    weights: Path | None = weights_option("accuracy stage"),
    onnx: Path | None = onnx_option("accuracy stage"),
    quality_images: int = quality_images_option("accuracy stage"),
    quality_resolution: int | None = typer.Option(None, min=1, help="accuracy stage: input size "
                                                  "(default: the device's)."),
    queue: str = QUEUE,
) -> None:
    """Queue jobs for every architecture (of --space) x device (the accuracy stage scores a
    trained network, --weights or --onnx, on --images)."""
    from anb.collect_throughput.queue.stages import job_specs, quality_payload, submit_jobs
    from anb.records import detect_space

    spec = cli_space(space, detect_space(_archs_path(archs)), f"--archs {archs!r}")
    try:
        names = [s.strip() for s in stages.split(",") if s.strip()]
        arch_list = _archs(archs, spec)
        quality = None
        if "accuracy" in names:
            if images is None:
                raise ValueError("the accuracy stage needs --images DIR (a labelled image "
                                 "folder) and --weights PATH or --onnx FILE")
            quality = quality_payload(images, weights, onnx, quality_images, quality_resolution)
        specs = job_specs(arch_list, devices, spec, names, priority, max_attempts, quality)
    except (ValueError, FileNotFoundError) as err:
        fail(err)
    if specs:
        names = [specs[0].stage, *specs[0].next_stages]
    with _open(queue, create=True) as q:
        try:
            added = submit_jobs(q, specs)
        except ValueError as err:
            fail(err)
    typer.echo(f"queued {len(added)} job(s) ({len(specs) - len(added)} already in the queue) "
               f"for {len(arch_list)} architecture(s) x {len(devices)} device(s), stages "
               f"{'->'.join(names)} -> {queue}")


def _status_text(q, failed: int) -> str:
    from anb.jobs.queue import STATES

    q.reap()
    counts = q.counts()
    rows: dict[tuple[str, str], dict[str, int]] = {}
    for (device, stage, state), n in counts.items():
        rows.setdefault((device, stage), {})[state] = n
    lines = [f"{'device':<20} {'stage':<10} " + " ".join(f"{s:>9}" for s in STATES)]
    for (device, stage), c in sorted(rows.items()):
        lines.append(f"{device:<20} {stage:<10} " + " ".join(f"{c.get(s, 0):>9}" for s in STATES))
    active = q.jobs(state="leased", limit=50)
    if active:
        lines.append("\nrunning:")
        now = time.time()
        for j in active:
            lines.append(f"  #{j.id} {j.stage} {j.device} {j.arch[:40]} on {j.worker} "
                         f"(attempt {j.attempts}/{j.max_attempts}, lease "
                         f"{j.lease_until - now:+.0f} s)")
    bad = q.jobs(state="failed", limit=failed)
    if bad:
        lines.append("\nfailed:")
        lines += [f"  #{j.id} {j.stage} {j.device} {j.arch[:40]}: {j.last_error}" for j in bad]
    return "\n".join(lines)


@app.command("status")
def status_cmd(
    queue: str = QUEUE,
    watch: float = typer.Option(0, min=0.0, max=86400.0,
                                help="Refresh every N seconds (a live view; Ctrl-C stops)."),
    failed: int = typer.Option(10, min=0, max=10_000,
                               help="Show up to N failed jobs with their errors."),
    as_json: bool = typer.Option(False, "--json", help="Counts and running jobs as JSON."),
) -> None:
    """Counts per device and stage, who is running what, the last errors."""
    with _open(queue) as q:
        if as_json:
            q.reap()
            typer.echo(json.dumps({
                "counts": [{"device": d, "stage": s, "state": st, "jobs": n}
                           for (d, s, st), n in q.counts().items()],
                "running": [{"id": j.id, "stage": j.stage, "device": j.device, "arch": j.arch,
                             "worker": j.worker, "attempts": j.attempts}
                            for j in q.jobs(state="leased", limit=1000)]}, indent=2))
            return
        while True:
            text = _status_text(q, failed)
            if not watch:
                typer.echo(text)
                return
            typer.echo("\x1b[2J\x1b[H" + time.strftime("%H:%M:%S ") + queue + "\n" + text)
            try:
                time.sleep(watch)
            except KeyboardInterrupt:
                return


def _ids(q, ids: list[int], device: str | None, stage: str | None):
    """The selection, refused (exit 2) when it names a job, device or stage the queue lacks."""
    missing = sorted(set(ids or ()) - {job.id for job in q.get(ids)}) if ids else []
    if missing:
        fail(f"job id(s) {missing[:5]} are not in the queue")
    counted = q.counts()
    for option, value, known in (("--device", device, {d for d, _, _ in counted}),
                                 ("--stage", stage, {s for _, s, _ in counted})):
        if value is not None and value not in known:
            fail(f"{option} {value!r} has no job in the queue; it has {sorted(known)}")
    return (ids or None), device, stage


@app.command("retry")
def retry_cmd(ids: list[int] = typer.Argument(None, help="Job ids (default: all failed)."),
              device: str | None = None, stage: str | None = None,
              queue: str = QUEUE) -> None:
    """Re-queue failed/cancelled jobs with fresh attempts."""
    with _open(queue) as q:
        typer.echo(f"re-queued {q.retry(*_ids(q, ids, device, stage))} job(s)")


@app.command("cancel")
def cancel_cmd(ids: list[int] = typer.Argument(None, help="Job ids."),
               device: str | None = None, stage: str | None = None,
               queue: str = QUEUE) -> None:
    """Cancel queued/running jobs (by id, device or stage)."""
    with _open(queue) as q:
        try:
            n = q.cancel(*_ids(q, ids, device, stage))
        except ValueError as err:
            fail(err)
        typer.echo(f"cancelled {n} job(s)")


@app.command("bump")
def bump_cmd(ids: list[int] = typer.Argument(..., help="Job ids."),
             priority: int = typer.Option(0, min=0, help="New priority (0 jumps the queue)."),
             queue: str = QUEUE) -> None:
    """Change the priority of open jobs."""
    with _open(queue) as q:
        _ids(q, ids, None, None)
        try:
            n = q.bump(ids, priority)
        except ValueError as err:
            fail(err)
        typer.echo(f"set priority {priority} on {n} job(s)")


@app.command("results")
def results_cmd(out: Path = typer.Option(..., "--out", help="Results folder (<out>/<device>/"
                                         "<arch_id>.json, as 'anb measure' writes)."),
                device: str | None = None, queue: str = QUEUE) -> None:
    """Write the records of finished measure and accuracy jobs from the queue (timings and
    the trained network's quality on the device; for 'anb merge')."""
    from anb.collect_throughput.queue.stages import publish
    from anb.collect_throughput.records.folder import RESULTS
    from anb.outputs import check_folder, prepare_folder

    try:
        check_folder(out, RESULTS)
    except ValueError as err:
        fail(err)
    with _open(queue) as q:
        _ids(q, [], device, None)
        done = [job for stage in ("measure", "accuracy")
                for job in q.jobs(state="done", device=device, stage=stage, limit=10**9)]
    if done:
        prepare_folder(out, RESULTS)
    try:
        written = {publish(job, job.result, out) for job in done} - {None}
    except ValueError as err:
        fail(err)
    typer.echo(f"wrote {len(written)} record(s) from {len(done)} job(s) -> {out}")


def worker_cmd(
    devices: list[str] = typer.Option([], "--device", help="Device this machine reaches "
                                      "(config name or TOML path; repeat for several)."),
    stages: str = typer.Option("export,convert,measure,accuracy", help="Stages this machine "
                               "runs (device stages only for its --device)."),
    store: Path = typer.Option(Path("anb-store"), help="Model store shared by the stages."),
    out: Path | None = typer.Option(None, help="Results folder (<out>/<device>/<arch_id>"
                                       ".json, as 'anb measure' writes)."),
    lease: float = typer.Option(60.0, min=1.0, max=86400.0,
                                help="Lease seconds (renewed every third)."),
    poll: float = typer.Option(2.0, min=0.01, max=3600.0,
                               help="Seconds between claims when idle."),
    max_jobs: int | None = typer.Option(None, min=1, help="Stop after N jobs."),
    idle_exit: bool = typer.Option(False, help="Stop when nothing is left to claim."),
    name: str | None = typer.Option(None, help="Worker name (default host:pid)."),
    queue: str = QUEUE,
) -> None:
    """Run jobs from the queue until stopped (SIGTERM/Ctrl-C: after the current job)."""
    import logging

    from anb.collect_throughput.queue.stages import make_context
    from anb.collect_throughput.records.folder import RESULTS
    from anb.jobs.stages import get_stage
    from anb.jobs.worker import Worker, serve
    from anb.outputs import check_folder, prepare_folder

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        if out is not None:
            check_folder(out, RESULTS)
        ctx = make_context(store, out, devices)
        names = [s.strip() for s in stages.split(",") if s.strip()]
        for stage_name in names:  # an unknown one is refused before the queue is created
            get_stage(stage_name)
        q = _open(queue, create=True)
        worker = Worker(q, names, ctx, name, lease, poll)
        worker.capabilities()
        if out is not None:
            prepare_folder(out, RESULTS)
    except (ValueError, FileNotFoundError) as err:
        fail(err)
    with q:
        stats = serve(worker, max_jobs=max_jobs, idle_exit=idle_exit)
    typer.echo(f"{worker.name}: done {stats.done}, failed {stats.failed}, re-queued "
               f"{stats.retried}, lost {stats.lost}")


def register(root: typer.Typer) -> None:
    """Add ``anb queue ...`` and ``anb worker`` to the root app."""
    root.add_typer(app, name="queue")
    root.command("worker")(worker_cmd)
