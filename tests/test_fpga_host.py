"""``fpga_code`` runs inside the Vitis AI 2.5 container and on board images (issue 12 item 4).

The floor (docs/background/devices.md, "Toolchain floors"): Python 3.7, torch 1.10, no import of
``anb``. Checked here by ``vermin --target=3.7`` on the sources, by importing and running every host
and board module in a subprocess where ``anb`` and post-1.10 torch modules/functions are blocked,
and by comparing each copy of ``anb`` logic kept in ``fpga_code`` with the original.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from anb.collect_throughput.timing import stats
from anb.collect_throughput.timing.inputs import calibration_and_eval
from anb.collect_throughput.timing.protocol import Protocol, StoppingRule, WarmupRule
from anb.records import validate_record
from anb.searchspace.arch import EFFICIENTNET_B0, as_arch
from anb.searchspace.model import build_model
from anb.searchspace.sampler import Sampler
from anb.searchspace.space import ANB_SPACE

REPO = Path(__file__).resolve().parents[1]
HOST, BOARD = REPO / "fpga_code" / "host", REPO / "fpga_code" / "board"
sys.path.insert(0, str(BOARD))
sys.path.insert(0, str(HOST))

import anb_model  # noqa: E402
import board_core  # noqa: E402
import images as host_images  # noqa: E402
import quantize_nndct  # noqa: E402

ARCHS = [EFFICIENTNET_B0, *Sampler(12, space=ANB_SPACE).sample(3),
         as_arch("e6k5l3se-e6k5l3se-e6k5l3se-e6k5l3se-e6k5l3se-e6k5l4se-e6k5l3se", ANB_SPACE)]
# Modules and torch functions newer than torch 1.10 (2021-10), blocked in the import test.
BLOCKED_MODULES = ("anb", "torch._dynamo", "torch.export", "torch.func", "torch.compiler",
                   "torch._export", "onnxscript", "tomllib", "importlib.metadata")
BLOCKED_TORCH = ("compile", "export", "func", "compiler", "vmap")


def test_vermin_finds_nothing_newer_than_python_3_7():
    proc = subprocess.run([str(Path(sys.executable).with_name("vermin")), "--target=3.7",
                           "--no-tips", "--violations", str(REPO / "fpga_code")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


FLOOR_SCRIPT = textwrap.dedent("""
    import importlib.abc, sys
    import torch  # torch imports some of its newer modules itself: block them for our code
    BLOCKED = {blocked!r}

    class Floor(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                raise ImportError("blocked on the Vitis AI 2.5 floor: " + name)
            return None

    sys.meta_path.insert(0, Floor())
    for name in BLOCKED:
        if name in sys.modules:
            sys.modules[name] = None  # already loaded by torch: "import name" now raises
    for attr in {torch_attrs!r}:
        if hasattr(torch, attr):
            delattr(torch, attr)
    sys.path[:0] = [{host!r}, {board!r}]
    import anb_model, images, quantize_nndct, compile_xmodel
    import board_core, dpu_timing, run_dpu, utilisation
    model = anb_model.build_model({arch!r}).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 64, 64))
    assert tuple(out.shape) == (2, 1000), out.shape
    assert anb_model.unsupported_modules(model) == []
    proto = board_core.protocol("zcu102", "throughput", 1, 5)
    entry = board_core.perf_entry(proto, [0.01, 0.011, 0.0105], [0.02], 1, "converged", {{}}, {{}})
    print("FLOOR-OK", entry["protocol_fingerprint"], sys.modules.get("anb") is not None)
""")


@pytest.mark.slow
def test_host_and_board_modules_import_and_run_without_anb_or_new_torch(tmp_path):
    script = FLOOR_SCRIPT.format(blocked=BLOCKED_MODULES, torch_attrs=BLOCKED_TORCH,
                                 host=str(HOST), board=str(BOARD), arch=str(ARCHS[1]))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "FLOOR-OK" in proc.stdout and proc.stdout.strip().endswith("False")


def test_the_floor_check_catches_an_anb_import(tmp_path):
    """The blocking finder itself works: a host module importing ``anb`` fails under it."""
    (tmp_path / "bad_host.py").write_text("import anb.searchspace.model\n")
    script = FLOOR_SCRIPT.format(blocked=BLOCKED_MODULES, torch_attrs=BLOCKED_TORCH,
                                 host=str(tmp_path), board=str(BOARD), arch=str(ARCHS[1]))
    script = script.replace("import anb_model, images", "import bad_host, anb_model, images")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert proc.returncode != 0 and "blocked on the Vitis AI 2.5 floor: anb" in proc.stderr


def test_no_post_1_10_torch_keywords_in_fpga_code():
    """``torch.onnx.export(..., dynamo=...)`` (torch >= 2.5) and friends cannot be caught by an
    import block; nothing in fpga_code may use them."""
    for path in (REPO / "fpga_code").rglob("*.py"):
        text = path.read_text()
        for word in ("dynamo", "weights_only", "torch.compile", "torch.export", "torch.func"):
            assert word not in text, f"{path.name} uses {word}"


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS, ids=str)
def test_host_model_builder_equals_anb(arch):
    ours = anb_model.build_model(str(arch)).eval()
    theirs = build_model(arch, space=ANB_SPACE).eval()
    a, b = ours.state_dict(), theirs.state_dict()
    assert list(a) == list(b)
    assert all(a[k].shape == b[k].shape for k in a)
    ours.load_state_dict(b)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(ours(x), theirs(x), atol=1e-5, rtol=1e-4)
    leaves = [(n, type(m).__name__) for n, m in theirs.named_modules()
              if not list(m.children()) and not n.endswith("drop_path")]  # eval: identity
    assert [(n, type(m).__name__) for n, m in ours.named_modules()
            if not list(m.children())] == leaves
    assert anb_model.arch_id(str(arch)) == arch.id
    assert anb_model.unsupported_modules(ours) == []


@pytest.mark.slow
def test_host_model_loads_a_trainer_checkpoint(tmp_path):
    theirs = build_model(ARCHS[1], space=ANB_SPACE).eval()
    torch.save({"format": 1, "model": {f"module.{k}": v for k, v in theirs.state_dict().items()}},
               tmp_path / "ckpt.pt")
    ours = anb_model.load_weights(anb_model.build_model(str(ARCHS[1])).eval(), tmp_path / "ckpt.pt")
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert torch.allclose(ours(x), theirs(x), atol=1e-5, rtol=1e-4)


def test_board_core_copies_equal_anb():
    rng = np.random.default_rng(0)
    for n in (3, 7, 25):
        values = rng.lognormal(0, 0.2, n)
        ours, theirs = board_core.summarize(values), stats.summarize(values)
        assert set(ours) == set(theirs)
        for key in theirs:
            assert ours[key] == pytest.approx(theirs[key], rel=1e-9), key
    for p in (0.9, 0.975, 0.995):
        assert board_core.t_quantile(p, 7) == pytest.approx(stats.t_quantile(p, 7), rel=1e-9)
    for device, kind, batch, threads in (("zcu102", "latency", 1, 1),
                                         ("vck190", "throughput", 6, 6)):
        proto = board_core.protocol(device, kind, batch, threads, budget_seconds=12.0)
        same = Protocol(**{**proto, "warmup": WarmupRule(**proto["warmup"]),
                           "stopping": StoppingRule(**proto["stopping"])})
        assert board_core.fingerprint(proto) == same.fingerprint
    for arch in ARCHS:
        assert board_core.arch_id(str(arch)) == arch.id
        assert board_core.anb_dict(str(arch)) == arch.to_anb_dict()
    entry = board_core.perf_entry(board_core.protocol("zcu102", "latency", 1, 1),
                                  [0.004, 0.0041, 0.0042], [0.01], 3, "converged", {}, {})
    record = board_core.arch_record(str(ARCHS[0]), {"latency_zcu102": entry})
    assert validate_record(record, space=ANB_SPACE).id == ARCHS[0].id
    assert entry["latency_mean"] == pytest.approx(4.1)


def test_board_utilisation_copy_equals_the_board_runners():
    """``fpga_code/board/utilisation.py`` is the board runner's sampling code, definition for
    definition (so run_dpu.py's peak RSS means what every other board's does); catches a fix
    made in one copy only."""
    import ast

    from anb.collect_throughput.board import RUNNER

    def definitions(path):
        tree = ast.parse(path.read_text())
        return {n.name: ast.dump(n) for n in tree.body
                if isinstance(n, (ast.FunctionDef, ast.ClassDef))}

    ours, runner = definitions(BOARD / "utilisation.py"), definitions(RUNNER)
    assert {"Sampler", "rss_bytes", "reset_peak_rss", "proc_times"} <= set(ours)
    for name, tree in ours.items():
        assert tree == runner.get(name), f"utilisation.{name} differs from runner.py's"


def _image_folder(root, classes=6, per_class=30):
    from PIL import Image

    for c in range(classes):
        (root / f"n{c:08d}").mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", (48, 40), (c * 30, i * 5, 0)).save(root / f"n{c:08d}" / f"{i:04d}.png")
    return root


@pytest.mark.parametrize("device, kind, threads, pinned", [
    ("zcu102", "latency", 1, "1c79387da08c7006"), ("zcu102", "throughput", 5, "410ca26408c638f1"),
    ("vck190", "latency", 1, "d32a2db71394e3fd"), ("vck190", "throughput", 6, "2355c92508c35ee8")])
def test_board_fingerprints_are_pinned(device, kind, threads, pinned):
    """Catches: the fingerprint code changed on both sides (board copy and anb) at once, which
    the equality check above cannot see: literal hex strings, board copy and anb alike."""
    proto = board_core.protocol(device, kind, 1, threads)
    assert board_core.fingerprint(proto) == pinned
    same = Protocol(**{**proto, "warmup": WarmupRule(**proto["warmup"]),
                       "stopping": StoppingRule(**proto["stopping"])})
    assert same.fingerprint == pinned


def test_calibration_and_evaluation_images_span_every_class_with_a_seed(tmp_path):
    folder = _image_folder(tmp_path / "val")
    calib, evaluated = host_images.calibration_and_eval(str(folder), 150, 24, seed=0)
    assert len(calib) == 150 and len(evaluated) == 24
    assert sorted({y for _, y in calib}) == list(range(6))  # all classes, not the first 3
    assert [sum(y == c for _, y in calib) for c in range(6)] == [25] * 6
    assert [sum(y == c for _, y in evaluated) for c in range(6)] == [4] * 6
    assert not {f for f, _ in calib} & {f for f, _ in evaluated}
    sorted_first = sorted(str(p) for p in folder.rglob("*.png"))[:150]
    assert sorted(f for f, _ in calib) != sorted_first
    assert host_images.calibration_and_eval(str(folder), 150, 24, seed=0) == (calib, evaluated)
    theirs = calibration_and_eval(folder, 150, 24, seed=0)
    assert [(str(f), y) for f, y in theirs[0]] == calib  # same algorithm as anb's
    assert [(str(f), y) for f, y in theirs[1]] == evaluated


def test_host_preprocessing_is_anbs_validation_transform(tmp_path):
    """The host's Python 3.7 copy of :mod:`anb.preprocessing`: the same constants and the same
    pixels (a non-square image, so the crop margin and the centring matter)."""
    from PIL import Image

    from anb import preprocessing

    assert host_images.IMAGENET_MEAN == preprocessing.IMAGENET_MEAN
    assert host_images.IMAGENET_STD == preprocessing.IMAGENET_STD
    assert host_images.VAL_CROP_RATIO == preprocessing.VAL_CROP_RATIO
    pixels = np.random.default_rng(0).integers(0, 256, (61, 83, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "image.png")
    theirs = preprocessing.normalise(preprocessing.val_image(tmp_path / "image.png", 32))
    ours = host_images.preprocess(str(tmp_path / "image.png"), 32)
    assert ours.dtype == np.float32 and ours.shape == (3, 32, 32)
    assert np.array_equal(ours, theirs.transpose(2, 0, 1))


class StandInQuantizer:
    """Stand-in for ``pytorch_nndct.apis.torch_quantizer`` (Vitis AI is not installable): it
    records how it was called and runs the float model; everything around it runs for real."""

    calls: list = []

    def __init__(self, mode, module, input_args, output_dir, device=None, **kw):
        StandInQuantizer.calls.append({"mode": mode, "device": device, "kw": kw,
                                       "arg_device": input_args[0].device})
        self.quant_model = module
        self.output_dir = output_dir
        self.batches = []

    def export_quant_config(self):
        Path(self.output_dir, "quant_info.json").write_text("{}")

    def export_xmodel(self, output_dir, deploy_check=False):
        Path(output_dir, "ANBNet_int.xmodel").write_bytes(b"stand-in")


@pytest.mark.slow
def test_quantize_script_passes_the_device_and_samples_across_classes(tmp_path, monkeypatch):
    folder = _image_folder(tmp_path / "val", classes=5, per_class=8)
    nndct = types.ModuleType("pytorch_nndct")
    apis = types.ModuleType("pytorch_nndct.apis")
    apis.torch_quantizer = StandInQuantizer
    monkeypatch.setitem(sys.modules, "pytorch_nndct", nndct)
    monkeypatch.setitem(sys.modules, "pytorch_nndct.apis", apis)
    StandInQuantizer.calls = []
    out = tmp_path / "q"
    code = quantize_nndct.main(["--arch", str(ARCHS[1]), "--images", str(folder), "--out",
                                str(out), "--resolution", "32", "--calib-images", "10",
                                "--eval-images", "15", "--batch", "4"])
    assert code == 0
    assert [c["mode"] for c in StandInQuantizer.calls] == ["calib", "test"]
    assert all(c["device"] == torch.device("cpu") and c["arg_device"].type == "cpu"
               for c in StandInQuantizer.calls)
    result = json.loads((out / "quant_accuracy.json").read_text())
    assert result["calib_classes"] == 5 and result["eval_classes"] == 5
    assert result["calib_images"] == 10 and result["eval_images"] == 15
    assert (out / "ANBNet_int.xmodel").exists() and result["arch_id"] == ARCHS[1].id
    assert quantize_nndct.parser().parse_args(["--arch", "a", "--images", "i", "--out", "o"]
                                              ).calib_images == 150
