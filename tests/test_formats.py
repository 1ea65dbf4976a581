"""Every persisted format carries a version (anb.formats): written by its writer, and each version
it reads is kept as a fixture under tests/data/formats/<format>/<version>/ (see the README
there) and read back; a file claiming a newer version is refused naming both versions."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.formats import FORMATS, UNVERSIONED, Format, NewerFormat, check, current, stamp
from anb.searchspace.space import ANB_SPACE

FIXTURES = Path(__file__).parent / "data" / "formats"
runner = CliRunner()


def versions(name: str) -> list[str]:
    """The fixture folders format ``name`` must have: one per version read, and
    ``unversioned`` where files written before versions are read."""
    fmt = FORMATS[name]
    return [f"v{v}" for v in range(fmt.oldest, fmt.current + 1)] + (
        ["unversioned"] if fmt.unversioned else [])


def newer_copy(src: Path, dst: Path, file: str, name: str) -> Path:
    """A copy of the fixture folder ``src`` whose ``file`` claims the version after the current
    one of format ``name``."""
    shutil.copytree(src, dst)
    data = json.loads((dst / file).read_text())
    data["format_version"] = current(name) + 1
    (dst / file).write_text(json.dumps(data))
    return dst


def newer_message(name: str, file: Path) -> str:
    found, ours = current(name) + 1, current(name)
    return (f"{file}: the {FORMATS[name].what} is format version {found}, newer than version "
            f"{ours} this anb reads; upgrade anb to read it")


# -- the rule ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_format_keeps_a_fixture_of_each_version_it_reads(name):
    held = sorted(p.name for p in (FIXTURES / name).iterdir() if p.is_dir())
    assert held == sorted(versions(name))


def test_check_reads_the_current_older_and_unversioned_files():
    assert check("adapted", 4, "m.json") == 4 and check("adapted", 1, "m.json") == 1
    assert check("record", None, "r.json") == UNVERSIONED == 1
    assert stamp("adapted") == {"format_version": 4} and stamp("surrogate") == {
        "format_version": 1}


def test_check_refuses_a_newer_version_naming_the_file_and_both_versions():
    with pytest.raises(NewerFormat) as err:
        check("adapted", 5, "out/manifest.json")
    assert str(err.value) == ("out/manifest.json: the adapted surrogate is format version 5, "
                              "newer than version 4 this anb reads; upgrade anb to read it")


def test_check_refuses_what_it_cannot_read(monkeypatch):
    monkeypatch.setitem(FORMATS, "thing", Format("thing", 3, oldest=2, unversioned=False))
    with pytest.raises(ValueError, match=r"^t.json: the thing has no format_version; this anb "
                                         r"reads version 2 to 3$"):
        check("thing", None, "t.json")
    with pytest.raises(ValueError, match="older than this anb reads"):
        check("thing", 1, "t.json")
    for bad in ("2", 2.0, True):
        with pytest.raises(ValueError, match=f"format_version {bad!r} is not a version"):
            check("thing", bad, "t.json")
    with pytest.raises(KeyError, match="unknown format 'nope'"):
        check("nope", 1, "t.json")


# -- records ----------------------------------------------------------------------------------

@pytest.mark.parametrize("version", versions("record"))
def test_records_of_each_version_load(version):
    from anb.records import load_records

    (record,) = load_records(FIXTURES / "record" / version / "result_0.json", ANB_SPACE)
    assert record["architecture"]["block0_e"] == 6 and record["metrics"]["val_top1"] > 0


def test_a_written_record_carries_the_current_version(tmp_path):
    from anb.io import read_json
    from anb.records import write_record

    record = read_json(FIXTURES / "record" / "unversioned" / "result_0.json")
    assert "format_version" not in record
    write_record(record, tmp_path / "r.json", ANB_SPACE)
    assert read_json(tmp_path / "r.json")["format_version"] == current("record")


def test_a_newer_record_is_refused_not_skipped(tmp_path):
    from anb.records import read_records

    folder = newer_copy(FIXTURES / "record" / "v1", tmp_path / "records", "result_0.json",
                        "record")
    shutil.copy(FIXTURES / "record" / "unversioned" / "result_0.json", folder / "result_1.json")
    with pytest.raises(NewerFormat) as err:
        read_records(folder, ANB_SPACE)
    assert str(err.value) == newer_message("record", folder / "result_0.json")


# -- merge outputs ----------------------------------------------------------------------------

@pytest.mark.parametrize("version", versions("merge"))
@pytest.mark.parametrize("form", ["", "dataset.csv"])
def test_merge_outputs_of_each_version_load(version, form):
    from anb.records import load_dataset

    frame = load_dataset(FIXTURES / "merge" / version / form, ANB_SPACE)
    assert len(frame) == 2 and frame["val_top1"].notna().all()


@pytest.mark.parametrize("form", ["", "dataset.csv", "records"])
def test_a_newer_merge_output_is_refused(tmp_path, form):
    from anb.records import load_dataset

    folder = newer_copy(FIXTURES / "merge" / "v1", tmp_path / "merged", "merge_report.json",
                        "merge")
    if form == "records":  # the record files alone are versioned by their own field
        assert len(load_dataset(folder / form, ANB_SPACE)) == 2
        return
    with pytest.raises(NewerFormat) as err:
        load_dataset(folder / form, ANB_SPACE)
    assert str(err.value) == newer_message("merge", folder / "merge_report.json")


def test_a_merge_writes_the_current_versions(tmp_path):
    from anb.collect_throughput.records.merge import merge
    from anb.io import read_json

    merge(FIXTURES / "merge" / "unversioned" / "records", [], tmp_path / "out", space=ANB_SPACE)
    assert read_json(tmp_path / "out" / "merge_report.json")["format_version"] == \
        current("merge")
    assert {read_json(f)["format_version"] for f in (tmp_path / "out" / "records").iterdir()} \
        == {current("record")}


# -- the queue database -----------------------------------------------------------------------

def queue_from(version: str, path: Path) -> Path:
    """A SQLite queue made from the fixture's SQL dump."""
    with sqlite3.connect(path) as conn:
        conn.executescript((FIXTURES / "queue" / version / "queue.sql").read_text())
    conn.close()
    return path


def schema_rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name, version FROM anb_schema").fetchall()
    conn.close()
    return rows


@pytest.mark.parametrize("version", versions("queue"))
def test_queues_of_each_version_open(version, tmp_path):
    from anb.jobs.queue import open_queue

    path = queue_from(version, tmp_path / "q.db")
    with open_queue(str(path), create=False) as q:
        assert [j.device for j in q.jobs()] == ["cpu-ort", "cpu-ort"]
    assert schema_rows(path) == [("queue", 1)]  # an unversioned queue is version 1


def test_a_new_queue_records_the_current_version(tmp_path):
    from anb.jobs.queue import open_queue

    open_queue(str(tmp_path / "q.db")).close()
    assert schema_rows(tmp_path / "q.db") == [("queue", current("queue"))]


def test_a_queue_made_before_versions_is_not_labelled_with_a_later_one(tmp_path, monkeypatch):
    """Once the schema is version 2, a queue created before versions still records 1 (what
    it holds) while a new one records 2."""
    from anb.jobs.queue import open_queue

    monkeypatch.setitem(FORMATS, "queue", Format("queue database", 2))
    open_queue(str(queue_from("unversioned", tmp_path / "old.db"))).close()
    open_queue(str(tmp_path / "new.db")).close()
    assert schema_rows(tmp_path / "old.db") == [("queue", 1)]
    assert schema_rows(tmp_path / "new.db") == [("queue", 2)]


def test_a_newer_queue_is_refused_by_the_library_and_the_cli(tmp_path):
    from anb.jobs.queue import open_queue

    path = queue_from("v1", tmp_path / "q.db")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE anb_schema SET version = ?", (current("queue") + 1,))
    conn.close()
    with pytest.raises(NewerFormat) as err:
        open_queue(str(path))
    assert str(err.value) == newer_message("queue", f"sqlite:///{path.resolve()}")
    result = runner.invoke(app, ["queue", "status", "--queue", str(path)])
    assert result.exit_code == 2 and "upgrade anb" in result.output


# -- plans ------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", versions("plan"))
def test_plans_of_each_version_read(version):
    from anb.surrogates.plan_cli import read_plan

    info = read_plan(FIXTURES / "plan" / version)
    assert info["space"] == "anb-mnasnet" and len(info["batch"]) == 2


def test_a_plan_is_written_with_the_current_version_and_a_newer_one_refused(tmp_path):
    from anb.surrogates.plan_cli import read_plan

    result = runner.invoke(app, ["plan", "--out", str(tmp_path / "p"), "--batch", "2",
                                 "--pool", "20"])
    assert result.exit_code == 0, result.output
    assert read_plan(tmp_path / "p")["format_version"] == current("plan")
    newer = newer_copy(FIXTURES / "plan" / "v1", tmp_path / "newer", "plan.json", "plan")
    with pytest.raises(NewerFormat) as err:
        read_plan(newer)
    assert str(err.value) == newer_message("plan", newer / "plan.json")


# -- search results ---------------------------------------------------------------------------

@pytest.mark.parametrize("version", versions("search"))
def test_search_results_of_each_version_read(version):
    from anb.nas.report import read_summary

    assert read_summary(FIXTURES / "search" / version)["objectives"] == ["macs:min",
                                                                        "params:min"]


def test_a_search_writes_the_current_version_and_a_newer_one_is_refused(tmp_path):
    from anb.nas.followup import front_report
    from anb.nas.report import read_summary

    result = runner.invoke(app, ["search", "-o", "macs:min", "-o", "params:min", "--budget",
                                 "20", "--out", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert read_summary(tmp_path / "s")["format_version"] == current("search")
    newer = newer_copy(FIXTURES / "search" / "v1", tmp_path / "newer", "summary.json",
                       "search")
    with pytest.raises(NewerFormat) as err:
        front_report(newer, tmp_path / "report")
    assert str(err.value) == newer_message("search", newer / "summary.json")


# -- surrogate and adapted artifacts ----------------------------------------------------------

def rewrite_manifest(folder: Path, digest, **fields) -> None:
    manifest = {**json.loads((folder / "manifest.json").read_text()), **fields}
    manifest = {k: v for k, v in manifest.items() if v is not None}
    manifest["manifest_sha256"] = digest(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_surrogate_manifests_read_the_fixture_and_the_shipped_benchmark():
    from anb.resources import SHIPPED_DIR
    from anb.surrogates.artifact import read_manifest

    assert read_manifest(FIXTURES / "surrogate" / "v1")["format_version"] == 1
    assert read_manifest(SHIPPED_DIR)["format_version"] == current("surrogate")


@pytest.mark.parametrize("version", [None, 2])
def test_a_surrogate_without_or_of_a_newer_version_is_refused(tmp_path, version):
    from anb.surrogates.artifact import _digest, read_manifest

    folder = shutil.copytree(FIXTURES / "surrogate" / "v1", tmp_path / "s")
    rewrite_manifest(folder, _digest, format_version=version)
    expected = newer_message("surrogate", folder / "manifest.json") if version else \
        f"{folder / 'manifest.json'}: the surrogate artifact has no format_version; this anb " \
        "reads version 1"
    with pytest.raises(ValueError) as err:
        read_manifest(folder)
    assert str(err.value) == expected


@pytest.mark.parametrize("version", versions("adapted"))
def test_adapted_manifests_of_each_version_read(version):
    from anb.surrogates.adapt.model import read_adapted_manifest

    assert read_adapted_manifest(FIXTURES / "adapted" / version)["format_version"] == \
        int(version[1:])


def test_a_newer_adapted_folder_is_refused(tmp_path):
    from anb.surrogates.adapt.model import _digest, read_adapted_manifest

    folder = shutil.copytree(FIXTURES / "adapted" / "v4", tmp_path / "a")
    rewrite_manifest(folder, _digest, format_version=5)
    with pytest.raises(NewerFormat) as err:
        read_adapted_manifest(folder)
    assert str(err.value) == newer_message("adapted", folder / "manifest.json")
