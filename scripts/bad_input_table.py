"""The bad-input table: every ``anb`` command and public function given one bad input of each
kind that applies, each outcome classified.

Usage: ``python scripts/bad_input_table.py [--out cases.tsv] [--only TEXT] [--hang 120]``

A command runs as the console entry runs it (``anb.cli_support.run``), a function is called,
each in a forked child (so a hang or a crash is one case's, not the table's) inside a fresh
folder of prepared inputs, under a memory limit. Each outcome is one class:

- ``clear``: exit 2 (a command) or ``ValueError`` / ``TypeError`` / ``OSError`` (a function)
  whose message names the argument or its value, and nothing written;
- ``vague``: refused, but the message names neither, or the exit code is not 2;
- ``traceback``: an exception escaped (a command) or one of another type (a function);
- ``wrong``: exit 0 or a result for a bad input, still running after ``--hang`` seconds, or files
  left behind (new, changed or removed).

It prints the counts per class, overall and per kind, and writes the non-clear cases (target,
kind, class, what came back) to ``--out``. Exit code 1 when any case is a traceback or wrong.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import io
import multiprocessing
import os
import resource
import shutil
import sys
import tarfile
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLASSES = ("clear", "vague", "traceback", "wrong")
ARCH = "e6k5l1-e6k5l1-e6k5l1-e6k5l1-e6k5l1-e6k5l1-e6k5l1"
NB201_ARCH = "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|skip_connect~0|" \
             "nor_conv_3x3~1|nor_conv_3x3~2|"
ABSURD = str(10**12)
#: The architectures of the prepared measured table (``anb adapt --measured``).
MEASURED_ARCHS = [f"e{e}k{k}l{depth}-" * 6 + "e6k5l1" for e, k, depth in
                  ((1, 3, 1), (4, 3, 2), (6, 5, 3), (6, 3, 1), (4, 5, 2), (1, 5, 3), (6, 5, 1),
                   (4, 3, 3))]
#: What the commands import on first use, imported once before the cases fork.
PREIMPORT = ("anb.cli", "anb.nas", "anb.records", "anb.surrogates", "anb.surrogates.adapt.api",
             "anb.searchspace", "pandas", "sklearn", "torch")
MEMORY_LIMIT = 8 * 2**30  # bytes of address space a case may take: an absurd size fails fast


def prepare_inputs(root: Path) -> None:
    """Bad inputs of every kind (and a few good ones to pair them with) in ``root``."""
    from anb.resources import RELEASED_DATASET

    (root / "adir").mkdir()
    (root / "userdir").mkdir()
    (root / "userdir" / "notes.txt").write_text("the user's own file\n")
    (root / "afile.txt").write_text("hello\n")
    (root / "archs.txt").write_text(ARCH + "\n")
    (root / "nb201_archs.txt").write_text(NB201_ARCH + "\n")
    (root / "corrupt.db").write_text("not a database\n")
    (root / "table.csv").write_text("a,b\n1,2\n")
    (root / "empty.csv").write_bytes(b"")
    (root / "latin1.txt").write_bytes(b"caf\xe9 \xe9t\xe9\n")
    (root / "truncated.json").write_text('{"architecture": ')
    (root / "corrupt.tar.gz").write_bytes(b"\x00garbage" * 40)
    records, broken = root / "records", root / "badrecords"
    records.mkdir()
    broken.mkdir()
    with tarfile.open(RELEASED_DATASET) as archive:
        members = [m for m in archive.getmembers() if m.isfile() and m.name.endswith(".json")]
        for member in members[:3]:
            data = archive.extractfile(member).read()  # type: ignore[union-attr]
            (records / Path(member.name).name).write_bytes(data)
            (broken / Path(member.name).name).write_bytes(data)
    good = (records / Path(members[0].name).name).read_bytes()
    (broken / "zz_truncated.json").write_bytes(good[:len(good) // 2])
    shutil.copy(RELEASED_DATASET, root / "dataset.tar.gz")
    (root / "pareto.csv").write_text(f"arch\n{ARCH}\n")
    (root / "measured.csv").write_text("arch,throughput_cpu\n" + "".join(
        f"{arch},{100 + 10 * i}\n" for i, arch in enumerate(MEASURED_ARCHS)))
    (root / "images" / "cls").mkdir(parents=True)
    from PIL import Image

    Image.new("RGB", (8, 8), (120, 30, 200)).save(root / "images" / "cls" / "a.png")
    for argv in (["search", "-o", "params:min", "-o", "val_top1", "--budget", "10",
                  "--benchmark", "accel-nasbench", "--out", "searchdir"],
                 ["queue", "submit", "--archs", "archs.txt", "--device", "cpu-ort", "--queue",
                  "q.db"]):
        ending, code, output = _run_in(root, tuple(argv))
        if (ending, code) != ("exit", 0):
            raise RuntimeError(f"preparing inputs: anb {' '.join(argv)} failed: {output}")


#: What each role of an argument is given, per kind: (kind, value).
ROLE_VALUES: dict[str, list[tuple[str, str]]] = {
    "in-file": [("missing", "missing.txt"), ("dir", "adir"), ("empty", "empty.csv"),
                ("non-utf8", "latin1.txt"), ("truncated", "truncated.json"),
                ("corrupt", "corrupt.tar.gz")],
    "in-data": [("missing", "missing.tar.gz"), ("dir", "adir"), ("empty", "empty.csv"),
                ("non-utf8", "latin1.txt"), ("truncated", "badrecords"),
                ("corrupt", "corrupt.tar.gz"), ("file", "afile.txt")],
    "in-folder": [("missing", "missing"), ("file", "afile.txt")],
    "queue": [("corrupt", "corrupt.db"), ("dir", "adir"), ("non-utf8", "latin1.txt")],
    "out-folder": [("user-file-as-output", "afile.txt"), ("user-folder-as-output", "userdir")],
    "out-file": [("dir", "adir")],
    "int": [("negative", "-5"), ("absurd", ABSURD)],
    "float": [("negative", "-1.5"), ("absurd", "1e300"), ("absurd", "nan")],
    "name": [("unknown-name", "bogus")],
    "names": [("unknown-name", "bogus"), ("duplicate", "DUP")],
    "seed": [("negative", "-5")],  # any other integer is a seed
    "space": [("unknown-name", "bogus"), ("wrong-space", "nasbench201")],
    "any-space": [("unknown-name", "bogus")],  # nothing given names another space
    "arch": [("unknown-name", "e9k9"), ("wrong-space", NB201_ARCH)],
    "archs-file": [("missing", "missing.txt"), ("dir", "adir"), ("empty", "empty.csv"),
                   ("non-utf8", "latin1.txt"), ("truncated", "truncated.json"),
                   ("wrong-space", "nb201_archs.txt")],
}


@dataclass(frozen=True)
class Command:
    """A command, its good arguments (``{slot}`` placeholders filled from ``good``) and the role
    of each slot."""

    argv: tuple[str, ...]
    good: dict[str, str]
    roles: dict[str, str]


def _c(argv: str, roles: dict[str, str], **good: str) -> Command:
    return Command(tuple(argv.split()), good, roles)


#: Every command with each argument that takes a user's value. The slot of an option is its
#: name; an option that is not in ``argv`` is appended when it is the one made bad.
COMMANDS: dict[str, Command] = {
    "space info": _c("space info", {"--space": "any-space"}),
    "space sample": _c("space sample", {"-n": "int", "--seed": "seed", "--shard": "name",
                                        "--format": "name", "--space": "any-space"}),
    "space count": _c("space count {archs}", {"archs": "arch", "--resolution": "int",
                                              "--num-classes": "int", "--space": "space"},
                      archs=ARCH),
    "space onnx": _c("space onnx {arch} {out}", {"arch": "arch", "out": "out-file",
                                                 "--resolution": "int", "--num-classes": "int",
                                                 "--activation": "name", "--space": "space"},
                     arch=ARCH, out="m.onnx"),
    "space configspace": _c("space configspace {out}", {"out": "out-file", "--space": "any-space"},
                            out="cs.json"),
    "measure": _c("measure {device} --archs {archs} --out {out}",
                  {"device": "name", "archs": "archs-file", "out": "out-folder",
                   "--shard": "name", "--batch": "int", "--threads": "int", "--budget": "float",
                   "--interleave": "int", "--space": "space", "--weights": "in-file",
                   "--images": "in-folder"},
                  device="cpu-ort", archs="archs.txt", out="o"),
    "measure-qualcomm": _c("measure-qualcomm {device} --archs {archs} --out {out}",
                           {"device": "name", "archs": "archs-file", "out": "out-folder",
                            "--transport": "name"},
                           device="snpe-dsp", archs="archs.txt", out="o"),
    "merge": _c("merge {results} --out {out}", {"results": "in-data", "out": "out-folder",
                                                  "--accuracy": "in-file",
                                                  "--on-conflict": "name", "--space": "space"},
                results="records", out="o"),
    "quant-report": _c("quant-report {arch} --out {out}",
                       {"arch": "arch", "out": "out-folder", "--weights": "in-file",
                        "--images": "in-folder", "--target": "name", "--resolution": "int",
                        "--calibration": "int", "--eval-images": "int",
                        "--sqnr-threshold": "float"}, arch=ARCH, out="o"),
    "quant-layers": _c("quant-layers {archs} --out {out}",
                       {"archs": "arch", "out": "out-folder", "--path": "name",
                        "--weights": "in-file", "--onnx": "in-file", "--images": "in-folder",
                        "--resolution": "int", "--worst": "int", "--sqnr-threshold": "float"},
                       archs=ARCH, out="o"),
    "train": _c("train --config {config}", {"config": "in-file"}, config="x.ini"),
    "retrain": _c("retrain {archs} --out {out}", {"archs": "archs-file", "out": "out-folder",
                                                    "--config": "in-file"},
                  archs="pareto.csv", out="o"),
    "export": _c("export --out {out} --local {local}",
                 {"out": "out-file", "local": "in-folder", "--duplicates": "name",
                  "--space": "space", "--recipe": "name"}, out="o.csv", local="records"),
    "write-ffcv": _c("write-ffcv {source} {out}", {"source": "in-folder", "out": "out-file",
                                                     "--max-side": "int", "--workers": "int"},
                     source="images", out="o.beton"),
    "fit": _c("fit {dataset} --out {out}",
              {"dataset": "in-data", "out": "out-folder", "--config": "in-file",
               "--targets": "name", "--split": "name", "--split-dir": "in-folder",
               "--members": "int", "--jobs": "int", "--hpo-seconds": "float", "--seed": "seed",
               "--space": "space"}, dataset="dataset.tar.gz", out="o"),
    "evaluate": _c("evaluate {model} {dataset}",
                   {"model": "in-folder", "dataset": "in-data", "--split": "name",
                    "--on": "name", "--split-dir": "in-folder", "--report": "out-folder",
                    "--jobs": "int", "--space": "space"},
                   model="accel-nasbench", dataset="dataset.tar.gz"),
    "query": _c("query {model} {archs}",
                {"model": "name", "archs": "archs-file", "--metrics": "names", "--level": "float",
                 "--seed": "seed", "--out": "out-file", "--space": "space"},
                model="accel-nasbench", archs="archs.txt"),
    "search": _c("search -o {objective} --budget {budget}",
                 {"objective": "names", "budget": "int", "-c": "name", "--benchmark": "name",
                  "--algorithm": "name", "--seed": "seed", "--out": "out-folder",
                  "--measure": "in-file", "--max-measurements": "int", "--max-hours": "float",
                  "--space": "space", "--noise": "name"},
                 objective="params:min", budget="10"),
    "adapt": _c("adapt --device {device} --measured {measured} --out {out}",
                {"device": "name", "measured": "in-file", "--base": "in-folder",
                 "out": "out-folder", "--metric": "name", "--suggest": "int",
                 "--candidates": "int", "--space": "space"},
                device="cpu", measured="measured.csv", out="ad"),
    "front-report": _c("front-report {search} --out {out}",
                       {"search": "in-folder", "out": "out-folder", "--accuracy": "in-file",
                        "--measured": "in-file", "--accuracy-metric": "name"},
                       search="searchdir", out="o"),
    "plan": _c("plan {dataset} --out {out}",
               {"dataset": "in-data", "out": "out-folder", "--batch": "int",
                "--gpu-hours": "float", "--targets": "names", "--candidates": "in-file",
                "--pool": "int", "--acquisition": "name", "--seed": "seed", "--space": "space"},
               dataset="records", out="o"),
    "pipeline": _c("pipeline --out {out}",
                   {"out": "out-folder", "--num-archs": "int", "--num-measured": "int",
                    "--accuracy-config": "in-file", "--device": "name",
                    "--measure-budget": "float", "--released": "in-data",
                    "--surrogate-config": "in-file", "--search-budget": "int"}, out="o"),
    "config": _c("config {name}", {"name": "name"}, name="cpu-ort"),
    "cite": _c("cite {benchmark}", {"benchmark": "name"}, benchmark="accel-nasbench"),
    "worker": _c("worker --idle-exit",
                 {"--device": "name", "--stages": "name", "--out": "out-folder",
                  "--lease": "float", "--poll": "float", "--max-jobs": "int",
                  "--queue": "queue"}),
    "queue submit": _c("queue submit --archs {archs} --device {device} --queue {queue}",
                       {"archs": "archs-file", "device": "name", "queue": "queue",
                        "--stages": "name", "--priority": "int", "--max-attempts": "int",
                        "--space": "space", "--quality-images": "int"},
                       archs="archs.txt", device="cpu-ort", queue="q.db"),
    "queue status": _c("queue status --queue {queue}", {"queue": "queue", "--watch": "float",
                                                         "--failed": "int"}, queue="q.db"),
    "queue retry": _c("queue retry {ids} --queue {queue}", {"ids": "int", "queue": "queue",
                                                             "--device": "name",
                                                             "--stage": "name"},
                      ids="1", queue="q.db"),
    "queue cancel": _c("queue cancel {ids} --queue {queue}", {"ids": "int", "queue": "queue",
                                                               "--device": "name",
                                                               "--stage": "name"},
                       ids="1", queue="q.db"),
    "queue bump": _c("queue bump {ids} --priority 1 --queue {queue}",
                     {"ids": "int", "queue": "queue", "--priority": "int"}, ids="1",
                     queue="q.db"),
    "queue results": _c("queue results --out {out} --queue {queue}",
                        {"out": "out-folder", "queue": "queue", "--device": "name"},
                        out="o", queue="q.db"),
}

#: Values an option needs beside the good ones for its bad value to be reached.
DUPLICATES = {"query": "val_top1,val_top1", "plan": "val_top1,val_top1"}

#: Generated values that are valid for that argument, left out: (target, slot, value): why.
VALID = {
    ("search", "--space", "nasbench201"): "analytic metrics search any space",
    ("search", "--max-measurements", ABSURD): "an upper limit: huge means unlimited",
    ("search", "--max-hours", "1e300"): "an upper limit: huge means unlimited",
    ("measure", "--budget", "1e300"): "an upper limit on timing: other stops still end it",
    ("measure", "--interleave", ABSURD): "blocks larger than the list time all at once",
    ("plan", "--gpu-hours", "1e300"): "an upper limit: huge means unlimited",
    ("queue submit", "--priority", ABSURD): "any ordering value",
    ("queue bump", "--priority", ABSURD): "any ordering value (as queue submit's)",
    ("worker", "--max-jobs", ABSURD): "an upper limit: huge means unlimited",
    ("queue submit", "--max-attempts", ABSURD): "an upper limit: huge means retry on",
    ("quant-report", "--sqnr-threshold", "-1.5"): "a threshold in dB: any finite number",
    ("quant-report", "--sqnr-threshold", "1e300"): "a threshold in dB: any finite number",
    ("quant-layers", "--sqnr-threshold", "-1.5"): "a threshold in dB: any finite number",
    ("quant-layers", "--sqnr-threshold", "1e300"): "a threshold in dB: any finite number",
}

#: Bad inputs whose documented outcome is a partial result with exit code 1, not a refusal:
#: (target, kind): why. ``anb measure`` with an architecture listed twice measures it once
#: (its ``--archs`` help says so), so it is no case.
PARTIAL = {
    ("merge", "results", "truncated"): "one bad record never stops the rest: merged, named, "
                                       "exit 1",
}

#: Hand-written cases beyond one per role: (target, kind, argv, names the error should hold).
EXTRA_CLI: list[tuple[str, str, list[str], tuple[str, ...]]] = [
    ("search", "infeasible", ["search", "-o", "params:min", "-c", "params<=1", "--budget", "10",
                              "--out", "s"], ("params",)),
    ("search", "duplicate", ["search", "-o", "params:min", "-o", "params:max", "--budget",
                             "10"], ("params",)),
    ("search", "alias", ["search", "-o", "params:min", "-o", "params:minimize", "--budget",
                         "10"], ("params",)),
    ("query", "alias", ["query", "accel-nasbench", "archs.txt", "--metrics",
                        "val_top1,accuracy"], ("--metrics",)),
    ("space count", "wrong-space", ["space", "count", ARCH, "--space", "nasbench201"],
     ("nasbench201", ARCH)),
    ("query", "wrong-space", ["query", "accel-nasbench", "archs.txt", "--space", "nasbench201"],
     ("nasbench201",)),
]


@dataclass(frozen=True)
class Case:
    """One bad input: a command line (``argv``) or a call (``call``, given the prepared
    folder), with what a clear refusal names (any one of ``names``)."""

    target: str
    kind: str
    names: tuple[str, ...]
    argv: tuple[str, ...] = ()
    call: Callable[[], Any] | None = None
    env: tuple[tuple[str, str], ...] = ()
    ok_exit: int = 2  # the refusal's exit code
    writes: bool = False  # whether it may leave files (an infeasible search's report)
    call_text: str = ""  # the call as written

    @property
    def label(self) -> str:
        return " ".join(self.argv) if self.argv else self.call_text


def cli_cases() -> list[Case]:
    """One case per command, slot and kind of its role, plus the hand-written ones."""
    cases = []
    for target, command in COMMANDS.items():
        for slot, role in command.roles.items():
            for kind, value in ROLE_VALUES[role]:
                if (target, slot, value) in VALID:
                    continue
                if value == "DUP":
                    if target not in DUPLICATES:
                        continue
                    value = DUPLICATES[target]
                argv = [a.format(**{**command.good, slot: value}) if "{" in a else a
                        for a in command.argv]
                option = command.argv[command.argv.index(f"{{{slot}}}") - 1] \
                    if f"{{{slot}}}" in command.argv else slot
                names = _spellings(value) + ((option,) if option.startswith("-") else ())
                if slot.startswith("-") and slot not in command.argv:
                    argv += [slot, value]
                elif slot.startswith("-"):
                    argv[argv.index(slot) + 1] = value
                partial = (target, slot, kind) in PARTIAL
                cases.append(Case(target, kind, names, tuple(argv), ok_exit=1 if partial else 2,
                                  writes=partial))
    for target, kind, argv, names in EXTRA_CLI:
        infeasible = kind == "infeasible"
        cases.append(Case(target, kind, names, tuple(argv), ok_exit=1 if infeasible else 2,
                          writes=infeasible))
    cases.append(Case("query", "file-for-folder", ("ANB_CACHE_DIR",),
                      ("query", "accel-nasbench", "archs.txt"),
                      env=(("ANB_CACHE_DIR", "afile.txt"),)))
    return cases


def _spellings(value: str) -> tuple[str, ...]:
    """``value`` as given and as a refusal may print it: a number with thousands separators
    or in Python's float format (``1e300`` as ``1e+300``)."""
    try:
        number = float(value)
    except ValueError:
        return (value,)
    shown = {value, repr(number), f"{number:g}"}
    if number.is_integer() and abs(number) < 1e18:
        shown |= {f"{int(number):,}", str(int(number))}
    return tuple(sorted(shown))


def _api(target: str, kind: str, label: str, call: Callable[[], Any], *names: str) -> Case:
    return Case(target, kind, names, call=call, call_text=label)


def api_cases(bench: Any) -> list[Case]:
    """The public Python functions given bad arguments (``bench``: the packaged benchmark).
    ``Benchmark.query([])`` is no case: an empty query answers an empty frame with the full
    columns (tests/test_surrogates_honesty.py), which a search's empty batch relies on."""
    import anb
    from anb import nas, records, searchspace, surrogates
    from anb.surrogates.adapt.api import adapt

    mnasnet = searchspace.get_space("anb-mnasnet")
    arch = searchspace.as_arch(ARCH, mnasnet)
    evaluator = nas.surrogate_evaluator(bench)

    def problem(*objectives: tuple[str, bool], constraints: tuple = ()) -> Any:
        return nas.Problem(evaluator, [nas.Objective(m, up) for m, up in objectives],
                           list(constraints), space=mnasnet)

    top1 = ("val_top1", True)
    return [
        _api("anb.load", "missing", "load('missing')", lambda: anb.load("missing"), "missing"),
        _api("anb.load", "dir", "load('adir')", lambda: anb.load("adir"), "adir"),
        _api("anb.load", "file", "load('afile.txt')", lambda: anb.load("afile.txt"),
             "afile.txt"),
        _api("anb.load", "corrupt", "load('corrupt.tar.gz')",
             lambda: anb.load("corrupt.tar.gz"), "corrupt.tar.gz"),
        _api("anb.load", "negative", "load(n_jobs=-5)", lambda: anb.load(n_jobs=-5), "n_jobs"),
        _api("Benchmark.query", "unknown-name", "query(['e9k9'])",
             lambda: bench.query(["e9k9"]), "e9k9"),
        _api("Benchmark.query", "wrong-space", "query([NB201_ARCH])",
             lambda: bench.query([NB201_ARCH]), NB201_ARCH),
        _api("Benchmark.query", "unknown-name", "query(metrics='bogus')",
             lambda: bench.query([ARCH], "bogus"), "bogus"),
        _api("Benchmark.query", "duplicate", "query(metrics=['val_top1', 'val_top1'])",
             lambda: bench.query([ARCH], ["val_top1", "val_top1"]), "val_top1"),
        _api("Benchmark.query", "negative", "query(noise=True, seed=-1)",
             lambda: bench.query([ARCH], noise=True, seed=-1), "seed"),
        _api("Benchmark.query", "absurd", "query(level=5)",
             lambda: bench.query([ARCH], level=5), "level"),
        _api("Sampler", "negative", "Sampler(chunk=0)",
             lambda: searchspace.Sampler(chunk=0, space=mnasnet), "chunk"),
        _api("Sampler", "unknown-name", "Sampler(space='bogus')",
             lambda: searchspace.Sampler(space="bogus"), "bogus"),
        _api("Sampler.sample", "negative", "Sampler().sample(-1)",
             lambda: searchspace.Sampler(space=mnasnet).sample(-1), "-1"),
        _api("Sampler.sample", "absurd", "Sampler().sample(10**12)",
             lambda: searchspace.Sampler(space=mnasnet).sample(10**12), "1000000000000",
             "1,000,000,000,000"),
        _api("get_space", "unknown-name", "get_space('bogus')",
             lambda: searchspace.get_space("bogus"), "bogus"),
        _api("get_space", "wrong-type", "get_space(3)", lambda: searchspace.get_space(3), "3"),
        _api("sample", "negative", "sample(-1)",
             lambda: searchspace.sample(-1, space=mnasnet), "-1"),
        _api("sample", "absurd", "sample(10**12)",
             lambda: searchspace.sample(10**12, space=mnasnet), "1000000000000",
             "1,000,000,000,000"),
        _api("sample", "unknown-name", "sample(2, shard='bogus')",
             lambda: searchspace.sample(2, shard="bogus", space=mnasnet), "bogus"),
        _api("as_arch", "unknown-name", "as_arch('e9k9')",
             lambda: searchspace.as_arch("e9k9", mnasnet), "e9k9"),
        _api("as_arch", "wrong-type", "as_arch(123)",
             lambda: searchspace.as_arch(123, mnasnet), "123"),
        _api("count", "negative", "count(arch, resolution=-1)",
             lambda: searchspace.count(arch, space=mnasnet, resolution=-1), "resolution"),
        _api("count", "negative", "count(arch, num_classes=0)",
             lambda: searchspace.count(arch, space=mnasnet, num_classes=0), "num_classes"),
        _api("encode", "unknown-name", "encode([ARCH], kind='bogus')",
             lambda: searchspace.encode([ARCH], kind="bogus", space=mnasnet), "bogus"),
        _api("encode", "unknown-name", "encode(['e9k9'])",
             lambda: searchspace.encode(["e9k9"], space=mnasnet), "e9k9"),
        _api("load_dataset", "missing", "load_dataset('missing.tar.gz')",
             lambda: records.load_dataset("missing.tar.gz", mnasnet), "missing.tar.gz"),
        _api("load_dataset", "corrupt", "load_dataset('corrupt.tar.gz')",
             lambda: records.load_dataset("corrupt.tar.gz", mnasnet), "corrupt.tar.gz"),
        _api("load_dataset", "empty", "load_dataset('empty.csv')",
             lambda: records.load_dataset("empty.csv", mnasnet), "empty.csv"),
        _api("load_dataset", "non-utf8", "load_dataset('latin1.txt')",
             lambda: records.load_dataset("latin1.txt", mnasnet), "latin1.txt"),
        _api("load_dataset", "truncated", "load_dataset('badrecords')",
             lambda: records.load_dataset("badrecords", mnasnet), "zz_truncated.json"),
        _api("surrogates.prepare", "missing", "prepare('missing.tar.gz')",
             lambda: surrogates.prepare("missing.tar.gz", space=mnasnet), "missing.tar.gz"),
        _api("surrogates.prepare", "unknown-name", "prepare('records', targets=['bogus'])",
             lambda: surrogates.prepare("records", targets=["bogus"], space=mnasnet), "bogus"),
        _api("surrogates.prepare", "unknown-name", "prepare('records', split='bogus')",
             lambda: surrogates.prepare("records", split="bogus", space=mnasnet), "bogus"),
        _api("surrogates.fit", "missing", "fit('missing.tar.gz', 'o')",
             lambda: surrogates.fit("missing.tar.gz", "o"), "missing.tar.gz"),
        _api("surrogates.fit", "user-file-as-output", "fit('records', 'afile.txt')",
             lambda: surrogates.fit("records", "afile.txt"), "afile.txt"),
        _api("surrogates.fit", "user-folder-as-output", "fit('records', 'userdir')",
             lambda: surrogates.fit("records", "userdir"), "userdir"),
        _api("surrogates.fit", "negative", "fit('dataset.tar.gz', 'o', members=0)",
             lambda: surrogates.fit("dataset.tar.gz", "o", members=0), "members"),
        _api("surrogates.fit", "negative", "fit('dataset.tar.gz', 'o', n_jobs=0)",
             lambda: surrogates.fit("dataset.tar.gz", "o", n_jobs=0), "n_jobs"),
        _api("surrogates.fit", "unknown-name", "fit('records', 'o', targets=['bogus'])",
             lambda: surrogates.fit("records", "o", targets=["bogus"]), "bogus"),
        _api("surrogates.fit", "unknown-name", "fit('records', 'o', space='bogus')",
             lambda: surrogates.fit("records", "o", space="bogus"), "bogus"),
        _api("surrogates.evaluate_artifact", "missing", "evaluate_artifact('missing', ...)",
             lambda: surrogates.evaluate_artifact("missing", "records"), "missing"),
        _api("surrogates.evaluate_artifact", "dir", "evaluate_artifact('adir', ...)",
             lambda: surrogates.evaluate_artifact("adir", "records"), "adir"),
        _api("surrogates.save", "user-file-as-output", "save(bench, 'afile.txt')",
             lambda: surrogates.save(bench, "afile.txt"), "afile.txt"),
        _api("surrogates.save", "user-folder-as-output", "save(bench, 'userdir')",
             lambda: surrogates.save(bench, "userdir"), "userdir"),
        _api("surrogates.load_ensemble", "missing", "load_ensemble('missing')",
             lambda: surrogates.load_ensemble("missing"), "missing"),
        _api("surrogates.make_family", "unknown-name", "make_family('bogus')",
             lambda: surrogates.make_family("bogus"), "bogus"),
        _api("adapt", "missing", "adapt('cpu', 'missing.csv')",
             lambda: adapt("cpu", "missing.csv"), "missing.csv"),
        _api("adapt", "empty", "adapt('cpu', 'empty.csv')", lambda: adapt("cpu", "empty.csv"),
             "empty.csv"),
        _api("adapt", "non-utf8", "adapt('cpu', 'latin1.txt')",
             lambda: adapt("cpu", "latin1.txt"), "latin1.txt"),
        _api("adapt", "unknown-name", "adapt('cpu', 'table.csv', base='bogus')",
             lambda: adapt("cpu", "table.csv", base="bogus"), "bogus"),
        _api("nas.Problem", "empty", "Problem(evaluator, [])", lambda: problem(), "objectives"),
        _api("nas.Problem", "unknown-name", "random_search(Problem(objective 'bogus'), 8)",
             lambda: nas.random_search(problem(("bogus", True)), 8), "bogus"),
        _api("nas.Problem", "duplicate", "Problem(val_top1 twice)",
             lambda: problem(top1, ("val_top1", False)), "val_top1"),
        _api("nas.Problem", "unknown-name", "random_search(Problem(constraint 'bogus'), 8)",
             lambda: nas.random_search(problem(top1, constraints=(
                 nas.Constraint("bogus", True, 1.0),)), 8), "bogus"),
        _api("nas.random_search", "negative", "random_search(problem, budget=0)",
             lambda: nas.random_search(problem(top1), budget=0), "budget"),
        _api("nas.random_search", "negative", "random_search(problem, 8, batch=0)",
             lambda: nas.random_search(problem(top1), 8, batch=0), "batch"),
        _api("nas.nsga2", "negative", "nsga2(problem, 8, population=0)",
             lambda: nas.nsga2(problem(top1), 8, population=0), "population"),
        _api("nas.regularized_evolution", "negative", "regularized_evolution(sample=0)",
             lambda: nas.regularized_evolution(problem(top1), 8, sample=0), "sample"),
        _api("nas.regularized_evolution", "absurd", "regularized_evolution(sample > population)",
             lambda: nas.regularized_evolution(problem(top1), 8, population=4, sample=16),
             "sample"),
        _api("integrations.AnbProblem", "unknown-name", "AnbProblem(bench, ['bogus'])",
             lambda: _integration("optuna", "AnbProblem")(bench, ["bogus"]), "bogus"),
        _api("integrations.AnbProblem", "unknown-name", "AnbProblem(constraint 'bogus<=1')",
             lambda: _integration("optuna", "AnbProblem")(bench, constraints=["bogus<=1"]),
             "bogus"),
        _api("integrations.AnbBlackbox", "unknown-name", "AnbBlackbox(bench, ['bogus'])",
             lambda: _integration("syne_tune", "AnbBlackbox")(bench, ["bogus"]), "bogus"),
        _api("integrations.AnbBlackbox", "unknown-name", "AnbBlackbox(constraint 'x>>1')",
             lambda: _integration("syne_tune", "AnbBlackbox")(bench, constraints=["x>>1"]),
             "x>>1"),
    ]


def _integration(module: str, name: str) -> Any:
    return getattr(importlib.import_module(f"anb.integrations.{module}"), name)


def _tree(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` with a digest of a file's bytes (a folder: "")."""
    return {str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest()
            if p.is_file() else "" for p in sorted(folder.rglob("*"))}


def _run_cli(argv: tuple[str, ...]) -> tuple[str, int | None, str]:
    """(kind of ending, exit code, output) of the console entry on ``argv``."""
    from anb.cli import app
    from anb.cli_support import run

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            run(app, list(argv))
        except SystemExit as end:
            code = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
            return "exit", code, out.getvalue()
        except BaseException:  # noqa: BLE001 - what the user would see as a traceback
            return "raised", None, out.getvalue() + traceback.format_exc()
    return "exit", 0, out.getvalue()


def _run_in(folder: Path, argv: tuple[str, ...]) -> tuple[str, int | None, str]:
    """:func:`_run_cli` with ``folder`` as the working folder."""
    with contextlib.chdir(folder):
        return _run_cli(argv)


def _run_call(call: Callable[[], Any]) -> tuple[str, int | None, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            result = call()
        except (ValueError, TypeError, OSError) as err:
            return "refused", None, f"{type(err).__name__}: {err}"
        except BaseException as err:  # noqa: BLE001
            return "raised", None, f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
    return "returned", 0, f"returned {type(result).__name__}: {str(result)[:200]}"


def _child(case: Case, inputs: Path, conn: Any) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    work = Path(tempfile.mkdtemp(prefix="anb-bad-"))
    shutil.copytree(inputs, work, dirs_exist_ok=True)
    os.chdir(work)
    os.environ.update({k: str(work / v) for k, v in case.env})
    before = _tree(work)
    ending = _run_cli(case.argv) if case.argv else _run_call(case.call)  # type: ignore[arg-type]
    after = _tree(work)
    changed = sorted(set(before.items()) ^ set(after.items()))
    conn.send((*ending, [path for path, _ in changed]))
    shutil.rmtree(work, ignore_errors=True)


def classify(case: Case, ending: str, code: int | None, output: str, changed: list[str]
             ) -> str:
    """The class of one outcome (see the module doc)."""
    if ending == "hang":
        return "wrong"
    if ending == "raised" or "Traceback (most recent call last)" in output:
        return "traceback"
    if changed and not case.writes:
        return "wrong"
    if ending == "returned" or (ending == "exit" and code == 0):
        return "wrong"
    if ending == "exit" and code != case.ok_exit:
        return "vague"
    named = any(name in output for name in case.names)
    return "clear" if named else "vague"


def run_case(case: Case, inputs: Path, hang: float) -> tuple[str, str]:
    """(class, what came back) of one case, run in a forked child."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(case, inputs, send))
    child.start()
    if receive.poll(hang):
        ending, code, output, changed = receive.recv()
    else:
        ending, code, output, changed = "hang", None, f"still running after {hang:.0f} s", []
    child.join(5)
    if child.is_alive():
        child.kill()
        child.join()
    if ending != "hang" and code is None and not output:
        ending, output = "raised", f"child died (exit {child.exitcode})"
    detail = f"exit {code}: " if ending == "exit" else ""
    if changed:
        detail += f"[left {', '.join(changed[:5])}] "
    return classify(case, ending, code, output, changed), detail + " ".join(output.split())[-600:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bad_inputs.tsv", help="where the non-clear cases go")
    parser.add_argument("--only", default="",
                        help="comma-separated targets to run (default: all)")
    parser.add_argument("--hang", type=float, default=60.0,
                        help="seconds after which a case counts as started work (wrong)")
    parser.add_argument("--jobs", type=int, default=1, help="cases run at once")
    args = parser.parse_args()
    import anb
    for module in PREIMPORT:  # imported once, before the children fork
        importlib.import_module(module)

    bench = anb.load(quiet=True)
    only = set(args.only.split(",")) - {""}
    cases = [c for c in [*cli_cases(), *api_cases(bench)] if not only or c.target in only]
    totals: Counter[str] = Counter()
    per_kind: dict[str, Counter[str]] = {}
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        inputs = Path(folder)
        prepare_inputs(inputs)
        with ThreadPoolExecutor(args.jobs) as pool:  # each thread waits on its own child
            outcomes = pool.map(lambda case: run_case(case, inputs, args.hang), cases)
            for i, (case, (verdict, detail)) in enumerate(zip(cases, outcomes, strict=True), 1):
                totals[verdict] += 1
                per_kind.setdefault(case.kind, Counter())[verdict] += 1
                print(f"{i}/{len(cases)} {verdict:9} {case.target} [{case.kind}] {case.label}",
                      file=sys.stderr, flush=True)
                if verdict != "clear":
                    rows.append("\t".join([case.target, case.kind, verdict, case.label,
                                           detail]))
    Path(args.out).write_text("target\tkind\tclass\tinput\toutcome\n"
                              + "".join(row + "\n" for row in rows))
    print(f"{'kind':24}" + "".join(f"{c:>10}" for c in CLASSES))
    for kind, counts in sorted(per_kind.items()):
        print(f"{kind:24}" + "".join(f"{counts[c]:>10}" for c in CLASSES))
    print(f"{'all ' + str(len(cases)):24}" + "".join(f"{totals[c]:>10}" for c in CLASSES))
    return 1 if totals["traceback"] or totals["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
