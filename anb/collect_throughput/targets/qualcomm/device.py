"""Device stages over a transport: push the model and raw inputs, run
``snpe-throughput-net-run`` (throughput), ``snpe-net-run`` (outputs, per-layer outputs with
``--debug``, diagnostic log with ``--profiling_level detailed``), pull results back, and turn the
log into per-layer times with ``snpe-diagview --csv_format_version 2`` on the host.

The board is reached through a :class:`~anb.collect_throughput.transports.Transport`
(``local://``, ``ssh://``, ``adb://``); :func:`open_device_transport` opens the config's one.
"""
from __future__ import annotations

import logging
import posixpath
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from anb.collect_throughput.targets.qualcomm.config import QualcommDevice
from anb.collect_throughput.targets.qualcomm.host import to_nchw, write_input_list
from anb.collect_throughput.targets.qualcomm.parse import (
    parse_diagview_csv,
    parse_throughput,
    read_raw,
)
from anb.collect_throughput.targets.qualcomm.tools import find_tool, run_tool, tool_name
from anb.collect_throughput.transports import Transport, open_transport

log = logging.getLogger(__name__)

#: What the board's shell prints on stderr after a tool ran under :func:`with_peak_rss`.
PEAK_RSS_TAG = "anb-peak-rss-kb="


def with_peak_rss(argv: Sequence[str], interval: float = 0.05) -> list[str]:
    """``argv`` run by the board's POSIX shell while its ``VmHWM`` (the kernel's peak resident
    set of that process) is read from ``/proc/<pid>/status`` every ``interval`` s; the last
    value read is printed on stderr as ``anb-peak-rss-kb=<kB>`` and the tool's exit status is
    kept. Works on Linux and Android (toybox) shells; 0 where ``/proc`` is unreadable."""
    script = (f'"$@" & p=$!; peak=0; while kill -0 $p 2>/dev/null; do '
              f'v=$(sed -n "s/^VmHWM:[^0-9]*\\([0-9]*\\).*/\\1/p" /proc/$p/status '
              f'2>/dev/null); [ -n "$v" ] && peak=$v; sleep {interval}; done; wait $p; rc=$?; '
              f'echo "{PEAK_RSS_TAG}$peak" >&2; exit $rc')
    return ["sh", "-c", script, "anb-tool", *argv]


def peak_rss_bytes(stderr: str) -> int | None:
    """The peak printed by :func:`with_peak_rss` (None when absent or 0: not measured)."""
    values = [line.split("=", 1)[1] for line in stderr.splitlines()
              if line.startswith(PEAK_RSS_TAG)]
    kb = int(values[-1]) if values and values[-1].strip().isdigit() else 0
    return kb * 1024 or None


def open_device_transport(device: QualcommDevice) -> Transport:
    """The transport named by ``device.transport``."""
    return open_transport(device.transport, device.name)


class DeviceStages:
    """Run the SDK's device tools for one :class:`QualcommDevice` through ``transport``.

    Remote layout under ``device.remote_dir``: ``<tag>/model.dlc``, ``<tag>/inputs/*.raw``,
    ``<tag>/inputs.txt`` (remote paths), ``<tag>/output/Result_<i>/<tensor>.raw`` and
    ``<tag>/output/SNPEDiag_0.log``. The SDK's device binaries are expected on the board's PATH
    (``remote_bin`` prefixes them otherwise).
    """

    def __init__(self, device: QualcommDevice, transport: Transport, tag: str,
                 remote_bin: str = "", timeout: float = 600):
        if device.sdk != "snpe":
            raise ValueError(f"device {device.name!r}: sdk={device.sdk!r} has no device stages "
                             "in this build (host conversion only); allowed: 'snpe'")
        self.device, self.transport, self.timeout = device, transport, timeout
        self.root = posixpath.join(device.remote_dir, tag)
        self.remote_bin = remote_bin
        self.peak_rss: dict[str, int | None] = {}
        """Peak resident memory of the last throughput / net-run tool process (bytes)."""

    def _tool(self, role: str) -> str:
        name = tool_name(self.device.sdk, role)
        return posixpath.join(self.remote_bin, name) if self.remote_bin else name

    def prepare(self, dlc: Path, raw_inputs: Sequence[Path]) -> tuple[str, str, list[str]]:
        """Push the model and inputs; return (remote model, remote input list, remote raws)."""
        self.transport.run(["mkdir", "-p", posixpath.join(self.root, "inputs")], "prepare",
                           self.timeout)
        model = posixpath.join(self.root, "model.dlc")
        self.transport.push(Path(dlc), model, "push model")
        raws = []
        for raw in raw_inputs:
            remote = posixpath.join(self.root, "inputs", Path(raw).name)
            self.transport.push(Path(raw), remote, "push inputs")
            raws.append(remote)
        with tempfile.TemporaryDirectory(prefix="anb-qc-") as tmp:
            listing = write_input_list(raws, Path(tmp) / "inputs.txt")
            input_list = posixpath.join(self.root, "inputs.txt")
            self.transport.push(listing, input_list, "push input list")
        return model, input_list, raws

    def throughput_argv(self, model: str, raw: str, seconds: int | None = None) -> list[str]:
        d = self.device
        return [self._tool("throughput"), "--container", model, "--duration",
                str(seconds or d.duration), d.runtime_flag, "--perf_profile", d.perf_profile,
                "--input_raw", raw]

    def throughput(self, model: str, raw: str, seconds: int | None = None) -> tuple[float, str]:
        """Inferences/s over ``seconds`` (default ``device.duration``); also the tool's
        output."""
        result = self.transport.run(with_peak_rss(self.throughput_argv(model, raw, seconds)),
                                    "throughput", (seconds or self.device.duration) + self.timeout)
        self.peak_rss["throughput"] = peak_rss_bytes(result.stderr)
        return parse_throughput(result.stdout, self._tool("throughput")), result.stdout

    def net_run_argv(self, model: str, input_list: str, debug: bool = False) -> list[str]:
        d = self.device
        argv = [self._tool("run"), "--container", model, "--input_list", input_list,
                "--output_dir", posixpath.join(self.root, "output"), d.runtime_flag,
                "--perf_profile", d.perf_profile, "--profiling_level", "detailed",
                "--use_native_input_files", "--use_native_output_files"]
        return argv + (["--debug"] if debug else [])

    def net_run(self, model: str, input_list: str, debug: bool = False) -> None:
        self.transport.run(["rm", "-rf", posixpath.join(self.root, "output")], "clean output",
                           self.timeout)
        result = self.transport.run(with_peak_rss(self.net_run_argv(model, input_list, debug)),
                                    "net-run", self.timeout)
        self.peak_rss["latency"] = peak_rss_bytes(result.stderr)

    def pull_outputs(self, tensors: dict[str, tuple[int, ...]], index: int, local: Path,
                     ) -> dict[str, np.ndarray]:
        """Tensor name -> NCHW array of input ``index``; ``tensors`` maps names to ONNX
        (NCHW) shapes; device files are NHWC. Missing tensors are left out."""
        out: dict[str, np.ndarray] = {}
        local.mkdir(parents=True, exist_ok=True)
        for name, shape in tensors.items():
            fname = raw_file_name(name)
            remote = posixpath.join(self.root, "output", f"Result_{index}", fname)
            target = local / fname
            try:
                self.transport.pull(remote, target, "pull outputs")
            except RuntimeError:
                continue
            nhwc = (shape[0], shape[2], shape[3], shape[1]) if len(shape) == 4 else shape
            out[name] = to_nchw(read_raw(target, tuple(nhwc)))
        return out

    def layer_times(self, local: Path) -> tuple[dict[str, float], pd.DataFrame]:
        """Pull the diagnostic log and run ``snpe-diagview --csv_format_version 2`` on it."""
        local.mkdir(parents=True, exist_ok=True)
        log = local / "SNPEDiag_0.log"
        self.transport.pull(posixpath.join(self.root, "output", "SNPEDiag_0.log"), log,
                            "pull diagnostic log")
        csv_path = local / "layers_diag.csv"
        run_tool([find_tool(self.device.sdk, "profile"), "--input_log", str(log),
                  "--csv_format_version", "2", "--output", str(csv_path)])
        return parse_diagview_csv(csv_path.read_text())

    def cleanup(self) -> None:
        """Remove this run's folder on the board; best effort (an unreachable board must not
        hide the error that ended the run)."""
        try:
            self.transport.run(["rm", "-rf", self.root], "cleanup", self.timeout, check=False)
        except RuntimeError as err:
            log.warning("%s: cleanup of %s failed: %s", self.device.name, self.root, err)


def raw_file_name(tensor: str) -> str:
    """The device's file name of an output tensor (``/`` and ``:`` become ``_``)."""
    return tensor.replace("/", "_").replace(":", "_").lstrip("_") + ".raw"
