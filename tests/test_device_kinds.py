"""Every device config names its ``kind``; the loader checks it against the config's tables and
picks the target of that kind; a config written before the field loads only where its tables
show one kind."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from anb.cli import app
from anb.cli_support import run
from anb.collect_throughput.device_kinds import DEVICE_KINDS, device_kind, inferred_kind
from anb.collect_throughput.targets.devices import load_any_device, load_target
from anb.collect_throughput.targets.local import LocalTarget
from anb.collect_throughput.targets.protocol_target import Schedule, scheduled
from anb.collect_throughput.targets.qualcomm.config import QUALCOMM_DIR
from anb.collect_throughput.targets.qualcomm.stages import QualcommTarget
from anb.collect_throughput.targets.remote import RemoteTarget
from anb.collect_throughput.timing.protocol import CONFIG_DIR, device_from_mapping
from anb.searchspace.space import ANB_SPACE

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the backport
    import tomli as tomllib

SHIPPED = sorted([*CONFIG_DIR.glob("*.toml"), *QUALCOMM_DIR.glob("*.toml")])
LATENCY = {"name": "x", "backend": "onnxruntime", "latency": {"batch": 1}}
REMOTE = {"transport": "local://"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_config_names_its_kind(path: Path):
    table = tomllib.loads(path.read_text())
    assert table.get("kind") in DEVICE_KINDS
    assert device_kind(table) == table["kind"]
    assert inferred_kind(table) == table["kind"]  # the field agrees with the tables


def test_the_kind_picks_the_target():
    assert type(load_target("cpu-ort", space=ANB_SPACE.name)) is LocalTarget
    assert type(load_target("rpi4-ort", space=ANB_SPACE.name)) is RemoteTarget
    assert type(load_target("snpe-dsp", space=ANB_SPACE.name)) is QualcommTarget
    board = load_target({**LATENCY, "kind": "remote", "remote": REMOTE}, space=ANB_SPACE.name)
    assert type(board) is RemoteTarget and board.where == "board"


@pytest.mark.parametrize(("table", "kind"), [
    (LATENCY, "local"),
    ({**LATENCY, "remote": REMOTE}, "remote"),
    ({"name": "q", "sdk": "snpe"}, "qualcomm"),
    ({"name": "zcu102", "fpga": {"xmodels": "x"}, "remote": REMOTE}, "fpga"),
    ({"name": "q", "runtime": "dsp"}, None),  # Qualcomm fields but no sdk: not told apart
    ({**LATENCY, "sdk": "snpe"}, None),  # two kinds' tables
    ({**LATENCY, "fpga": {"xmodels": "x"}}, None),
    ({"name": "x", "backend": "onnxruntime"}, None),  # no table at all
])
def test_a_config_without_kind_loads_only_when_its_tables_tell(table, kind):
    assert inferred_kind(table) == kind
    if kind is not None:
        assert device_kind(table) == kind
        return
    with pytest.raises(ValueError, match=r"^kind=None is invalid; allowed: one of \['fpga', "
                       r"'local', 'qualcomm', 'remote'\] \(a config without kind loads only "
                       "when its tables show one kind"):
        device_kind(table)


@pytest.mark.parametrize(("table", "message"), [
    ({**LATENCY, "kind": "gpu"},
     r"kind='gpu' is invalid; allowed: one of \['fpga', 'local', 'qualcomm', 'remote'\]"),
    ({**LATENCY, "kind": "local", "remote": REMOTE},
     r"kind='local' is invalid with a \[remote\] table; allowed: 'remote'"),
    ({**LATENCY, "kind": "remote"}, r"kind='remote' needs a \[remote\] table"),
    ({"name": "x", "kind": "local"}, r"kind='local' needs at least one of the tables"),
    ({"name": "zcu102", "kind": "fpga", "remote": REMOTE}, r"kind='fpga' needs an \[fpga\]"),
    ({**LATENCY, "kind": "qualcomm"}, r"\(a Qualcomm config \(sdk = 'snpe'\)\): unknown "
     r"field\(s\) \['backend', 'latency'\]"),
])
def test_a_named_kind_is_checked_against_the_tables(table, message):
    with pytest.raises(ValueError, match=message):
        load_any_device(table, space=ANB_SPACE.name)


def test_a_kind_loader_refuses_another_kind():
    with pytest.raises(ValueError, match=r"kind='fpga' is invalid here; allowed: \['local', "
                       r"'remote'\]"):
        device_from_mapping({**LATENCY, "kind": "fpga", "fpga": {}}, space=ANB_SPACE.name)
    assert device_from_mapping({**LATENCY, "kind": "local"}, space=ANB_SPACE.name).remote is None


def test_measure_names_a_bad_kind(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text('kind = "gpu"\nname = "x"\nbackend = "onnxruntime"\n[latency]\nbatch = 1\n')
    with pytest.raises(SystemExit) as stop:
        run(app, ["measure", str(config), "--archs", "sample:1", "--out", str(tmp_path / "o")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: device config {str(config)!r} (a device config of no known "
                          "kind): kind='gpu' is invalid; allowed: one of ")
    assert not (tmp_path / "o").exists()


def test_a_schedule_reaches_protocol_targets_only():
    local = load_target("cpu-ort", space=ANB_SPACE.name)
    timed = scheduled(local, Schedule(interleave=4, anchors=(), anchor_every=2))
    assert type(timed) is LocalTarget and timed.config is local.config
    assert (timed.schedule.interleave, timed.schedule.anchor_every) == (4, 2)
    qualcomm = load_target("snpe-dsp", space=ANB_SPACE.name)
    assert scheduled(qualcomm, Schedule(interleave=4)) is qualcomm
    with pytest.raises(ValueError, match="interleave=0 is invalid; allowed: an integer >= 1"):
        Schedule(interleave=0)
    with pytest.raises(ValueError, match="anchor_every=0 is invalid; allowed: an integer >= 1"):
        Schedule(anchor_every=0)
