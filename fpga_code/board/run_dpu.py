#!/usr/bin/env python3
"""Board runner: measure compiled architectures on a Xilinx DPU with ``xir`` + ``vart``.

Runs on the board image (Python 3.7+, numpy, ``xir``, ``vart``; nothing from ``anb``). Copy
``fpga_code/board/`` to the board and run, for one architecture::

    python3 run_dpu.py --device zcu102 --out results \
        --xmodel build/zcu102/<arch_id>/<arch_id>.xmodel --arch <arch string>

or, in batch mode, for every architecture of a list whose compiled model is in a folder
(``<dir>/<arch_id>.xmodel`` or ``<dir>/<arch_id>/<arch_id>.xmodel``)::

    python3 run_dpu.py --device zcu102 --out results --xmodels build/zcu102 --archs archs.txt

Each architecture's record (``latency_<device>`` and ``throughput_<device>``, the record
``anb measure`` writes) goes to ``results/<device>/<arch_id>.json`` atomically; batch mode skips
architectures whose record already holds both under this run's protocol, and one that fails is
reported and the rest go on (exit 1 at the end). Throughput runs at the board's fixed thread
count (5 on ZCU102, 6 on VCK190) with ``--in-flight`` jobs queued per runner; ``--sweep`` tries
the board's thread counts and keeps the best. Only this file touches ``xir``/``vart``.
``--stand-in`` runs int8 ONNX models through ``ort_runner.OrtStandInRunner`` on the CPU instead
(no DPU: tests and host emulation; the records' environment says ``stand_in``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np

import board_core
import dpu_timing


def dpu_subgraph(graph):
    """The single DPU subgraph of a compiled graph; fail loudly otherwise."""
    subgraphs = [s for s in graph.get_root_subgraph().toposort_child_subgraph()
                 if s.has_attr("device") and s.get_attr("device").upper() == "DPU"]
    if len(subgraphs) != 1:
        raise RuntimeError("{} DPU subgraphs in the xmodel; need exactly 1 (an op fell back to "
                           "the CPU; rerun the host DPU check)".format(len(subgraphs)))
    return subgraphs[0]


def board_environment(device, stand_in=False):
    env = {"host": socket.gethostname(), "os": platform.platform(),
           "python": sys.version.split()[0], "device_name": device,
           "dpu": dpu_timing.BOARDS[device]["dpu"], "libraries": {"numpy": np.__version__}}
    if stand_in:
        env["dpu"] = "none: " + STAND_IN
        env["stand_in"] = STAND_IN
    for name in ("vart", "xir"):  # best-effort: board images do not always set __version__
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__version__", None):
            env["libraries"][name] = str(module.__version__)
    if hasattr(os, "getloadavg"):
        env["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return env


def xmodel_for(folder, arch_id):
    """``<folder>/<arch_id>.xmodel`` or ``<folder>/<arch_id>/<arch_id>.xmodel`` (None if absent)."""
    for path in (os.path.join(folder, arch_id + ".xmodel"),
                 os.path.join(folder, arch_id, arch_id + ".xmodel")):
        if os.path.isfile(path):
            return path
    return None


def record_path(out, device, arch_id):
    return os.path.join(out, device, arch_id + ".json")


def expected_fingerprints(device, latency_batch, throughput_batch, args):
    sweep = list(dpu_timing.BOARDS[device]["sweep"]) if args.sweep else None
    lat = board_core.protocol(device, "latency", latency_batch, 1, args.resolution, args.budget)
    thr = board_core.protocol(device, "throughput", throughput_batch,
                              args.threads or dpu_timing.BOARDS[device]["threads"],
                              args.resolution, args.budget)
    if sweep:
        thr = dict(thr, threads=sweep)
    return {"latency_" + device: board_core.fingerprint(lat),
            "throughput_" + device: board_core.fingerprint(thr)}


def is_done(path, fingerprints):
    """True when the record at ``path`` holds every key under the expected protocol."""
    if not os.path.isfile(path):
        return False
    with open(path) as handle:
        perf = json.load(handle).get("platform_perf", {})
    return all(perf.get(key, {}).get("protocol_fingerprint") == fp
               for key, fp in fingerprints.items())


def measure_one(make_runner, arch, device, out, images, args):
    """Latency + throughput of one architecture; writes its record; returns a short summary."""
    env = board_environment(device, getattr(args, "stand_in", False))
    probe = make_runner()
    batch = dpu_timing.native_batch(probe)
    if images is None:
        images = np.random.default_rng(0).uniform(
            -1, 1, (batch, 3, args.resolution, args.resolution)).astype(np.float32)
    began = time.time()
    latency = dpu_timing.measure_latency(probe, images, device, env, args.resolution, args.budget)
    throughput = dpu_timing.measure_throughput(
        make_runner, images, device, env, threads=args.threads,
        sweep=dpu_timing.BOARDS[device]["sweep"] if args.sweep else None,
        in_flight=args.in_flight, images_per_round=args.images_per_round,
        resolution=args.resolution, budget=args.budget)
    throughput["seconds_for_arch"] = time.time() - began
    canonical = board_core.arch_string(board_core.parse_arch(arch))
    arch_id = board_core.arch_id(canonical)
    path = record_path(out, device, arch_id)
    board_core.write_json_atomic(path, board_core.arch_record(
        canonical, {"latency_" + device: latency, "throughput_" + device: throughput}))
    return {"arch_id": arch_id, "latency_ms": latency["latency_mean"],
            "throughput_ips": throughput["throughput_mean"], "threads": throughput["threads"],
            "seconds": round(time.time() - began, 1), "record": path}


def run_batch(archs, xmodels, device, out, images, args, runner_factory):
    """Measure every architecture of ``archs`` with a compiled model under ``xmodels``;
    skip finished ones; go on after a failure. Returns ``(done, skipped, failed)``."""
    done, skipped, failed = [], [], {}
    for arch in archs:
        try:
            arch_id = board_core.arch_id(arch)
            xmodel = xmodel_for(xmodels, arch_id)
            if xmodel is None:
                raise FileNotFoundError("no {0}.xmodel or {0}/{0}.xmodel under {1}".format(
                    arch_id, xmodels))
            make_runner = runner_factory(xmodel)
            batch = dpu_timing.native_batch(make_runner())
            if is_done(record_path(out, device, arch_id),
                       expected_fingerprints(device, batch, batch, args)):
                skipped.append(arch_id)
                continue
            summary = measure_one(make_runner, arch, device, out, images, args)
            print(json.dumps(summary), flush=True)
            done.append(arch_id)
        except Exception as err:  # noqa: BLE001 - one bad architecture never stops the rest
            failed[arch] = "{}: {}".format(type(err).__name__, err)
            print("error: {}: {}".format(arch, failed[arch]), file=sys.stderr, flush=True)
    return done, skipped, failed


def vart_factory(xmodel):
    import vart
    import xir

    subgraph = dpu_subgraph(xir.Graph.deserialize(xmodel))
    return lambda: vart.Runner.create_runner(subgraph, "run")


STAND_IN = "OrtStandInRunner: onnxruntime int8 on this machine's CPU, not a DPU"


def stand_in_factory(batch, resolution):
    """``--stand-in``: each "xmodel" is an int8 (QDQ) ONNX model run by ``ort_runner``'s
    ``OrtStandInRunner`` on the CPU (tests, host emulation); its records say so."""
    from ort_runner import OrtStandInRunner

    return lambda xmodel: lambda: OrtStandInRunner(xmodel, batch, resolution)


def read_archs(path):
    with open(path) as handle:
        return [line.strip() for line in handle if line.strip() and not line.startswith("#")]


def parser():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", required=True, choices=sorted(dpu_timing.BOARDS))
    p.add_argument("--out", required=True)
    p.add_argument("--xmodel", help="one compiled model (with --arch)")
    p.add_argument("--arch", help="architecture string of --xmodel")
    p.add_argument("--xmodels", help="batch mode: folder of compiled models (with --archs)")
    p.add_argument("--archs", help="batch mode: text file, one architecture string per line")
    p.add_argument("--images", help="NCHW float32 .npy (default: synthetic)")
    p.add_argument("--resolution", type=int, default=224)
    p.add_argument("--threads", type=int, help="throughput threads (default: the board's)")
    p.add_argument("--sweep", action="store_true", help="sweep the board's thread counts")
    p.add_argument("--in-flight", type=int, default=dpu_timing.IN_FLIGHT,
                   help="jobs queued per runner")
    p.add_argument("--images-per-round", type=int, default=dpu_timing.IMAGES_PER_ROUND)
    p.add_argument("--budget", type=float, help="timing budget per measurement (s)")
    p.add_argument("--stand-in", action="store_true",
                   help="no DPU: the models are int8 ONNX files run by the onnxruntime "
                        "stand-in (ort_runner.py) on the CPU; records say so")
    p.add_argument("--stand-in-batch", type=int, default=1,
                   help="the stand-in's native batch (a DPU's: 1 on ZCU102, 6 on VCK190)")
    return p


def main(argv=None, runner_factory=vart_factory):
    args = parser().parse_args(argv)
    single, batch = bool(args.xmodel or args.arch), bool(args.xmodels or args.archs)
    if single == batch or (single and not (args.xmodel and args.arch)) or \
            (batch and not (args.xmodels and args.archs)):
        print("error: give --xmodel with --arch, or --xmodels with --archs", file=sys.stderr)
        return 2
    if args.stand_in:
        runner_factory = stand_in_factory(args.stand_in_batch, args.resolution)
    images = np.load(args.images) if args.images else None
    if single:
        archs, folder = [args.arch], None
    else:
        archs, folder = read_archs(args.archs), args.xmodels
    if single:
        try:
            print(json.dumps(measure_one(runner_factory(args.xmodel), args.arch, args.device,
                                         args.out, images, args)))
        except (RuntimeError, ValueError, OSError) as err:
            print("error: {}".format(err), file=sys.stderr)
            return 1
        return 0
    done, skipped, failed = run_batch(archs, folder, args.device, args.out, images, args,
                                      runner_factory)
    print("{}: measured {}, skipped {} (already done), failed {}".format(
        args.device, len(done), len(skipped), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
