"""Device configs of the board tests: one brief latency protocol measured on a ``[remote]``."""
from __future__ import annotations

from pathlib import Path


def board_config(folder: Path, name: str, remote: dict[str, str], backend: str = "onnxruntime",
                 extra: str = "") -> Path:
    """``folder/<name>.toml``: ``backend`` at 32 px, batch 1, at least 5 repetitions in 0.3 s,
    on the board of ``remote`` (string keys of ``[remote]``; ``extra``: more lines of it)."""
    keys = "".join(f'{key} = "{value}"\n' for key, value in remote.items())
    path = folder / f"{name}.toml"
    path.write_text(f"""kind = "remote"
name = "{name}"
backend = "{backend}"
resolution = 32
[latency]
batch = 1
[stopping]
min_reps = 5
budget_seconds = 0.3
[remote]
{keys}{extra}""")
    return path
