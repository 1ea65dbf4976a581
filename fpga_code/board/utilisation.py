"""CPU use and peak RSS of this process while a measurement runs (Python 3.7, stdlib only).

A copy of the utilisation part of ``anb/collect_throughput/board/runner.py`` (the board runner
``anb`` pushes to boards), kept equal to it by tests/test_fpga_host.py: ``run_dpu.py`` records
the same ``peak_rss_bytes`` and ``utilisation`` of the DPU runner process as every other board.
"""
import os
import subprocess
import threading
import time


def proc_times():
    """This process's CPU seconds (user + system) and the machine's busy / total jiffies."""
    cpu = sum(os.times()[:2])
    busy = total = 0
    try:
        with open("/proc/stat") as handle:
            fields = [int(x) for x in handle.readline().split()[1:]]
        total, busy = sum(fields), sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)
    except (OSError, ValueError, IndexError):
        pass
    return cpu, busy, total


def _status_bytes(field):
    """``field`` (``VmRSS``, ``VmHWM``) of /proc/self/status in bytes (None if unreadable)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def rss_bytes():
    """This process's resident set now (VmRSS; without /proc, the lifetime peak ru_maxrss)."""
    rss = _status_bytes("VmRSS")
    if rss is not None:
        return rss
    try:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    except (ImportError, OSError):
        return None


def reset_peak_rss():
    """Reset this process's peak RSS (VmHWM) to its RSS now (Linux >= 4.0); False if not
    possible, then only the samples tell the peak."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return _status_bytes("VmHWM") is not None
    except (OSError, IOError):
        return False


def gpu_utilisation():
    try:
        out = subprocess.check_output(
            ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,"
             "nounits"], stderr=subprocess.DEVNULL, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [line.split(",") for line in out.decode().splitlines() if line.strip()]
    return [{"gpu_percent": float(r[0]), "memory_used_mib": float(r[1])} for r in rows]


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


class Sampler(threading.Thread):
    """Samples CPU (this process and the machine), RSS and GPU every ``interval`` s while a run
    goes on: ``start()``, the run, then ``stop()`` returns the summary.

    The peak RSS is exact where Linux lets a process reset its high-water mark (VmHWM, reset at
    ``start``, read at ``stop``; ``peak_rss_source`` says ``VmHWM``); elsewhere it is the largest
    sample (``sampled VmRSS``). Past ``max_samples`` rows, every other row is dropped and the
    interval doubled, so a long run keeps a bounded record. ``gpu``: also ask ``nvidia-smi``
    (where it answers) at every sample."""

    def __init__(self, interval=0.1, gpu=True, max_samples=300):
        threading.Thread.__init__(self)
        self.daemon = True
        self.interval, self.max_samples, self.samples = interval, max_samples, []
        self.halt = threading.Event()
        self.gpu = gpu and gpu_utilisation() is not None
        self.hwm = False
        self.rss_start = None

    def start(self):
        self.rss_start = rss_bytes()
        self.hwm = reset_peak_rss()
        threading.Thread.start(self)

    def sample(self, began, last):
        now = time.perf_counter()
        cpu, busy, total = proc_times()
        wall = now - last[0]
        row = {"t": round(now - began, 4), "rss_bytes": rss_bytes(),
               "process_cpu_percent": round(100.0 * (cpu - last[1]) / wall, 2) if wall else None,
               "system_cpu_percent": round(100.0 * (busy - last[2]) / (total - last[3]), 2)
               if total > last[3] else None}
        if self.gpu:
            row["gpus"] = gpu_utilisation()
        self.samples.append(row)
        if len(self.samples) > self.max_samples:
            self.samples = self.samples[1::2]
            self.interval *= 2
        return (now, cpu, busy, total)

    def run(self):
        began = time.perf_counter()
        last = (began,) + proc_times()
        while not self.halt.wait(self.interval):
            last = self.sample(began, last)
        self.sample(began, last)

    def stop(self):
        self.halt.set()
        self.join()
        hwm = _status_bytes("VmHWM") if self.hwm else None
        rss = [s["rss_bytes"] for s in self.samples if s["rss_bytes"] is not None]
        peak = max(rss + ([hwm] if hwm is not None else [])) if rss or hwm else None
        return {"interval_s": self.interval, "samples": self.samples,
                "peak_rss_bytes": peak,
                "peak_rss_source": "VmHWM" if hwm is not None else "sampled VmRSS",
                "rss_start_bytes": self.rss_start,
                "mean_process_cpu_percent": _mean(s["process_cpu_percent"]
                                                  for s in self.samples),
                "mean_system_cpu_percent": _mean(s["system_cpu_percent"]
                                                 for s in self.samples)}
