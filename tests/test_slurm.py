"""The sbatch template on a real single-node SLURM cluster on localhost (slurmctld + slurmd +
munge, started and stopped here): a 2-process CPU run on the bundled digits, requeued (what
preemption does) in the middle of the stream, which the job resumes from."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from anb.searchspace import Sampler
from anb.searchspace.space import ANB_SPACE
from tests.trainer_helpers import CONFIG, REPO, TORCHRUN

TEMPLATE = REPO / "configs" / "slurm" / "train.sbatch"
pytestmark = pytest.mark.timeout(600)
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue")
ARGS = ["--epochs", "2", "--eval_epochs", "1", "--progress", "false", "--seed", "3",
        "--batch_size", "16", "--max_steps", "3", "--max_val_steps", "1", "--val_batch_size", "64"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


class Cluster:
    """A throw-away SLURM cluster of this host, configured in ``root``."""

    def __init__(self, root: Path):
        self.root = root
        self.env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
        self.pids: list[Path] = []

    def start(self) -> None:
        root, host = self.root, socket.gethostname()
        for name in ("state", "spool", "log"):
            (root / name).mkdir(parents=True)
        shutil.copy("/etc/munge/munge.key", root / "munge.key")
        os.chmod(root / "munge.key", 0o600)
        sock = root / "munge.sock"
        subprocess.run(["munged", "--force", f"--socket={sock}", f"--key-file={root / 'munge.key'}",
                        f"--pid-file={root / 'munged.pid'}",
                        f"--log-file={root / 'log/munged.log'}",
                        f"--seed-file={root / 'munged.seed'}"], check=True)
        self.pids.append(root / "munged.pid")
        (root / "slurm.conf").write_text("\n".join([
            "ClusterName=anbtest", f"SlurmctldHost={host}", "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", f"AuthInfo=socket={sock}", "CredType=cred/munge",
            f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
            f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'log/slurmctld.log'}",
            f"SlurmdLogFile={root / 'log/slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU", "ReturnToService=2", "MpiDefault=none",
            f"NodeName={host} CPUs=2 State=UNKNOWN",
            f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP "
            "OverSubscribe=YES", ""]))
        subprocess.run(["slurmctld", "-c"], env=self.env, check=True)
        self.pids.append(root / "slurmctld.pid")
        subprocess.run(["slurmd"], env=self.env, check=True)
        self.pids.append(root / "slurmd.pid")
        deadline = time.time() + 60
        while "idle" not in self.run("sinfo", "-h", "-o", "%T").stdout:
            assert time.time() < deadline, (root / "log/slurmctld.log").read_text()[-2000:]
            time.sleep(0.5)

    def run(self, *cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True,
                              timeout=60)

    def job_state(self, job_id: str) -> str:
        return self.run("scontrol", "show", "job", job_id).stdout.split("JobState=")[1].split()[0]

    def stop(self) -> None:
        for pid_file in reversed(self.pids):  # only the daemons this fixture started
            if pid_file.exists():
                try:
                    os.kill(int(pid_file.read_text().split()[0]), 15)
                except (ProcessLookupError, ValueError):
                    pass
        time.sleep(1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        pytest.fail(f"SLURM/munge not installed ({missing}); run scripts/ci/accuracy.sh")
    cluster = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def submit(cluster: Cluster, folder: Path, *extra: str) -> str:
    env = {"ANB_CONFIG": str(CONFIG), "ANB_TORCHRUN": str(TORCHRUN),
           "ANB_NPROC_PER_NODE": "2", "ANB_RDZV_PORT": str(free_port()),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = ["sbatch", "--parsable", f"--chdir={REPO}", f"--output={folder}/slurm-%j.out",
           str(TEMPLATE), "--folder", str(folder), *ARGS, *extra]
    proc = subprocess.run(cmd, env={**cluster.env, **env}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr + _logs(folder)
    return proc.stdout.strip().split(";")[0]


def _logs(folder: Path) -> str:
    return "".join(p.read_text()[-3000:] for p in folder.glob("slurm-*.out"))


def _records(folder: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (folder / "records").glob("*.json")}


@dataclass(frozen=True)
class Requeued:
    """A finished job of the template and what it left."""

    job: str
    folder: Path
    ids: list[str]
    """The stream's architectures, in order."""
    first_log: str
    """The log as it was when the job was requeued."""


@pytest.fixture(scope="module")
def requeued(cluster, tmp_path_factory) -> Requeued:
    """One 2-process job of the template over three architectures, requeued (what preemption
    does) while the second one is mid-training, then run to completion: the tests below share
    it (each sbatch run starts a launcher and two trainers)."""
    folder = tmp_path_factory.mktemp("requeued")
    ids = [a.id for a in Sampler(3, space=ANB_SPACE).sample(3)]
    job = submit(cluster, folder, "--num_models", "3")
    ckpt = folder / "checkpoints" / f"{ids[1]}.pt"
    deadline = time.time() + 300
    while not ckpt.exists():  # second architecture mid-training
        assert time.time() < deadline and cluster.job_state(job) in ("PENDING", "RUNNING"), \
            _logs(folder)
        time.sleep(0.1)
    first_log = _logs(folder)
    requeue = cluster.run("scontrol", "requeue", job)
    assert requeue.returncode == 0, requeue.stderr
    while cluster.job_state(job) != "COMPLETED":
        state = cluster.job_state(job)
        if state == "PENDING":  # SLURM holds requeued jobs ~2 min; release it now
            cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
        assert time.time() < deadline + 300 and state not in ("FAILED", "CANCELLED"), \
            state + _logs(folder)
        time.sleep(1)
    return Requeued(job, folder, ids, first_log)


@pytest.mark.slow
def test_sbatch_template_runs_two_processes(requeued):
    job, folder = requeued.job, requeued.folder
    found = _records(folder)
    assert sorted(found) == sorted(requeued.ids), _logs(folder)
    for record in found.values():
        assert record["provenance"]["world_size"] == 2
    logs = requeued.first_log + _logs(folder)
    assert f"anb: job {job} restart 0 on 1 node(s) x 2 process(es), 2 CPU(s) per node" in \
        requeued.first_log
    assert "\r" not in logs and "it/s" not in logs  # no progress bars in batch logs
    assert "images_per_s=" in logs and "data_wait_s=" in logs


@pytest.mark.slow
def test_requeue_mid_stream_resumes_without_loss_or_repeat(requeued):
    job, folder, ids = requeued.job, requeued.folder, requeued.ids
    found = _records(folder)
    assert sorted(found) == sorted(ids), _logs(folder)
    assert found[ids[0]]["provenance"]["job_ids"] == [f"slurm-{job}-r0"]
    assert found[ids[1]]["provenance"]["job_ids"] == [f"slurm-{job}-r0", f"slurm-{job}-r1"]
    assert found[ids[2]]["provenance"]["job_ids"] == [f"slurm-{job}-r1"]
    logs = _logs(folder)
    assert f"{ids[0]} already done" in logs and f"{ids[1]} resuming from epoch 1" in logs


def test_template_requests_cpus_memory_a_free_port_and_allocated_gpus():
    """Without CPUs and memory requested, 4 ranks x 12 loader workers share a core or two and
    an in-memory ImageNet file is OOM-killed; a fixed port collides with other jobs."""
    text = TEMPLATE.read_text()
    directives = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --exclusive" in directives and "#SBATCH --mem=0" in directives
    assert '--cpus-per-task="$CPUS"' in text and "CPUS=${SLURM_CPUS_ON_NODE" in text
    assert "29500" not in text and "nvidia-smi" not in text
    assert "--logging.progress false" in text
    function = text[text.index("gpus_allocated() {"):text.index("\n}\n", text.index(
        "gpus_allocated() {")) + 3]
    for env, want in (({"SLURM_GPUS_ON_NODE": "4"}, "4"),
                      ({"SLURM_GPUS_PER_NODE": "a100:8"}, "8"),
                      ({"SLURM_GPUS_PER_NODE": "2"}, "2"), ({}, "0")):
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_GPUS")}
        out = subprocess.run(["bash", "-c", function + "\ngpus_allocated"], env={**clean, **env},
                             capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == want, (env, out.stdout, out.stderr)


def test_readme_slurm_example_trains_the_published_recipe():
    """docs/background/accel-nasbench.md, "Data and schedule": 4 GPUs x 512 images at peak lr
    0.425."""
    readme = (REPO / "README.md").read_text()
    line = readme[readme.index("- **SLURM**"):readme.index("- **SLURM**") + 400]
    assert "--nodes 1 --gpus-per-node 4" in line and "imagenet_proxy.ini" in line
    from anb.collect_accuracy.config import global_batch, load_config, peak_lr

    config = load_config(REPO / "configs" / "accuracy" / "imagenet_proxy.ini")
    assert config["trainval"]["batch_size"] == 512
    assert global_batch(config, 4) == 2048 and peak_lr(config, 4) == pytest.approx(0.425)
