#!/usr/bin/env python3
"""Compile a quantized ``<net>_int.xmodel`` for a board with ``vai_c_xir`` (Vitis AI docker).

    python3 compile_xmodel.py --xmodel quantized/<id>/ANBNet_int.xmodel --board zcu102 \
        --out build/zcu102/<id> --name <id>

Fails (exit 1, one line) unless the compiler reports exactly one DPU subgraph.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ARCH_JSON = "/opt/vitis_ai/compiler/arch"
BOARDS = {
    "zcu102": f"{ARCH_JSON}/DPUCZDX8G/ZCU102/arch.json",   # DPUCZDX8G_ISA1_B4096
    "vck190": f"{ARCH_JSON}/DPUCVDX8G/VCK190/arch.json",   # DPUCVDX8G
}
_COUNT = re.compile(r"DPU subgraph number\s*:?\s*(\d+)", re.IGNORECASE)


def compile_command(xmodel: Path, board: str, out: Path, name: str,
                    arch_json: str | None = None) -> list[str]:
    if board not in BOARDS:
        raise ValueError(f"board={board!r} is invalid; allowed: {sorted(BOARDS)}")
    return ["vai_c_xir", "-x", str(xmodel), "-a", arch_json or BOARDS[board], "-o", str(out),
            "-n", name]


def dpu_subgraph_count(log: str) -> int:
    """The compiler's "DPU subgraph number N" (the last one printed)."""
    found = _COUNT.findall(log)
    if not found:
        raise ValueError("vai_c_xir printed no 'DPU subgraph number'; check its log")
    return int(found[-1])


def compile_for(xmodel: Path, board: str, out: Path, name: str,
                arch_json: str | None = None) -> Path:
    """Run the compiler; return the compiled xmodel path; raise unless one DPU subgraph."""
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(compile_command(xmodel, board, out, name, arch_json),
                          capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    (out / "compile.log").write_text(log)
    if proc.returncode != 0:
        raise RuntimeError(f"vai_c_xir failed with exit code {proc.returncode}; see "
                           f"{out / 'compile.log'}")
    count = dpu_subgraph_count(log)
    if count != 1:
        raise RuntimeError(f"{count} DPU subgraphs for {board} (need 1): an op fell back to "
                           "the CPU; see " + str(out / "compile.log"))
    return out / f"{name}.xmodel"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--xmodel", required=True, type=Path)
    parser.add_argument("--board", required=True, choices=sorted(BOARDS))
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--name", required=True)
    parser.add_argument("--arch-json", help="override the board's arch.json")
    args = parser.parse_args()
    try:
        print(compile_for(args.xmodel, args.board, args.out, args.name, args.arch_json))
    except (RuntimeError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
