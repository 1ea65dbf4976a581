"""FFCV: the writer (image folder -> ``.beton``, max side 400, JPEG quality 90) and the
production loader (random-resized-crop down to ``trainval.crop_scale`` + flip unless
``trainval.hflip`` is off, decoded in FFCV's JIT pipeline)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from anb.extras import missing

try:
    import torch
except ModuleNotFoundError as err:
    raise missing(err, "train", "anb.collect_accuracy.ffcv_io") from None

from anb.collect_accuracy.config import MAX_IMAGE_SIDE, MAX_WRITERS, Config, ConfigError
from anb.collect_accuracy.data import Batch, Loaders
from anb.preprocessing import IMAGENET_MEAN_255, IMAGENET_STD_255


def _ffcv():
    try:
        import ffcv  # noqa: F401
    except ImportError as err:
        raise ImportError("FFCV is not installed; `pip install anb[ffcv]` (needs libturbojpeg "
                          "and OpenCV, see scripts/ci/accuracy.sh), or use "
                          f"dataloader.kind = folder ({err})") from None


class _FolderSource:
    """Indexed (PIL image, label) pairs of an image folder, as the FFCV writer wants."""

    def __init__(self, root: Path):
        from anb.collect_accuracy.imagefolder import scan

        self.paths, self.labels, self.classes = scan(root)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        from PIL import Image

        with Image.open(self.paths[index]) as image:
            return image.convert("RGB"), self.labels[index]


def write_beton(source: Path, out: Path, max_side: int = 400, quality: int = 90,
                workers: int = 8, compress_probability: float = 1.0) -> int:
    """Write the image folder ``source`` (``<class>/<image>``) as the FFCV file ``out``:
    images resized to at most ``max_side`` px, each stored as JPEG at ``quality`` with
    probability ``compress_probability``, else raw (the reference's ``train_400_0.50_90`` is
    0.5; 1.0 = all JPEG). Atomic."""
    _ffcv()
    from anb.io import atomic_write

    source = Path(source)
    if not source.is_dir():
        raise FileNotFoundError(f"image folder {str(source)!r} does not exist")
    if not 1 <= quality <= 100:
        raise ValueError(f"option --quality: value {quality} is out of range; allowed 1..100")
    if not 8 <= max_side <= MAX_IMAGE_SIDE:
        raise ValueError(f"option --max-side: value {max_side} is out of range; allowed "
                         f"8..{MAX_IMAGE_SIDE}")
    if not 0.0 <= compress_probability <= 1.0:
        raise ValueError(f"option --compress-probability: value {compress_probability} is out "
                         "of range; allowed 0..1")
    if not 1 <= workers <= MAX_WRITERS:
        raise ValueError(f"option --workers: value {workers} is out of range; allowed "
                         f"1..{MAX_WRITERS}")
    count = len(_FolderSource(source))

    def write(tmp: Path) -> None:
        # FFCV forks its writer processes and waits until they report every image: forked
        # from a process with threads (torch, wandb) a worker can die, and FFCV then waits
        # forever. A child of the single-threaded fork server forks them instead; its failure
        # is an error.
        child = ffcv_context().Process(
            target=_write_worker, args=(str(source), str(tmp), max_side, quality, workers,
                                        compress_probability))
        child.start()
        child.join()
        if child.exitcode != 0:
            raise RuntimeError(f"the FFCV writer for {str(source)!r} failed "
                               f"(exit code {child.exitcode})")

    atomic_write(out, write)
    return count


# imported once by the fork server, not by each writer: importing ``ffcv.fields`` JIT-compiles
# its image fields (about 7 s of CPU on each import)
_PRELOAD = [__name__, "ffcv.fields", "ffcv.writer", "ffcv.loader"]


def ffcv_context():
    """A multiprocessing context for FFCV work (the writers): children forked from a fork server
    (one process, no threads) that imported FFCV once, so that the second and later writes of
    a process (train and val, a test session) start without compiling FFCV again."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    return context


def _write_worker(source: str, tmp: str, max_side: int, quality: int, workers: int,
                  compress_probability: float) -> None:
    import multiprocessing

    # this child inherits the fork server's start method; FFCV's writers started that way
    # would each import FFCV again (a JIT compile each): forked, they share this one
    multiprocessing.set_start_method("fork", force=True)
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter

    writer = DatasetWriter(tmp, {
        "image": RGBImageField(
            write_mode="jpg" if compress_probability == 1.0 else "proportion",
            compress_probability=compress_probability, max_resolution=max_side,
            jpeg_quality=quality),
        "label": IntField()}, num_workers=workers)
    writer.from_indexed_dataset(_FolderSource(Path(source)))


def train_order(distributed: bool, in_memory: bool):
    """RANDOM in memory or when distributed (ffcv 1.0.2's QUASI_RANDOM raises in distributed
    mode), else QUASI_RANDOM (page-wise shuffling for files read from disk)."""
    from ffcv.loader import OrderOption

    return OrderOption.RANDOM if distributed or in_memory else OrderOption.QUASI_RANDOM


def val_indices(count: int, rank: int, world: int) -> np.ndarray:
    """This rank's validation images: every image on exactly one rank (FFCV's distributed
    sampler pads the last batch with repeats, which would count some images twice)."""
    return np.arange(rank, count, world, dtype=np.uint64)  # FFCV indexes with uint64


class _PerImage(torch.nn.Module):
    """Apply ``transform`` to each image of a uint8 batch (RandAugment draws ops per image)."""

    def __init__(self, transform):
        super().__init__()
        self.transform = transform

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.transform(image) for image in x])


class FFCVLoaders(Loaders):
    """FFCV loaders: training shards via FFCV's ``distributed`` mode, validation by explicit
    disjoint indices (each image counted once)."""

    def __init__(self, config: Config, rank: int, world: int, device: torch.device):
        try:
            _ffcv()
        except ImportError as err:
            raise ConfigError(f"config key 'dataloader.kind': value 'ffcv' needs FFCV: {err}; "
                              "allowed without it: folder, digits") from None
        from ffcv.fields.basics import IntDecoder
        from ffcv.fields.rgb_image import (
            CenterCropRGBImageDecoder,
            RandomResizedCropRGBImageDecoder,
        )
        from ffcv.loader import Loader, OrderOption
        from ffcv.transforms import (
            NormalizeImage,
            RandomHorizontalFlip,
            Squeeze,
            ToDevice,
            ToTensor,
            ToTorchImage,
        )

        from anb.collect_accuracy.data import randaugment

        dl, tv = config["dataloader"], config["trainval"]
        cuda = device.type == "cuda"
        channels_last = tv["channels_last"] and cuda
        dtype = np.float16 if cuda and tv["amp"] else np.float32
        mean, std = np.array(IMAGENET_MEAN_255), np.array(IMAGENET_STD_255)
        self.decoder = RandomResizedCropRGBImageDecoder((tv["min_res"], tv["min_res"]),
                                                        scale=(tv["crop_scale"], 1.0))
        flip = [RandomHorizontalFlip()] if tv["hflip"] else []

        def label_pipe():
            return [IntDecoder(), ToTensor(), Squeeze(), ToDevice(device, non_blocking=True)]

        augment = randaugment(tv)
        if augment is not None and not cuda:
            raise ConfigError("config key 'trainval.randaugment_ops': FFCV applies RandAugment "
                              "on the GPU only (uint8 images before normalisation); allowed on "
                              "CPU: 0, or dataloader.kind = digits")

        def image_tail(train: bool = False):
            if cuda:  # ffcv-imagenet's order: normalise on the GPU
                extra = [_PerImage(augment)] if train and augment is not None else []
                return [ToTensor(), ToDevice(device, non_blocking=True),
                        ToTorchImage(channels_last=channels_last), *extra,
                        NormalizeImage(mean, std, dtype)]
            # on CPU NormalizeImage is a JIT (numpy) stage: keep it in the first JIT group, as
            # ffcv 1.0.2's stage grouping loops forever on JIT -> torch -> JIT pipelines
            return [NormalizeImage(mean, std, dtype), ToTensor(),
                    ToTorchImage(channels_last=False), ToDevice(device)]

        seed = config["model"]["seed"]
        try:
            self.train_loader = Loader(
                dl["train_path"], batch_size=tv["batch_size"], drop_last=True,
                order=train_order(world > 1, dl["in_memory"]), os_cache=dl["in_memory"],
                num_workers=dl["num_workers"], distributed=world > 1, seed=seed,
                pipelines={"image": [self.decoder, *flip, *image_tail(train=True)],
                           "label": label_pipe()})
            from ffcv.reader import Reader

            val_count = Reader(dl["val_path"]).num_samples
            self.val_loader = Loader(
                dl["val_path"], batch_size=tv["val_batch_size"], drop_last=False,
                order=OrderOption.SEQUENTIAL, num_workers=dl["num_workers"], seed=seed,
                indices=val_indices(val_count, rank, world),
                pipelines={"image": [CenterCropRGBImageDecoder((tv["val_res"], tv["val_res"]),
                                                               ratio=tv["crop_ratio"]),
                                     *image_tail()],
                           "label": label_pipe()})
        except (ValueError, OSError, AssertionError) as err:
            raise ConfigError(f"config key 'dataloader.train_path' / 'val_path': cannot open "
                              f"FFCV files {dl['train_path']!r}, {dl['val_path']!r}: {err}"
                              ) from None
        reader = self.train_loader.reader
        labels = reader.metadata[f"f{reader.field_names.index('label')}"]
        self.num_classes = int(labels.max()) + 1

    def train_steps(self) -> int:
        return len(self.train_loader)

    def train(self, epoch: int, res: int) -> Iterator[Batch]:
        # regenerate the pipeline (buffers are sized by the decoder) only when res changes
        self.train_loader.recompile = self.decoder.output_size != (res, res)
        self.decoder.output_size = (res, res)
        self.train_loader.next_epoch = epoch  # shuffle of epoch e, also after a resume
        return iter(self.train_loader)

    def val(self) -> Iterator[Batch]:
        return iter(self.val_loader)
