"""``vart``: Xilinx DPU boards. Nothing runs on this host: such a device is measured on its board
by ``fpga_code/board/run_dpu.py`` (see ``fpga_code/README.md``), whose records name this
back-end in their protocol."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from anb.collect_throughput.backends.base import Backend, Session
from anb.collect_throughput.timing.protocol import Protocol


class VartBackend(Backend):
    name = "vart"

    def prepare(self, arch: Any, protocol: Protocol, workdir: Path) -> Session:
        raise ValueError(f"device {protocol.device!r}: backend='vart' runs on a Xilinx DPU "
                         "board only; measure it there with fpga_code/board/run_dpu.py "
                         "(fpga_code/README.md)")
