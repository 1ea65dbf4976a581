"""Per-architecture claims: jobs sharing a results folder never train one architecture twice.

Before training an architecture, global rank 0 takes an exclusive ``fcntl.flock`` on
``<folder>/locks/<arch_id>.lock`` (non-blocking) and holds it until the record is written. The
lock belongs to the open file, so the operating system drops it when the holder exits, is
killed (SIGKILL included) or its node's processes are torn down: a claim never outlives its
job, and no stale lock file needs cleaning. A job that finds an architecture claimed moves on
to the next one and comes back to it at the end of its stream; the holder's host, pid and job
id are written into the lock file for the message.

``flock`` is only as global as the file system makes it: Lustre mounted with ``localflock``
and BeeGFS without global locks grant it on each node separately, so two nodes could take one
architecture. A multi-node job checks this at start-up (:func:`probe_global`): rank 0 takes a
probe lock, and the first rank of every other host must find it taken. A node-local lock is
refused with a message naming ``claims.backend``. ``claims.backend = none`` turns claims off
(one job per results folder only). Single-node jobs cannot probe across hosts: jobs of one
folder on several nodes then rely on the mount being global (Lustre ``-o flock``, NFS v4,
GPFS, BeeGFS with ``tuneUseGlobalFileLocks``).

``claims.backend = queue`` claims through the shared job queue (:mod:`anb.jobs`; SQLite on
one host, PostgreSQL across hosts, ``claims.queue_url``) instead of lock files: each
architecture of a recipe is one job, leased for ``claims.lease_s`` and renewed after every
epoch, so a claim of a dead job expires with its lease whatever the file system.

Lock files stay in place (removing a lock file another process has open would split the lock
between two inodes). The holder never opens its own lock file a second time: on NFS, flock is
emulated with POSIX locks, which a second close() in the same process would release.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from anb.collect_accuracy.config import ConfigError

UNSUPPORTED = (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL)


def lock_path(folder: Path, arch_id: str) -> Path:
    return Path(folder) / "locks" / f"{arch_id}.lock"


class Claim:
    """An exclusive lock on one architecture of a results folder, held until :meth:`release`
    (or the process's end)."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)  # no stale holder text once released
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def holder_info(job_id: str, arch: str = "") -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "job_id": job_id, "arch": arch,
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def try_claim(folder: Path, arch_id: str, holder: dict[str, Any]) -> Claim | None:
    """Claim ``arch_id`` in ``folder``: a :class:`Claim`, or None while another process holds
    it. A file system without flock support is a :class:`ConfigError` naming the folder."""
    path = lock_path(folder, arch_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        if err.errno in UNSUPPORTED:
            raise ConfigError(
                f"config key 'logging.folder': {str(folder)!r} is on a file system without "
                f"flock support ({os.strerror(err.errno)}), so concurrent jobs cannot be kept "
                "from training the same architecture; mount it with flock (Lustre: -o flock) "
                "or, running one job per folder only, set --logging.lock false") from None
        raise
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder, sort_keys=True) + "\n").encode(), 0)
    except OSError:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        raise
    return Claim(path, fd)


def read_holder(folder: Path, arch_id: str) -> dict[str, Any]:
    """What the current holder wrote into the lock file ({} when unreadable or empty)."""
    try:
        return json.loads(lock_path(folder, arch_id).read_text() or "{}")
    except (OSError, ValueError):
        return {}


def describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "another process (holder details not yet written)"
    return (f"job {holder.get('job_id', '?')} (host {holder.get('host', '?')}, "
            f"pid {holder.get('pid', '?')}, since {holder.get('since', '?')})")


def probe_global(folder: Path, dist: Any, host: str | None = None) -> bool:
    """Check across the hosts of a multi-rank job that a lock taken on rank 0's host is seen
    on the others. True when probed and global, False when the job has one host (nothing to
    probe); a node-local lock is a :class:`ConfigError`. ``host`` overrides this rank's host
    name (tests). Collective: every rank calls it."""
    from anb.collect_accuracy.distributed import all_gather, barrier, broadcast_object

    host = host or socket.gethostname()
    hosts = all_gather(host)
    if len(set(hosts)) < 2:
        return False
    name = f".probe-{broadcast_object(os.getpid(), dist.world_size)}"
    claim = None
    if dist.is_main:
        claim = try_claim(Path(folder), name, holder_info(dist.job_id, "probe"))
    barrier()
    seen_free = False
    first_of_host = hosts.index(host) == dist.rank
    if not dist.is_main and host != hosts[0] and first_of_host:
        probe = lock_path(folder, name)
        probe.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            seen_free = True
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass
        finally:
            os.close(fd)
    free_on = [h for h, free in zip(hosts, all_gather(seen_free), strict=True) if free]
    barrier()
    if claim is not None:
        claim.release()
        lock_path(folder, name).unlink(missing_ok=True)
    if free_on:
        raise ConfigError(
            f"config key 'claims.backend': value 'flock' but {str(folder)!r} has node-local "
            f"locks (a lock taken on {hosts[0]} was free on {sorted(set(free_on))}), so two "
            "nodes could train the same architecture; mount it with global locks (Lustre: "
            "-o flock, not localflock; BeeGFS: tuneUseGlobalFileLocks), or set "
            "--claims.backend none and give each job its own folder")
    return True


QUEUE_STAGE = "train-accuracy"


class QueueClaim:
    """A lease on one architecture's job in the shared queue (:mod:`anb.jobs`)."""

    def __init__(self, queue: Any, job: Any, lease_s: float):
        self.queue, self.job, self.lease_s = queue, job, lease_s

    def renew(self) -> bool:
        """Extend the lease (after every epoch); False when it was lost."""
        return self.job is not None and self.queue.heartbeat(self.job, self.lease_s)

    def finish(self, result: dict[str, Any]) -> None:
        if self.job is not None:
            self.queue.complete(self.job, result)
            self.job = None

    def release(self) -> None:
        """Give the job back unfinished (the next claim may take it)."""
        if self.job is not None:
            self.queue.release(self.job)
            self.job = None


class QueueClaims:
    """Claims through the shared job queue: the job of an architecture under a recipe is
    (arch, device = ``<recipe hash>:<arch id>``, stage ``train-accuracy``)."""

    def __init__(self, url: str, recipe_hash: str, lease_s: float):
        from anb.jobs.queue import open_queue

        if not url:
            raise ConfigError("config key 'claims.queue_url': empty, but claims.backend = "
                              "'queue' needs it; allowed: sqlite:///path or postgresql://...")
        try:
            self.queue = open_queue(url)
        except Exception as err:  # noqa: BLE001 - driver errors: bad URL, server unreachable
            raise ConfigError(f"config key 'claims.queue_url': cannot open queue {url!r} "
                              f"({type(err).__name__}: {err})") from None
        self.recipe_hash, self.lease_s = recipe_hash, lease_s

    def _device(self, arch_id: str) -> str:
        return f"{self.recipe_hash}:{arch_id}"

    def try_claim(self, arch: str, arch_id: str, worker: str) -> QueueClaim | None:
        from anb.jobs.queue import Capability, JobSpec

        device = self._device(arch_id)
        self.queue.submit([JobSpec(arch=arch, device=device, stage=QUEUE_STAGE,
                                   max_attempts=1_000_000)])
        job = self.queue.claim(worker, [Capability(QUEUE_STAGE, device)], self.lease_s)
        return None if job is None else QueueClaim(self.queue, job, self.lease_s)

    def holder(self, arch_id: str) -> dict[str, Any]:
        jobs = self.queue.jobs(device=self._device(arch_id), stage=QUEUE_STAGE, limit=1)
        if not jobs:
            return {}
        job = jobs[0]
        return {"job_id": job.worker, "host": "queue", "pid": job.id,
                "since": f"{job.state}, lease until {job.lease_until}"}

    def close(self) -> None:
        self.queue.close()
