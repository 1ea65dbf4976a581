"""Process-group setup from the launcher's environment (torchrun, torchrun under srun).

The global rank and world size come from ``RANK`` / ``WORLD_SIZE`` (set by torchrun for every
worker across all nodes); ``LOCAL_RANK`` only picks the GPU. Without a launcher the trainer
runs as a single process.
"""
from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from anb.extras import missing

try:
    import torch
    import torch.distributed as dist
except ModuleNotFoundError as err:
    raise missing(err, "train", "anb.collect_accuracy.distributed") from None

from anb.collect_accuracy.config import Config, ConfigError


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    job_id: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    try:
        return default if value in (None, "") else int(value)
    except ValueError:
        raise ConfigError(f"environment variable {name}={value!r} is not an integer") from None


def pick_device(config: Config, local_rank: int) -> torch.device:
    wanted = config["distributed"]["device"]
    if wanted == "cuda" and not torch.cuda.is_available():
        raise ConfigError("config key 'distributed.device': value 'cuda' but no CUDA device is "
                          "available; allowed here: auto, cpu")
    if wanted in ("auto", "cuda") and torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def job_id() -> str:
    """A job id unique per launch: SLURM job (+ array task) + requeue count where there is one,
    else host + a random suffix (torchrun's default rendezvous id is the constant 'none')."""
    slurm = os.environ.get("SLURM_JOB_ID")
    if slurm:
        array = os.environ.get("SLURM_ARRAY_TASK_ID")
        restart = os.environ.get("SLURM_RESTART_COUNT", "0")
        return f"slurm-{slurm}{f'_{array}' if array else ''}-r{restart}"
    return f"local-{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


def setup(config: Config) -> DistInfo:
    """Initialise the process group when launched with more than one process."""
    rank, world = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)
    local_rank = _env_int("LOCAL_RANK", 0)
    device = pick_device(config, local_rank)
    if world > 1 and not dist.is_initialized():
        backend = config["distributed"]["backend"]
        if backend == "auto":
            backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, rank=rank, world_size=world,
                                timeout=timedelta(seconds=config["distributed"]["timeout_s"]),
                                device_id=device if device.type == "cuda" else None)
    return DistInfo(rank, world, local_rank, device, broadcast_object(job_id(), world))


def broadcast_object(obj: Any, world: int) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if world <= 1 or not dist.is_initialized():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Element-wise sum over ranks."""
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(tensor)
    return tensor.tolist()


def all_gather(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order."""
    if not dist.is_initialized():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
