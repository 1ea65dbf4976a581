"""Validation over several ranks is a weighted sum: with uneven shards (and uneven accuracy per
rank) the all-reduced top-1/top-5/loss equal the single-process numbers exactly, and every
validation image is counted once. Real gloo process groups (3 spawned processes)."""
from __future__ import annotations

import os
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from anb.collect_accuracy.config import load_config
from anb.collect_accuracy.data import TensorImageLoaders
from anb.collect_accuracy.distributed import DistInfo
from anb.collect_accuracy.train import Trainer
from anb.preprocessing import IMAGENET_MEAN_255, IMAGENET_STD_255
from anb.searchspace import get_space
from tests.trainer_helpers import CONFIG

pytestmark = pytest.mark.timeout(180)
WORLD, N_VAL, CLASSES = 3, 11, 10  # shards of 4, 4, 3 images


class Oracle(nn.Module):
    """Predicts the class written into a constant image's value (value = 20 x class)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raw = x[:, 0].mean((1, 2)) * IMAGENET_STD_255[0] + IMAGENET_MEAN_255[0]
        cls = torch.round(raw / 20).long().clamp(0, CLASSES - 1)
        return 5.0 * nn.functional.one_hot(cls, CLASSES).float() + 0.01 * torch.arange(CLASSES)


def data() -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    predicted = torch.arange(N_VAL) % CLASSES
    x_val = (20 * predicted).to(torch.uint8).view(-1, 1, 1, 1).expand(-1, 3, 16, 16).contiguous()
    # right on images 0, 3, 6, 9 (all on rank 0) and 1: rank accuracies 100 %, 25 %, 0 %
    right = torch.tensor([i in (0, 3, 6, 9, 1) for i in range(N_VAL)])
    y_val = torch.where(right, predicted, (predicted + 3) % CLASSES)
    x_train = torch.zeros(64, 3, 16, 16, dtype=torch.uint8)
    return (x_train, torch.zeros(64, dtype=torch.long)), (x_val, y_val)


def evaluate(rank: int, world: int) -> dict[str, float]:
    config = load_config(CONFIG, ["--val_res", "16", "--val_batch_size", "2",
                                  "--batch_size", "4"])
    loaders = TensorImageLoaders(*data(), CLASSES, config, rank, world, torch.device("cpu"))
    info = DistInfo(rank, world, rank, torch.device("cpu"), "test")
    trainer = Trainer(config, info, loaders, get_space("anb-mnasnet"))
    return trainer.evaluate(Oracle(), nn.CrossEntropyLoss())


def _worker(rank: int, port: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        queue.put((rank, evaluate(rank, WORLD)))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_uneven_shards_reduce_to_the_single_process_numbers():
    single = evaluate(0, 1)
    assert single["val_top1"] == round(100 * 5 / 11, 3)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, port, queue)) for r in range(WORLD)]
    for proc in procs:
        proc.start()
    results = dict(queue.get(timeout=150) for _ in range(WORLD))
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    for rank in range(WORLD):
        assert results[rank]["val_top1"] == single["val_top1"]
        assert results[rank]["val_top5"] == single["val_top5"]
        assert results[rank]["val_loss"] == pytest.approx(single["val_loss"], rel=1e-6)
    # averaging per-rank accuracies instead would give (100 + 25 + 0) / 3 = 41.7 %, not 45.5 %
    assert abs(single["val_top1"] - 125 / 3) > 3


def test_each_validation_image_is_on_exactly_one_rank():
    """ImageNet's 50,000 validation images at 6 / 24 / 28 ranks (FFCV's distributed sampler
    would pad to 50,004 / 50,016 / 50,008), and the in-memory loaders' shards."""
    from anb.collect_accuracy.ffcv_io import val_indices

    for world in (6, 24, 28):
        shards = [val_indices(50_000, rank, world) for rank in range(world)]
        joined = np.concatenate(shards)
        assert len(joined) == 50_000 and len(np.unique(joined)) == 50_000
    config = load_config(CONFIG, ["--val_res", "16", "--batch_size", "4"])
    seen = []
    for rank in range(WORLD):
        loaders = TensorImageLoaders(*data(), CLASSES, config, rank, WORLD, torch.device("cpu"))
        seen += [int(v) for _, y in loaders.val() for v in y]
    assert len(seen) == N_VAL
