"""Measure on a board the host reaches over a transport (SSH, ADB, or this machine).

A device config of ``kind = "remote"`` (:class:`RemoteTarget`) has a ``[remote]`` table::

    kind = "remote"
    [remote]
    transport = "ssh://pi@rpi4.lab:22"   # or "adb://SERIAL", "local://"
    runtime = "onnxruntime"              # what runs the model on the board (registries.RUNTIMES):
                                         # onnxruntime, openvino, tvm (the runner), resident
    workdir = "/tmp/anb"                 # files go to <workdir>/job-<id>/, removed afterwards
    python = "python3"                   # the board's interpreter (>= 3.7 + numpy + runtime)
    timeout = 900                        # seconds for one measurement on the board
    connect_timeout = 10
    identity = "~/.ssh/anb_board"        # transport options: identity, known_hosts, ssh_options,
    known_hosts = "~/.ssh/known_hosts"   # adb (path of the adb binary)
    # runtime "tvm": the board's LLVM target and the compiler linking the library (defaults:
    # this host's CPU and compiler)
    tvm_target = {kind = "llvm", mtriple = "aarch64-linux-gnu"}
    tvm_cc = "aarch64-linux-gnu-g++"

For every protocol of the device the host prepares the model (the same ONNX file local
measurement uses; for ``tvm`` the library compiled from it), pushes it with the inputs and the
board runner into a fresh folder, runs it, pulls the result and removes the folder (and kills
the runner if it hung). Timing happens on the board under the protocol's warm-up and stopping
rules; the record is the one local measurement writes (plus the board's environment and the
transport, and the CPU use and peak RSS the runner sampled while the model ran), so ``anb
merge`` joins it the same way.

A board runtime is a :class:`BoardRuntime` named in
:data:`~anb.collect_throughput.registries.RUNTIMES` (built-in, ``RUNTIMES.register`` or an
``anb.runtimes`` entry point); it uses a :class:`BoardFolder` to push, run and pull.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import shlex
import tempfile
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anb.collect_throughput.board import RUNNER
from anb.collect_throughput.registries import RUNTIMES
from anb.collect_throughput.targets.protocol_target import ProtocolTarget
from anb.collect_throughput.timing.network import measured_arch, measured_resolution
from anb.collect_throughput.timing.protocol import DeviceConfig, Protocol
from anb.collect_throughput.timing.result import Measurement, utilisation_fields
from anb.collect_throughput.transports import (
    CommandResult,
    Transport,
    TransportError,
    open_transport,
)
from anb.version import __version__

log = logging.getLogger(__name__)
TRANSPORT_OPTIONS = ("identity", "known_hosts", "ssh_options", "adb", "token_file")


@dataclass(frozen=True)
class RemoteSpec:
    """The ``[remote]`` table of a device config (see module docstring)."""

    transport: str
    runtime: str = "onnxruntime"
    workdir: str = "/tmp/anb"
    python: str = "python3"
    timeout: float = 900.0
    connect_timeout: float = 10.0
    tvm_target: dict[str, Any] | None = None
    tvm_cc: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, device: str, data: Mapping[str, Any]) -> RemoteSpec:
        data = dict(data)
        known = {f.name for f in dataclasses.fields(cls)} - {"options"}
        options = {k: data.pop(k) for k in TRANSPORT_OPTIONS if k in data}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"device {device!r}: remote.{unknown[0]}={data[unknown[0]]!r} is "
                             f"unknown; allowed: {sorted(known | set(TRANSPORT_OPTIONS))}")
        if "transport" not in data:
            raise ValueError(f"device {device!r}: remote.transport is missing; allowed: "
                             "ssh://user@host:port, adb://SERIAL, local://")
        spec = cls(**data, options=options)
        for name in ("timeout", "connect_timeout"):
            value = getattr(spec, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"device {device!r}: remote.{name}={value!r} is invalid; "
                                 "allowed: a positive number of seconds")
        if spec.runtime not in RUNTIMES:
            raise ValueError(f"device {device!r}: remote.runtime={spec.runtime!r} is invalid; "
                             f"allowed: {RUNTIMES.names()}")
        if (spec.runtime == "resident") != spec.transport.startswith("tcp://"):
            raise ValueError(f"device {device!r}: remote.transport={spec.transport!r} with "
                             f"remote.runtime={spec.runtime!r} is invalid; allowed: "
                             "transport 'tcp://HOST:PORT' exactly with runtime 'resident' (a "
                             "board running board/server.py)")
        spec.check_tvm(device)
        return spec

    def check_tvm(self, device: str) -> None:
        """``tvm_target`` / ``tvm_cc`` only with runtime ``tvm`` (or ``resident``, which runs
        TVM for the ``tvm`` back-end); the target an LLVM table."""
        for name in ("tvm_target", "tvm_cc"):
            if getattr(self, name) is not None and self.runtime not in ("tvm", "resident"):
                raise ValueError(f"device {device!r}: remote.{name} is given with "
                                 f"remote.runtime={self.runtime!r}; allowed: only with "
                                 "runtime 'tvm' or 'resident'")
        target = self.tvm_target
        if target is not None and not (isinstance(target, dict) and target.get("kind") == "llvm"):
            raise ValueError(f"device {device!r}: remote.tvm_target={target!r} is invalid; "
                             'allowed: an LLVM target table, e.g. {kind = "llvm", mtriple = '
                             '"aarch64-linux-gnu"}')
        if self.tvm_cc is not None and not (isinstance(self.tvm_cc, str) and self.tvm_cc):
            raise ValueError(f"device {device!r}: remote.tvm_cc={self.tvm_cc!r} is invalid; "
                             "allowed: a C++ compiler command, e.g. 'aarch64-linux-gnu-g++'")

    def open(self, device: str) -> Transport:
        return open_transport(self.transport, device,
                              {**self.options, "connect_timeout": self.connect_timeout})


class BoardFolder:
    """One job's folder on the board: push files into it, run commands, pull files back."""

    def __init__(self, transport: Transport, spec: RemoteSpec):
        self.transport, self.spec = transport, spec
        self.path = f"{spec.workdir.rstrip('/')}/job-{uuid.uuid4().hex[:12]}"
        self.hung = False

    def remote(self, name: str) -> str:
        return f"{self.path}/{name}"

    def push(self, local: Path, name: str) -> str:
        target = self.remote(name)
        self.transport.push(Path(local), target, step=f"push {name}",
                            timeout=self.spec.connect_timeout + 300)
        return target

    def pull(self, name: str, local: Path) -> Path:
        self.transport.pull(self.remote(name), Path(local), step=f"pull {name}",
                            timeout=self.spec.connect_timeout + 300)
        return Path(local)

    def run(self, argv: list[str], step: str, timeout: float | None = None) -> CommandResult:
        """Run ``argv`` in the folder (its pid kept, so a hung run can be killed); exit status
        127 (command not found) becomes a ``missing`` error naming the command."""
        line = f"cd {shlex.quote(self.path)} && echo $$ > .pid && exec {shlex.join(argv)}"
        try:
            result = self.transport.run(["sh", "-c", line], step,
                                        timeout or self.spec.timeout, check=False)
        except TransportError as err:
            self.hung = err.kind == "timeout"
            raise
        if result.returncode == 127:
            raise self.transport.error(step, f"{argv[0]!r} not found on the board: "
                                       f"{result.stderr or result.stdout}", "missing")
        return result

    def open(self) -> None:
        self.transport.run(["mkdir", "-p", self.path], "connect",
                           self.spec.connect_timeout + 30)

    def close(self) -> None:
        """Kill a hung run, remove the folder; failures here are logged, never raised."""
        steps = []
        if self.hung:
            steps.append((["sh", "-c", f"kill -9 $(cat {shlex.quote(self.remote('.pid'))})"],
                          "kill hung run"))
        steps.append((["rm", "-rf", self.path], "cleanup"))
        for argv, step in steps:
            try:
                self.transport.run(argv, step, self.spec.connect_timeout + 30, check=False)
            except TransportError as err:
                log.warning("%s", err)


@contextmanager
def board_folder(transport: Transport, spec: RemoteSpec) -> Iterator[BoardFolder]:
    folder = BoardFolder(transport, spec)
    folder.open()
    try:
        yield folder
    finally:
        folder.close()


class BoardRuntime(ABC):
    """Runs a prepared model on the board and returns the :class:`Measurement`; ``spec``: the
    device's ``[remote]`` table (None where only models are prepared without one)."""

    name: str = ""

    def __init__(self, spec: RemoteSpec | None = None) -> None:
        self.spec = spec

    def check(self, protocol: Protocol) -> None:  # noqa: B027 - optional: accepts every one
        """Reject a protocol this runtime cannot run (clear error naming device and fields)."""

    @abstractmethod
    def model(self, arch: Any, protocol: Protocol, workdir: Path) -> tuple[Path, dict]:
        """Prepare the model file on the host (export, convert...), cached in ``workdir`` (a
        second call finds it there); returns it and facts for the record (e.g. quantization)."""

    @contextmanager
    def connect(self, spec: RemoteSpec, device: str) -> Iterator[Any]:
        """What :meth:`measure` and :meth:`outputs` talk to: by default a fresh
        :class:`BoardFolder` over the spec's transport (a resident runtime yields its client)."""
        with board_folder(spec.open(device), spec) as folder:
            yield folder

    @abstractmethod
    def measure(self, folder: Any, arch: Any, protocol: Protocol, model: Path,
                ) -> Measurement:
        """Measure ``model`` on the board through ``folder`` (what :meth:`connect` yields)."""

    def outputs(self, folder: Any, protocol: Protocol, model: Path,
                images: np.ndarray) -> np.ndarray:
        """The model's outputs for ``images`` (float32, the model's input layout), computed
        on the board."""
        raise NotImplementedError(f"board runtime {self.name!r} does not return outputs")


def _board_failure(transport: Transport, step: str, result: dict[str, Any]) -> TransportError:
    kind = result.get("kind", "command")
    return transport.error(result.get("step", step), result.get("error", "failed"),
                           kind if kind in ("missing", "rejected", "timeout") else "command")


class OnnxRuntimeBoard(BoardRuntime):
    """onnxruntime on the board through the self-contained runner (``board/runner.py``); the
    runner's other runtimes (:mod:`.board_runtimes`) differ in the back-ends they take, the
    model they push and the job fields they add."""

    name = "onnxruntime"
    RUNNER_RUNTIME = "onnxruntime"  # the runner's ``runtime`` job field (a plug-in may rename)
    BACKENDS: tuple[str, ...] = ("onnxruntime", "onnxruntime-int8")

    def check(self, protocol: Protocol) -> None:
        from anb.collect_throughput.backends import get_backend

        if protocol.backend not in self.BACKENDS:
            raise ValueError(f"device {protocol.device!r}: backend={protocol.backend!r} cannot "
                             f"run on a board with the {self.name} runtime; allowed: "
                             f"{list(self.BACKENDS)}")
        try:
            get_backend(protocol.backend).check(protocol)
        except ValueError as err:
            raise ValueError(f"device {protocol.device!r}: {err}") from None

    def model(self, arch: Any, protocol: Protocol, workdir: Path) -> tuple[Path, dict]:
        """The host back-end's model file (its ``model_path``: ONNX, fp32 or int8)."""
        from anb.collect_throughput.backends import get_backend

        self.check(protocol)
        return get_backend(protocol.backend).model_path(  # type: ignore[attr-defined]
            arch, protocol, Path(workdir))

    def job_fields(self, protocol: Protocol) -> dict[str, Any]:
        """Fields of the runner's job particular to this runtime."""
        return {}

    def board_model(self, model: Path, protocol: Protocol, shape: tuple[int, ...]) -> Path:
        """The file the board loads for ``model`` (an ONNX file) at input ``shape``."""
        return model

    def _run(self, folder: BoardFolder, protocol: Protocol, model: Path, batches: np.ndarray,
             mode: str, tmp: Path) -> dict[str, Any]:
        """Push runner, model, inputs and job; run; pull the result (raised if not ok)."""
        np.save(tmp / "inputs.npy", batches)
        name = "model" + model.suffix
        job = {"mode": mode, "runtime": self.RUNNER_RUNTIME, "model": folder.remote(name),
               "inputs": folder.remote("inputs.npy"), "outputs": folder.remote("outputs.npy"),
               "threads": protocol.threads, "clock": protocol.clock,
               "lock": f"{folder.spec.workdir.rstrip('/')}/.board.lock",
               "lock_timeout": folder.spec.timeout / 2,
               "warmup": dataclasses.asdict(protocol.warmup),
               "stopping": dataclasses.asdict(protocol.stopping), **self.job_fields(protocol)}
        (tmp / "job.json").write_text(json.dumps(job))
        folder.push(RUNNER, "runner.py")
        folder.push(model, name)
        folder.push(tmp / "inputs.npy", "inputs.npy")
        folder.push(tmp / "job.json", "job.json")
        run = folder.run([*shlex.split(folder.spec.python), folder.remote("runner.py"),
                          folder.remote("job.json"), folder.remote("result.json")], "run")
        try:
            result = json.loads(folder.pull("result.json", tmp / "result.json").read_text())
        except TransportError:
            raise folder.transport.error("run", f"the board runner exited {run.returncode} "
                                         f"without a result: {run.stderr or run.stdout}"
                                         ) from None
        if not result.get("ok"):
            raise _board_failure(folder.transport, "run", result)
        return result

    def outputs(self, folder: BoardFolder, protocol: Protocol, model: Path,
                images: np.ndarray) -> np.ndarray:
        batches = np.asarray(images, dtype=np.float32)[:, None]
        model = self.board_model(Path(model), protocol, tuple(batches.shape[1:]))
        with tempfile.TemporaryDirectory(prefix="anb-board-") as tmp:
            self._run(folder, protocol, model, batches, "outputs", Path(tmp))
            out = folder.pull("outputs.npy", Path(tmp) / "outputs.npy")
            return np.load(out).reshape(len(images), -1)

    def measure(self, folder: BoardFolder, arch: Any, protocol: Protocol, model: Path,
                ) -> Measurement:
        from anb.collect_throughput.timing.inputs import make_inputs

        with tempfile.TemporaryDirectory(prefix="anb-board-") as tmp:
            result = self._run(folder, protocol, model, np.stack(make_inputs(protocol, arch)),
                               "time", Path(tmp))
        env = {**result["environment"], "anb_version": __version__, "device_name": protocol.device,
               "transport": folder.transport.url, "board_runtime": self.name}
        return Measurement(
            arch=str(arch), arch_id=arch.id, device=protocol.device, kind=protocol.kind,
            batch=protocol.batch, resolution=measured_resolution(protocol, arch),
            precision=protocol.precision, times_s=result["times_s"],
            warmup_times_s=result["warmup_times_s"], inner=result["inner"],
            stop_reason=result["stop_reason"],
            protocol=protocol.as_dict(), environment=env,
            extra={"warmup_stop_reason": result["warmup_stop_reason"], "warmup_compiles": 0,
                   "elapsed_seconds": result["elapsed_seconds"],
                   "board_timed_from": result["timed_from"], "board_timed_to": result["timed_to"],
                   **utilisation_fields(result.get("utilisation"))})


def get_runtime(name: str, spec: RemoteSpec | None = None) -> BoardRuntime:
    """The board runtime registered as ``name`` in :data:`RUNTIMES`, for ``spec``."""
    cls = RUNTIMES.load(name)
    if not (isinstance(cls, type) and issubclass(cls, BoardRuntime)):
        raise ValueError(f"{RUNTIMES.where(name)} names {cls!r}, not a BoardRuntime subclass")
    return cls(spec)


def remote_spec(device: DeviceConfig) -> RemoteSpec:
    """The device's ``[remote]`` table, parsed and checked against each protocol (its
    back-end runs on the runtime); a clear error if it has none."""
    table = getattr(device, "remote", None)
    if not table:
        raise ValueError(f"device {device.name!r} has no [remote] table (transport, runtime...)")
    spec = RemoteSpec.from_mapping(device.name, table)
    runtime = get_runtime(spec.runtime, spec)
    for protocol in device.protocols:
        runtime.check(protocol)
    return spec


class RemoteTarget(ProtocolTarget):
    """A protocol config measured on its board over ``[remote]`` (see module docstring): one
    board folder per architecture and protocol, models prepared on the host."""

    where = "board"

    def board(self) -> tuple[RemoteSpec, BoardRuntime]:
        """The ``[remote]`` table, checked against every protocol, and its board runtime."""
        spec = remote_spec(self.config)
        return spec, get_runtime(spec.runtime, spec)

    def measure_block(self, protocol: Protocol, archs: list[Any],
                      workdir: Path) -> list[Measurement]:
        """``protocol`` measured on the board for each of ``archs``, one after another."""
        spec, runtime = self.board()
        out = []
        for arch in (measured_arch(protocol, a) for a in archs):
            path, extra = runtime.model(arch, protocol, Path(workdir))
            with runtime.connect(spec, self.name) as folder:
                m = runtime.measure(folder, arch, protocol, path)
            m.extra.update(extra)
            out.append(m)
        return out

    def prepare_model(self, arch: Any, protocol: Protocol,
                      workdir: Path) -> tuple[Path, dict[str, Any]]:
        spec = remote_spec(self.config)
        return get_runtime(spec.runtime, spec).model(arch, protocol, workdir)

    def outputs(self, protocol: Protocol, model: str | Path, images: np.ndarray) -> np.ndarray:
        """``model``'s outputs for ``images`` computed on the board (one row per image)."""
        spec, runtime = self.board()
        with runtime.connect(spec, self.name) as folder:
            return runtime.outputs(folder, protocol, Path(model), images)
