"""Training-step throughput (images/s) per architecture with each data loader, beside the same
model fed from memory (the loader-free ceiling).

    python benchmarks/train_throughput.py --num-archs 3 --res 160 --batch-size 256 \\
        --loaders ffcv,folder --images 4096 --workers 12 --out throughput.json

Without ``--data``, synthetic ImageNet-sized JPEGs (about 500 x 375, smooth noise, quality 90)
are written to a temporary folder, and an FFCV file of them (max side 400, quality 90). The
ratio column is loader rate / loader-free rate; the loader is not the bottleneck at >= 0.9.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anb.collect_accuracy import recipe
from anb.collect_accuracy.config import load_config
from anb.collect_accuracy.data import make_loaders, normalise
from anb.collect_accuracy.distributed import pick_device
from anb.collect_accuracy.train import train_step
from anb.searchspace import Arch, Sampler
from anb.searchspace.model import build_model
from anb.searchspace.space import ANB_SPACE


def synthetic_jpegs(root: Path, count: int, classes: int = 10, seed: int = 0) -> Path:
    """ImageNet-like JPEGs: random sizes around 500 x 375, smooth colour noise, quality 90."""
    rng = np.random.default_rng(seed)
    for i in tqdm(range(count), desc="synthetic JPEGs"):
        w, h = int(rng.integers(400, 600)), int(rng.integers(300, 450))
        if rng.random() < 0.3:
            w, h = h, w
        small = rng.integers(0, 256, (h // 16 + 1, w // 16 + 1, 3), dtype=np.uint8)
        image = Image.fromarray(small).resize((w, h), Image.BICUBIC)
        folder = root / str(i % classes)
        folder.mkdir(parents=True, exist_ok=True)
        image.save(folder / f"{i:06d}.jpg", quality=90)
    return root


def measure(step, batches, steps: int, warmup: int, batch: int, device: torch.device) -> float:
    """Images/s over ``steps`` steps after ``warmup`` steps."""
    it = iter(batches)
    for _ in range(warmup):
        step(*next(it))
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step(*next(it))
    if device.type == "cuda":
        torch.cuda.synchronize()
    return steps * batch / (time.perf_counter() - start)


def repeat_epochs(loaders, res: int):
    epoch = 0
    while True:
        yield from loaders.train(epoch, res)
        epoch += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", default="", help="Comma-separated architecture strings.")
    parser.add_argument("--num-archs", type=int, default=3, help="Else sample this many.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loaders", default="ffcv,folder", help="ffcv, folder, digits.")
    parser.add_argument("--data", type=Path, help="ImageNet-style folder (else synthetic).")
    parser.add_argument("--images", type=int, default=2048, help="Synthetic images to write.")
    parser.add_argument("--res", type=int, default=160)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    parser.add_argument("--out", type=Path, help="Write the results as JSON here.")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="anb-throughput-"))
    data = args.data or synthetic_jpegs(work / "jpegs", args.images)
    overrides = ["--batch_size", str(args.batch_size), "--min_res", str(args.res),
                 "--max_res", str(args.res), "--num_workers", str(args.workers),
                 "--device", args.device, "--val_res", str(args.res)]
    config = load_config(None, overrides)
    device = pick_device(config, 0)
    cuda = device.type == "cuda"
    loader_overrides = {"folder": ["--kind", "folder", "--train_path", str(data),
                                   "--val_path", str(data)],
                        "digits": ["--kind", "digits", "--image_size", str(args.res)]}
    if "ffcv" in args.loaders:
        from anb.collect_accuracy.ffcv_io import write_beton

        beton = work / "train.beton"
        write_beton(data, beton, max_side=400, quality=90, workers=args.workers)
        loader_overrides["ffcv"] = ["--kind", "ffcv", "--train_path", str(beton),
                                    "--val_path", str(beton)]
    archs = ([Arch.from_string(a, ANB_SPACE) for a in args.archs.split(",") if a] or
             Sampler(args.seed, space=ANB_SPACE).sample(args.num_archs))
    if cuda:
        torch.backends.cudnn.benchmark = True
    results = []
    for arch in archs:
        model = build_model(arch, num_classes=10, space=ANB_SPACE).to(device)
        if cuda:
            model = model.to(memory_format=torch.channels_last)
        optimizer = recipe.make_optimizer(model, config)
        recipe.set_lr(optimizer, 0.01)
        scaler = torch.amp.GradScaler("cuda", enabled=cuda)
        loss_fn = recipe.make_loss(config)

        def step(x, y):
            # only measure() below calls it, within this iteration: no late binding
            train_step(model, optimizer, scaler, loss_fn, x, y, cuda)  # noqa: B023

        x = normalise(torch.randint(0, 256, (args.batch_size, 3, args.res, args.res),
                                    dtype=torch.uint8, device=device), cuda)
        y = torch.randint(0, 10, (args.batch_size,), device=device)
        row = {"arch": str(arch), "arch_id": arch.id, "res": args.res,
               "batch_size": args.batch_size, "device": str(device),
               "memory": measure(step, itertools.repeat((x, y)), args.steps, args.warmup,
                                 args.batch_size, device)}
        for name in (n for n in args.loaders.split(",") if n):
            loaders = make_loaders(load_config(None, overrides + loader_overrides[name]), 0, 1,
                                   device)
            row[name] = measure(step, repeat_epochs(loaders, args.res), args.steps, args.warmup,
                                args.batch_size, device)
            row[f"{name}_ratio"] = row[name] / row["memory"]
        results.append(row)
        print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                       for k, v in row.items()), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    from publish import published

    with published(__file__):
        main()
