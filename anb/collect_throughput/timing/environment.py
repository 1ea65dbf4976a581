"""What the measurement ran on, and the machine's state at its start and end.

Static facts (:func:`host_environment`): host, OS, Python, CPU model, affinity, the frequency
governor of the CPUs in use, library versions. State (:func:`machine_state`, taken at the start
and the end of each measurement): load, CPU frequencies, other processes using a CPU, and for
NVIDIA GPUs (``nvidia-smi``, when present) clocks, power, temperature and performance state.
"""
from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

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


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpu_governors(cpus: Iterable[int] | None = None) -> dict[str, str]:
    """``scaling_governor`` of each CPU in ``cpus`` (default: this process's affinity);
    absent where cpufreq is not exposed (containers, VMs)."""
    cpus = sorted(os.sched_getaffinity(0)) if cpus is None else cpus
    found = {}
    for cpu in cpus:
        value = _read(Path(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"))
        if value:
            found[str(cpu)] = value
    return found


def cpu_frequencies_mhz(cpus: Iterable[int] | None = None) -> dict[str, float]:
    cpus = sorted(os.sched_getaffinity(0)) if cpus is None else cpus
    found = {}
    for cpu in cpus:
        value = _read(Path(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq"))
        if value and value.isdigit():
            found[str(cpu)] = int(value) / 1e3
    return found


def _cpu_ticks() -> dict[int, tuple[str, int]]:
    """``pid -> (name, utime + stime)`` of every process visible in ``/proc``."""
    ticks = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        text = _read(stat)
        if not text or ")" not in text:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        ticks[int(stat.parent.name)] = (name, int(fields[11]) + int(fields[12]))
    return ticks


def busy_processes(threshold_percent: float = 10.0, window_s: float = 0.1) -> list[dict]:
    """Other processes using more than ``threshold_percent`` of a CPU over ``window_s``
    (those visible in ``/proc``; empty where there is none), busiest first."""
    if not Path("/proc/self/stat").exists():
        return []
    hz = os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    first, began = _cpu_ticks(), time.perf_counter()
    time.sleep(window_s)
    second, elapsed = _cpu_ticks(), time.perf_counter() - began
    busy = []
    for pid, (name, ticks) in second.items():
        if pid == me or pid not in first:
            continue
        percent = 100.0 * (ticks - first[pid][1]) / hz / elapsed
        if percent > threshold_percent:
            busy.append({"pid": pid, "name": name, "cpu_percent": round(percent, 1)})
    return sorted(busy, key=lambda d: -d["cpu_percent"])


NVIDIA_QUERY = ("name", "driver_version", "pstate", "clocks.sm", "clocks.mem", "clocks.max.sm",
                "power.draw", "power.limit", "temperature.gpu", "utilization.gpu")


def parse_nvidia_smi(text: str) -> list[dict[str, str]]:
    """Rows of ``nvidia-smi --query-gpu=<NVIDIA_QUERY> --format=csv,noheader,nounits``."""
    rows = []
    for line in text.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(NVIDIA_QUERY):
            rows.append(dict(zip(NVIDIA_QUERY, values, strict=True)))
    return rows


def nvidia_state() -> list[dict[str, str]] | None:
    """Per-GPU clocks, power, temperature (None without ``nvidia-smi``)."""
    if not shutil.which("nvidia-smi"):
        return None
    out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(NVIDIA_QUERY)}",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True,
                         timeout=30)
    return parse_nvidia_smi(out.stdout) if out.returncode == 0 else None


def machine_state() -> dict[str, Any]:
    """What can change between the start and the end of a measurement."""
    state: dict[str, Any] = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if hasattr(os, "getloadavg"):
        state["load_average"] = [round(x, 2) for x in os.getloadavg()]
    freqs = cpu_frequencies_mhz()
    if freqs:
        state["cpu_mhz"] = freqs
    state["busy_processes"] = busy_processes()
    gpus = nvidia_state()
    if gpus is not None:
        state["gpus"] = gpus
    return state


def check_pinnable(threads: int) -> list[int]:
    """The CPUs this process may use; ValueError if ``threads`` of them cannot be pinned."""
    allowed = sorted(os.sched_getaffinity(0))
    if threads > len(allowed):
        raise ValueError(f"threads={threads} cannot be pinned: only {len(allowed)} CPU(s) "
                         f"allowed ({allowed})")
    return allowed


def pin_cpus(threads: int) -> list[int]:
    """Pin this process to the last ``threads`` CPUs it may use; return them."""
    allowed = check_pinnable(threads)
    chosen = allowed[-threads:]
    os.sched_setaffinity(0, chosen)
    return chosen


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
        env["cpu_governor"] = cpu_governors()
    if hasattr(os, "getloadavg"):
        env["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return env
