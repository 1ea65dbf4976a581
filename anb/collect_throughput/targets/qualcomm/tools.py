"""The SDK's command-line tools: names per role, found on PATH or under the SDK root, run with
errors that say which tool, what failed and what to do."""
from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

#: Tool per role and SDK (docs/background/devices.md, "Running on the device").
TOOLS = {
    "snpe": {"convert": "snpe-onnx-to-dlc", "quantize": "snpe-dlc-quantize",
             "info": "snpe-dlc-info", "throughput": "snpe-throughput-net-run",
             "run": "snpe-net-run", "profile": "snpe-diagview"},
    "qnn": {"convert": "qnn-onnx-converter", "compile": "qnn-context-binary-generator",
            "throughput": "qnn-throughput-net-run", "run": "qnn-net-run",
            "profile": "qnn-profile-viewer"},
}
_ROOT_VARS = {"snpe": "SNPE_ROOT", "qnn": "QNN_SDK_ROOT"}
_HOST_BIN = "bin/x86_64-linux-clang"


class ToolMissing(RuntimeError):
    """An SDK tool is not installed where it was looked for."""


class ToolFailed(RuntimeError):
    """An SDK tool ran and exited non-zero."""


def tool_name(sdk: str, role: str) -> str:
    if sdk not in TOOLS:
        raise ValueError(f"sdk={sdk!r} is invalid; allowed: {sorted(TOOLS)}")
    if role not in TOOLS[sdk]:
        raise ValueError(f"the {sdk} SDK has no {role!r} tool; roles: {sorted(TOOLS[sdk])}")
    return TOOLS[sdk][role]


def find_tool(sdk: str, role: str) -> str:
    """The host path of a tool: PATH first, then ``$SNPE_ROOT``/``$QNN_SDK_ROOT``'s host bin."""
    name = tool_name(sdk, role)
    found = shutil.which(name)
    root = os.environ.get(_ROOT_VARS[sdk])
    if found is None and root and (Path(root) / _HOST_BIN / name).is_file():
        found = str(Path(root) / _HOST_BIN / name)
    if found is None:
        raise ToolMissing(f"{name} ({sdk} {role} tool) not found on PATH"
                          + (f" nor in ${_ROOT_VARS[sdk]}/{_HOST_BIN}" if root else
                             f" and ${_ROOT_VARS[sdk]} is not set")
                          + f"; install the {sdk.upper()} SDK and source its bin/envsetup.sh")
    return found


def run_tool(argv: Sequence[str], timeout: float = 3600, cwd: str | Path | None = None,
             ) -> str:
    """Run a host tool; return its stdout; :class:`ToolFailed` with its stderr tail if it fails."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              cwd=cwd)
    except FileNotFoundError:
        raise ToolMissing(f"{argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise ToolFailed(f"{Path(argv[0]).name} did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise ToolFailed(f"{Path(argv[0]).name} exited {proc.returncode}: {tail}")
    return proc.stdout
