"""Output folders: anb writes only into an empty folder or one holding its own kind of output.

Every command that writes a folder names its :class:`Kind` and goes through this module:

- :func:`check_folder` refuses a file given as the folder, and a non-empty folder that does not
  hold this kind of output (unless ``overwrite``): nothing of the user's is ever replaced
  silently. A folder holds a kind when anb's marker file (:data:`MARKER`) says so, or, for
  folders written before the marker existed, when the kind's ``legacy`` test recognises it
  (e.g. an artifact's ``manifest.json`` ``format``).
- :func:`replace_folder` writes a whole new folder beside the target and swaps it in only
  once complete; on an error or Ctrl-C the old folder is untouched and the staging removed.
- :func:`prepare_folder` opens a resumable folder (measure results, training runs, searches)
  to be written into, file by file.
- :func:`exclusive` serialises runs into one folder with a lock: a second run is refused at
  once, naming the process that holds the folder.
"""
from __future__ import annotations

import fnmatch
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from anb.cli_support import UserError
from anb.io import atomic_write_json, current_umask
from anb.version import __version__

#: The marker anb writes into every output folder: ``{"kind", "what", "anb_version"}``.
MARKER = ".anb-output.json"
LOCK = ".anb-lock"
_SHOWN = 5


@dataclass(frozen=True)
class Kind:
    """One kind of output folder: ``name`` goes into the marker, ``what`` into messages
    ("an anb surrogate artifact"); ``legacy`` recognises folders written without a marker;
    ``replaceable``: written whole by :func:`replace_folder` (its command takes
    ``--overwrite``), else resumed file by file (:func:`prepare_folder`); ``companions``:
    glob patterns of files that may already sit in a new folder of this kind without making it
    someone else's (e.g. the SLURM log of the job about to write there)."""

    name: str
    what: str
    legacy: Callable[[Path], bool] | None = None
    replaceable: bool = False
    companions: tuple[str, ...] = ()


def has_files(*names: str) -> Callable[[Path], bool]:
    """A legacy test: the folder holds every one of ``names``."""
    return lambda folder: all((folder / name).exists() for name in names)


def has_manifest_format(fmt: str) -> Callable[[Path], bool]:
    """A legacy test: ``manifest.json`` in the folder has ``"format": fmt``."""
    def test(folder: Path) -> bool:
        try:
            return json.loads((folder / "manifest.json").read_text()).get("format") == fmt
        except (OSError, ValueError, AttributeError):
            return False
    return test


def read_marker(folder: Path) -> dict | None:
    """The marker of an anb output folder, or None."""
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and isinstance(marker.get("kind"), str) else None


def holds(folder: Path, kind: Kind) -> bool:
    """Whether ``folder`` holds an output of ``kind`` (its marker, or the legacy test)."""
    marker = read_marker(folder)
    if marker is not None:
        return marker["kind"] == kind.name
    return kind.legacy is not None and kind.legacy(folder)


def _content(folder: Path, kind: Kind) -> list[str]:
    """What ``folder`` holds besides anb's marker and locks and ``kind``'s companions."""
    return sorted(p.name for p in folder.iterdir() if p.name != MARKER
                  and not p.name.startswith(LOCK)
                  and not any(fnmatch.fnmatch(p.name, c) for c in kind.companions))


def check_folder(path: str | os.PathLike, kind: Kind, overwrite: bool = False,
                 option: str = "--out") -> Path:
    """Refuse ``path`` as the folder of a ``kind`` output when it is a file, or a non-empty
    folder holding something else (unless ``overwrite``); return it as a Path."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{option} {path}: is a file, but {kind.what} is a folder; anb leaves "
                        f"the file untouched. Give another {option}, or remove the file")
    if not path.is_dir() or overwrite or holds(path, kind):
        return path
    content = _content(path, kind)
    if not content:
        return path
    marker = read_marker(path)
    if marker is not None:
        held = f"{marker.get('what', marker['kind'])}, not {kind.what}"
    else:
        shown = ", ".join(content[:_SHOWN]) + (", ..." if len(content) > _SHOWN else "")
        held = (f"1 file that is not {kind.what}: {shown}" if len(content) == 1 else
                f"{len(content)} files that are not {kind.what}: {shown}")
    raise UserError(f"{option} {path}: holds {held}; anb leaves it untouched. Give another "
                    f"{option} (new or empty)" + (", or --overwrite to replace the folder"
                                                  if kind.replaceable else ""))


def write_marker(folder: Path, kind: Kind) -> None:
    atomic_write_json(folder / MARKER, {"kind": kind.name, "what": kind.what,
                                        "anb_version": __version__})


def prepare_folder(path: str | os.PathLike, kind: Kind, option: str = "--out") -> Path:
    """Check ``path`` (:func:`check_folder`), create it and mark it as a ``kind`` output, to be
    written into (resumed) file by file."""
    path = check_folder(path, kind, option=option)
    path.mkdir(parents=True, exist_ok=True)
    if read_marker(path) is None:
        write_marker(path, kind)
    return path


@contextmanager
def replace_folder(path: str | os.PathLike, kind: Kind, overwrite: bool = False,
                   option: str = "--out") -> Iterator[Path]:
    """Yield an empty staging folder beside ``path`` to write the new output into; once the
    block ends, swap it in for ``path`` (a same-kind output, or anything with ``overwrite``).
    On an error or Ctrl-C inside the block or the swap, ``path`` is untouched and the staging
    removed."""
    path = check_folder(path, kind, overwrite, option)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.new.", dir=path.parent))
    staging.chmod(0o777 & ~current_umask())  # mkdtemp's 0700 would keep colleagues out
    try:
        yield staging
        _swap_in(staging, path, kind, overwrite, option)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _swap_in(staging: Path, path: Path, kind: Kind, overwrite: bool, option: str) -> None:
    """Mark the complete ``staging`` and rename it to ``path``: checked again first (something
    foreign may have arrived while the output was written), the old output moved aside and
    deleted only once the new one is in place, put back if the swap fails."""
    write_marker(staging, kind)
    check_folder(path, kind, overwrite, option)
    old: Path | None = None
    try:
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
            os.replace(path, old)
        os.replace(staging, path)
    except BaseException:
        if old is not None and not path.exists():
            os.replace(old, path)  # the old output back where it was
        raise
    finally:
        if old is not None:  # gone once put back
            shutil.rmtree(old, ignore_errors=True)


@contextmanager
def exclusive(folder: Path, command: str, per_host: bool = False) -> Iterator[None]:
    """Hold ``folder``'s lock while ``command`` writes it; a second holder is refused at once
    with a :class:`UserError` naming the running one. ``per_host``: only runs on this machine
    exclude each other (shards on other machines may share a network folder)."""
    from filelock import FileLock, Timeout

    host = socket.gethostname()
    name = f"{LOCK}.{host}" if per_host else LOCK
    lock = FileLock(folder / name, timeout=0)
    info = folder / f"{name}.json"
    try:
        lock.acquire()
    except Timeout:
        holder = _read_holder(info)
        raise UserError(f"another {holder.get('command', 'anb command')} (pid "
                        f"{holder.get('pid', '?')} on {holder.get('host', host)}) is writing "
                        f"{folder}; wait for it to finish or use another --out") from None
    try:
        atomic_write_json(info, {"command": command, "pid": os.getpid(), "host": host})
        yield
    finally:
        info.unlink(missing_ok=True)
        lock.release()


def _read_holder(info: Path) -> dict:
    try:
        holder = json.loads(info.read_text())
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def check_file(path: str | os.PathLike, option: str = "--out") -> Path:
    """Refuse a folder given where a command writes one file."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{option} {path}: is a folder; a file is written there. Give a file "
                        "path (a new file, or one to replace)")
    return path
