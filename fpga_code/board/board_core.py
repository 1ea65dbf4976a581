"""What a board runner needs from anb, for Python 3.7 + numpy only (no ``anb`` import).

Board images (ZCU102 / VCK190 Petalinux) have Python 3, numpy, ``xir`` and ``vart`` and
nothing else, so this file carries its own copies of: the architecture string parser and id,
the robust statistics of :mod:`anb.collect_throughput.timing.stats`, the warm-up + stopping loop of
:mod:`anb.collect_throughput.timing.loop`, the protocol fingerprint of
:mod:`anb.collect_throughput.timing.protocol` and the ``platform_perf`` entry of
:mod:`anb.collect_throughput.timing.result`. ``tests/test_fpga_host.py`` checks every copy
against the original, so a record written here is one ``anb merge`` joins.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
import time

import numpy as np

# -- architectures (anb.searchspace.arch) ----------------------------------------------------
_STAGE = re.compile(r"e(\d+)k(\d+)l(\d+)(se)?")
ALLOWED = {"e": (1, 4, 6), "k": (3, 5), "l": (1, 2, 3)}
STAGES = 7
LONG_STAGE = 5  # stage 5 also allows l = 4


def parse_arch(text):
    """``[(e, k, l, se), ...]`` of an architecture string such as ``e1k3l1se-e6k3l2-...``."""
    parts = text.strip().split("-")
    if len(parts) != STAGES:
        raise ValueError("arch {!r}: {} stages, need {}".format(text, len(parts), STAGES))
    stages = []
    for i, part in enumerate(parts):
        m = _STAGE.fullmatch(part)
        if not m:
            raise ValueError("arch {!r}: stage {} {!r} is not e<E>k<K>l<L>[se]".format(
                text, i, part))
        e, k, depth = int(m.group(1)), int(m.group(2)), int(m.group(3))
        layers = ALLOWED["l"] + ((4,) if i == LONG_STAGE else ())
        if e not in ALLOWED["e"] or k not in ALLOWED["k"] or depth not in layers:
            raise ValueError("arch {!r}: stage {} {!r} is outside the space".format(text, i, part))
        stages.append((e, k, depth, m.group(4) is not None))
    return stages


def arch_string(stages):
    return "-".join("e{}k{}l{}{}".format(e, k, depth, "se" if se else "")
                    for e, k, depth, se in stages)


def arch_id(text):
    """16 hex digits of SHA-256 over the canonical string (``anb.searchspace.Arch.id``)."""
    canonical = arch_string(parse_arch(text))
    return hashlib.sha256("anb-arch:{}".format(canonical).encode()).hexdigest()[:16]


def anb_dict(text):
    """The dataset's ``block{i}_{e,k,l,se}`` mapping."""
    out = {}
    for i, (e, k, depth, se) in enumerate(parse_arch(text)):
        out.update({"block{}_e".format(i): e, "block{}_k".format(i): k,
                    "block{}_l".format(i): depth, "block{}_se".format(i): se})
    return out


# -- statistics (anb.collect_throughput.timing.stats) ----------------------------------------------
def normal_quantile(p):
    """Inverse standard normal CDF by bisection on ``math.erf`` (``statistics.NormalDist`` is
    Python 3.8+)."""
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def t_quantile(p, df):
    z = normal_quantile(p)
    if df <= 0:
        return math.inf
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3 + g4 / df ** 4


def relative_ci(values, trim=0.1, confidence=0.95):
    x = np.sort(np.asarray(values, dtype=float))
    n = x.size
    if n < 3:
        return math.inf
    g = int(math.floor(trim * n))
    df = n - 2 * g - 1
    if df < 1:
        return math.inf
    centre = float(x[g:n - g].mean())
    winsorised = np.clip(x, x[g], x[n - g - 1])
    se = winsorised.std(ddof=1) / ((1 - 2 * g / n) * math.sqrt(n))
    half = float(t_quantile(0.5 + confidence / 2, df) * se)
    return half / abs(centre) if centre else math.inf


def summarize(values, trim=0.1, confidence=0.95):
    x = np.asarray(values, dtype=float)
    s = np.sort(x)
    g = int(math.floor(trim * x.size))
    kept = s[g:x.size - g]
    t_mean = float(kept.mean())
    t_std = float(kept.std(ddof=1)) if kept.size > 1 else 0.0
    return {"n": int(x.size), "mean": float(x.mean()),
            "std": float(x.std(ddof=1)) if x.size > 1 else 0.0, "median": float(np.median(x)),
            "min": float(s[0]), "max": float(s[-1]), "trimmed_mean": t_mean,
            "trimmed_std": t_std, "cv": t_std / t_mean if t_mean else math.inf,
            "ci_rel": relative_ci(x, trim, confidence), "trim": trim, "confidence": confidence}


# -- protocol (anb.collect_throughput.timing.protocol) ---------------------------------------------
FINGERPRINT_FIELDS = ("device", "backend", "kind", "batch", "resolution", "precision", "threads",
                      "layout", "inputs", "clock", "pinned", "compile", "cudnn_benchmark",
                      "allow_fallbacks", "calibration_images", "quantization", "warmup",
                      "stopping")
WARMUP = {"min_steps": 2, "window": 1, "tolerance": 0.02, "max_steps": 50, "max_seconds": 60.0}
STOPPING = {"min_reps": 5, "max_reps": 200, "rel_ci": 0.005, "confidence": 0.95, "trim": 0.1,
            "budget_seconds": 30.0, "min_rep_seconds": 0.1, "drift_window": 2}


def protocol(device, kind, batch, threads, resolution=224, budget_seconds=None, inputs="synthetic"):
    """The measurement as ``anb.collect_throughput.timing.protocol.Protocol.as_dict()``
    spells it."""
    stopping = dict(STOPPING)
    if budget_seconds is not None:
        stopping["budget_seconds"] = float(budget_seconds)
    return {"device": device, "backend": "vart", "kind": kind, "batch": int(batch),
            "resolution": int(resolution), "precision": "int8", "threads": int(threads),
            "layout": "nchw", "inputs": inputs, "clock": "wall", "imagenet_dir": None,
            "pinned": False, "compile": False, "cudnn_benchmark": True, "allow_fallbacks": False,
            "calibration_images": 150, "quantization": "dpu", "warmup": dict(WARMUP),
            "stopping": stopping}


def fingerprint(proto):
    chosen = {k: proto[k] for k in FINGERPRINT_FIELDS if k in proto}
    text = json.dumps(chosen, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# -- timing loop (anb.collect_throughput.timing.loop) ----------------------------------------------
def _stable(times, rule):
    w = rule["window"]
    if len(times) < max(rule["min_steps"], 2 * w):
        return False
    last, before = np.median(times[-w:]), np.median(times[-2 * w:-w])
    return abs(last - before) <= rule["tolerance"] * before


def run_loop(step, proto):
    """Warm up until stable, then timed repetitions until the trimmed-mean CI is within
    ``rel_ci`` (or the budget / ``max_reps``): ``(times, warmup_times, inner, stop_reason)``;
    ``times`` are seconds per step."""
    warm, stop = proto["warmup"], proto["stopping"]
    warm_times = []
    began = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        step()
        warm_times.append(time.perf_counter() - t0)
        if (_stable(warm_times, warm) or len(warm_times) >= warm["max_steps"]
                or time.perf_counter() - began >= warm["max_seconds"]):
            break
    per_step = float(np.median(warm_times[-warm["window"]:]))
    inner = max(1, int(math.ceil(stop["min_rep_seconds"] / per_step))) if per_step > 0 else 1
    times = []
    timed_began = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        for _ in range(inner):
            step()
        times.append((time.perf_counter() - t0) / inner)
        n = len(times)
        if n >= stop["min_reps"] and relative_ci(times, stop["trim"],
                                                 stop["confidence"]) <= stop["rel_ci"]:
            return times, warm_times, inner, "converged"
        if n >= stop["max_reps"]:
            return times, warm_times, inner, "max_reps"
        if time.perf_counter() - timed_began >= stop["budget_seconds"] and n >= 3:
            return times, warm_times, inner, "budget"


# -- records (anb.collect_throughput.timing.result) ------------------------------------------------
UNITS = {"latency": "ms", "throughput": "images/s"}


def perf_entry(proto, times_s, warmup_times_s, inner, stop_reason, environment, extra):
    """The ``platform_perf`` entry of one measurement (times are seconds per native batch)."""
    kind, batch = proto["kind"], proto["batch"]
    t = np.asarray(times_s, dtype=float)
    values = t * 1e3 if kind == "latency" else batch / t
    s = summarize(values, proto["stopping"]["trim"], proto["stopping"]["confidence"])
    entry = {
        "{}_mean".format(kind): s["trimmed_mean"], "{}_std".format(kind): s["trimmed_std"],
        "{}_median".format(kind): s["median"], "mean_untrimmed": s["mean"],
        "std_untrimmed": s["std"], "cv": s["cv"], "ci_rel": s["ci_rel"], "n": s["n"],
        "unit": UNITS[kind], "statistic": "trimmed_mean({})".format(s["trim"]),
        "batch": batch, "resolution": proto["resolution"], "precision": "int8", "inner": inner,
        "raw_times_s": [float(x) for x in times_s],
        "warmup_times_s": [float(x) for x in warmup_times_s], "stop_reason": stop_reason,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "protocol": proto,
        "protocol_fingerprint": fingerprint(proto), "environment": environment,
    }
    entry.update(extra)
    return entry


def arch_record(text, entries, tool="fpga_code/board/run_dpu.py"):
    canonical = arch_string(parse_arch(text))
    return {"architecture": anb_dict(canonical), "platform_perf": dict(entries),
            "provenance": {"throughput": {"tool": tool, "arch": canonical,
                                          "arch_id": arch_id(canonical)}}}


def write_json_atomic(path, obj):
    """Write ``obj`` to ``path`` through a temp file and a rename (never half-written)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".{}.".format(os.path.basename(path)), suffix=".tmp",
                               dir=folder)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(obj, handle, indent=2)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
