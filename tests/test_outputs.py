"""Output folders (:mod:`anb.outputs`): anb never replaces what is not its own.

Every command that writes a folder is driven through the console entry (``cli_support.run``):
a folder holding someone else's files and a file given as the folder are refused with exit 2,
one ``error:`` line naming the path and what it holds, and nothing written anywhere; an output
of the command's own kind is replaced (or resumed); ``--overwrite`` replaces anything.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from anb import outputs, resources
from anb.cli import app
from anb.cli_support import UserError, run
from anb.searchspace import EFFICIENTNET_B0
from anb.searchspace.space import ANB_SPACE
from tests.console_fixtures import run_console

REPO = Path(__file__).resolve().parents[1]
ARCH = str(EFFICIENTNET_B0)
DIGITS = resources.CONFIG_DIR / "accuracy" / "digits_tiny.ini"
KIND = outputs.Kind("demo", "an anb demo output", outputs.has_files("demo.txt"),
                    replaceable=True)


def anb(args: list[str], capsys) -> tuple[int, str]:
    """Run ``anb ARGS`` as the console command does; return (exit code, stdout + stderr)."""
    with pytest.raises(SystemExit) as exit_:
        run(app, [str(a) for a in args])
    captured = capsys.readouterr()
    return exit_.value.code, captured.out + captured.err


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a folder)."""
    return {str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes())
            for p in sorted(root.rglob("*"))}


def _tiny_fit_config(folder: Path) -> Path:
    """The cheapest fit: no layer-cost model, no internal hold-outs, one member of 5 trees."""
    config = folder / "tiny.json"
    config.write_text(json.dumps({"layer_cost": False, "hole_folds": 0, "default": {
        "family": "xgboost", "n_members": 1, "params": {"n_estimators": 5}}}))
    return config


# Each writing command, with arguments valid up to the output folder ``OUT``.
FOLDER_COMMANDS = {
    "fit": lambda t: ["fit", resources.RELEASED_DATASET, "--out", "OUT"],
    "adapt": lambda t: ["adapt", "--device", "myboard", "--measured", t / "my.csv",
                        "--out", "OUT"],
    "merge": lambda t: ["merge", t / "results", "--out", "OUT"],
    "measure": lambda t: ["measure", "cpu-ort", "--archs", ARCH, "--out", "OUT"],
    "measure-qualcomm": lambda t: ["measure-qualcomm", "snpe-dsp", "--archs", ARCH,
                                   "--out", "OUT"],
    "search": lambda t: ["search", "-o", "macs:min", "--budget", "5", "--out", "OUT"],
    "quant-report": lambda t: ["quant-report", ARCH, "--out", "OUT"],
    "quant-layers": lambda t: ["quant-layers", ARCH, "--out", "OUT"],
    "front-report": lambda t: ["front-report", t / "search", "--out", "OUT"],
    "evaluate": lambda t: ["evaluate", t / "model", resources.RELEASED_DATASET,
                           "--report", "OUT"],
    "retrain": lambda t: ["retrain", t / "pareto.csv", "--out", "OUT"],
    "train": lambda t: ["train", "--config", DIGITS, "--logging.folder", "OUT"],
    "pipeline": lambda t: ["pipeline", "--out", "OUT"],
    "queue results": lambda t: ["queue", "results", "--queue", t / "q.db", "--out", "OUT"],
    "worker": lambda t: ["worker", "--queue", t / "q.db", "--idle-exit", "--out", "OUT"],
}


def _inputs(tmp_path: Path) -> Path:
    """A work folder with the small inputs some commands read (read only after the check)."""
    (tmp_path / "pareto.csv").write_text(f"arch\n{ARCH}\n")
    return tmp_path


def _command_args(name: str, tmp_path: Path, out: Path) -> list:
    return [out if a == "OUT" else a for a in FOLDER_COMMANDS[name](tmp_path)]


@pytest.mark.parametrize("name", sorted(FOLDER_COMMANDS))
def test_foreign_folder_is_refused_and_untouched(name, tmp_path, capsys):
    work = _inputs(tmp_path)
    thesis = work / "thesis"
    thesis.mkdir()
    (thesis / "thesis.tex").write_text("\\documentclass{article} my thesis\n")
    (thesis / "figures").mkdir()
    before = tree(work)
    code, text = anb(_command_args(name, work, thesis), capsys)
    assert code == 2, text
    assert "Traceback" not in text and text.count("error:") == 1, text
    assert f"{thesis}: holds 2 files that are not" in text and "thesis.tex" in text, text
    assert tree(work) == before  # nothing replaced, nothing new (no staging, no marker)


@pytest.mark.parametrize("name", sorted(FOLDER_COMMANDS))
def test_file_given_as_folder_is_refused_and_untouched(name, tmp_path, capsys):
    work = _inputs(tmp_path)
    notes = work / "notes.txt"
    notes.write_text("my notes\n")
    before = tree(work)
    code, text = anb(_command_args(name, work, notes), capsys)
    assert code == 2, text
    assert "Traceback" not in text and f"{notes}: is a file" in text, text
    assert tree(work) == before


FILE_COMMANDS = {
    "export": lambda t: ["export", "--local", t, "--out", "OUT"],
    "query": lambda t: ["query", "accel-nasbench", t / "archs.txt", "--out", "OUT"],
    "space onnx": lambda t: ["space", "onnx", ARCH, "OUT"],
    "space configspace": lambda t: ["space", "configspace", "OUT"],
    "write-ffcv": lambda t: ["write-ffcv", t, "OUT"],
}


@pytest.mark.parametrize("name", sorted(FILE_COMMANDS))
def test_folder_given_as_file_is_refused(name, tmp_path, capsys):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "keep.txt").write_text("keep")
    before = tree(tmp_path)
    args = [folder if a == "OUT" else a for a in FILE_COMMANDS[name](tmp_path)]
    code, text = anb(args, capsys)
    assert code == 2 and f"{folder}: is a folder; a file is written there" in text, text
    assert tree(tmp_path) == before


def test_another_kind_of_anb_output_is_named(tmp_path, capsys):
    search = tmp_path / "search"
    code, text = anb(["search", "-o", "macs:min", "--budget", "5", "--out", search], capsys)
    assert code == 0, text
    before = tree(search)
    code, text = anb(["measure", "cpu-ort", "--archs", ARCH, "--out", search], capsys)
    assert code == 2 and "holds anb search results, not anb measure results" in text, text
    assert tree(search) == before


def test_search_resumes_its_own_folder(tmp_path, capsys):
    out = tmp_path / "search"
    for budget in (5, 7):
        code, text = anb(["search", "-o", "macs:min", "--budget", budget, "--out", out], capsys)
        assert code == 0, text
    assert json.loads((out / "summary.json").read_text())["evaluations"] == 7
    assert outputs.read_marker(out)["kind"] == "search"


def _records(folder: Path, n: int) -> Path:
    from anb.records import load_records

    folder.mkdir()
    for record in load_records(resources.RELEASED_DATASET, space=ANB_SPACE)[:n]:
        body = {k: v for k, v in record.items() if k != "source"}
        (folder / Path(record["source"]).name).write_text(json.dumps(body))
    return folder


@pytest.mark.slow
def test_merge_replaces_its_own_output_and_overwrite_replaces_anything(tmp_path, capsys):
    one, two = _records(tmp_path / "one", 2), _records(tmp_path / "two", 3)
    out = tmp_path / "dataset"
    assert anb(["merge", one, "--out", out], capsys)[0] == 0
    assert len(list((out / "records").glob("*.json"))) == 2
    code, text = anb(["merge", two, "--out", out], capsys)
    assert code == 0, text
    assert len(list((out / "records").glob("*.json"))) == 3  # replaced, not added to
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "thesis.tex").write_text("mine")
    code, text = anb(["merge", one, "--out", thesis, "--overwrite"], capsys)
    assert code == 0, text
    assert not (thesis / "thesis.tex").exists() and (thesis / "merge_report.json").is_file()


@pytest.mark.slow
def test_fit_replaces_an_artifact_written_without_the_marker(tmp_path, capsys, monkeypatch):
    from anb.surrogates import load
    from anb.surrogates.ensemble import TargetSurrogate

    config = _tiny_fit_config(tmp_path)
    out = tmp_path / "model"
    base = ["fit", resources.RELEASED_DATASET, "--config", config, "--out", out]
    assert anb(base + ["--targets", "latency_zcu102"], capsys)[0] == 0
    (out / outputs.MARKER).unlink()  # as the previous anb version wrote it
    code, text = anb(base + ["--targets", "throughput_a100"], capsys)
    assert code == 0, text
    assert load(out).metrics == ["throughput_a100"]
    assert not any(p.name.startswith("latency_zcu102") for p in out.iterdir())
    before = tree(tmp_path)

    def interrupted(self, folder, name, compiled=False):  # Ctrl-C while it is being written
        (folder / f"{name}_partial.json").write_text("{")
        raise KeyboardInterrupt

    monkeypatch.setattr(TargetSurrogate, "save", interrupted)
    code, text = anb(base + ["--targets", "latency_zcu102"], capsys)
    assert code == 130, text
    assert tree(tmp_path) == before  # the old artifact intact, no staging left


@pytest.mark.slow
def test_adapt_overwrite_replaces_a_foreign_folder(tmp_path, capsys):
    from anb.surrogates.adapt.model import load_adapted
    from anb.surrogates.fit import prepare

    config = _tiny_fit_config(tmp_path)
    base = tmp_path / "base"
    assert anb(["fit", resources.RELEASED_DATASET, "--config", config, "--out", base,
                "--targets", "latency_zcu102,throughput_a100"], capsys)[0] == 0
    data = prepare(resources.RELEASED_DATASET, space=ANB_SPACE)
    lab = data.labels["latency_vck190"]
    rows = [i for i in range(len(lab.values)) if lab.present[i]][:8]
    csv = tmp_path / "my.csv"
    csv.write_text("arch,latency_myboard\n" + "".join(
        f"{data.frame['arch'].iloc[i]},{lab.values[i]}\n" for i in rows))
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "thesis.tex").write_text("mine")
    args = ["adapt", "--device", "myboard", "--measured", csv, "--base", base, "--out", thesis]
    assert anb(args, capsys)[0] == 2 and (thesis / "thesis.tex").read_text() == "mine"
    code, text = anb(args + ["--overwrite"], capsys)
    assert code == 0, text
    assert sorted(p.name for p in thesis.iterdir()) == [outputs.MARKER, "adapted.npz",
                                                        "manifest.json"]
    assert list(load_adapted(thesis).models) == ["latency_myboard"]


@pytest.mark.slow
def test_measure_refuses_a_second_run_into_the_same_folder(tmp_path):
    """Two real ``anb measure`` processes: the second ends at once naming the first's pid.

    The first is stopped (SIGSTOP) while the second runs, so a short measurement cannot end
    before the second starts up. A third run, after the first, resumes the folder (in this
    process through the console entry's wrapper, tests/console_fixtures.py: the lock is free
    by then)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "speed"
    command = [sys.executable, "-m", "anb", "measure", "cpu-ort", "--archs", ARCH, "--out",
               str(out), "--budget", "0.3", "--anchors", "none", "--no-progress"]
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    info = out / f"{outputs.LOCK}.{socket.gethostname()}.json"
    deadline = time.monotonic() + 60
    while not info.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert info.exists(), first.communicate()
    first.send_signal(signal.SIGSTOP)  # holds the lock however slow the second's start-up
    try:
        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    finally:
        first.send_signal(signal.SIGCONT)
    first_out, first_err = first.communicate(timeout=300)
    assert second.returncode == 2, second.stderr
    assert second.stderr.strip() == (
        f"error: another anb measure (pid {first.pid} on {socket.gethostname()}) is writing "
        f"{out}; wait for it to finish or use another --out")
    assert first.returncode == 0, first_err
    assert "measured 1" in first_out and not info.exists()
    third = run_console(command[3:], tmp_path)
    assert third.returncode == 0 and "skipped 1 (already done)" in third.stdout, third.stderr


# The writer itself.

def test_check_folder_accepts_new_empty_and_own_and_refuses_the_rest(tmp_path):
    assert outputs.check_folder(tmp_path / "new", KIND) == tmp_path / "new"
    assert outputs.check_folder(tmp_path, KIND) == tmp_path  # empty
    (tmp_path / "demo.txt").write_text("legacy output")  # recognised without the marker
    outputs.check_folder(tmp_path, KIND)
    (tmp_path / "other").write_text("x")
    outputs.check_folder(tmp_path, KIND)  # still recognised: the legacy test holds
    folder = tmp_path / "foreign"
    folder.mkdir()
    for i in range(7):
        (folder / f"f{i}.tex").write_text("x")
    with pytest.raises(UserError) as err:
        outputs.check_folder(folder, KIND)
    assert str(err.value) == (
        f"--out {folder}: holds 7 files that are not an anb demo output: f0.tex, f1.tex, "
        "f2.tex, f3.tex, f4.tex, ...; anb leaves it untouched. Give another --out (new or "
        "empty), or --overwrite to replace the folder")
    assert outputs.check_folder(folder, KIND, overwrite=True) == folder
    resumed = outputs.Kind("resumed", "anb resumed results")
    with pytest.raises(UserError, match=r"\(new or empty\)$"):
        outputs.check_folder(folder, resumed)  # no --overwrite offered where it cannot replace


def test_marker_decides_over_the_legacy_test(tmp_path):
    outputs.write_marker(tmp_path, outputs.Kind("other", "an anb other output"))
    (tmp_path / "demo.txt").write_text("x")
    with pytest.raises(UserError, match="holds an anb other output, not an anb demo output"):
        outputs.check_folder(tmp_path, KIND)


def test_replace_folder_swaps_in_only_a_complete_output(tmp_path):
    out = tmp_path / "out"
    with outputs.replace_folder(out, KIND) as staging:
        (staging / "demo.txt").write_text("first")
    assert (out / "demo.txt").read_text() == "first" and outputs.holds(out, KIND)
    before = tree(tmp_path)
    for error in (RuntimeError("disk full"), KeyboardInterrupt()):
        with pytest.raises(type(error)):
            with outputs.replace_folder(out, KIND) as staging:
                (staging / "demo.txt").write_text("half")
                raise error
        assert tree(tmp_path) == before  # the old output intact, the staging gone
    with outputs.replace_folder(out, KIND) as staging:
        (staging / "new.txt").write_text("second")
    assert sorted(p.name for p in out.iterdir()) == [outputs.MARKER, "new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging, no old copy left


def test_replace_folder_refuses_before_the_block_runs(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    ran = []
    with pytest.raises(UserError, match="notes.txt: is a file, but an anb demo output is a "
                                        "folder"):
        with outputs.replace_folder(tmp_path / "notes.txt", KIND):
            ran.append(1)
    assert ran == [] and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_prepare_folder_marks_once_and_resumes(tmp_path):
    out = outputs.prepare_folder(tmp_path / "runs", KIND)
    (out / "a.json").write_text("{}")
    marker = (out / outputs.MARKER).read_bytes()
    assert outputs.prepare_folder(out, KIND) == out
    assert (out / outputs.MARKER).read_bytes() == marker and (out / "a.json").exists()


def test_exclusive_refuses_a_second_holder_and_frees_on_exit(tmp_path):
    with outputs.exclusive(tmp_path, "anb demo"):
        with pytest.raises(UserError, match=rf"another anb demo \(pid {os.getpid()} on "):
            with outputs.exclusive(tmp_path, "anb demo"):
                pass
    with outputs.exclusive(tmp_path, "anb demo"):  # free again
        pass


def test_check_file_refuses_a_folder(tmp_path):
    assert outputs.check_file(tmp_path / "a.csv") == tmp_path / "a.csv"
    with pytest.raises(UserError, match="is a folder; a file is written there"):
        outputs.check_file(tmp_path)


def test_a_kinds_companion_files_do_not_make_a_folder_foreign(tmp_path):
    """Catches: a SLURM job's log written into the results folder before the trainer starts
    (sbatch's slurm-<id>.out) refused as someone else's file."""
    kind = outputs.Kind("demo-companions", "a demo output", companions=("slurm-*.out",))
    (tmp_path / "slurm-7.out").write_text("job log")
    assert outputs.check_folder(tmp_path, kind) == tmp_path
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(outputs.UserError,
                       match="holds 1 file that is not a demo output: notes.txt"):
        outputs.check_folder(tmp_path, kind)



@pytest.mark.parametrize(("umask", "file_mode", "folder_mode"),
                         [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750), (0o077, 0o600, 0o700)])
def test_outputs_follow_the_umask(tmp_path, umask, file_mode, folder_mode):
    """Files and output folders were 0600 / 0700 whatever the umask: on a shared cluster
    colleagues could not read the results. Now they get what the umask allows."""
    from anb.io import atomic_write_text, current_umask

    previous = os.umask(umask)
    try:
        assert current_umask() == umask
        written = atomic_write_text(tmp_path / "record.json", "{}")
        with outputs.replace_folder(tmp_path / "out", outputs.Kind("artifact", "test")) as stage:
            atomic_write_text(stage / "manifest.json", "{}")
    finally:
        os.umask(previous)
    assert written.stat().st_mode & 0o777 == file_mode
    assert (tmp_path / "out").stat().st_mode & 0o777 == folder_mode
    assert (tmp_path / "out" / "manifest.json").stat().st_mode & 0o777 == file_mode


def test_replace_folder_refuses_what_arrived_while_the_output_was_written(tmp_path):
    """Bug class: the swap replacing (and deleting) files a user put into the folder after the
    first check, while the output was being written."""
    out = tmp_path / "out"
    with pytest.raises(UserError, match="holds 1 file that is not an anb demo output: "
                                        "thesis.tex; anb leaves it untouched"):
        with outputs.replace_folder(out, KIND) as staging:
            (staging / "demo.txt").write_text("new")
            out.mkdir()
            (out / "thesis.tex").write_text("mine")
    assert [p.name for p in out.iterdir()] == ["thesis.tex"]
    assert (out / "thesis.tex").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # the staging removed


@pytest.mark.parametrize("failing, existed", [("aside", True), ("in", True), ("in", False)])
def test_a_failed_swap_keeps_the_old_output(tmp_path, monkeypatch, failing, existed):
    """Bug class: a rename failing mid-swap (moving the old output aside, or the new one in)
    losing the old output, hiding the error, or leaving staging / old copies behind."""
    out = tmp_path / "out"
    if existed:
        with outputs.replace_folder(out, KIND) as staging:
            (staging / "demo.txt").write_text("old")
    before = tree(tmp_path)
    real, failed, moves = os.replace, [], []

    def replace_failing_once(src, dst):
        step = "aside" if Path(src) == out else "in" if Path(dst) == out else None
        moves.append((step, Path(dst)))
        if step == failing and not failed:
            failed.append(step)
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace_failing_once)
    with pytest.raises(OSError, match="No space left on device"):
        with outputs.replace_folder(out, KIND) as staging:
            (staging / "demo.txt").write_text("new")
    assert failed == [failing]
    assert tree(tmp_path) == before  # the old output in place, nothing else left
    aside = [dst for step, dst in moves if step == "aside"]
    assert len(aside) == int(existed)  # moved aside beside it: a rename on one filesystem
    assert all(a.parent == tmp_path and a.name.startswith(".out.old.") for a in aside)


def test_the_swap_re_checks_with_the_callers_overwrite_and_option(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(UserError, match=rf"^--to {out}: holds 1 file that is not"):
        with outputs.replace_folder(out, KIND, option="--to"):
            out.mkdir()
            (out / "notes.txt").write_text("mine")
    with outputs.replace_folder(out, KIND, overwrite=True) as staging:
        (out / "more.txt").write_text("mine, arrived meanwhile")
        (staging / "demo.txt").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == [outputs.MARKER, "demo.txt"]


def test_legacy_outputs_are_recognised_by_their_files(tmp_path):
    files, manifest = outputs.has_files("a.txt", "b.txt"), outputs.has_manifest_format("fmt-1")
    (tmp_path / "a.txt").write_text("x")
    assert not files(tmp_path) and not manifest(tmp_path)  # no manifest: not readable
    (tmp_path / "b.txt").write_text("x")
    assert files(tmp_path) is True
    for text, held in [('{"format": "fmt-1"}', True), ('{"format": "fmt-2"}', False),
                       ('{"fmt": "fmt-1"}', False), ("[1]", False), ("{oops", False)]:
        (tmp_path / "manifest.json").write_text(text)
        assert manifest(tmp_path) is held, text


def test_the_marker_is_written_and_read_exactly(tmp_path):
    kind = outputs.Kind("demo", "an anb demo output")
    outputs.write_marker(tmp_path, kind)
    marker = json.loads((tmp_path / outputs.MARKER).read_text())
    assert marker == {"kind": "demo", "what": "an anb demo output",
                      "anb_version": outputs.__version__}
    assert outputs.read_marker(tmp_path) == marker
    for text in ("[1]", '{"kind": 3}', '{"what": "x"}', "{oops"):
        (tmp_path / outputs.MARKER).write_text(text)
        assert outputs.read_marker(tmp_path) is None, text
    (tmp_path / outputs.MARKER).write_text('{"kind": "other"}')  # no "what": named by kind
    (tmp_path / "x").write_text("x")
    with pytest.raises(UserError, match="holds other, not an anb demo output"):
        outputs.check_folder(tmp_path, KIND)


def test_five_foreign_files_are_all_named(tmp_path):
    for i in range(5):
        (tmp_path / f"f{i}").write_text("x")
    with pytest.raises(UserError, match="files that are not an anb demo output: f0, f1, f2, "
                                        "f3, f4; anb leaves"):
        outputs.check_folder(tmp_path, KIND)


def test_prepare_folder_creates_parents_and_names_its_option(tmp_path):
    out = outputs.prepare_folder(tmp_path / "a" / "b", KIND)
    assert out.is_dir() and outputs.holds(out, KIND)
    (tmp_path / "c").write_text("mine")
    with pytest.raises(UserError, match=rf"^--results {tmp_path / 'c'}: is a file"):
        outputs.prepare_folder(tmp_path / "c", KIND, option="--results")
    with pytest.raises(UserError, match=rf"^--out {tmp_path / 'c'}: is a file"):
        outputs.prepare_folder(tmp_path / "c", KIND)


def test_check_file_names_the_option(tmp_path):
    with pytest.raises(UserError) as err:
        outputs.check_file(tmp_path)
    assert str(err.value) == (f"--out {tmp_path}: is a folder; a file is written there. Give a "
                              "file path (a new file, or one to replace)")


def test_a_holder_file_that_is_not_an_object_still_gives_a_refusal(tmp_path):
    from filelock import FileLock

    with FileLock(tmp_path / outputs.LOCK, timeout=0):
        (tmp_path / f"{outputs.LOCK}.json").write_text("[1, 2]")
        with pytest.raises(UserError, match=r"^another anb command \(pid \? on "):
            with outputs.exclusive(tmp_path, "anb demo"):
                pass
