#!/usr/bin/env python3
"""Quantize one architecture with Vitis AI's ``pytorch_nndct`` (inside the Vitis AI docker).

    python3 quantize_nndct.py --arch <arch string> --calib-dir imagenet/calib \
        --val-dir imagenet/val --out quantized/<arch_id> [--weights model.pt]

1. host DPU check: every module/op of the built network must run on the DPU (no
   sigmoid/SiLU/softmax), else exit 1;
2. ``calib`` mode over ~150 calibration images, ``export_quant_config``;
3. ``test`` mode: quantized top-1 on the validation images (class sub-folders, sorted), written
   to ``quant_accuracy.json``; then one batch-1 forward and ``export_xmodel``.
Then compile per board with ``compile_xmodel.py``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def image_tensor(files: list[Path], resolution: int):
    import numpy as np
    import torch

    from anb.collect_throughput.inputs import preprocess_image

    return torch.from_numpy(np.stack([preprocess_image(f, resolution) for f in files]))


def labelled_images(folder: Path, limit: int) -> list[tuple[Path, int]]:
    """``(file, class index)`` from class sub-folders (sorted names), at most ``limit``."""
    from anb.collect_throughput.inputs import IMAGE_SUFFIXES

    classes = sorted(d.name for d in folder.iterdir() if d.is_dir())
    items = [(f, i) for i, c in enumerate(classes) for f in sorted((folder / c).iterdir())
             if f.suffix.lower() in IMAGE_SUFFIXES]
    if not items:
        raise SystemExit(f"error: no labelled images under {folder} (expected class folders)")
    return items[:limit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", required=True)
    parser.add_argument("--calib-dir", required=True, type=Path)
    parser.add_argument("--val-dir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--weights", type=Path, help="state_dict of the trained network")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--calib-images", type=int, default=150)
    parser.add_argument("--val-images", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=50)
    args = parser.parse_args()

    import torch
    from pytorch_nndct.apis import torch_quantizer

    from anb.collect_throughput.dpu_check import assert_dpu_safe
    from anb.searchspace.arch import as_arch
    from anb.searchspace.model import build_model

    arch = as_arch(args.arch)
    model = build_model(arch).eval()
    if args.weights:
        model.load_state_dict(torch.load(args.weights, map_location="cpu"))
    try:
        assert_dpu_safe(model)
    except ValueError as err:
        raise SystemExit(f"error: {arch}: {err}")
    dummy = torch.randn(1, 3, args.resolution, args.resolution)
    args.out.mkdir(parents=True, exist_ok=True)

    calib = [f for f in sorted(args.calib_dir.rglob("*")) if f.is_file()][: args.calib_images]
    quantizer = torch_quantizer("calib", model, (dummy,), output_dir=str(args.out))
    with torch.no_grad():
        for start in range(0, len(calib), args.batch):
            quantizer.quant_model(image_tensor(calib[start:start + args.batch], args.resolution))
    quantizer.export_quant_config()

    quantizer = torch_quantizer("test", model, (dummy,), output_dir=str(args.out))
    qmodel = quantizer.quant_model
    items = labelled_images(args.val_dir, args.val_images)
    correct = 0
    with torch.no_grad():
        for start in range(0, len(items), args.batch):
            chunk = items[start:start + args.batch]
            logits = qmodel(image_tensor([f for f, _ in chunk], args.resolution))
            correct += int((logits.argmax(1) == torch.tensor([y for _, y in chunk])).sum())
        qmodel(image_tensor([items[0][0]], args.resolution))  # export needs a batch-1 pass
    quantizer.export_xmodel(output_dir=str(args.out), deploy_check=False)
    result = {"arch": str(arch), "arch_id": arch.id, "quant_top1": 100.0 * correct / len(items),
              "val_images": len(items), "calib_images": len(calib)}
    (args.out / "quant_accuracy.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
