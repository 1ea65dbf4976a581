#!/usr/bin/env python3
"""Quantize one architecture with Vitis AI's ``pytorch_nndct`` (inside the Vitis AI docker).

Self-contained for the Vitis AI 2.5 image (Python 3.7, torch 1.10): it imports nothing from
``anb``; the network comes from ``anb_model.py`` beside it (checked equal to ``anb``'s)::

    python3 quantize_nndct.py --arch <arch string> --images imagenet/val \
        --out quantized/<arch_id> [--weights checkpoint.pt] [--device cpu]

1. host DPU check: every leaf module must run on the DPU (no sigmoid/SiLU/softmax), else exit 1;
2. ``calib`` mode over 150 calibration images, ``export_quant_config``;
3. ``test`` mode: quantized top-1 on the evaluation images, written to ``quant_accuracy.json``;
   then one batch-1 forward and ``export_xmodel``.
Calibration and evaluation images are disjoint samples spread over every class of the folder,
drawn with ``--seed`` (``images.py``). The quantizer's device is passed explicitly
(``torch_quantizer`` defaults to CUDA). Then compile per board with ``compile_xmodel.py``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import anb_model
import images


def parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", required=True)
    p.add_argument("--images", required=True, help="folder of class sub-folders (ImageNet val)")
    p.add_argument("--out", required=True)
    p.add_argument("--weights", help="trained weights: state_dict or the trainer's checkpoint")
    p.add_argument("--device", default="cpu", help="torch device of the quantizer (cpu | cuda)")
    p.add_argument("--resolution", type=int, default=224)
    p.add_argument("--calib-images", type=int, default=150)
    p.add_argument("--eval-images", type=int, default=5000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=50)
    return p


def quantizer_for(torch_quantizer, mode, model, dummy, out, device):
    """``torch_quantizer`` with the device given explicitly (its default is CUDA)."""
    return torch_quantizer(mode, model, (dummy,), output_dir=out, device=device)


def main(argv=None):
    args = parser().parse_args(argv)
    import torch

    try:
        model = anb_model.build_model(args.arch).eval()
    except ValueError as err:
        print("error: {}".format(err), file=sys.stderr)
        return 1
    if args.weights:
        anb_model.load_weights(model, args.weights)
    bad = anb_model.unsupported_modules(model)
    if bad:
        print("error: {}: not DPU-safe: {}".format(args.arch, ", ".join(bad[:6])), file=sys.stderr)
        return 1
    from pytorch_nndct.apis import torch_quantizer

    device = torch.device(args.device)
    model = model.to(device)
    dummy = torch.randn(1, 3, args.resolution, args.resolution, device=device)
    if not os.path.isdir(args.out):
        os.makedirs(args.out)
    calib, evaluated = images.calibration_and_eval(args.images, args.calib_images,
                                                   args.eval_images, args.seed)

    quantizer = quantizer_for(torch_quantizer, "calib", model, dummy, args.out, device)
    with torch.no_grad():
        for start in range(0, len(calib), args.batch):
            x = images.batch_tensor(calib[start:start + args.batch], args.resolution).to(device)
            quantizer.quant_model(x)
    quantizer.export_quant_config()

    quantizer = quantizer_for(torch_quantizer, "test", model, dummy, args.out, device)
    qmodel = quantizer.quant_model
    correct = 0
    with torch.no_grad():
        for start in range(0, len(evaluated), args.batch):
            chunk = evaluated[start:start + args.batch]
            logits = qmodel(images.batch_tensor(chunk, args.resolution).to(device))
            labels = torch.tensor([y for _, y in chunk], device=device)
            correct += int((logits.argmax(1) == labels).sum())
        qmodel(images.batch_tensor(evaluated[:1], args.resolution).to(device))  # batch-1 pass
    quantizer.export_xmodel(output_dir=args.out, deploy_check=False)
    result = {"arch": args.arch, "arch_id": anb_model.arch_id(args.arch),
              "quant_top1": 100.0 * correct / len(evaluated), "eval_images": len(evaluated),
              "eval_classes": len({y for _, y in evaluated}), "calib_images": len(calib),
              "calib_classes": len({y for _, y in calib}), "seed": args.seed,
              "device": str(device), "weights": args.weights}
    with open(os.path.join(args.out, "quant_accuracy.json"), "w") as handle:
        handle.write(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
