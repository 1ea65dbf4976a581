"""Benchmark figures land in ``benchmarks/RESULTS.md``, written by the scripts that measured them.

Each script's ``__main__`` runs under :func:`published`: what the script prints is kept, and when
it finishes without error its section of RESULTS.md (one per command: the script and its
arguments but those that only say where to write: ``OUTPUT_OPTIONS``; sections in name order)
is replaced by the output, headed by the exact command, the date, the machine and the commit. A
failed or interrupted run leaves RESULTS.md as it was. ``ANB_PUBLISH=0`` turns publishing off
(a scratch run that should not replace the recorded one).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import io
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

RESULTS = Path(__file__).resolve().with_name("RESULTS.md")
REPO = RESULTS.parents[1]
HEADER = """# Measured results

Written by the scripts in `benchmarks/` (never by hand): each section is the output of the last
complete run of one command (a script and its arguments), with the date, machine and commit that
produced it. Run the command again to replace its section; `ANB_PUBLISH=0` runs one without
touching this file.
"""
#: Options that name where a script writes, not what it measures: left out of a section's name.
OUTPUT_OPTIONS = ("--csv", "--plot", "--out")
SECTION = re.compile(r"<!-- begin (?P<name>[^>]+?) -->\n.*?<!-- end (?P=name) -->\n", re.S)


class _Tee(io.TextIOBase):
    """Writes to the real stream and keeps a copy."""

    def __init__(self, stream: io.TextIOBase) -> None:
        self.stream, self.kept = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def machine() -> str:
    """CPU model, cores this process may use, and the thread pins in effect."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    pins = ", ".join(f"{k}={os.environ[k]}" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
                     if k in os.environ)
    return f"{model}, {cores} cores" + (f" ({pins})" if pins else "") + \
        f", Python {platform.python_version()}"


def commit() -> str:
    """The checkout's short commit hash, ``+changes`` when files other than RESULTS.md differ."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              check=False).stdout.strip()
    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    changed = [line for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
               if not line.endswith("benchmarks/RESULTS.md")]
    return head + (" +changes" if changed else "")


def section(name: str, command: str, output: str) -> str:
    """One script's section of RESULTS.md."""
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = output.rstrip("\n")
    return (f"<!-- begin {name} -->\n## {name}\n\n`{command}`\n\n{when} · {machine()} · "
            f"commit {commit()}\n\n```\n{body}\n```\n<!-- end {name} -->\n")


def write(name: str, text: str, path: Path | None = None) -> None:
    """Replace (or add) section ``name`` of ``path`` (RESULTS.md); sections stay in name order."""
    path = path or RESULTS
    sections = {m["name"]: m[0] for m in SECTION.finditer(path.read_text())} \
        if path.exists() else {}
    sections[name] = text
    content = HEADER + "".join("\n" + sections[key] for key in sorted(sections))
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(content)
    tmp.replace(path)


def section_name(script: str, args: list[str]) -> str:
    """The script's stem and its arguments, without ``OUTPUT_OPTIONS`` and their values."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in OUTPUT_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in OUTPUT_OPTIONS)):
            kept.append(arg.lstrip("-"))
    name = " ".join([Path(script).stem, *kept])
    return re.sub(r"[^\w./=,: -]", "_", name).replace("--", "-")


@contextlib.contextmanager
def published(script: str) -> Iterator[None]:
    """Run a benchmark's ``main()`` inside this; on success its output becomes its section."""
    tee = _Tee(sys.stdout)  # type: ignore[arg-type]
    with contextlib.redirect_stdout(tee):  # type: ignore[type-var]
        yield
    if os.environ.get("ANB_PUBLISH", "1") == "0":
        return
    name = section_name(script, sys.argv[1:])
    command = " ".join(["python", f"benchmarks/{Path(script).name}",
                        *map(shlex.quote, sys.argv[1:])])
    write(name, section(name, command, tee.kept.getvalue()))
    print(f"published to {RESULTS} (section {name})", file=sys.stderr)
