"""A Xilinx FPGA board (DPU) as a :class:`~anb.collect_throughput.targets.base.MeasureTarget`: the
board runner ``fpga_code/board/run_dpu.py`` driven over a ``[remote]`` transport.

A device config with an ``[fpga]`` table::

    kind = "fpga"
    name = "zcu102"                 # the board: zcu102 | vck190 (records: latency_zcu102 ...)
    [fpga]
    xmodels = "build/zcu102"        # compiled: <arch_id>.xmodel or <arch_id>/<arch_id>.xmodel
    fpga_code = "fpga_code"         # default: the checkout's fpga_code/ (outside the package)
    resolution = 224
    budget = 30.0                   # optional: timing budget per measurement (s)
    threads = 5                     # optional: throughput threads (default: the board's)
    sweep = false                   # sweep the board's thread counts
    in_flight = 2
    images_per_round = 1000
    stand_in = false                # no DPU: int8 ONNX "xmodels" run by ort_runner on the CPU
    stand_in_batch = 1
    [remote]
    transport = "ssh://root@zcu102.lab"   # or adb://SERIAL, local:// (see .remote)
    python = "python3"
    workdir = "/tmp/anb"

``measure`` pushes ``fpga_code/board/*.py``, the architectures' compiled models and the records
already in ``<out>/<board>/`` into a fresh board folder, runs ``run_dpu.py`` in batch mode (it
skips architectures whose record holds both keys under its protocol fingerprint and re-measures
others), pulls the records it wrote and removes the folder. The board's search space is
anb-mnasnet only (``board_core`` parses it).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import shlex
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anb.collect_throughput.device_kinds import FPGA, without_kind
from anb.collect_throughput.records.folder import check_results_space, result_path
from anb.collect_throughput.targets.base import MeasureSummary, MeasureTarget, RunSettings
from anb.collect_throughput.targets.remote import BoardFolder, RemoteSpec, board_folder
from anb.collect_throughput.transports import TransportError
from anb.io import atomic_write_json, read_json
from anb.searchspace.registry import DEFAULT_SPACE, get_space

log = logging.getLogger(__name__)
FPGA_CODE = Path(__file__).resolve().parents[3] / "fpga_code"
"""Where a checkout keeps ``fpga_code/`` (the package does not ship it)."""


def find_fpga_code(given: str | Path | None, device: str) -> Path:
    """The ``fpga_code`` folder: ``given``, else the checkout's, else ``./fpga_code``; an
    error says where it looked."""
    places = [Path(given).expanduser()] if given else [FPGA_CODE, Path.cwd() / "fpga_code"]
    for place in places:
        if (place / "board" / "run_dpu.py").is_file():
            return place
    raise ValueError(f"device {device!r}: fpga.fpga_code: no board/run_dpu.py under "
                     f"{[str(p) for p in places]}; allowed: the path of anb's fpga_code/ "
                     "folder (a checkout has it; the installed package does not)")


def board_names(code: Path) -> list[str]:
    """The boards ``run_dpu.py`` knows (``dpu_timing.BOARDS``, read from the file)."""
    import sys

    spec = importlib.util.spec_from_file_location("_anb_dpu_timing", code / "board" /
                                                  "dpu_timing.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(code / "board"))  # dpu_timing imports board_core beside it
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(code / "board"))
    return sorted(module.BOARDS)


@dataclass(frozen=True)
class FpgaDevice:
    """An FPGA board config (see module docstring)."""

    name: str
    xmodels: str
    remote: RemoteSpec
    fpga_code: str | None = None
    resolution: int = 224
    budget: float | None = None
    threads: int | None = None
    sweep: bool = False
    in_flight: int = 2
    images_per_round: int = 1000
    stand_in: bool = False
    stand_in_batch: int = 1
    space: str = DEFAULT_SPACE
    keys: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", (f"latency_{self.name}", f"throughput_{self.name}"))

    def code(self) -> Path:
        return find_fpga_code(self.fpga_code, self.name)

    def argv(self) -> list[str]:
        """``run_dpu.py``'s options beyond the batch-mode paths."""
        out = ["--device", self.name, "--resolution", str(self.resolution),
               "--in-flight", str(self.in_flight), "--images-per-round",
               str(self.images_per_round)]
        for flag, value in (("--budget", self.budget), ("--threads", self.threads)):
            if value is not None:
                out += [flag, str(value)]
        if self.sweep:
            out.append("--sweep")
        if self.stand_in:
            out += ["--stand-in", "--stand-in-batch", str(self.stand_in_batch)]
        return out


FPGA_FIELDS = {f.name for f in dataclasses.fields(FpgaDevice)} - {"name", "remote", "space",
                                                                   "keys"}


def device_from_mapping(data: Mapping[str, Any], overrides: Mapping[str, Any] | None = None,
                        *, space: str) -> FpgaDevice:
    """An :class:`FpgaDevice` from its TOML table; ``overrides`` (``anb measure``'s
    ``resolution``, ``threads``, ``stopping.budget_seconds``) replace its fields."""
    data = without_kind(data, FPGA)
    name = data.pop("name", None)
    if not isinstance(name, str) or not name:
        raise ValueError("name is missing; allowed: the board, e.g. 'zcu102'")
    table, remote = data.pop("fpga"), data.pop("remote", None)
    if data:
        raise ValueError(f"{sorted(data)[0]}={data[sorted(data)[0]]!r} is unknown; allowed: "
                         "kind, name, [fpga], [remote]")
    if not isinstance(remote, Mapping):
        raise ValueError("[remote] is missing; allowed: a table with transport = "
                         "'ssh://...', 'adb://...' or 'local://'")
    fpga = dict(table)
    unknown = sorted(set(fpga) - FPGA_FIELDS)
    if unknown:
        raise ValueError(f"fpga.{unknown[0]}={fpga[unknown[0]]!r} is unknown; allowed: "
                         f"{sorted(FPGA_FIELDS)}")
    if "xmodels" not in fpga:
        raise ValueError("fpga.xmodels is missing; allowed: the folder of compiled models "
                         "(<arch_id>.xmodel or <arch_id>/<arch_id>.xmodel)")
    for key, value in dict(overrides or {}).items():
        if key in ("resolution", "threads"):
            fpga[key] = value
        elif key == "stopping" and set(value) == {"budget_seconds"}:
            fpga["budget"] = value["budget_seconds"]
        else:
            raise ValueError(f"override {key}={value!r} is invalid; allowed for an FPGA board: "
                             "resolution, threads, budget")
    if space != DEFAULT_SPACE:
        raise ValueError(f"search space {space!r} is invalid; allowed: {DEFAULT_SPACE!r} (the "
                         "board runner measures it only)")
    if "runtime" in remote:
        raise ValueError(f"remote.runtime={remote['runtime']!r} is invalid for an FPGA board; "
                         "allowed: none (the board runs fpga_code/board/run_dpu.py)")
    spec = RemoteSpec.from_mapping(name, remote)
    device = FpgaDevice(name=name, remote=spec, **fpga)
    boards = board_names(device.code())
    if name not in boards:
        raise ValueError(f"name={name!r} is invalid; allowed: a board run_dpu.py knows {boards}")
    return device


def xmodel_for(folder: Path, arch_id: str) -> Path | None:
    """``<folder>/<arch_id>.xmodel`` or ``<folder>/<arch_id>/<arch_id>.xmodel`` (as run_dpu)."""
    for path in (folder / f"{arch_id}.xmodel", folder / arch_id / f"{arch_id}.xmodel"):
        if path.is_file():
            return path
    return None


class FpgaTarget(MeasureTarget):
    """An FPGA board through ``run_dpu.py`` over its transport (see module docstring)."""

    def __init__(self, config: FpgaDevice):
        self.config, self.name, self.keys = config, config.name, config.keys

    def measure(self, archs: Iterable[Any], out: str | Path,
                run: RunSettings) -> MeasureSummary:
        """The board's batch run over ``archs`` (compiled models: nothing is prepared in
        ``run.workdir``; the board shows no progress bar)."""
        space = get_space(self.config.space)
        archs = [space.arch(a) for a in archs]
        check_results_space(out, self.name, space.name)
        summary = MeasureSummary()
        folder = Path(self.config.xmodels).expanduser()
        todo = []
        for arch in archs:
            xmodel = xmodel_for(folder, arch.id)
            if xmodel is None:
                message = f"no {arch.id}.xmodel or {arch.id}/{arch.id}.xmodel under {folder}"
                if not run.keep_going:
                    raise ValueError(f"device {self.name!r}: {arch}: {message}")
                summary.failed[arch.id] = message
            else:
                todo.append((arch, xmodel))
        if todo:
            self._run_board(todo, Path(out), summary)
        for arch, _ in todo:
            if arch.id not in summary.measured and arch.id not in summary.failed:
                summary.skipped.append(arch.id)
        if summary.failed and not run.keep_going:
            arch_id, message = next(iter(summary.failed.items()))
            raise RuntimeError(f"device {self.name!r}: architecture {arch_id} failed on the "
                               f"board: {message} (measured ones are in "
                               f"{result_path(out, self.name, todo[0][0]).parent})")
        return summary

    def _run_board(self, todo: list[tuple[Any, Path]], out: Path,
                   summary: MeasureSummary) -> None:
        """Push code, models and existing records; run the batch; pull the new records."""
        spec, code = self.config.remote, self.config.code()
        with board_folder(spec.open(self.name), spec) as board, \
                tempfile.TemporaryDirectory(prefix="anb-fpga-") as tmp:
            board.transport.run(["mkdir", "-p", board.remote("board"), board.remote("xmodels"),
                                 board.remote(f"results/{self.name}")], "connect",
                                spec.connect_timeout + 30)
            for source in sorted((code / "board").glob("*.py")):
                board.push(source, f"board/{source.name}")
            for arch, xmodel in todo:
                board.push(xmodel, f"xmodels/{arch.id}.xmodel")
                stored = result_path(out, self.name, arch)
                if stored.is_file():
                    board.push(stored, f"results/{self.name}/{arch.id}.json")
            listing = Path(tmp) / "archs.txt"
            listing.write_text("".join(f"{arch}\n" for arch, _ in todo))
            board.push(listing, "archs.txt")
            run = self._run(board)
            ids = {str(arch): arch.id for arch, _ in todo}
            for line in run.stdout.splitlines():
                if line.startswith("{"):
                    summary.measured.append(json.loads(line)["arch_id"])
            for line in run.stderr.splitlines():
                if line.startswith("error: ") and ": " in line[7:]:
                    arch, message = line[7:].split(": ", 1)
                    summary.failed[ids.get(arch, arch)] = message
            if run.returncode not in (0, 1) or (run.returncode == 1 and not summary.failed):
                raise board.transport.error("run", f"run_dpu.py exited {run.returncode}: "
                                            f"{(run.stderr or run.stdout).strip()[-2000:]}")
            for arch, _ in todo:
                if arch.id in summary.measured:
                    self._pull(board, arch, Path(tmp), result_path(out, self.name, arch))

    def _run(self, board: BoardFolder) -> Any:
        argv = [*shlex.split(board.spec.python), board.remote("board/run_dpu.py"),
                *self.config.argv(), "--out", board.remote("results"),
                "--xmodels", board.remote("xmodels"), "--archs", board.remote("archs.txt")]
        return board.run(argv, "run")

    def _pull(self, board: BoardFolder, arch: Any, tmp: Path, target: Path) -> None:
        """The board's record merged into the stored one (its other keys kept)."""
        pulled = read_json(board.pull(f"results/{self.name}/{arch.id}.json",
                                      tmp / f"{arch.id}.json"))
        record = read_json(target) if target.is_file() else pulled
        for key in self.keys:
            entry = pulled["platform_perf"][key]
            entry["environment"] = {**entry.get("environment", {}),
                                    "transport": board.transport.url,
                                    "board_runtime": "run_dpu"}
            record.setdefault("platform_perf", {})[key] = entry
        atomic_write_json(target, record)

    def measure_job(self, arch: Any, workdir: Path) -> dict:
        out = Path(workdir) / "fpga-results"
        summary = self.measure([arch], out, RunSettings())
        arch = get_space(self.config.space).arch(arch)
        record = read_json(out / self.name / f"{arch.id}.json")
        if arch.id not in summary.measured + summary.skipped:
            raise TransportError(self.name, "run", f"{arch} was not measured", "command")
        perf = record["platform_perf"]
        values = {k: perf[k][f"{k.split('_', 1)[0]}_mean"] for k in self.keys}
        return {"record": record, "values": values,
                "latency_ms": values[f"latency_{self.name}"]}
