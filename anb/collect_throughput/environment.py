"""What the measurement ran on: host, CPU, threads, load and library versions."""
from __future__ import annotations

import os
import platform
import socket
import sys
from importlib import metadata
from typing import Any, Iterable

from anb.version import __version__

LIBRARIES = ("numpy", "torch", "onnxruntime", "onnx", "torch-xla")


def library_versions(names: Iterable[str] = LIBRARIES) -> dict[str, str]:
    """Installed versions of ``names`` (absent ones are left out)."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_environment() -> dict[str, Any]:
    """Host facts every record carries; back-ends add their device facts on top."""
    env: dict[str, Any] = {
        "anb_version": __version__,
        "host": socket.gethostname(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "libraries": library_versions(),
        "env_threads": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
                        if k in os.environ},
    }
    if hasattr(os, "sched_getaffinity"):
        env["cpu_affinity"] = sorted(os.sched_getaffinity(0))
    if hasattr(os, "getloadavg"):
        env["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return env
