"""Data loaders behind one interface, plus the bundled digits set and 1-D numpy arrays.

A :class:`Loaders` yields ready batches ``(x, y)`` on the training device: ``x`` float,
normalised, augmented at the epoch's resolution for training (random-resized-crop down to
``trainval.crop_scale`` of the area; horizontal flip unless ``trainval.hflip`` is off; every
image loader follows these two keys), centre-cropped at ``val_res`` for validation. Each rank
sees a disjoint slice; every rank runs the same number of training steps (as DDP requires).
Randomness is a function of ``(seed, epoch, rank)``, so a resumed epoch sees the same data as an
uninterrupted one.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from anb.extras import missing

try:
    import torch
    import torch.nn.functional as F
except ModuleNotFoundError as err:
    raise missing(err, "train", "anb.collect_accuracy.data") from None

from anb.collect_accuracy.config import Config, ConfigError
from anb.digits import digits_tensors
from anb.preprocessing import IMAGENET_MEAN_255, IMAGENET_STD_255

Batch = tuple[torch.Tensor, torch.Tensor]


class Loaders(ABC):
    """Training and validation batches for one rank."""

    num_classes: int
    in_channels: int = 3

    @abstractmethod
    def train_steps(self) -> int:
        """Training steps per epoch (identical on every rank)."""

    @abstractmethod
    def train(self, epoch: int, res: int) -> Iterator[Batch]:
        """Augmented training batches of ``epoch`` at resolution ``res``."""

    @abstractmethod
    def val(self) -> Iterator[Batch]:
        """Validation batches (this rank's disjoint share of the validation set)."""


def epoch_order(n: int, seed: int, epoch: int, rank: int, world: int, batch: int) -> np.ndarray:
    """This rank's sample order for an epoch: a seeded permutation, strided by rank, cut to
    whole batches of the same count on every rank."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    per_rank = (n // world) // batch * batch
    return order[rank::world][:per_rank]


def seed_of(*keys: int) -> int:
    """A 31-bit seed derived from integers (identical on every machine)."""
    return int(np.random.SeedSequence(list(keys)).generate_state(1)[0] >> 1)


def normalise(x: torch.Tensor, channels_last: bool = False) -> torch.Tensor:
    """uint8/float NCHW in [0, 255] -> float normalised with the ImageNet statistics."""
    x = x.float()
    if x.shape[1] == 3:
        mean = torch.tensor(IMAGENET_MEAN_255, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD_255, device=x.device).view(1, 3, 1, 1)
        x = (x - mean) / std
    else:
        x = (x - 127.5) / 64.0
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def crop_boxes(n: int, generator: torch.Generator, scale: tuple[float, float] = (0.08, 1.0),
               ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> torch.Tensor:
    """Random-resized-crop boxes as ``(n, 4)`` fractions ``(w, h, cx, cy)`` of a square image,
    centres in [-1, 1] coordinates."""
    area = torch.empty(n).uniform_(*scale, generator=generator)
    log_r = torch.empty(n).uniform_(math.log(ratio[0]), math.log(ratio[1]), generator=generator)
    aspect = torch.exp(log_r)
    w = torch.sqrt(area * aspect).clamp(max=1.0)
    h = torch.sqrt(area / aspect).clamp(max=1.0)
    cx = (torch.rand(n, generator=generator) * 2 - 1) * (1 - w)
    cy = (torch.rand(n, generator=generator) * 2 - 1) * (1 - h)
    return torch.stack([w, h, cx, cy], 1)


def resized_crop(x: torch.Tensor, res: int, boxes: torch.Tensor,
                 flip: torch.Tensor | None = None) -> torch.Tensor:
    """Crop ``boxes`` (see :func:`crop_boxes`) out of a float batch and resize to ``res``,
    in one batched ``grid_sample``; ``flip`` mirrors the selected samples."""
    n = x.shape[0]
    boxes = boxes.to(x.device, x.dtype)
    sx = boxes[:, 0] if flip is None else torch.where(flip.to(x.device), -boxes[:, 0], boxes[:, 0])
    theta = torch.zeros(n, 2, 3, device=x.device, dtype=x.dtype)
    theta[:, 0, 0], theta[:, 0, 2] = sx, boxes[:, 2]
    theta[:, 1, 1], theta[:, 1, 2] = boxes[:, 1], boxes[:, 3]
    grid = F.affine_grid(theta, [n, x.shape[1], res, res], align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


class InMemoryLoaders(Loaders):
    """Loaders over in-memory ``x_train`` / ``x_val`` tensors, split across ranks by index."""

    x_train: torch.Tensor

    def _shard(self, config: Config, rank: int, world: int, device: torch.device, seed: int
               ) -> None:
        tv = config["trainval"]
        self.batch, self.val_batch = tv["batch_size"], tv["val_batch_size"]
        self.rank, self.world, self.device, self.seed = rank, world, device, seed
        if len(self.x_train) // world < self.batch:
            raise ConfigError(f"config key 'trainval.batch_size': value {self.batch} is larger "
                              f"than the {len(self.x_train) // world} training samples per rank")

    def train_steps(self) -> int:
        return (len(self.x_train) // self.world) // self.batch


class TensorImageLoaders(InMemoryLoaders):
    """Images held in memory as a uint8 ``(N, C, S, S)`` tensor; augmentation on the device."""

    def __init__(self, train: tuple[torch.Tensor, torch.Tensor],
                 val: tuple[torch.Tensor, torch.Tensor], num_classes: int, config: Config,
                 rank: int, world: int, device: torch.device, seed: int = 0):
        self.x_train, self.y_train = train
        self.x_val, self.y_val = val
        self.num_classes, self.in_channels = num_classes, int(self.x_train.shape[1])
        tv = config["trainval"]
        self.val_res, self.crop_ratio = tv["val_res"], tv["crop_ratio"]
        self.crop_scale, self.hflip = tv["crop_scale"], tv["hflip"]
        self.channels_last = tv["channels_last"] and device.type == "cuda"
        self.augment = randaugment(tv)
        self._shard(config, rank, world, device, seed)

    def train(self, epoch: int, res: int) -> Iterator[Batch]:
        order = torch.from_numpy(epoch_order(len(self.x_train), self.seed, epoch, self.rank,
                                             self.world, self.batch))
        generator = torch.Generator().manual_seed(seed_of(self.seed, epoch, self.rank))
        if self.augment is not None:
            torch.manual_seed(seed_of(self.seed, epoch, self.rank, 1))  # torchvision's RNG
        for start in range(0, len(order), self.batch):
            idx = order[start:start + self.batch]
            boxes = crop_boxes(len(idx), generator, (self.crop_scale, 1.0))
            flip = torch.rand(len(idx), generator=generator) < 0.5  # drawn either way
            x = self.x_train[idx]
            if self.augment is not None:  # per image, on the uint8 source
                x = torch.stack([self.augment(image) for image in x])
            x = x.to(self.device, non_blocking=True).float()
            x = resized_crop(x, res, boxes, flip if self.hflip else None)
            yield normalise(x, self.channels_last), self.y_train[idx].to(self.device)

    def val(self) -> Iterator[Batch]:
        idx_all = torch.arange(self.rank, len(self.x_val), self.world)
        for start in range(0, len(idx_all), self.val_batch):
            idx = idx_all[start:start + self.val_batch]
            boxes = torch.tensor([[self.crop_ratio, self.crop_ratio, 0.0, 0.0]]).expand(len(idx), 4)
            x = resized_crop(self.x_val[idx].to(self.device).float(), self.val_res, boxes)
            yield normalise(x, self.channels_last), self.y_val[idx].to(self.device)


def randaugment(tv: dict):
    """torchvision's RandAugment for the full recipe (None when ``randaugment_ops`` is 0)."""
    if not tv["randaugment_ops"]:
        return None
    try:
        from torchvision.transforms import v2
    except (ImportError, RuntimeError) as err:
        raise ConfigError(f"config key 'trainval.randaugment_ops': value "
                          f"{tv['randaugment_ops']} needs torchvision matching torch "
                          f"{torch.__version__} ({type(err).__name__}: {err}); allowed "
                          "without it: 0") from None
    return v2.RandAugment(num_ops=tv["randaugment_ops"], magnitude=tv["randaugment_magnitude"])


class ArrayLoaders(InMemoryLoaders):
    """1-D tasks: float arrays ``(N, C, L)`` from an ``.npz`` (``x_train``, ``y_train``,
    ``x_val``, ``y_val``); labels are class ids, or ``(N, K)`` 0/1 for multi-label tasks."""

    def __init__(self, path: str, config: Config, rank: int, world: int, device: torch.device,
                 seed: int = 0):
        arrays = _load_npz(path)
        self.x_train = torch.from_numpy(np.ascontiguousarray(arrays["x_train"], np.float32))
        self.x_val = torch.from_numpy(np.ascontiguousarray(arrays["x_val"], np.float32))
        multilabel = config["dataloader"]["task"] == "multilabel"
        dtype = np.float32 if multilabel else np.int64
        self.y_train = torch.from_numpy(np.asarray(arrays["y_train"], dtype))
        self.y_val = torch.from_numpy(np.asarray(arrays["y_val"], dtype))
        self.in_channels, self.length = int(self.x_train.shape[1]), int(self.x_train.shape[2])
        self.num_classes = (int(self.y_train.shape[1]) if multilabel
                            else int(max(self.y_train.max(), self.y_val.max())) + 1)
        self._shard(config, rank, world, device, seed)

    def train(self, epoch: int, res: int) -> Iterator[Batch]:
        order = torch.from_numpy(epoch_order(len(self.x_train), self.seed, epoch, self.rank,
                                             self.world, self.batch))
        for start in range(0, len(order), self.batch):
            idx = order[start:start + self.batch]
            yield self.x_train[idx].to(self.device), self.y_train[idx].to(self.device)

    def val(self) -> Iterator[Batch]:
        idx_all = torch.arange(self.rank, len(self.x_val), self.world)
        for start in range(0, len(idx_all), self.val_batch):
            idx = idx_all[start:start + self.val_batch]
            yield self.x_val[idx].to(self.device), self.y_val[idx].to(self.device)


def _load_npz(path: str) -> dict[str, np.ndarray]:
    if not path or not Path(path).is_file():
        raise ConfigError(f"config key 'dataloader.train_path': numpy data file {path!r} does "
                          "not exist; give an .npz with x_train, y_train, x_val, y_val")
    with np.load(path) as data:
        missing = [k for k in ("x_train", "y_train", "x_val", "y_val") if k not in data]
        if missing:
            raise ConfigError(f"config key 'dataloader.train_path': numpy data file {path!r} "
                              f"lacks array(s) {missing}; needs x_train, y_train, x_val, y_val")
        arrays = {k: data[k] for k in ("x_train", "y_train", "x_val", "y_val")}
    if arrays["x_train"].ndim != 3:
        raise ConfigError(f"config key 'dataloader.train_path': numpy data file {path!r}: "
                          "x_train must be (N, channels, length), "
                          f"got shape {arrays['x_train'].shape}")
    return arrays


def make_loaders(config: Config, rank: int, world: int, device: torch.device) -> Loaders:
    """The loaders named by ``dataloader.kind``; errors name the missing path."""
    dl, seed = config["dataloader"], config["model"]["seed"]
    kind = dl["kind"]
    if kind == "digits":
        train, val = digits_tensors(dl["image_size"])
        return TensorImageLoaders(train, val, 10, config, rank, world, device, seed)
    if kind == "numpy":
        return ArrayLoaders(dl["train_path"], config, rank, world, device, seed)
    for key in ("train_path", "val_path"):
        if not dl[key] or not Path(dl[key]).exists():
            raise ConfigError(f"config key 'dataloader.{key}': dataset path {dl[key]!r} does "
                              f"not exist (dataloader.kind = {kind!r})")
    if kind == "folder":
        from anb.collect_accuracy.imagefolder import FolderLoaders
        return FolderLoaders(config, rank, world, device)
    from anb.collect_accuracy.ffcv_io import FFCVLoaders
    return FFCVLoaders(config, rank, world, device)
