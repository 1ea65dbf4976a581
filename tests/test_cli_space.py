"""`anb space` from the shell: output and exit codes. The commands run in this process through
the console entry's wrapper (tests/console_fixtures.py); --help through the installed script
and the streaming sample, whose memory is a process's, in processes of their own."""
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from anb.searchspace.space import ANB_SPACE
from tests.console_fixtures import run_console

ANB = [str(Path(sys.executable).with_name("anb"))]


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return run_console(list(args), Path.cwd(), stdin=stdin)


def test_help_lists_the_space_group():
    out = subprocess.run([*ANB, "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "space" in out.stdout


def test_info_prints_size_and_stages():
    out = run("space", "info")
    assert out.returncode == 0
    assert "104,485,552,128 architectures" in out.stdout
    assert "stage 5: 112->192 stride 2" in out.stdout and "l [1, 2, 3, 4]" in out.stdout


@pytest.mark.slow
def test_sample_is_sharded_and_matches_the_library():
    from anb.searchspace import Sampler

    out = run("space", "sample", "-n", "4", "--seed", "9", "--shard", "1/3")
    assert out.returncode == 0
    assert out.stdout.split() == [str(a) for a in Sampler(9,
                                                          space=ANB_SPACE).sample(4, shard=(1, 3))]
    ids = run("space", "sample", "-n", "2", "--format", "id").stdout.split()
    assert ids == [a.id for a in Sampler(0, space=ANB_SPACE).sample(2)]


def test_sample_beyond_the_space_is_refused_at_once():
    start = time.monotonic()
    out = run("space", "sample", "-n", str(10**12))
    assert out.returncode == 2 and out.stdout == ""
    assert "cannot sample 1,000,000,000,000 architectures" in out.stderr
    assert "holds 104,485,552,128" in out.stderr
    assert time.monotonic() - start < 30


@pytest.mark.slow
def test_sample_streams_in_bounded_memory():
    """A huge N prints its first chunks at once and holds only a chunk in memory."""
    proc = subprocess.Popen(ANB + ["space", "sample", "-n", str(5 * 10**10)],
                            stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        # a guard only: a non-streaming sampler never prints (start-up takes a minute at load 10)
        timer = threading.Timer(300, proc.kill)
        timer.start()
        while len(lines) < 200_000:
            line = proc.stdout.readline()
            assert line, "the sampler printed nothing before it was stopped"
            lines.append(line)
        timer.cancel()
        rss_kb = int(re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{proc.pid}/status").read_text())[1])
        assert rss_kb < 400_000
        assert len(set(lines)) == len(lines)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_count_reads_args_and_stdin():
    b0 = "e1k3l1se-e6k3l2se-e6k5l2se-e6k3l3se-e6k5l3se-e6k5l4se-e6k3l1se"
    out = run("space", "count", b0)
    assert out.returncode == 0
    assert out.stdout.splitlines()[1].endswith(f"{b0},415.145024,5.288548")
    assert run("space", "count", stdin=b0 + "\n").stdout == out.stdout


@pytest.mark.parametrize("args, message", [
    (["space", "count", "e1k3l1"], "has 1 stage token(s)"),
    (["space", "sample", "--shard", "5/2"], "shard (5, 2) is invalid"),
    (["space", "sample", "--format", "xml"], "--format 'xml' is not one of"),
    (["space", "info", "--space", "nope"], "unknown search space 'nope'"),
])
@pytest.mark.slow
def test_bad_input_exits_non_zero_with_a_message(args, message):
    out = run(*args)
    assert out.returncode != 0
    assert message in out.stderr


@pytest.mark.slow
def test_onnx_and_configspace_exports(tmp_path):
    from ConfigSpace import ConfigurationSpace

    from anb.searchspace.onnx_export import run_onnx

    onnx = tmp_path / "b.onnx"
    out = run("space", "onnx", "e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1", str(onnx),
              "--num-classes", "10", "--resolution", "64")
    assert out.returncode == 0, out.stderr
    import numpy as np
    assert run_onnx(onnx, np.zeros((2, 3, 64, 64), np.float32)).shape == (2, 10)
    cs_path = tmp_path / "cs.json"
    assert run("space", "configspace", str(cs_path)).returncode == 0
    assert len(ConfigurationSpace.from_json(cs_path)) == 28
    bad = run("space", "onnx", "e1k3l1", str(tmp_path / "bad.onnx"))
    assert bad.returncode != 0 and "stage token" in bad.stderr
    assert not (tmp_path / "bad.onnx").exists()
