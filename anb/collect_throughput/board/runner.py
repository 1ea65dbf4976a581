#!/usr/bin/env python3
"""anb board runner: time (or run) one model on this board with its runtime.

Self-contained: Python >= 3.7, numpy and the job's runtime (onnxruntime, OpenVINO or the Apache
TVM runtime); nothing else, no import of ``anb``. The host pushes this file, the model, the
inputs (``.npy``) and a job file, then runs::

    python3 runner.py JOB.json RESULT.json

JOB: ``{"mode": "time" | "outputs", "runtime": "onnxruntime" | "openvino" | "tvm", "model":
path, "inputs": path, "threads": int, "clock": "wall" | "cpu", "providers": [...],
"openvino_config": {...}, "lock": path, "lock_timeout": s, "sample_interval": s, "gpu": bool,
"warmup": {...}, "stopping": {...}}`` with the warm-up and stopping fields of
``anb.collect_throughput.timing.protocol`` (all given by the host). ``runtime`` (default
``onnxruntime``) says what runs the model: onnxruntime or OpenVINO's CPU plug-in (compiled with
``openvino_config``, the host back-end's settings) load an ONNX file; ``tvm`` loads a library
the host compiled (``.so``) into the Relax virtual machine on ``threads`` threads of TVM's pool.
Timing follows the same rules as local measurement (``anb.collect_throughput.timing.loop`` and
``stats``; tests/test_remote_board.py checks step for step that both decide alike): warm up
until the median of the last ``window`` steps is within ``tolerance`` of the window before,
pick ``inner`` steps per repetition to last ``min_rep_seconds``, repeat until the confidence
interval of the trimmed mean is within ``rel_ci`` (or ``max_reps`` / ``budget_seconds``).

RESULT: ``{"ok": true, "times_s": [...], "warmup_times_s": [...], "inner", "stop_reason",
"elapsed_seconds", "warmup_stop_reason", "timed_from", "timed_to", "environment": {...},
"utilisation": {...}}`` (mode ``time``; one measurement at a time per board: ``lock`` is held
while it runs) or ``{"ok": true, "outputs": path, ...}`` (mode ``outputs``). ``environment``
names the ``runtime`` and its ``runtime_version``. ``utilisation`` (:class:`Sampler`) holds the
CPU use (this process, the machine), RSS and GPU sampled every ``sample_interval`` s while the
model ran, and the peak RSS over that time. On failure ``{"ok": false, "step": ..., "kind":
"missing" | "rejected" | "timeout" | "command", "error": ...}`` and exit status 3.
"""
import json
import math
import os
import platform
import socket
import subprocess
import sys
import threading
import time
import traceback

FAILED = 3


class BoardError(Exception):
    def __init__(self, step, kind, message):
        Exception.__init__(self, message)
        self.step, self.kind = step, kind


# -- statistics (as anb.collect_throughput.timing.stats) -------------------------------------------
def normal_quantile(p):
    """Inverse standard normal CDF (Wichura's AS241, as ``statistics.NormalDist.inv_cdf``)."""
    q = p - 0.5
    if abs(q) <= 0.425:
        r = 0.180625 - q * q
        num = (((((((2509.0809287301226727 * r + 33430.575583588128105) * r
                    + 67265.770927008700853) * r + 45921.953931549871457) * r
                  + 13731.693765509461125) * r + 1971.5909503065514427) * r
                + 133.14166789178437745) * r + 3.387132872796366608)
        den = (((((((5226.495278852545925 * r + 28729.085735721942674) * r
                    + 39307.89580009271061) * r + 21213.794301586595867) * r
                  + 5394.1960214247511077) * r + 687.1870074920579083) * r
                + 42.313330701600911252) * r + 1.0)
        return q * num / den
    r = p if q <= 0.0 else 1.0 - p
    r = math.sqrt(-math.log(r))
    if r <= 5.0:
        r = r - 1.6
        num = (((((((7.7454501427834140764e-4 * r + 0.0227238449892691845833) * r
                    + 0.24178072517745061177) * r + 1.27045825245236838258) * r
                  + 3.64784832476320460504) * r + 5.7694972214606914055) * r
                + 4.6303378461565452959) * r + 1.42343711074968357734)
        den = (((((((1.05075007164441684324e-9 * r + 5.475938084995344946e-4) * r
                    + 0.0151986665636164571966) * r + 0.14810397642748007459) * r
                  + 0.68976733498510000455) * r + 1.6763848301838038494) * r
                + 2.05319162663775882187) * r + 1.0)
    else:
        r = r - 5.0
        num = (((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r
                    + 0.0012426609473880784386) * r + 0.026532189526576123093) * r
                  + 0.29656057182850489123) * r + 1.7848265399172913358) * r
                + 5.4637849111641143699) * r + 6.6579046435011037772)
        den = (((((((2.04426310338993978564e-15 * r + 1.4215117583164458887e-7) * r
                    + 1.8463183175100546818e-5) * r + 7.868691311456132591e-4) * r
                  + 0.0148753612908506148525) * r + 0.13692988092273580531) * r
                + 0.59983220655588793769) * r + 1.0)
    x = num / den
    return -x if q < 0.0 else x


def t_quantile(p, df):
    """Student-t quantile by the Cornish-Fisher expansion (as stats.t_quantile)."""
    z = normal_quantile(p)
    if df <= 0:
        return math.inf
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3 + g4 / df ** 4


def relative_ci(values, trim, confidence):
    """CI half-width of the trimmed mean (Tukey-McLaughlin) over the trimmed mean."""
    import numpy as np

    n = len(values)
    if n < 3:
        return math.inf
    x = np.sort(np.asarray(values, dtype=float))
    g = int(math.floor(trim * n))
    centre = float(x[g: n - g].mean())
    df = n - 2 * g - 1
    if df < 1:
        return math.inf
    winsorised = np.clip(x, x[g], x[n - g - 1])
    se = winsorised.std(ddof=1) / ((1 - 2 * g / n) * math.sqrt(n))
    half = float(t_quantile(0.5 + confidence / 2, df) * se)
    return half / abs(centre) if centre else math.inf


# -- timing loop (as anb.collect_throughput.timing.loop.run_loop, no compile counter) --------------
class Clock(object):
    """Wall (``perf_counter``) or the calling thread's CPU time (``thread_time``)."""

    def __init__(self, kind="wall"):
        if kind not in ("wall", "cpu"):
            raise BoardError("job", "command", "clock=%r is invalid; allowed: wall, cpu" % kind)
        self.read = time.perf_counter if kind == "wall" else time.thread_time
        self._t0 = 0.0

    def start(self):
        self._t0 = self.read()

    def stop(self):
        return self.read() - self._t0


def warmup_is_stable(times, rule):
    import numpy as np

    w = rule["window"]
    if len(times) < max(rule["min_steps"], 2 * w):
        return False
    last, before = np.median(times[-w:]), np.median(times[-2 * w: -w])
    return abs(last - before) <= rule["tolerance"] * before


def warm_up(step, clock, rule, now=time.perf_counter):
    times = []
    began = now()
    while True:
        clock.start()
        step()
        times.append(clock.stop())
        if warmup_is_stable(times, rule):
            return times, "stable"
        if len(times) >= rule["max_steps"]:
            return times, "max_steps"
        if now() - began >= rule["max_seconds"]:
            return times, "max_seconds"


def run_loop(step, clock, warmup, stopping, now=time.perf_counter):
    """Warm up, calibrate ``inner``, repeat until the stopping rule is met."""
    import numpy as np

    began = now()
    warm_times, warm_reason = warm_up(step, clock, warmup, now)
    per_step = float(np.median(warm_times[-warmup["window"]:]))
    inner = max(1, int(math.ceil(stopping["min_rep_seconds"] / per_step))) if per_step > 0 else 1
    times = []
    timed_began = now()
    while True:
        clock.start()
        for _ in range(inner):
            step()
        times.append(clock.stop() / inner)
        n = len(times)
        if n >= stopping["min_reps"] and relative_ci(times, stopping["trim"],
                                                     stopping["confidence"]) <= stopping["rel_ci"]:
            reason = "converged"
            break
        if n >= stopping["max_reps"]:
            reason = "max_reps"
            break
        if now() - timed_began >= stopping["budget_seconds"] and n >= 3:
            reason = "budget"
            break
    return {"times_s": times, "warmup_times_s": warm_times, "inner": inner,
            "stop_reason": reason, "elapsed_seconds": now() - began,
            "warmup_stop_reason": warm_reason}


# -- utilisation (also the target server's STATS) ---------------------------------------------
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


# -- the board ---------------------------------------------------------------------------------
def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip("\x00\n ")
    except (IOError, OSError):
        return None


def _cpu_model():
    text = _read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        if line.split(":")[0].strip() in ("model name", "Hardware", "Model", "cpu model"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _gpus():
    try:
        out = subprocess.check_output(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            stderr=subprocess.DEVNULL, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.decode(errors="replace").splitlines() if line.strip()]


def board_environment(np=None):
    """What the measurement ran on: board, OS, CPU/GPU, Python and numpy versions."""
    env = {"host": socket.gethostname(), "os": platform.platform(),
           "machine": platform.machine(), "python": platform.python_version(),
           "python_executable": sys.executable, "cpu": _cpu_model(),
           "cpu_count": os.cpu_count(), "gpus": _gpus(), "libraries": {}}
    model = _read("/proc/device-tree/model") or _read("/sys/firmware/devicetree/base/model")
    if model:
        env["board_model"] = model
    if hasattr(os, "sched_getaffinity"):
        env["cpu_affinity"] = sorted(os.sched_getaffinity(0))
    if hasattr(os, "getloadavg"):
        env["load_average"] = [round(x, 2) for x in os.getloadavg()]
    if np is not None:
        env["libraries"]["numpy"] = np.__version__
    return env


#: The runtimes this runner loads: the module imported and what to install on the board.
RUNTIMES = {"onnxruntime": ("onnxruntime", "onnxruntime"),
            "openvino": ("openvino", "openvino"),
            "tvm": ("tvm", "the Apache TVM runtime (pip: apache-tvm)")}


def _python_check():
    if sys.version_info < (3, 7):
        raise BoardError("import_runtime", "missing",
                         "Python %s is too old; the board runner needs Python >= 3.7"
                         % platform.python_version())


def load_numpy():
    _python_check()
    try:
        import numpy as np
    except ImportError as err:
        raise BoardError("import_runtime", "missing", "%s on the board's Python %s (%s); "
                         "install numpy there" % (err, platform.python_version(),
                                                  sys.executable)) from None
    return np


def load_runtime(name="onnxruntime"):
    """numpy and the runtime module ``name`` (one of :data:`RUNTIMES`)."""
    if name not in RUNTIMES:
        raise BoardError("job", "command", "runtime=%r is invalid; allowed: %s"
                         % (name, ", ".join(sorted(RUNTIMES))))
    np = load_numpy()
    module, package = RUNTIMES[name]
    try:
        runtime = __import__(module)
    except ImportError as err:
        raise BoardError("import_runtime", "missing", "%s on the board's Python %s (%s); "
                         "install numpy and %s there"
                         % (err, platform.python_version(), sys.executable, package)) from None
    return np, runtime


class BoardModel(object):
    """A loaded model: ``feed(batch)`` makes an input, ``run(feed)`` infers, ``array(out)``
    turns the output into numpy; ``version`` and ``facts`` go to the environment."""

    version = ""
    facts = {}  # type: dict

    def feed(self, batch):
        raise NotImplementedError

    def run(self, feed):
        raise NotImplementedError

    def array(self, out):
        raise NotImplementedError


class OrtModel(BoardModel):
    """onnxruntime: one session, sequential, ``threads`` intra-op threads."""

    def __init__(self, np, ort, job):
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(job.get("threads", 1))
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self.session = ort.InferenceSession(
                job["model"], options, providers=job.get("providers") or ["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime's own types; re-raised as a step
            raise BoardError("load_model", "rejected", "onnxruntime %s rejected the model: %s"
                             % (ort.__version__, err)) from err
        self.np, self.name = np, self.session.get_inputs()[0].name
        self.output = self.session.get_outputs()[0].name
        self.version = ort.__version__
        self.facts = {"ort_available_providers": list(ort.get_available_providers()),
                      "ort_device": ort.get_device(),
                      "ort_providers": list(self.session.get_providers()),
                      "ort_intra_op_threads": int(job.get("threads", 1))}

    def feed(self, batch):
        return {self.name: self.np.ascontiguousarray(batch)}

    def run(self, feed):
        return self.session.run([self.output], feed)[0]

    def array(self, out):
        return out


def _setting(value):
    """An OpenVINO property as the host back-end records it (a type's name, else text)."""
    return value.get_type_name() if hasattr(value, "get_type_name") else str(value)


class OpenVinoModel(BoardModel):
    """OpenVINO's CPU plug-in compiled with the host's ``openvino_config``."""

    def __init__(self, np, ov, job):
        core = ov.Core()
        config = job.get("openvino_config") or {}
        try:
            compiled = core.compile_model(core.read_model(job["model"]), "CPU", config)
        except Exception as err:  # OpenVINO's own types; re-raised as a step
            raise BoardError("load_model", "rejected", "OpenVINO %s rejected the model: %s"
                             % (ov.get_version(), err)) from err
        self.np, self.request = np, compiled.create_infer_request()
        self.version = ov.get_version()
        self.facts = {"openvino_device": "CPU",
                      "openvino_cpu": str(core.get_property("CPU", "FULL_DEVICE_NAME")),
                      "openvino_settings": {k: _setting(compiled.get_property(k))
                                            for k in config}}

    def feed(self, batch):
        return {0: self.np.ascontiguousarray(batch)}

    def run(self, feed):
        return self.request.infer(feed)[0]

    def array(self, out):
        return self.np.array(out)


class TvmModel(BoardModel):
    """The host-compiled library in the TVM runtime's Relax VM, ``threads`` pool threads."""

    def __init__(self, np, tvm, job):
        from tvm import relax

        tvm.get_global_func("runtime.config_threadpool")(1, int(job.get("threads", 1)))
        try:
            self.main = relax.VirtualMachine(tvm.runtime.load_module(job["model"]),
                                             tvm.cpu())["main"]
        except Exception as err:  # TVM's own types; re-raised as a step
            raise BoardError("load_model", "rejected", "TVM %s rejected the library: %s"
                             % (tvm.__version__, err)) from err
        self.np, self.tvm, self.version = np, tvm, tvm.__version__
        self.facts = {"tvm_threads": int(job.get("threads", 1))}

    def feed(self, batch):
        return self.tvm.runtime.tensor(self.np.ascontiguousarray(batch))

    def run(self, feed):
        return self.main(feed)

    def array(self, out):
        if not hasattr(out, "numpy"):  # a tuple of outputs: the first
            out = out[0]
        return out.numpy()


MODELS = {"onnxruntime": OrtModel, "openvino": OpenVinoModel, "tvm": TvmModel}


def board_lock(path, timeout):
    """Hold ``path`` locked (``flock``) so one measurement at a time runs on this board, even
    with several hosts driving it or a killed host's runner still finishing; the lock goes with
    the process. Returns the seconds waited."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    began = time.time()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return time.time() - began  # fd stays open until the process exits
        except (IOError, OSError):
            if time.time() - began > timeout:
                os.close(fd)
                raise BoardError("lock", "timeout", "another measurement held %s for over %g s"
                                 % (path, timeout)) from None
            time.sleep(0.1)


def run_job(job):
    name = job.get("runtime", "onnxruntime")
    np, module = load_runtime(name)
    waited = board_lock(job["lock"], float(job.get("lock_timeout", 600))) if job.get("lock") \
        else 0.0
    env = board_environment(np)
    env["board_lock_wait_s"] = round(waited, 3)
    model = MODELS[name](np, module, job)
    env["libraries"][name] = model.version
    env.update(model.facts, runtime=name, runtime_version=model.version)
    batches = np.load(job["inputs"])
    if batches.ndim == 4:
        batches = batches[None]
    sampler = Sampler(float(job.get("sample_interval", 0.1)), bool(job.get("gpu", True)))
    sampler.start()
    try:
        result = _infer(np, model, batches, job)
    finally:
        result_stats = sampler.stop()
    result.update({"ok": True, "environment": env, "utilisation": result_stats})
    return result


def _infer(np, model, batches, job):
    """Outputs of every batch (mode ``outputs``) or the timing loop's result (``time``)."""
    feeds = [model.feed(b) for b in batches]
    try:
        first = model.array(model.run(feeds[0]))
    except Exception as err:  # the runtime's own types; re-raised as a step
        raise BoardError("run_model", "rejected", "the model does not run on input of shape "
                         "%s: %s" % (tuple(batches[0].shape), err)) from err
    if job.get("mode", "time") == "outputs":
        outs = [first] + [model.array(model.run(f)) for f in feeds[1:]]
        np.save(job["outputs"], np.stack(outs))
        return {"outputs": job["outputs"]}
    state = {"i": 0}

    def step():
        model.run(feeds[state["i"] % len(feeds)])
        state["i"] += 1

    began = time.time()
    result = run_loop(step, Clock(job.get("clock", "wall")), job["warmup"], job["stopping"])
    result.update({"timed_from": began, "timed_to": time.time()})
    return result


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: runner.py JOB.json RESULT.json\n")
        return 2
    try:
        with open(argv[1]) as handle:
            job = json.load(handle)
        result, status = run_job(job), 0
    except BoardError as err:
        result = {"ok": False, "step": err.step, "kind": err.kind, "error": str(err)}
        status = FAILED
    except Exception as err:  # noqa: BLE001 - reported with its traceback, never hang silently
        result = {"ok": False, "step": "run", "kind": "command",
                  "error": "%s: %s" % (type(err).__name__, err),
                  "traceback": traceback.format_exc()}
        status = FAILED
    tmp = argv[2] + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(result, handle)
    os.rename(tmp, argv[2])
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
