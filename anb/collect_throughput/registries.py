"""What measurement can be extended with, one :class:`~anb.plugins.Registry` per kind: back-ends
(this host), board runtimes, transports to a board, and device configs. Installed packages add
to them under the entry-point groups ``anb.backends``, ``anb.runtimes``, ``anb.transports`` and
``anb.devices``::

    [project.entry-points."anb.backends"]
    my-npu = "my_package.npu:NpuBackend"          # a Backend subclass
    [project.entry-points."anb.runtimes"]
    my-rt = "my_package.board:MyBoardRuntime"     # a remote.BoardRuntime subclass
    [project.entry-points."anb.transports"]
    serial = "my_package.serial:SerialTransport"  # a transports.Transport subclass (URL scheme)
    [project.entry-points."anb.devices"]
    my-npu-dev = "my_package:DEVICE"              # a device table (dict) or a TOML file's path

Only names live here (nothing is imported until asked for), so
:mod:`anb.collect_throughput.timing.protocol` validates a ``backend`` against :data:`BACKENDS`
without importing a back-end.
"""
from __future__ import annotations

from anb.plugins import Registry

_PKG = "anb.collect_throughput"

BACKENDS = Registry("backend", "anb.backends", {
    "torch": f"{_PKG}.backends.torch_backend:TorchBackend",
    "onnxruntime": f"{_PKG}.backends.onnxruntime_backend:OnnxRuntimeBackend",
    "onnxruntime-int8": f"{_PKG}.backends.int8_backend:OnnxRuntimeInt8Backend",
    "cuda": f"{_PKG}.backends.cuda:CudaBackend",
    "xla": f"{_PKG}.backends.xla:XlaBackend",
    "vart": f"{_PKG}.backends.vart:VartBackend",
    "openvino": f"{_PKG}.backends.openvino_backend:OpenVinoBackend",
    "openvino-int8": f"{_PKG}.backends.openvino_backend:OpenVinoInt8Backend",
    "tvm": f"{_PKG}.backends.tvm_backend:TvmBackend",
})
RUNTIMES = Registry("remote.runtime", "anb.runtimes", {
    "onnxruntime": f"{_PKG}.targets.remote:OnnxRuntimeBoard",
    "openvino": f"{_PKG}.targets.board_runtimes:OpenVinoBoard",
    "tvm": f"{_PKG}.targets.board_runtimes:TvmBoard",
    "resident": f"{_PKG}.targets.resident:ResidentBoard",
})
TRANSPORTS = Registry("transport", "anb.transports", {
    "local": f"{_PKG}.transports.local:LocalTransport",
    "ssh": f"{_PKG}.transports.ssh:SshTransport",
    "adb": f"{_PKG}.transports.adb:AdbTransport",
})
DEVICES = Registry("device", "anb.devices", {})
"""Device configs of installed packages (the shipped ones are TOML files in ``configs/``)."""
