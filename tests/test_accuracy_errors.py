"""Bad input to the accuracy stage fails with a message naming the key (or option), the value
and what is allowed; damaged files in a results folder are errors that touch nothing."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.collect_accuracy import ffcv_io
from anb.collect_accuracy.export import export, from_local
from anb.collect_accuracy.train import main
from anb.searchspace import Arch
from anb.searchspace.space import ANB_SPACE
from tests.cli_helpers import range_refused
from tests.trainer_helpers import CONFIG

SMALL = "e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1"
QUICK = ["--progress", "false", "--epochs", "1", "--eval_epochs", "1", "--max_steps", "2",
         "--max_val_steps", "1", "--min_res", "32", "--max_res", "32", "--val_res", "32"]


@pytest.mark.parametrize("override, message", [
    (["--epochs", "0"], "'trainval.epochs': value 0 is out of range; allowed values are >= 1"),
    (["--crop_ratio", "1.5"], "'trainval.crop_ratio': value 1.5 is out of range; allowed "
                              "values are 0 < value <= 1"),
    (["--lr", "-1"], "'optimizer.lr': value -1.0 is out of range; allowed values are > 0"),
    (["--min_res", "64", "--max_res", "32"], "'trainval.min_res' / 'trainval.max_res'"),
    (["--epochs", "1", "--eval_epochs", "1", "--lr_peak_epoch", "2"],
     "'optimizer.lr_peak_epoch': value 2.0"),
    (["--epochs", "4", "--eval_epochs", "5"],
     "'trainval.eval_epochs': value 5 must be in 1..trainval.epochs"),
    (["--lock", "maybe"], "'logging.lock': value 'maybe' is not a valid bool"),
])
def test_out_of_range_values_name_key_value_and_allowed_range(tmp_path, capsys, override,
                                                              message):
    code = main(["--config", str(CONFIG), "--folder", str(tmp_path / "out"), *override])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not (tmp_path / "out").exists()


def test_unreadable_record_is_a_clear_error_and_nothing_is_touched(tmp_path, capsys):
    out = tmp_path / "out"
    args = ["--config", str(CONFIG), "--folder", str(out), *QUICK, "--archs", SMALL]
    assert main(args) == 0
    record = out / "records" / f"{Arch.from_string(SMALL, ANB_SPACE).id}.json"
    record.write_text('{"truncated": ')
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert str(record) in err and "is unreadable" in err and "remove it" in err
    assert record.read_text() == '{"truncated": '


def test_missing_ffcv_names_the_key_and_the_alternatives(tmp_path, capsys, monkeypatch):
    def no_ffcv():
        raise ImportError("FFCV is not installed")

    monkeypatch.setattr(ffcv_io, "_ffcv", no_ffcv)
    (tmp_path / "a.beton").write_bytes(b"")
    code = main(["--config", str(CONFIG), "--folder", str(tmp_path / "out"), *QUICK,
                 "--kind", "ffcv", "--train_path", str(tmp_path / "a.beton"),
                 "--val_path", str(tmp_path / "a.beton")])
    err = capsys.readouterr().err
    assert code == 2 and "'dataloader.kind': value 'ffcv' needs FFCV" in err
    assert "allowed without it: folder, digits" in err


def test_write_ffcv_option_out_of_range(tmp_path):
    pytest.importorskip("ffcv", reason="FFCV is installed by scripts/ci/accuracy.sh")
    result = CliRunner().invoke(app, ["write-ffcv", str(tmp_path), str(tmp_path / "x.beton"),
                                      "--quality", "0"])
    assert result.exit_code == 2
    assert range_refused(result.output, "--quality", ">=", "1")
    assert not (tmp_path / "x.beton").exists()


class FailingApi:
    """Stand-in for ``wandb.Api`` whose project listing fails like an unknown project."""

    def runs(self, path: str):
        raise RuntimeError(f"Could not find project {path}")


def test_export_names_a_wandb_project_it_cannot_read(tmp_path):
    with pytest.raises(ValueError, match="option --project: cannot list the runs of wandb "
                                         "project 'team/nope' .*Could not find project"):
        export(tmp_path / "x.csv", api=FailingApi(), projects=["team/nope"], space=ANB_SPACE)
    assert not (tmp_path / "x.csv").exists()


def test_export_duplicate_rule_names_allowed_values(tmp_path):
    (tmp_path / "res").mkdir()
    result = CliRunner().invoke(app, ["export", "--out", str(tmp_path / "x.csv"), "--local",
                                      str(tmp_path / "res"), "--duplicates", "median"])
    assert result.exit_code == 2
    assert "duplicate rule 'median' is unknown; allowed are ['first', 'mean']" in result.output


def test_export_lists_an_unreadable_skip_marker(tmp_path):
    (tmp_path / "skipped").mkdir()
    (tmp_path / "skipped" / "abc.json").write_text("{not json")
    (entry,) = from_local(tmp_path, space=ANB_SPACE).incomplete
    assert entry["arch_id"] == "abc" and entry["status"] == "skipped"
    assert "unreadable" in entry["reason"]
