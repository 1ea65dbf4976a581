#!/usr/bin/env python3
"""Board runner: measure one compiled architecture on a Xilinx DPU with ``xir`` + ``vart``.

Run on the board (ZCU102 / VCK190 Vitis AI image), with the repository's ``anb`` package copied
beside it (its timing/record modules need only numpy)::

    python3 run_dpu.py --xmodel build/zcu102/<arch_id>/<arch_id>.xmodel --arch <arch string> \
        --device zcu102 --out results [--images calib.npy]

Writes ``results/<device>/<arch_id>.json`` (the record ``anb measure`` writes; ``anb merge``
joins it): ``latency_<device>`` (1 thread, native batch) and ``throughput_<device>`` (best of
the thread sweep). Only this file touches ``xir``/``vart``; the logic is in ``dpu_timing``.
"""
from __future__ import annotations

import argparse
import json
import platform
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

import dpu_timing  # noqa: E402
from anb.collect_throughput.protocol import Protocol, StoppingRule, WarmupRule  # noqa: E402
from anb.collect_throughput.result import arch_record  # noqa: E402
from anb.io import atomic_write_json  # noqa: E402
from anb.searchspace.arch import as_arch  # noqa: E402


def dpu_subgraph(graph):
    """The single DPU subgraph of a compiled graph; fail loudly otherwise."""
    subgraphs = [s for s in graph.get_root_subgraph().toposort_child_subgraph()
                 if s.has_attr("device") and s.get_attr("device").upper() == "DPU"]
    if len(subgraphs) != 1:
        raise SystemExit(f"error: {len(subgraphs)} DPU subgraphs in the xmodel; need exactly 1 "
                         "(an op fell back to the CPU; rerun the host DPU check)")
    return subgraphs[0]


def board_environment(device: str) -> dict:
    import vart  # noqa: F401  (version below)

    env = {"host": socket.gethostname(), "os": platform.platform(),
           "python": sys.version.split()[0], "device_name": device,
           "dpu": dpu_timing.BOARDS[device]["dpu"], "libraries": {"numpy": np.__version__}}
    try:
        from importlib import metadata

        for name in ("vart", "xir", "target-factory"):
            env["libraries"][name] = metadata.version(name)
    except Exception:  # noqa: BLE001 - versions are best-effort on board images
        pass
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--xmodel", required=True, type=Path)
    parser.add_argument("--arch", required=True, help="architecture string (record key)")
    parser.add_argument("--device", required=True, choices=sorted(dpu_timing.BOARDS))
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--images", type=Path, help="NCHW float32 .npy (default: synthetic)")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--threads", type=int, nargs="*", help="throughput thread sweep")
    parser.add_argument("--budget", type=float, default=10.0, help="seconds per measurement")
    args = parser.parse_args()

    import vart
    import xir

    arch = as_arch(args.arch)
    subgraph = dpu_subgraph(xir.Graph.deserialize(str(args.xmodel)))

    def make_runner():
        return vart.Runner.create_runner(subgraph, "run")

    probe = make_runner()
    batch = int(probe.get_input_tensors()[0].dims[0])
    images = (np.load(args.images) if args.images else np.random.default_rng(0).uniform(
        -1, 1, (batch, 3, args.resolution, args.resolution)).astype(np.float32))
    rules = dict(warmup=WarmupRule(min_steps=5, window=5, tolerance=0.02),
                 stopping=StoppingRule(min_reps=10, rel_ci=0.005, budget_seconds=args.budget,
                                       min_rep_seconds=0.0))
    env = board_environment(args.device)
    base = dict(device=args.device, backend="vart", precision="int8", batch=batch,
                resolution=args.resolution, **rules)
    latency = dpu_timing.measure_latency(probe, images, Protocol(kind="latency", **base),
                                         str(arch), arch.id, env)
    throughput = dpu_timing.measure_throughput(
        make_runner, images, Protocol(kind="throughput", **base), str(arch), arch.id, env,
        args.threads or dpu_timing.BOARDS[args.device]["threads"])
    path = args.out / args.device / f"{arch.id}.json"
    atomic_write_json(path, arch_record(arch, [latency, throughput], tool="fpga_code/run_dpu.py"))
    print(json.dumps({"latency_ms": latency.value, "throughput_ips": throughput.value,
                      "threads": throughput.extra["threads"], "record": str(path)}))


if __name__ == "__main__":
    main()
