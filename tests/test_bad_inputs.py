"""Every mistake a user can make on the command line ends with one ``error:`` line and exit
code 2, no traceback and nothing new in the working folder; Ctrl-C ends with exit code 130.

Each case runs the console entry's wrapper (``anb.cli_support.run``) in this process, in a
folder of prepared bad inputs (tests/console_fixtures.py); a few run the installed ``anb``
script, and the Ctrl-C cases a process of their own. The table is the list the issue asked
for: missing paths, a folder where a file is needed and the reverse, corrupt, empty and
non-UTF-8 files, absurd sizes, duplicate objectives and output folders holding user files. An
infeasible search is not a usage error: it writes its report and exits 1 (tests/test_nas.py).
"""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from anb.resources import RELEASED_DATASET as DATASET_TARBALL
from tests.console_fixtures import run_console

ROOT = Path(__file__).resolve().parents[1]
ARCH = "e6k5l1-e6k5l1-e6k5l1-e6k5l1-e6k5l1-e6k5l1-e6k5l1"
DEVICE = str(Path(__file__).parent / "data" / "cpu-ort-32.toml")
#: Seconds after which a case is taken to hang: a guard only, never a timing bound (a refusal
#: takes a few seconds, minutes on a loaded machine).
HANG_GUARD = 300


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    return {**env, **extra}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """A folder of bad inputs (and a few good ones to pair them with)."""
    root = tmp_path_factory.mktemp("inputs")
    (root / "adir").mkdir()
    (root / "userdir").mkdir()
    (root / "userdir" / "notes.txt").write_text("the user's own file\n")
    (root / "afile.txt").write_text("hello\n")
    (root / "archs.txt").write_text(ARCH + "\n")
    (root / "pareto.csv").write_text(f"arch\n{ARCH}\n")
    (root / "measured.csv").write_text("arch,throughput_cpu\n" + "".join(
        f"{f'e{e}k{k}l{depth}-' * 6}e6k5l1,{100 + i}\n" for i, (e, k, depth) in enumerate(
            [(1, 3, 1), (4, 3, 2), (6, 5, 3), (6, 3, 1), (4, 5, 2), (1, 5, 3)])))
    (root / "nb201_archs.txt").write_text("|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|"
                                          "skip_connect~0|nor_conv_3x3~1|nor_conv_3x3~2|\n")
    (root / "corrupt.db").write_text("not a database\n")
    (root / "table.csv").write_text("a,b\n1,2\n")
    (root / "empty.csv").write_bytes(b"")
    for name in ("latin1.txt", "latin1.json", "latin1.csv", "latin1.ini"):
        (root / name).write_bytes(b"caf\xe9 \xe9t\xe9\n")
    (root / "truncated.json").write_text('{"architecture": ')
    (root / "corrupt.tar.gz").write_bytes(b"\x00garbage" * 40)
    records = root / "records"
    records.mkdir()
    with tarfile.open(DATASET_TARBALL) as archive:
        members = [m for m in archive.getmembers() if m.isfile() and m.name.endswith(".json")]
        for member in members[:3]:
            (records / Path(member.name).name).write_bytes(archive.extractfile(member).read())
    good = (records / Path(members[0].name).name).read_bytes()
    (records / "zz_truncated.json").write_bytes(good[:len(good) // 2])
    return root


# (id, argv, text the error line must contain, extra env)
CASES = [
    # anb space
    ("space-onnx-folder-for-file", ["space", "onnx", ARCH, "adir"], "adir: is a folder", {}),
    ("space-configspace-folder", ["space", "configspace", "adir"], "adir: is a folder", {}),
    ("space-count-bad-arch", ["space", "count", "e9k9"], "'e9k9'", {}),
    ("space-sample-absurd-n", ["space", "sample", "-n", str(10**12)], "-n 1,000,000,000,000", {}),
    # anb measure
    ("measure-missing-archs", ["measure", "cpu-ort", "--archs", "missing.txt", "--out", "o"],
     "missing.txt", {}),
    ("measure-empty-archs-folder", ["measure", "cpu-ort", "--archs", "adir", "--out", "o"],
     "holds no architecture records", {}),
    ("measure-non-utf8-archs", ["measure", "cpu-ort", "--archs", "latin1.txt", "--out", "o"],
     "latin1.txt: not UTF-8", {}),
    ("measure-unknown-device", ["measure", "nodevice", "--archs", "archs.txt", "--out", "o"],
     "'nodevice'", {}),
    ("measure-absurd-threads", ["measure", "cpu-ort", "--archs", "archs.txt", "--out", "o",
                                "--threads", str(10**12)],
     "threads=1000000000000 cannot be pinned", {}),  # refused before --out is locked
    # anb pipeline
    ("pipeline-absurd-num-measured", ["pipeline", "--out", "p", "--num-measured", str(10**12)],
     "--num-measured 1,000,000,000,000: cannot sample", {}),
    # anb plan
    ("plan-empty-dataset-folder", ["plan", "adir", "--out", "o"],
     "dataset 'adir' holds no records", {}),
    ("plan-duplicate-targets", ["plan", "records", "--out", "o", "--targets",
                                "val_top1,val_top1"], "--targets 'val_top1' is given twice", {}),
    # anb merge
    ("merge-missing-results", ["merge", "missing", "--out", "o"], "'missing' does not exist",
     {}),
    ("merge-non-utf8-accuracy", ["merge", "records", "--accuracy", "latin1.json", "--out", "o"],
     "latin1.json: not UTF-8", {}),
    ("merge-empty-results-folder", ["merge", "adir", "--out", "o"], "adir: holds no records",
     {}),
    ("merge-empty-accuracy-folder", ["merge", "records", "--accuracy", "adir", "--out", "o"],
     "adir: holds no records", {}),
    ("merge-file-for-out-folder", ["merge", "records", "--out", "afile.txt"], "afile.txt", {}),
    ("merge-out-holds-user-files", ["merge", "records", "--out", "userdir"], "userdir", {}),
    # anb fit
    ("fit-empty-csv", ["fit", "empty.csv", "--out", "o"], "empty.csv: empty file",
     {}),
    ("fit-csv-without-archs", ["fit", "table.csv", "--out", "o"], "'table.csv' has no "
     "architecture", {}),
    ("fit-corrupt-tarball", ["fit", "corrupt.tar.gz", "--out", "o"],
     "corrupt.tar.gz: not a readable tar archive", {}),
    ("fit-truncated-record-in-folder", ["fit", "records", "--out", "o"],
     "zz_truncated.json: not valid JSON", {}),
    ("fit-non-utf8-config", ["fit", "records", "--config", "latin1.json", "--out", "o"],
     "latin1.json: not UTF-8", {}),
    ("fit-missing-dataset", ["fit", "missing.tar.gz", "--out", "o"], "'missing.tar.gz' does "
     "not exist", {}),
    ("fit-out-holds-user-files", ["fit", "records", "--out", "userdir"], "userdir", {}),
    # anb evaluate
    ("evaluate-missing-artifact", ["evaluate", "missing", "records"],
     "unknown packaged benchmark 'missing' and no folder of that name", {}),
    ("evaluate-folder-not-artifact", ["evaluate", "adir", "records"], "'adir' is not a surrogate "
     "artifact", {}),
    # anb query
    ("query-folder-for-archs-file", ["query", "accel-nasbench", "adir"], "adir: is a folder", {}),
    ("query-non-utf8-archs", ["query", "accel-nasbench", "latin1.txt"], "latin1.txt: not UTF-8",
     {}),
    ("query-truncated-json", ["query", "accel-nasbench", "truncated.json"],
     "truncated.json:1: not valid JSON", {}),
    ("query-empty-archs", ["query", "accel-nasbench", "empty.csv"], "empty.csv: no "
     "architectures", {}),
    ("query-duplicate-metrics", ["query", "accel-nasbench", "archs.txt", "--metrics",
                                 "val_top1,val_top1"], "--metrics 'val_top1' is given twice", {}),
    ("query-metric-and-its-alias", ["query", "accel-nasbench", "archs.txt", "--metrics",
                                    "val_top1,accuracy"],
     "--metrics 'val_top1' is given twice (val_top1 and accuracy)", {}),
    ("query-cache-dir-is-a-file", ["query", "accel-nasbench", "archs.txt"],
     "ANB_CACHE_DIR=", {"ANB_CACHE_DIR": "afile.txt"}),
    # anb search
    ("search-missing-benchmark", ["search", "-o", "val_top1", "--benchmark", "missing"],
     "unknown packaged benchmark 'missing' and no folder of that name", {}),
    ("search-unknown-metric", ["search", "-o", "bogus"], "['bogus']", {}),
    ("search-absurd-budget", ["search", "-o", "params:min", "--budget", str(10**12)],
     "--budget", {}),
    ("search-unknown-metric-small-budget", ["search", "-o", "bogus", "--budget", "10"],
     "['bogus']", {}),  # refused before the output folder is made
    ("search-duplicate-objectives", ["search", "-o", "params:min", "-o", "params:max",
                                     "--budget", "10", "--out", "s"], "params", {}),
    ("search-measure-file-for-out", ["search", "-o", "params:min", "-o",
                                     "throughput_cpu-ort-32:max", "--measure", DEVICE,
                                     "--budget", "4", "--out", "afile.txt"], "afile.txt", {}),
    # anb adapt
    ("adapt-missing-measured", ["adapt", "--device", "x", "--measured", "missing.csv", "--out",
                                "o"], "'missing.csv' does not exist", {}),
    ("adapt-non-utf8-measured", ["adapt", "--device", "x", "--measured", "latin1.csv", "--out",
                                 "o"], "latin1.csv: not UTF-8", {}),
    ("adapt-empty-measured", ["adapt", "--device", "x", "--measured", "empty.csv", "--out", "o"],
     "empty.csv: empty file", {}),
    # anb queue
    ("queue-status-corrupt-db", ["queue", "status", "--queue", "corrupt.db"],
     "corrupt.db is not an anb queue database", {}),
    ("queue-status-csv-as-queue", ["queue", "status", "--queue", "table.csv"],
     "table.csv is not an anb queue database", {}),
    ("queue-status-missing-queue", ["queue", "status", "--queue", "new.db"],
     "'new.db' does not exist", {}),
    ("queue-status-folder-as-queue", ["queue", "status", "--queue", "adir"], "'adir' is a folder",
     {}),
    ("queue-submit-missing-archs", ["queue", "submit", "--archs", "missing.txt", "--device",
                                    "cpu-ort", "--queue", "q.db"], "missing.txt", {}),
    ("queue-submit-corrupt-db", ["queue", "submit", "--archs", "archs.txt", "--device",
                                 "cpu-ort", "--queue", "corrupt.db"],
     "corrupt.db is not an anb queue database", {}),
    ("queue-results-corrupt-db", ["queue", "results", "--out", "o", "--queue", "corrupt.db"],
     "corrupt.db is not an anb queue database", {}),
    # anb train
    ("train-missing-config", ["train", "--config", "missing.ini"], "'missing.ini' does not exist",
     {}),
    ("train-folder-for-config", ["train", "--config", "adir"], "'adir' is a folder", {}),
    ("train-empty-config", ["train", "--config", "empty.csv"], "holds no [section]", {}),
    ("train-non-utf8-config", ["train", "--config", "latin1.ini"], "latin1.ini: not UTF-8", {}),
    ("measure-wrong-space-archs", ["measure", "cpu-ort", "--archs", "nb201_archs.txt", "--out",
                                   "o"], "--archs nb201_archs.txt:1: architecture string", {}),
    ("query-wrong-space-archs", ["query", "accel-nasbench", "nb201_archs.txt"],
     "nb201_archs.txt:1: architecture string", {}),
    ("queue-submit-empty-csv", ["queue", "submit", "--archs", "empty.csv", "--device", "cpu-ort",
                                "--queue", "q.db"], "empty.csv: empty file", {}),
    ("retrain-empty-config", ["retrain", "pareto.csv", "--out", "o", "--config", "empty.csv"],
     "config file 'empty.csv' holds no [section]", {}),
    ("retrain-truncated-config", ["retrain", "pareto.csv", "--out", "o", "--config",
                                  "truncated.json"],
     "contains no section headers. file: 'truncated.json', line: 1", {}),
    ("adapt-suggest-over-candidates", ["adapt", "--device", "cpu", "--measured", "measured.csv",
                                       "--out", "ad", "--suggest", "10000", "--candidates",
                                       "100"],
     "--suggest 10,000 is invalid; allowed: 1 to --candidates (100)", {}),
    ("search-non-utf8-device", ["search", "-o", "params:min", "--budget", "10", "--measure",
                                "latin1.txt"], "latin1.txt: not UTF-8", {}),
    # anb export
    ("export-missing-local", ["export", "--out", "o.csv", "--local", "missing"],
     "'missing' does not exist", {}),
    ("export-unknown-duplicates-rule", ["export", "--out", "o.csv", "--local", "records",
                                        "--duplicates", "bogus"], "duplicate rule 'bogus'", {}),
    ("export-unknown-recipe", ["export", "--out", "o.csv", "--local", "records", "--recipe",
                               "bogus"], "--recipe: value 'bogus'", {}),
    ("export-nothing-given", ["export", "--out", "o.csv"], "nothing to export", {}),
    # anb front-report
    ("front-report-missing-search", ["front-report", "missing", "--out", "o"],
     "missing: no pareto.csv", {}),
    ("front-report-not-a-search", ["front-report", "records", "--out", "o"],
     "records: no pareto.csv", {}),
    # anb quant-report
    ("quant-report-bad-arch", ["quant-report", "e9", "--out", "o"], "'e9'", {}),
    ("quant-report-bad-target", ["quant-report", ARCH, "--out", "o", "--target", "bogus"],
     "--target 'bogus'", {}),
    ("quant-report-missing-weights", ["quant-report", ARCH, "--out", "o", "--weights",
                                      "missing.pt"], "--weights 'missing.pt' does not exist", {}),
    ("quant-report-weights-without-images", ["quant-report", ARCH, "--out", "o", "--weights",
                                             "adir"], "--weights 'adir' needs --images", {}),
]


#: Out-of-range numbers Typer refuses itself (exit 2, the option and its bound named): (argv,
#: option, relation, bound). Run in-process: no console entry is needed for Typer's check.
RANGE_CASES = [
    (["space", "count", ARCH, "--resolution", str(10**12)], "--resolution", "<=", "8192"),
    (["space", "count", ARCH, "--num-classes", str(10**12)], "--num-classes", "<=", "100000"),
    (["space", "onnx", ARCH, "m.onnx", "--resolution", str(10**12)], "--resolution", "<=",
     "8192"),
    (["space", "onnx", ARCH, "m.onnx", "--num-classes", str(10**12)], "--num-classes", "<=",
     "100000"),
    (["measure", "cpu-ort", "--archs", ARCH, "--out", "o", "--resolution", str(10**12)],
     "--resolution", "<=", "8192"),
    (["measure", "cpu-ort", "--archs", ARCH, "--out", "o", "--batch", str(10**12)], "--batch",
     "<=", "4096"),
    (["quant-report", ARCH, "--out", "o", "--resolution", str(10**12)], "--resolution", "<=",
     "8192"),
    (["quant-layers", ARCH, "--out", "o", "--resolution", str(10**12)], "--resolution", "<=",
     "8192"),
    # image counts: at most ImageNet's validation set (anb.preprocessing.MAX_IMAGES)
    (["quant-report", ARCH, "--out", "o", "--calibration", str(10**12)], "--calibration", "<=",
     "50000"),
    (["quant-report", ARCH, "--out", "o", "--eval-images", str(10**12)], "--eval-images", "<=",
     "50000"),
    (["quant-layers", ARCH, "--out", "o", "--calibration", str(10**12)], "--calibration", "<=",
     "50000"),
    (["quant-layers", ARCH, "--out", "o", "--eval-images", str(10**12)], "--eval-images", "<=",
     "50000"),
    (["quant-layers", ARCH, "--out", "o", "--compare-images", str(10**12)], "--compare-images",
     "<=", "50000"),
    (["measure", "cpu-ort", "--archs", ARCH, "--out", "o", "--quality", "--quality-images",
      str(10**12)], "--quality-images", "<=", "50000"),
    (["queue", "submit", "--archs", ARCH, "--device", "cpu-ort", "--queue", "q.db",
      "--quality-images", str(10**12)], "--quality-images", "<=", "50000"),
    (["quant-layers", ARCH, "--out", "o", "--worst", str(10**12)], "--worst", "<=", "1000"),
    (["plan", "--out", "o", "--batch", str(10**12)], "--batch", "<=", "1000000"),
    (["pipeline", "--out", "p", "--search-budget", str(10**12)], "--search-budget", "<=",
     "100000"),
    (["pipeline", "--out", "p", "--measure-budget", "1e12"], "--measure-budget", "<=", "60"),
    # fit / evaluate: anb.surrogates.api's MAX_JOBS, MAX_MEMBERS, MAX_HPO_SECONDS
    (["fit", "--out", "o", "--jobs", str(10**12)], "--jobs", "<=", "1024"),
    (["fit", "--out", "o", "--members", "100000"], "--members", "<=", "100"),
    (["fit", "--out", "o", "--hpo-seconds", "1e300"], "--hpo-seconds", "<=", "604800"),
    (["evaluate", "accel-nasbench", "--jobs", str(10**12)], "--jobs", "<=", "1024"),
    (["write-ffcv", "adir", "o.beton", "--max-side", str(10**12)], "--max-side", "<=", "8192"),
    (["write-ffcv", "adir", "o.beton", "--workers", str(10**12)], "--workers", "<=", "256"),
    (["queue", "status", "--queue", "q.db", "--watch", "1e300"], "--watch", "<=", "86400"),
    (["queue", "status", "--queue", "q.db", "--failed", str(10**12)], "--failed", "<=",
     "10000"),
    (["worker", "--idle-exit", "--lease", "1e300"], "--lease", "<=", "86400"),
    (["worker", "--idle-exit", "--poll", "1e300"], "--poll", "<=", "3600"),
]


def test_absurd_sizes_are_refused_by_range(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from anb.cli import app
    from tests.cli_helpers import range_refused

    monkeypatch.chdir(tmp_path)
    for argv, option, relation, bound in RANGE_CASES:
        run = CliRunner().invoke(app, argv)
        assert run.exit_code == 2 and range_refused(run.output, option, relation, bound), \
            (argv, run.output)
    assert not list(tmp_path.iterdir()), "nothing written"


def test_measure_qualcomm_refuses_an_unknown_transport_before_any_work(tmp_path, monkeypatch):
    """It measured, failed every architecture on the transport and exited 0 with a folder."""
    from typer.testing import CliRunner

    from anb.cli import app

    monkeypatch.chdir(tmp_path)
    run = CliRunner().invoke(app, ["measure-qualcomm", "snpe-dsp", "--archs", ARCH, "--out", "o",
                                   "--transport", "bogus"])
    assert run.exit_code == 2 and "error: device 'snpe-dsp': transport='bogus' is invalid; " \
        "allowed: adb://..., local://..., ssh://..." in run.output, run.output
    assert not list(tmp_path.iterdir())


def test_queue_commands_refuse_what_the_queue_does_not_hold(tmp_path, monkeypatch):
    """retry / cancel / bump / results of a job id, device or stage the queue lacks: one error
    naming it (they answered "0 job(s)" with exit 0); a worker with an unknown stage creates no
    queue."""
    from typer.testing import CliRunner

    from anb.cli import app

    monkeypatch.chdir(tmp_path)
    submitted = CliRunner().invoke(app, ["queue", "submit", "--archs", ARCH, "--device",
                                         "cpu-ort", "--queue", "q.db"])
    assert submitted.exit_code == 0, submitted.output
    before = (tmp_path / "q.db").read_bytes()
    for argv, message in (
            (["retry", str(10**12)], f"job id(s) [{10**12}] are not in the queue"),
            (["cancel", "1", "--device", "bogus"],
             "--device 'bogus' has no job in the queue; it has ['cpu-ort']"),
            (["cancel", "--stage", "bogus"],
             "--stage 'bogus' has no job in the queue; it has ['measure']"),
            (["bump", "77", "--priority", "1"], "job id(s) [77] are not in the queue"),
            (["results", "--out", "o", "--device", "bogus"], "--device 'bogus' has no job")):
        run = CliRunner().invoke(app, ["queue", *argv, "--queue", "q.db"])
        assert run.exit_code == 2 and f"error: {message}" in run.output, (argv, run.output)
    assert (tmp_path / "q.db").read_bytes() == before and not (tmp_path / "o").exists()
    run = CliRunner().invoke(app, ["worker", "--idle-exit", "--stages", "bogus"])
    assert run.exit_code == 2 and "stage='bogus' is invalid" in run.output, run.output
    assert not (tmp_path / "anb-queue.db").exists()


@pytest.mark.parametrize("command", [["quant-report", ARCH], ["quant-layers", ARCH]])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_threshold_that_is_not_a_number_is_refused(tmp_path, monkeypatch, command, value):
    from typer.testing import CliRunner

    from anb.cli import app

    monkeypatch.chdir(tmp_path)
    run = CliRunner().invoke(app, [*command, "--out", "o", "--sqnr-threshold", value])
    assert run.exit_code == 2, run.output
    assert f"error: --sqnr-threshold {float(value)}: not a finite number" in run.output
    assert not list(tmp_path.iterdir()), "nothing written"


def test_merge_with_a_truncated_record_merges_the_rest_and_exits_1(inputs, tmp_path,
                                                                    monkeypatch):
    """One bad record never stops the rest, and the merge does not pass for complete: the
    skipped file is named with its reason and the exit code is 1."""
    import json

    from typer.testing import CliRunner

    from anb.cli import app

    monkeypatch.chdir(tmp_path)
    run = CliRunner().invoke(app, ["merge", str(inputs / "records"), "--out", "o"])
    assert run.exit_code == 1, run.output
    assert "zz_truncated.json: " in run.output and "incomplete: 1 record(s) skipped" in \
        run.output, run.output
    assert "merged 3 records" in run.output, run.output
    report = json.loads((tmp_path / "o" / "merge_report.json").read_text())
    assert [Path(e["file"]).name for e in report["skipped"]] == ["zz_truncated.json"]


def _tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _check_one_error_line(run: subprocess.CompletedProcess, expected: str, work: Path,
                          before: set[str]) -> None:
    output = run.stdout + run.stderr
    assert run.returncode == 2, output
    assert "Traceback" not in output, output
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and expected in errors[0], output
    assert _tree(work) == before, f"new files: {_tree(work) - before}"


@pytest.mark.parametrize("argv, expected, env", [
    pytest.param(argv, expected, env, id=case_id) for case_id, argv, expected, env in CASES])
def test_bad_input_is_one_error_line(inputs, tmp_path, argv, expected, env):
    """In this process through the console entry's wrapper (tests/console_fixtures.py)."""
    work = tmp_path / "work"
    shutil.copytree(inputs, work)
    before = _tree(work)
    env = {k: str(work / v) for k, v in env.items()}
    _check_one_error_line(run_console(argv, work, env), expected, work, before)


#: Cases of CASES run through the installed ``anb`` console script, in a process of its own:
#: a usage error of anb's own, a user's OS error and one read from the environment.
CONSOLE_SCRIPT_CASES = ["measure-missing-archs", "query-cache-dir-is-a-file",
                        "search-unknown-metric"]


@pytest.mark.parametrize("case_id", CONSOLE_SCRIPT_CASES)
def test_bad_input_through_the_console_script(inputs, tmp_path, case_id):
    _, argv, expected, env = next(case for case in CASES if case[0] == case_id)
    script = Path(sys.executable).with_name("anb")
    assert script.is_file(), f"{script}: the anb console script is not installed"
    work = tmp_path / "work"
    shutil.copytree(inputs, work)
    before = _tree(work)
    env = {k: str(work / v) for k, v in env.items()}
    run = subprocess.run([str(script), *argv], cwd=work, env=_env(**env), capture_output=True,
                         text=True, timeout=HANG_GUARD)
    _check_one_error_line(run, expected, work, before)


def _ctrl_c_as_in_a_terminal() -> None:
    """In the child before it starts anb: SIGINT handled and delivered as a terminal's shell
    leaves it. An ignored or blocked SIGINT is inherited across exec, and the suite itself may
    run with SIGINT ignored (started as a background job), where anb rightly cannot see the
    Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _interrupt(argv: list[str], work: Path, started: str, timeout: float
               ) -> tuple[subprocess.CompletedProcess, float, float]:
    """Start ``anb argv`` in ``work``, send SIGINT once ``started`` is on stderr, return the
    finished process, the seconds it took to stop and those it took to get to ``started``
    (the yardstick of a stop time on a machine of unknown load)."""
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "anb", *argv], cwd=work, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_ctrl_c_as_in_a_terminal)
    with proc:  # a failed wait leaves no anb running (Popen's exit waits for the kill)
        try:
            seen = b""
            deadline = time.monotonic() + timeout
            while started.encode() not in seen:  # woken by each write to stderr, no polling
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"no {started!r} in {timeout} s: {seen.decode()}"
                if select.select([proc.stderr], [], [], remaining)[0]:
                    chunk = os.read(proc.stderr.fileno(), 1 << 16)
                    assert chunk, f"anb ended before {started!r}: {seen.decode()}"
                    seen += chunk
            proc.send_signal(signal.SIGINT)
            sent = time.monotonic()
            to_start = sent - began
            out, err = proc.communicate(timeout=120)
            stop = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
    return subprocess.CompletedProcess(argv, proc.returncode, out.decode(),
                                       (seen + err).decode()), stop, to_start


@pytest.mark.slow
def test_ctrl_c_during_fit_exits_130_promptly_writing_nothing(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    # the default config without its hole folds (minutes of fitting before the first member,
    # none of it about stopping): the members are the default's
    config = tmp_path / "no_folds.json"
    config.write_text('{"hole_folds": 0}')
    run, stop, to_start = _interrupt(["fit", str(DATASET_TARBALL), "--config", str(config),
                                      "--out", "art"], work,
                                     "1/", timeout=300)  # one member fitted: under way
    assert run.returncode == 130, run.stderr
    assert "Traceback" not in run.stderr and "interrupted (Ctrl-C)" in run.stderr, run.stderr
    # at the end of the member being fitted: less than start-up and the first member took on
    # this machine at its present load; the rest of the fit takes about twice that
    assert stop < to_start, f"took {stop:.1f} s to stop (first member: {to_start:.1f} s)"
    assert _tree(work) == set(), "no artifact (nor a temporary one) is left"


@pytest.mark.slow
def test_ctrl_c_during_measured_search_writes_the_partial_report(tmp_path):
    import json

    work = tmp_path / "work"
    work.mkdir()
    run, stop, to_start = _interrupt(["search", "-o", "params:min", "-o",
                                      "throughput_cpu-ort-32:max", "--measure", DEVICE,
                                      "--budget", "200", "--out", "s"], work, "measured 8/",
                                     timeout=300)
    assert run.returncode == 130, run.stderr
    assert "Traceback" not in run.stderr and "run the same command again" in run.stderr
    # at the end of the block being measured; the whole budget takes 25 times the first 8
    assert stop < to_start + 10, f"took {stop:.1f} s to stop (8 measured in {to_start:.1f} s)"
    summary = json.loads((work / "s" / "summary.json").read_text())
    measured = {p.stem for p in (work / "s" / "measurements" / "cpu-ort-32").glob("*.json")}
    assert summary["stopped"] == "interrupted (Ctrl-C)" and summary["measurements"] >= 8
    assert summary["measurements"] == len(measured), "the report holds what was measured"
    assert not list((work / "s").glob(".*.tmp")), "nothing half-written"
