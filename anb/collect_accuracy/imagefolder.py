"""Plain image-folder loader (``<root>/<class>/<image>``, PIL, no torchvision), for users
without FFCV; and a writer of such a folder from the bundled digits (for smoke runs)."""
from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from anb.extras import missing

try:
    import torch
    from PIL import Image
    from torch.utils.data import DataLoader, Dataset
except ModuleNotFoundError as err:
    raise missing(err, "train", "anb.collect_accuracy.imagefolder") from None

from anb.collect_accuracy.config import Config, ConfigError
from anb.collect_accuracy.data import Batch, Loaders, epoch_order, normalise, seed_of
from anb.preprocessing import val_image

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


def scan(root: Path) -> tuple[list[Path], list[int], list[str]]:
    """Image paths, labels (index of the sorted class folder) and class names."""
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    paths, labels = [], []
    for label, name in enumerate(classes):
        for path in sorted((root / name).iterdir()):
            if path.suffix.lower() in IMAGE_SUFFIXES:
                paths.append(path)
                labels.append(label)
    if not paths:
        raise ConfigError(f"image folder {str(root)!r} holds no images in class sub-folders "
                          f"(expected <root>/<class>/<image>{list(IMAGE_SUFFIXES)})")
    return paths, labels, classes


def random_crop_box(width: int, height: int, rng: np.random.Generator,
                    scale: tuple[float, float] = (0.08, 1.0),
                    ratio: tuple[float, float] = (3 / 4, 4 / 3),
                    ) -> tuple[float, float, float, float]:
    """A random-resized-crop box (torchvision's rule: 10 tries, then the centre crop)."""
    area = width * height
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        w, h = math.sqrt(target * aspect), math.sqrt(target / aspect)
        if 0 < w <= width and 0 < h <= height:
            x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
            return (x, y, x + w, y + h)
    side = min(width, height)
    return ((width - side) / 2, (height - side) / 2, (width + side) / 2, (height + side) / 2)


class FolderDataset(Dataset):
    """Decodes, crops and resizes one image to ``res`` (uint8 HWC)."""

    def __init__(self, paths: list[Path], labels: list[int], train: bool, res: int,
                 crop_ratio: float, seed: int, crop_scale: float = 0.08, hflip: bool = True):
        self.paths, self.labels, self.train = paths, labels, train
        self.res, self.crop_ratio, self.seed, self.epoch = res, crop_ratio, seed, 0
        self.crop_scale, self.hflip = crop_scale, hflip

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        if not self.train:
            return val_image(self.paths[index], self.res, self.crop_ratio), self.labels[index]
        with Image.open(self.paths[index]) as source:
            image = source.convert("RGB")
            rng = np.random.default_rng(seed_of(self.seed, self.epoch, index))
            box = random_crop_box(image.width, image.height, rng, (self.crop_scale, 1.0))
            image = image.resize((self.res, self.res), Image.Resampling.BILINEAR, box=box)
            if rng.random() < 0.5 and self.hflip:
                image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            return np.array(image, dtype=np.uint8), self.labels[index]


class FolderLoaders(Loaders):
    def __init__(self, config: Config, rank: int, world: int, device: torch.device):
        dl, tv = config["dataloader"], config["trainval"]
        train_paths, train_labels, classes = scan(Path(dl["train_path"]))
        val_paths, val_labels, val_classes = scan(Path(dl["val_path"]))
        if val_classes != classes:
            raise ConfigError(f"config key 'dataloader.val_path': class folders of "
                              f"{dl['val_path']!r} differ from those of {dl['train_path']!r}")
        seed = config["model"]["seed"]
        self.train_set = FolderDataset(train_paths, train_labels, True, tv["min_res"], 1.0, seed,
                                       tv["crop_scale"], tv["hflip"])
        self.val_set = FolderDataset(val_paths, val_labels, False, tv["val_res"],
                                     tv["crop_ratio"], seed)
        self.num_classes = len(classes)
        self.batch, self.val_batch = tv["batch_size"], tv["val_batch_size"]
        self.workers = dl["num_workers"]
        self.rank, self.world, self.device, self.seed = rank, world, device, seed
        self.channels_last = tv["channels_last"] and device.type == "cuda"
        if self.train_steps() < 1:
            raise ConfigError(f"config key 'trainval.batch_size': value {self.batch} is larger "
                              f"than the {len(train_paths) // world} training images per rank")

    def train_steps(self) -> int:
        return (len(self.train_set) // self.world) // self.batch

    def _batches(self, dataset: FolderDataset, order: np.ndarray, batch: int,
                 drop_last: bool) -> Iterator[Batch]:
        loader = DataLoader(dataset, batch_size=batch, sampler=order.tolist(), drop_last=drop_last,
                            num_workers=self.workers, pin_memory=self.device.type == "cuda")
        for images, labels in loader:
            x = images.to(self.device, non_blocking=True).permute(0, 3, 1, 2)
            yield normalise(x, self.channels_last), labels.to(self.device, non_blocking=True)

    def train(self, epoch: int, res: int) -> Iterator[Batch]:
        self.train_set.res, self.train_set.epoch = res, epoch
        order = epoch_order(len(self.train_set), self.seed, epoch, self.rank, self.world,
                            self.batch)
        return self._batches(self.train_set, order, self.batch, True)

    def val(self) -> Iterator[Batch]:
        order = np.arange(self.rank, len(self.val_set), self.world)
        return self._batches(self.val_set, order, self.val_batch, False)


def write_digits_folder(root: Path, sizes: tuple[int, int] = (40, 56)) -> tuple[Path, Path]:
    """scikit-learn's digits as JPEGs in ``root/{train,val}/<digit>/`` (sides alternate
    between the given sizes, so images are not all square); returns the two folders."""
    from anb.digits import digits_tensors

    (x_train, y_train), (x_val, y_val) = digits_tensors(max(sizes))
    for split, xs, ys in (("train", x_train, y_train), ("val", x_val, y_val)):
        for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
            folder = root / split / str(int(y))
            folder.mkdir(parents=True, exist_ok=True)
            image = Image.fromarray(x.permute(1, 2, 0).numpy())
            image = image.resize((sizes[i % 2], sizes[(i + 1) % 2]), Image.Resampling.BILINEAR)
            image.save(folder / f"{i:05d}.jpg", quality=95)
    return root / "train", root / "val"
