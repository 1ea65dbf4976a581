"""Every constant the reference protocols fix for a device (docs/background/devices.md), checked
against what ships (issue 12 item 2).

One row per (device config, setting): the value the reference measured with and the section of
``docs/background/devices.md`` that states it. The values are read from the shipped configs
(``anb/configs/devices/*.toml``) and, for the boards, from the self-contained FPGA scripts.
Settings the reference gives as a floor (1 warm-up pass + 3 timed passes) are checked as such:
the shipped rules warm up and repeat at least that much.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from anb.collect_throughput.timing.protocol import load_device
from anb.searchspace.arch import EFFICIENTNET_B0
from anb.searchspace.space import ANB_SPACE
from tests.conftest import REPO

S4 = 'docs/background/devices.md, "GPU"'
S4T = 'docs/background/devices.md, "TPU"'
S4F = 'docs/background/devices.md, "FPGA"'

# (config, kind, setting, value, section)
EXACT = [
    *[(gpu, kind, name, value, S4)
      for gpu in ("a100", "3090")
      for kind, name, value in (
          ("throughput", "batch", 128), ("throughput", "resolution", 256),
          ("throughput", "precision", "fp16"), ("throughput", "layout", "channels_last"),
          ("throughput", "backend", "cuda"), ("latency", "resolution", 256),
          ("latency", "precision", "fp16"), ("latency", "layout", "channels_last"))],
    ("tpuv2", "throughput", "batch", 64, S4T),
    ("tpuv3", "throughput", "batch", 128, S4T),
    *[(tpu, "throughput", name, value, S4T) for tpu in ("tpuv2", "tpuv3")
      for name, value in (("precision", "bf16"), ("backend", "xla"), ("allow_fallbacks", False))],
]
# The reference's 1 warm-up pass and 3 timed passes are floors of the adaptive rules.
FLOORS = [(gpu, "warmup", "min_steps", 1, S4) for gpu in ("a100", "3090")] + \
         [(gpu, "stopping", "min_reps", 3, S4) for gpu in ("a100", "3090")]


def _protocol(config: str, kind: str):
    return next(p for p in load_device(config, space=ANB_SPACE.name).protocols if p.kind == kind)


@pytest.mark.parametrize("config,kind,name,value,section", EXACT,
                         ids=[f"{c}-{k}-{n}" for c, k, n, _, _ in EXACT])
def test_device_config_matches_reference(config, kind, name, value, section):
    got = getattr(_protocol(config, kind), name)
    assert got == value, f"{config} {kind}.{name} = {got!r}; {section} says {value!r}"


@pytest.mark.parametrize("config,table,name,floor,section", FLOORS,
                         ids=[f"{c}-{t}-{n}" for c, t, n, _, _ in FLOORS])
def test_device_rules_cover_reference_passes(config, table, name, floor, section):
    for protocol in load_device(config, space=ANB_SPACE.name).protocols:
        got = getattr(getattr(protocol, table), name)
        assert got >= floor, f"{config} {table}.{name} = {got}; {section} used {floor}"


COMMENTED = ("tpuv2", "tpuv3", "a100", "3090", "h100")


@pytest.mark.parametrize("config", COMMENTED)
def test_config_comments_state_the_batch_and_resolution_measured(config):
    """Every "batch N" / "N px" a config's comments mention (outside its [latency] table, which
    is batch 1) is the throughput protocol's: the comment cannot contradict the setting."""
    import re

    from anb.collect_throughput.timing.protocol import CONFIG_DIR

    protocol = _protocol(config, "throughput")
    table, comments = None, []
    for line in (CONFIG_DIR / f"{config}.toml").read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            table = line.strip("[]").strip()
        elif line.startswith("#") and table != "latency":
            comments.append(line.lstrip("#"))
    text = " ".join(comments)
    batches = [int(n) for n in re.findall(r"\bbatch\s+(\d+)", text, flags=re.IGNORECASE)]
    assert batches, f"{config}.toml: no 'batch N' in its comments"
    assert set(batches) == {protocol.batch}, \
        f"{config}.toml: comments say batch {batches}, [throughput] batch = {protocol.batch}"
    sizes = [int(n) for n in re.findall(r"\b(\d+)\s*px\b", text)]
    assert set(sizes) <= {protocol.resolution}, \
        f"{config}.toml: comments say {sizes} px, resolution = {protocol.resolution}"


def test_tpu_runs_one_core():
    """docs/background/devices.md, "TPU": one core: the back-end uses the process's one device."""
    source = (REPO / "anb/collect_throughput/backends/xla.py").read_text()
    assert "torch_xla.device()" in source and "xla_device_hw" in source


def test_cuda_inputs_are_built_at_the_reference_shape_without_a_gpu():
    """The CUDA back-end's input path runs here: batch 128 of 256 px fp16, channels_last
    (docs/background/devices.md, "GPU"); only the copy to the GPU waits for one."""
    from anb.collect_throughput.backends.cuda import CudaBackend
    from anb.collect_throughput.backends.torch_backend import input_tensors

    protocol = _protocol("a100", "throughput")
    (x,) = input_tensors(protocol, EFFICIENTNET_B0, "cpu", CudaBackend().input_dtype(protocol))
    assert tuple(x.shape) == (128, 3, 256, 256) and x.dtype == torch.float16
    assert x.is_contiguous(memory_format=torch.channels_last)


def test_imagenet_inputs_are_fed_at_the_protocol_resolution(tmp_path):
    """docs/background/devices.md, "GPU": ImageNet-val at 256 px: resize + centre crop to 256."""
    from PIL import Image

    from anb.collect_throughput.timing.inputs import preprocess_image

    Image.new("RGB", (400, 300), (255, 0, 0)).save(tmp_path / "a.png")
    assert preprocess_image(tmp_path / "a.png", 256).shape == (3, 256, 256)
    # Short side resized to exactly 256 (no 256/224 crop): a 256-high border row is kept.
    stripes = Image.new("RGB", (300, 256), (0, 0, 0))
    stripes.paste((255, 255, 255), (0, 0, 300, 1))
    stripes.save(tmp_path / "b.png")
    top = preprocess_image(tmp_path / "b.png", 256)[:, 0]
    assert top.mean() > 1.0  # the white top row survived the crop


def _fpga_modules():
    for sub in ("board", "host"):
        path = str(REPO / "fpga_code" / sub)
        if path not in sys.path:
            sys.path.insert(0, path)
    import compile_xmodel
    import dpu_timing
    import quantize_nndct

    return dpu_timing, compile_xmodel, quantize_nndct


# (board, constant, value, section): the board scripts cannot read anb's TOML (Python 3.7 +
# numpy only), so their constants are checked where they live.
FPGA = [
    ("zcu102", "dpu", "DPUCZDX8G_ISA1_B4096", S4F), ("vck190", "dpu", "DPUCVDX8G", S4F),
    ("zcu102", "threads", 5, S4F), ("vck190", "threads", 6, S4F),
    ("zcu102", "latency_threads", 1, S4F), ("vck190", "latency_threads", 1, S4F),
]


@pytest.mark.parametrize("board,name,value,section", FPGA,
                         ids=[f"{b}-{n}" for b, n, _, _ in FPGA])
def test_fpga_board_constants_match_reference(board, name, value, section):
    dpu_timing, _, _ = _fpga_modules()
    got = dpu_timing.BOARDS[board][name]
    assert got == value, f"{board} {name} = {got!r}; {section} says {value!r}"


def test_fpga_host_and_round_constants_match_reference():
    """docs/background/devices.md, "FPGA": ~150 calibration images, ~1000 images per throughput
    measurement, the compiler's arch.json per DPU, int8 inputs pre-scaled by fix_point."""
    dpu_timing, compile_xmodel, quantize_nndct = _fpga_modules()
    assert dpu_timing.IMAGES_PER_ROUND == 1000
    args = quantize_nndct.parser().parse_args(["--arch", "a", "--images", "i", "--out", "o"])
    assert args.calib_images == 150 and args.device == "cpu"
    assert "DPUCZDX8G" in compile_xmodel.BOARDS["zcu102"]
    assert "DPUCVDX8G" in compile_xmodel.BOARDS["vck190"]
    assert dpu_timing.prescale(np.array([0.5]), 6).tolist() == [32]  # round(x * 2**fix_point)
