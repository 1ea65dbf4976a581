"""Shared by the Qualcomm tests: where the SNPE stand-ins are (STAND-INS for the SDK tools, see
tests/standins/snpe/; the ``sdk_path`` fixture in conftest puts them on PATH), a test
architecture and a ``local://`` board that counts commands."""
from __future__ import annotations

from pathlib import Path

from anb.collect_throughput.transports.local import LocalTransport

STANDINS = Path(__file__).parent / "standins" / "snpe"
#: How long a second of the stand-in ``snpe-throughput-net-run --duration`` lasts in these tests
#: (``ANB_STANDIN_SNPE_SECOND``): a few inferences per run are all they need.
STANDIN_SECOND = "0.2"
ARCH = "e1k3l1-e6k3l2-e6k5l2-e6k3l3-e6k5l1-e6k5l4-e6k3l1"


class CountingLocal(LocalTransport):
    """The ``local://`` transport (this machine is the board), counting device commands."""

    def __init__(self):
        super().__init__("local://", "test-board")
        self.commands: list[list[str]] = []

    def run(self, argv, step, timeout, check=True):
        self.commands.append(list(argv))
        return super().run(argv, step, timeout, check)
