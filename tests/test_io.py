"""Atomic file writes (:mod:`anb.io`): a file is either its old self or wholly the new one,
never half-written, and no temporary file is left behind."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from anb import io


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_atomic_writes_create_folders_and_replace_whole_files(tmp_path):
    target = tmp_path / "new" / "deeper" / "record.json"
    assert io.atomic_write_json(target, {"a": [1, 2]}) == target
    assert target.read_text() == '{\n  "a": [\n    1,\n    2\n  ]\n}\n'
    assert io.atomic_write_json(target, {"a": 1}, indent=None) == target
    assert target.read_text() == '{"a": 1}\n'
    assert io.atomic_write_text(target, "é\n").read_bytes() == "é\n".encode()
    assert io.atomic_write_bytes(target, b"\x00\xff").read_bytes() == b"\x00\xff"
    assert _names(target.parent) == ["record.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    """Bug class: an error or Ctrl-C part-way through leaving a half-written file or a
    ``.record.json.*.tmp`` beside it."""
    target = tmp_path / "record.json"
    target.write_text("old")
    for error in (ValueError("bad value"), KeyboardInterrupt()):
        def half(tmp: Path, error: BaseException = error) -> None:
            tmp.write_text("half")
            raise error

        with pytest.raises(type(error)):
            io.atomic_write(target, half)
        assert target.read_text() == "old" and _names(tmp_path) == ["record.json"]


def test_a_folder_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "out").mkdir()
    called = []
    with pytest.raises(IsADirectoryError) as err:
        io.atomic_write(tmp_path / "out", called.append)
    assert str(err.value) == f"[Errno 21] is a folder, a file is needed here: '{tmp_path / 'out'}'"
    assert called == [] and _names(tmp_path) == ["out"]


def test_the_new_file_reaches_the_disk_before_it_replaces_the_old(tmp_path, monkeypatch):
    """Bug class: renaming a file whose bytes are still only in the page cache (a crash then
    leaves an empty file under the final name)."""
    events: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def record_fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def record_replace(src, dst) -> None:
        events.append(("replace", str(src)))
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", record_fsync)
    monkeypatch.setattr(os, "replace", record_replace)
    io.atomic_write_text(tmp_path / "a.txt", "data")
    assert [e[0] for e in events] == ["fsync", "replace"] and events[0][1] == events[1][1]
    assert Path(events[0][1]).parent == tmp_path and Path(events[0][1]).name.startswith(".a.txt.")


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_current_umask_reads_it_without_changing_it(umask, monkeypatch):
    previous = os.umask(umask)
    try:
        assert io.current_umask() == umask
        assert io.current_umask() == umask  # unchanged by reading it
        # without /proc (e.g. macOS): the set-and-restore fallback gives the same
        real = Path.read_text
        monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: (
            (_ for _ in ()).throw(OSError("no /proc")) if str(self) == "/proc/self/status"
            else real(self, *a, **k)))
        assert io.current_umask() == umask
        assert io.current_umask() == umask
    finally:
        os.umask(previous)


def test_json_written_reads_back(tmp_path):
    value = {"name": "a", "n": [1.5, None]}
    assert json.loads(io.atomic_write_json(tmp_path / "v.json", value).read_text()) == value
