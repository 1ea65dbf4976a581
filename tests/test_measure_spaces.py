"""The collection side on any search space (``--space``): ``anb measure`` measures the space's
own network on its own input and writes records naming the space, ``anb merge`` builds that
space's table and refuses another space's records, a queue job carries its space to the worker,
``anb space`` works on every space, and an unknown space name exits 2 listing the known ones.
Real measurements (onnxruntime on this CPU), kept short."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from anb.cli import app
from anb.cli_support import run as run_console
from anb.collect_throughput.arch_lists import read_arch_list
from anb.collect_throughput.backends.onnxruntime_backend import float_onnx, ort_session
from anb.collect_throughput.queue.stages import job_device, make_context
from anb.collect_throughput.records.anchors import default_anchors
from anb.collect_throughput.timing.inputs import make_inputs
from anb.collect_throughput.timing.network import measured_resolution
from anb.collect_throughput.timing.protocol import load_device
from anb.jobs.queue import open_queue
from anb.jobs.stages import chain
from anb.jobs.worker import Worker
from anb.records import model_info
from anb.searchspace.onnx_export import run_onnx
from anb.searchspace.registry import get_space, space_names
from anb.searchspace.space import ANB_SPACE

SEQ1D = get_space("anb-seq1d")
NB201 = get_space("nasbench201")
OFA = get_space("ofa-mbv3")
FAST = ["--budget", "0.2", "--batch", "2", "--no-progress"]
KEYS = {"latency_cpu-ort", "throughput_cpu-ort"}
runner = CliRunner()


def _invoke(*args: str):
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def _records(folder: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}


@pytest.mark.slow
def test_measure_and_merge_another_space_for_real(tmp_path, dataset_tarball):
    """Catches: the MnasNet network or its 3x224x224 input measured whatever --space says,
    records without the space (they would merge as anb-mnasnet), MnasNet anchors in another
    space, and a merge that mixes spaces or skips the other space's records quietly."""
    results = tmp_path / "results"
    code, out = _invoke("measure", "cpu-ort", "--space", "anb-seq1d", "--archs", "sample:3",
                        "--out", str(results), *FAST)
    assert code == 0, out
    assert "measured 3, skipped 0 (already done), failed 0" in out
    archs = read_arch_list("sample:3", SEQ1D)
    records = _records(results / "cpu-ort")
    assert set(records) == {a.id for a in archs}
    mnasnet = {p.key: p.fingerprint
               for p in load_device("cpu-ort", {"batch": 2}, space=ANB_SPACE.name).protocols}
    for arch in archs:
        record = records[arch.id]
        assert record["space"] == "anb-seq1d"
        assert record["architecture"] == SEQ1D.to_record(arch)
        assert set(record["platform_perf"]) == KEYS
        for key, entry in record["platform_perf"].items():
            # the sequence model's own input: 1 channel x 1000 steps, not 3 x 224 x 224
            assert entry["resolution"] == 1000
            assert (entry["protocol"]["space"], entry["protocol"]["resolution"]) == \
                ("anb-seq1d", None)
            assert entry["protocol_fingerprint"] != mnasnet[key]
            assert entry[f"{key.split('_')[0]}_mean"] > 0
    anchors = [json.loads(line) for line in
               (results / "cpu-ort" / "anchors.jsonl").read_text().splitlines()]
    assert {row["arch"] for row in anchors} == {"e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1",
                                                "e6k5l3-e6k5l3-e6k5l3-e6k5l3-e6k5l3"}

    # the space's own table
    code, out = _invoke("merge", str(results), "--out", str(tmp_path / "merged"),
                        "--space", "anb-seq1d")
    assert code == 0, out
    assert "merged 3 records (0 accuracy, 3 device results)" in out
    table = pd.read_csv(tmp_path / "merged" / "dataset.csv")
    assert set(table["space"]) == {"anb-seq1d"}
    assert sorted(table["arch"]) == sorted(map(str, archs))
    for arch in archs:
        row = table[table["arch_id"] == arch.id].iloc[0]
        assert row["macs"] == pytest.approx(model_info(arch, SEQ1D)["macs"])
        assert row["latency_cpu-ort"] == records[arch.id]["platform_perf"][
            "latency_cpu-ort"]["latency_mean"]
    report = json.loads((tmp_path / "merged" / "merge_report.json").read_text())
    assert report["space"] == "anb-seq1d" and report["skipped"] == []
    # a dataset given as --archs names its space: resumed, nothing measured again
    code, out = _invoke("measure", "cpu-ort", "--archs", str(tmp_path / "merged" / "dataset.csv"),
                        "--out", str(results), *FAST)
    assert code == 0 and "measured 0, skipped 3" in out, out
    code, out = _invoke("measure", "cpu-ort", "--archs", str(tmp_path / "merged" / "dataset.csv"),
                        "--out", str(results), "--space", "nasbench201", *FAST)
    assert code == 2 and "is in search space 'anb-seq1d', but 'nasbench201' is in use" in out

    # mixing is refused, naming both spaces, and nothing is written
    both = ("is in search space 'anb-seq1d', but 'anb-mnasnet' is in use")
    code, out = _invoke("merge", str(results), "--out", str(tmp_path / "m2"),
                        "--space", "anb-mnasnet")
    assert code == 2 and both in out and not (tmp_path / "m2").exists()
    # without --space the results name theirs
    code, out = _invoke("merge", str(results), "--out", str(tmp_path / "m4"))
    assert code == 0 and "merged 3 records" in out, out
    code, out = _invoke("merge", str(results), "--out", str(tmp_path / "m3"),
                        "--space", "anb-seq1d", "--accuracy", str(dataset_tarball))
    assert code == 2 and not (tmp_path / "m3").exists()
    assert "is in search space 'anb-mnasnet', but 'anb-seq1d' is in use" in out
    # and so is measuring another space into this results folder
    code, out = _invoke("measure", "cpu-ort", "--archs", "sample:1", "--out", str(results),
                        *FAST)
    assert code == 2 and f"results folder {results / 'cpu-ort'}" in out and both in out
    assert len(_records(results / "cpu-ort")) == 3


@pytest.mark.parametrize("space, shape", [("anb-seq1d", (2, 1, 1000)),
                                          ("nasbench201", (2, 3, 32, 32))])
def test_the_timed_model_is_the_spaces_network_on_its_input(space, shape, tmp_path):
    """Catches: an exported model that is not ``space.build(arch)`` (another builder, classes
    or channels) or inputs of the MnasNet shape."""
    spec = get_space(space)
    arch = read_arch_list("sample:1:5", spec)[0]
    (protocol,) = [p for p in load_device("cpu-ort", {"batch": 2}, space=space).protocols
                   if p.kind == "throughput"]
    (x,) = make_inputs(protocol, arch)
    assert x.shape == shape
    torch.manual_seed(0)
    got = ort_session(float_onnx(arch, tmp_path, None, space=spec), 1).run(["logits"],
                                                                      {"input": x})[0]
    torch.manual_seed(0)
    with torch.no_grad():
        ref = spec.build(arch).eval()(torch.from_numpy(x)).numpy()
    assert got.shape == (2, spec.task.num_classes)
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)


def test_resolution_is_the_override_else_the_architectures_own():
    """Catches: anb-mnasnet's 224 px (the config's) applied to another space, or an OFA
    architecture measured at another size than its own ``r``."""
    small, large = default_anchors(OFA)
    assert (str(small).split(":")[0], str(large).split(":")[0]) == ("r128", "r224")
    native = load_device("cpu-ort", space="ofa-mbv3").protocols[0]
    assert (measured_resolution(native, small), measured_resolution(native, large)) == (128, 224)
    fixed = load_device("cpu-ort", {"resolution": 192}, space="ofa-mbv3").protocols[0]
    assert measured_resolution(fixed, small) == 192
    assert load_device("cpu-ort", space="nasbench201").protocols[0].resolution is None
    protocols = load_device("cpu-ort", space=ANB_SPACE.name).protocols
    assert [p.resolution for p in protocols] == [224, 224]
    with pytest.raises(ValueError, match=r"space='nope' is invalid; allowed: \['anb-mnasnet'"):
        load_device("cpu-ort", space="nope")


def test_default_anchors_are_the_spaces_corners():
    """Catches: MnasNet anchors given to another space (they would not parse there)."""
    assert [str(a) for a in default_anchors(NB201)] == [
        "|none~0|+|none~0|none~1|+|none~0|none~1|none~2|",
        "|avg_pool_3x3~0|+|avg_pool_3x3~0|avg_pool_3x3~1|+|avg_pool_3x3~0|avg_pool_3x3~1|"
        "avg_pool_3x3~2|"]
    assert len(default_anchors(get_space("anb-mnasnet"))) == 3  # EfficientNet-B0 and the ends


def test_comma_lists_keep_architectures_that_hold_commas():
    """Catches: an ofa-mbv3 string (``k3e3,k5e4`` layers) cut at its commas."""
    a, b = (str(x) for x in OFA.archs_from_choices(OFA.choices_from_index([7, 123456])))
    assert "," in a and "," in b
    assert [str(x) for x in read_arch_list(f"{a}, {b}", OFA)] == [a, b]
    with pytest.raises(ValueError, match=r"--archs: 'r999:d2' is not an architecture of "
                                         r"search space 'ofa-mbv3'"):
        read_arch_list(f"{a},r999:d2,{b}", OFA)


@pytest.mark.slow
def test_queue_job_carries_its_space_to_the_worker(tmp_path):
    """Catches: a job measured as anb-mnasnet whatever space it was submitted for, a record
    without its space, and a queue that takes jobs of two spaces."""
    url = str(tmp_path / "q.db")
    device = tmp_path / "host-cpu.toml"
    device.write_text('name = "host-cpu"\nbackend = "onnxruntime"\nthreads = 1\n'
                      '[latency]\nbatch = 1\n[warmup]\nmax_seconds = 2.0\n'
                      '[stopping]\nmin_reps = 5\nbudget_seconds = 0.2\n')
    archs = read_arch_list("sample:2:1", NB201)
    code, out = _invoke("queue", "submit", "--archs", ",".join(map(str, archs)), "--device",
                        str(device), "--space", "nasbench201", "--queue", url)
    assert code == 0 and "queued 2 job(s)" in out, out
    with open_queue(url) as q:
        assert [j.payload["space"] for j in q.jobs()] == ["nasbench201"] * 2
        ctx = make_context(tmp_path / "store", tmp_path / "results", [str(device)])
        stats = Worker(q, ["measure"], ctx, "w", poll_seconds=0.05).run(idle_exit=True)
        assert (stats.done, stats.failed) == (2, 0), [j.last_error for j in q.jobs()]
    records = _records(tmp_path / "results" / "host-cpu")
    assert set(records) == {a.id for a in archs}
    for record in records.values():
        entry = record["platform_perf"]["latency_host-cpu"]
        assert (record["space"], entry["resolution"], entry["protocol"]["space"]) == \
            ("nasbench201", 32, "nasbench201")
    code, out = _invoke("queue", "submit", "--archs", "sample:1", "--device", str(device),
                        "--queue", url)
    assert code == 2 and "the queue's job #1 is in search space 'nasbench201', but " \
        "'anb-mnasnet' is in use" in out
    with open_queue(url) as q:
        assert len(q.jobs()) == 2


def test_a_qualcomm_job_of_another_space_is_refused_naming_it(tmp_path):
    """Catches: a Qualcomm device (MnasNet-only DLC export) handed another space's job."""
    from anb.collect_throughput.targets.devices import device_table

    name, table = device_table("snpe-dsp")
    ctx = make_context(tmp_path / "store", None, [])  # registers the stages
    with open_queue(str(tmp_path / "q.db"), create=True) as q:
        q.submit([chain(str(read_arch_list("sample:1", SEQ1D)[0]), name, ["measure"],
                        payload={"device_config": table, "space": "anb-seq1d"})])
        (job,) = q.jobs()
    with pytest.raises(ValueError, match=r"measures search space 'anb-mnasnet' only; job #1 is "
                                         r"of space 'anb-seq1d'"):
        job_device(job, ctx)


@pytest.mark.parametrize("args", [
    ["measure", "cpu-ort", "--archs", "sample:1", "--out", "OUT"],
    ["merge", "OUT", "--out", "OUT2"],
    ["queue", "submit", "--archs", "sample:1", "--device", "cpu-ort", "--queue", "OUT/q.db"],
    ["space", "onnx", "e1k3l1", "OUT/a.onnx"],
    ["space", "sample"],
])
def test_unknown_space_exits_2_listing_the_known_ones(args, tmp_path, capsys):
    """Catches: a traceback, or a silent fall-back to anb-mnasnet, for a mistyped --space."""
    args = [a.replace("OUT", str(tmp_path / "out")) for a in args]
    with pytest.raises(SystemExit) as exit_:
        run_console(app, [*args, "--space", "nasbench-201"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"unknown search space 'nasbench-201'; known spaces are {space_names()}" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("space, arch, shape", [
    ("nasbench201", "|nor_conv_3x3~0|+|skip_connect~0|nor_conv_1x1~1|+|avg_pool_3x3~0|none~1|"
                    "nor_conv_3x3~2|", (2, 3, 32, 32)),
    ("anb-seq1d", "e6k5l2-e1k3l1-e4k5l3-e6k3l1-e1k5l2", (2, 1, 1000)),
    ("ofa-mbv3", None, (1, 3, 128, 128)),
])
def test_space_onnx_builds_with_the_spaces_builder_and_input(space, arch, shape, tmp_path):
    """Catches: ``anb space onnx`` building a MnasNet, exporting a 3 x 224 x 224 example, or
    a 1000-class head for a 10-class space."""
    spec = get_space(space)
    arch = arch or str(default_anchors(spec)[0])
    out = tmp_path / "m.onnx"
    code, text = _invoke("space", "onnx", arch, str(out), "--space", space)
    assert code == 0, text
    logits = run_onnx(out, np.zeros(shape, np.float32))
    assert logits.shape == (shape[0], spec.task.num_classes)
    code, text = _invoke("space", "count", arch, "--space", space)
    info = model_info(spec.arch(arch), spec)
    quoted = f'"{arch}"' if "," in arch else arch  # a CSV field holding commas is quoted
    assert code == 0 and text.splitlines()[1] == \
        f"{spec.arch(arch).id},{quoted},{info['macs']:.6f},{info['params']:.6f}"


def test_space_commands_on_a_cell_space(tmp_path):
    """Catches: MnasNet-only paths (stages, to_anb_dict, the activation option) in ``anb
    space`` crashing on another space."""
    code, out = _invoke("space", "info", "--space", "nasbench201")
    assert code == 0 and out.splitlines()[0] == ("nasbench201: 6 variables, 15,625 "
                                                 "architectures; cifar10 32 px, 10 classes")
    code, out = _invoke("space", "sample", "-n", "2", "--format", "json", "--space", "fbnet")
    assert code == 0
    assert [json.loads(line) for line in out.splitlines()] == [
        get_space("fbnet").to_record(a) for a in read_arch_list("sample:2", get_space("fbnet"))]
    code, out = _invoke("space", "onnx", "|none~0|+|none~0|none~1|+|none~0|none~1|none~2|",
                        str(tmp_path / "a.onnx"), "--space", "nasbench201",
                        "--activation", "silu")
    assert code == 2 and "nasbench201: unknown build options ['activation']" in out
    assert not (tmp_path / "a.onnx").exists()
