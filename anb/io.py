"""Atomic file writes (write to a temporary file beside the target, then rename) and text/JSON
reads whose errors name the file."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp_path)`` (its return value is ignored) and rename the result onto ``path``
    (never half-written)."""
    path = Path(path)
    if path.is_dir():  # before any work: the rename would fail after it
        raise IsADirectoryError(errno.EISDIR, "is a folder, a file is needed here", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    tmp_path.chmod(0o666 & ~current_umask())  # mkstemp's 0600 would keep colleagues out
    try:
        write(tmp_path)
        with open(tmp_path, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return path


def current_umask() -> int:
    """This process's umask, read without changing it (``/proc/self/status`` on Linux; the
    set-and-restore fallback elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent) + "\n")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def read_text(path: str | os.PathLike) -> str:
    """A UTF-8 file's text. ValueError naming the file when it is a folder or not UTF-8;
    FileNotFoundError naming it when it is missing."""
    path = Path(path)
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: does not exist") from None
    except NotADirectoryError:
        raise ValueError(f"{path}: a folder on this path is a file") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a folder, a file is needed here") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.start}: {err.reason}); allowed: "
                         "a UTF-8 text file") from None


def read_csv(path: str | os.PathLike, **kwargs: Any) -> Any:
    """``pandas.read_csv(path, **kwargs)``; errors name the file: missing (FileNotFoundError),
    a folder, empty, not UTF-8 or not CSV (ValueError)."""
    import pandas as pd

    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, a CSV file is needed here")
    try:
        return pd.read_csv(path, **kwargs)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: does not exist") from None
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path}: empty file; allowed: a CSV table with a header row") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    except pd.errors.ParserError as err:
        raise ValueError(f"{path}: not a readable CSV table ({err})") from None


def parse_json(text: str | bytes, where: str) -> Any:
    """``json.loads(text)``; a ValueError naming ``where`` (a file, ``archive:member``) and the
    position when the text is not valid JSON."""
    try:
        return json.loads(text)
    except UnicodeDecodeError as err:
        raise ValueError(f"{where}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    except json.JSONDecodeError as err:
        detail = "empty file" if not err.doc.strip() else \
            f"{err.msg}: line {err.lineno} column {err.colno}"
        raise ValueError(f"{where}: not valid JSON ({detail})") from None


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file's value; errors name the file (see :func:`read_text`, :func:`parse_json`)."""
    return parse_json(read_text(path), str(path))
