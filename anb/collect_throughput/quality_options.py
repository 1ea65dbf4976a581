"""The options that name a trained network and the images to score it on: one definition for
``anb measure --quality`` and the accuracy stage of ``anb queue submit``."""
from __future__ import annotations

from typing import Any

import typer

from anb.collect_throughput.defaults import QUALITY_IMAGES
from anb.preprocessing import MAX_IMAGES


def images_option(use: str) -> Any:
    """``--images``: the labelled image folder; ``use`` says when it applies (help prefix)."""
    return typer.Option(None, "--images", help=f"{use}: labelled image folder "
                        "(<root>/<class>/<image>) to score on.")


def weights_option(use: str) -> Any:
    """``--weights``: the trained network in any form the trainer writes."""
    return typer.Option(None, "--weights", help=f"{use}: the trainer's checkpoint, artifact "
                        "folder, state_dict file, or a folder of <arch_id>.pt checkpoints.")


def onnx_option(use: str) -> Any:
    """``--onnx``: a trained ONNX model instead of ``--weights``."""
    return typer.Option(None, "--onnx", help=f"{use}: a trained ONNX model instead of "
                        "--weights.")


def quality_images_option(use: str) -> Any:
    """``--quality-images``: how many images are scored."""
    return typer.Option(QUALITY_IMAGES, min=1, max=MAX_IMAGES, help=f"{use}: images scored "
                        "(class-stratified sample of --images).")
