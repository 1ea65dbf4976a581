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
    # hidden, beside the target, and named so that a leftover (kill -9) is plainly temporary
    temporary = Path(events[0][1])
    assert temporary.parent == tmp_path and temporary.name.startswith(".a.txt.")
    assert temporary.name.endswith(".tmp")


def test_a_write_that_removed_its_temporary_fails_with_its_own_error(tmp_path):
    """Bug class: the clean-up of a temporary that is already gone replacing the write's
    own error with a FileNotFoundError."""
    def vanish(tmp: Path) -> None:
        tmp.unlink()
        raise ValueError("the writer's own error")

    with pytest.raises(ValueError, match="^the writer's own error$"):
        io.atomic_write(tmp_path / "a.txt", vanish)
    assert _names(tmp_path) == []


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_current_umask_reads_it_without_changing_it(umask, monkeypatch):
    previous = os.umask(umask)
    try:
        assert io.current_umask() == umask
        assert io.current_umask() == umask  # unchanged by reading it
        # on Linux it is read from /proc: the umask is never set, not even for a moment
        # (another thread creating a file meanwhile would get the temporary mask)
        with monkeypatch.context() as patch:
            patch.setattr(os, "umask", lambda mask: pytest.fail("os.umask called"))
            assert io.current_umask() == umask
        # without /proc (e.g. macOS): the set-and-restore fallback gives the same
        real = Path.read_text
        monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: (
            (_ for _ in ()).throw(OSError("no /proc")) if str(self) == "/proc/self/status"
            else real(self, *a, **k)))
        assert io.current_umask() == umask
        assert io.current_umask() == umask
    finally:
        os.umask(previous)


def test_json_written_reads_back_in_its_own_key_order(tmp_path):
    value = {"name": "a", "n": [1.5, None], "b": 1, "a": 2}
    text = io.atomic_write_json(tmp_path / "v.json", value).read_text()
    assert json.loads(text) == value and list(json.loads(text)) == ["name", "n", "b", "a"]


def test_sha256_file_hashes_every_chunk(tmp_path):
    import hashlib

    data = os.urandom(3000)
    (tmp_path / "f").write_bytes(data)
    assert io.sha256_file(tmp_path / "f", chunk=1024) == hashlib.sha256(data).hexdigest()
    assert io.sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()


def test_read_errors_name_the_file_and_what_is_wrong(tmp_path):
    """Bug class: a read error that does not say which file, or what is allowed."""
    missing, folder = tmp_path / "missing.json", tmp_path / "folder"
    folder.mkdir()
    (tmp_path / "file").write_text("x")
    latin1, empty = tmp_path / "latin1.json", tmp_path / "empty.json"
    latin1.write_bytes(b'{"a": "\xe9"}')
    empty.write_text(" \n")
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": }')
    for call, kind, message in [
            (lambda: io.read_text(missing), FileNotFoundError, f"{missing}: does not exist"),
            (lambda: io.read_text(tmp_path / "file" / "x"), ValueError,
             f"{tmp_path / 'file' / 'x'}: a folder on this path is a file"),
            (lambda: io.read_text(folder), ValueError,
             f"{folder}: is a folder, a file is needed here"),
            (lambda: io.read_text(latin1), ValueError,
             f"{latin1}: not UTF-8 text (byte 7: invalid continuation byte); allowed: a UTF-8 "
             "text file"),
            (lambda: io.read_json(missing), FileNotFoundError, f"{missing}: does not exist"),
            (lambda: io.read_json(empty), ValueError, f"{empty}: not valid JSON (empty file)"),
            (lambda: io.read_json(bad), ValueError,
             f"{bad}: not valid JSON (Expecting value: line 1 column 7)"),
            (lambda: io.parse_json(b'"\xff"', "archive.zip:a.json"), ValueError,
             "archive.zip:a.json: not UTF-8 text (byte 1: invalid start byte)"),
            (lambda: io.read_csv(folder), ValueError,
             f"{folder}: is a folder, a CSV file is needed here"),
            (lambda: io.read_csv(missing), FileNotFoundError, f"{missing}: does not exist"),
            (lambda: io.read_csv(empty), ValueError,
             f"{empty}: empty file; allowed: a CSV table with a header row"),
            (lambda: io.read_csv(latin1), ValueError,
             f"{latin1}: not UTF-8 text (byte 7: invalid continuation byte)")]:
        with pytest.raises(kind) as err:
            call()
        assert str(err.value) == message
    ragged = tmp_path / "ragged.csv"
    ragged.write_text('a,b\n1,2\n"3,4\n')
    with pytest.raises(ValueError, match=f"^{ragged}: not a readable CSV table \\(.+\\)$"):
        io.read_csv(ragged)


def test_read_csv_passes_its_options_to_pandas(tmp_path):
    (tmp_path / "t.csv").write_text("a;b\n1;x\n")
    table = io.read_csv(tmp_path / "t.csv", sep=";", dtype={"a": str})
    assert list(table.columns) == ["a", "b"] and table["a"].tolist() == ["1"]


def test_text_is_written_as_utf8_whatever_the_locale(tmp_path):
    """Bug class: text written in the locale's encoding (ASCII in the C locale, Latin-1 on
    some systems) instead of UTF-8, which every reader here expects."""
    import locale

    previous = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")  # an ASCII codeset (no UTF-8 mode in tests)
    try:
        assert io.atomic_write_text(tmp_path / "a.txt", "é\n").read_bytes() == "é\n".encode()
    finally:
        locale.setlocale(locale.LC_CTYPE, previous)
