"""Config parsing, the recipe's schedules, and clear errors on bad input (in-process)."""
from __future__ import annotations

import pytest
import torch

from anb.collect_accuracy import recipe
from anb.collect_accuracy.config import ConfigError, load_config, recipe_hash, to_ini
from anb.collect_accuracy.train import main
from anb.searchspace import EFFICIENTNET_B0
from anb.searchspace.model import build_model
from anb.searchspace.space import ANB_SPACE
from tests.trainer_helpers import CONFIG, REPO

IMAGENET = REPO / "configs" / "accuracy" / "imagenet_proxy.ini"
TINY = ["--progress", "false", "--num_models", "1", "--epochs", "1", "--eval_epochs", "1",
        "--max_steps", "2", "--max_val_steps", "1", "--min_res", "32", "--max_res", "32",
        "--val_res", "32"]


def test_imagenet_recipe_file_matches_the_reference():
    config = load_config(IMAGENET)
    assert set(config) == {"logging", "model", "dataloader", "trainval", "optimizer",
                           "distributed", "claims"}
    tv, opt = config["trainval"], config["optimizer"]
    assert [recipe.resolution(e, tv) for e in range(16)] == [160] * 12 + [192] * 4
    assert recipe.peak_lr(config, world_size=4) == pytest.approx(0.425)
    assert recipe.peak_lr(config, world_size=8) == pytest.approx(0.85)
    steps = 100
    assert recipe.lr_at(0, steps, 16, 0.425, opt) == pytest.approx(0.425e-4)
    assert recipe.lr_at(2 * steps, steps, 16, 0.425, opt) == pytest.approx(0.425)
    assert recipe.lr_at(9 * steps, steps, 16, 0.425, opt) == pytest.approx(0.425 / 2)
    assert recipe.lr_at(16 * steps, steps, 16, 0.425, opt) == 0.0
    assert config["trainval"]["label_smoothing"] == 0.1 and opt["momentum"] == 0.9


def test_weight_decay_only_on_weights_with_two_or_more_dims():
    model = build_model(EFFICIENTNET_B0, num_classes=10, space=ANB_SPACE)
    decay, no_decay = recipe.param_groups(model, 1e-4)
    assert decay["weight_decay"] == 1e-4 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decay["params"])
    assert all(p.ndim == 1 for p in no_decay["params"])
    bn = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)][0]
    assert any(p is bn.weight for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_overrides_file_and_round_trip(tmp_path):
    config = load_config(CONFIG, ["--trainval.epochs", "5", "--lr=0.3", "--wandb_mode", "offline"])
    assert config["trainval"]["epochs"] == 5 and config["optimizer"]["lr"] == 0.3
    assert config["logging"]["wandb_mode"] == "offline"
    path = tmp_path / "resolved.ini"
    path.write_text(to_ini(config))
    assert load_config(path) == config
    assert recipe_hash(load_config(path)) == recipe_hash(config)
    assert recipe_hash(config) != recipe_hash(load_config(CONFIG, ["--epochs", "6"]))
    # logging / distributed settings do not change the recipe
    assert recipe_hash(config) == recipe_hash(load_config(path, ["--folder", "elsewhere"]))


@pytest.mark.parametrize("override, message", [
    (["--trainval.epoch", "3"], "unknown config key 'trainval.epoch'"),
    (["--nonsense", "3"], "unknown config key 'nonsense'"),
    (["--epochs", "three"], "'trainval.epochs': value 'three' is not a valid int"),
    (["--wandb_mode", "cloud"], "allowed values are ['online', 'offline', 'disabled']"),
    (["--epochs"], "has no value"),
])
def test_bad_overrides_name_the_field(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(CONFIG, override)
    assert message in str(err.value)


def test_unknown_key_in_file(tmp_path):
    bad = tmp_path / "bad.ini"
    bad.write_text("[trainval]\nepochz = 3\n")
    with pytest.raises(ConfigError, match="unknown config key 'trainval.epochz'.*allowed keys"):
        load_config(bad)


def _run(tmp_path, capsys, *extra: str) -> tuple[int, str]:
    code = main(["--config", str(CONFIG), "--folder", str(tmp_path / "out"), *TINY, *extra])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--kind", "folder", "--train_path", "/no/such/train"],
     "'dataloader.train_path': dataset path '/no/such/train' does not exist"),
    (["--kind", "ffcv", "--train_path", "/no/train.beton", "--val_path", "/no/val.beton"],
     "'dataloader.train_path': dataset path '/no/train.beton' does not exist"),
    (["--archs", "e1k3l1-e9k3l1"], "'model.archs': architecture 'e1k3l1-e9k3l1'"),
    (["--shard", "3/2"], "'model.shard'"),
    (["--no_such_key", "1"], "unknown config key 'no_such_key'"),
    (["--kind", "numpy"], "does not fit space 'anb-mnasnet'"),
    (["--space", "anb-seq1d", "--kind", "numpy", "--train_path", "/no/ecg.npz"],
     "numpy data file '/no/ecg.npz' does not exist"),
    (["--config", "/no/such.ini"], "config file '/no/such.ini' does not exist"),
])
def test_bad_input_exits_non_zero_with_a_clear_message(tmp_path, capsys, extra, message):
    code, err = _run(tmp_path, capsys, *extra)
    assert code == 2 and message in err, err
    assert not (tmp_path / "out" / "records").exists()


def test_corrupted_checkpoint_is_an_error_and_finished_work_is_untouched(tmp_path, capsys):
    archs = "e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1," \
            "e4k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1"
    code, err = _run(tmp_path, capsys, "--archs", archs.split(",")[0])
    assert code == 0, err
    out = tmp_path / "out"
    finished = {p.name: p.read_bytes() for p in (out / "records").glob("*.json")}
    assert len(finished) == 1
    from anb.searchspace import Arch

    second = Arch.from_string(archs.split(",")[1], space=ANB_SPACE)
    (out / "checkpoints").mkdir(exist_ok=True)
    (out / "checkpoints" / f"{second.id}.pt").write_bytes(b"\x00garbage, not a checkpoint")
    code, err = _run(tmp_path, capsys, "--archs", archs)
    assert code == 2 and "is corrupted" in err and second.id in err
    assert {p.name: p.read_bytes() for p in (out / "records").glob("*.json")} == finished
    assert (out / "checkpoints" / f"{second.id}.pt").read_bytes().startswith(b"\x00garbage")


def test_checkpoint_of_another_recipe_is_refused(tmp_path, capsys):
    from anb.collect_accuracy import checkpoint

    arch = "e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1"
    out = tmp_path / "out"
    from anb.searchspace import Arch

    checkpoint.save(out / "checkpoints" / f"{Arch.from_string(arch, ANB_SPACE).id}.pt",
                    {"arch": arch, "recipe_hash": "0" * 16, "epoch": 1})
    code, err = _run(tmp_path, capsys, "--archs", arch)
    assert code == 2 and "field 'recipe_hash'" in err and "0000000000000000" in err


def test_anb_train_command(tmp_path):
    from typer.testing import CliRunner

    from anb.cli import app

    runner = CliRunner()
    bad = runner.invoke(app, ["train", "--config", str(CONFIG), "--trainval.epoks", "1"])
    assert bad.exit_code == 2
    out = tmp_path / "cli"
    good = runner.invoke(app, ["train", "--config", str(CONFIG), "--folder", str(out), *TINY])
    assert good.exit_code == 0, good.output
    assert len(list((out / "records").glob("*.json"))) == 1


def test_folder_of_another_recipe_is_refused(tmp_path, capsys):
    arch = "e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1"
    code, err = _run(tmp_path, capsys, "--archs", arch)
    assert code == 0, err
    record = next((tmp_path / "out" / "records").glob("*.json")).read_bytes()
    code, err = _run(tmp_path, capsys, "--archs", arch, "--label_smoothing", "0.2")
    assert code == 2 and "use one folder per recipe" in err
    assert next((tmp_path / "out" / "records").glob("*.json")).read_bytes() == record


@pytest.mark.parametrize("path", sorted((REPO / "configs" / "accuracy").glob("*.ini")),
                         ids=lambda p: p.name)
def test_shipped_recipes_load(path):
    config = load_config(path)
    assert config["dataloader"]["kind"] in ("ffcv", "folder", "digits", "numpy")
    assert (config["model"]["space"] == "anb-seq1d") == (config["dataloader"]["kind"] == "numpy")


@pytest.mark.parametrize("override, message", [
    (["--optimizer.name", "adam"], "'optimizer.name': value 'adam' is not allowed; allowed "
                                   "values are ['sgd', 'rmsprop']"),
    (["--schedule", "linear"], "'optimizer.schedule': value 'linear' is not allowed"),
    (["--claims.backend", "nfs"], "'claims.backend': value 'nfs' is not allowed; allowed values "
                                  "are ['flock', 'queue', 'none']"),
    (["--ema_decay", "1.5"], "'trainval.ema_decay': value 1.5 is out of range"),
    (["--global_batch", "-4"], "'trainval.global_batch': value -4 is out of range"),
    (["--schedule", "cosine", "--warmup_epochs", "40"], "'optimizer.warmup_epochs': value 40.0 "
                                                         "is after the last epoch"),
])
def test_full_recipe_keys_are_checked(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(CONFIG, override)
    assert message in str(err.value)


@pytest.mark.slow
def test_trainer_feeds_each_epoch_the_resolution_of_the_rule(tmp_path, monkeypatch):
    """Catches: the trainer switching resolution one epoch early (or late): the images each
    epoch's steps receive follow the recipe's rule (docs/background/accel-nasbench.md,
    "Data and schedule"), ``min_res`` up to and including
    ``start_ramp``, linear in between (rounded to ``res_step``), ``max_res`` from ``end_ramp``.
    With 32 -> 64 over epochs 1 -> 3 in steps of 16: 32, 32, 48, 64."""
    from anb.collect_accuracy import train

    sizes: list[int] = []
    real_step = train.train_step

    def recording_step(net, optimizer, scaler, loss_fn, x, y, amp):
        sizes.append(x.shape[-1])
        return real_step(net, optimizer, scaler, loss_fn, x, y, amp)

    monkeypatch.setattr(train, "train_step", recording_step)
    assert main(["--config", str(CONFIG), "--folder", str(tmp_path), *TINY[:-6],
                 "--epochs", "4", "--min_res", "32", "--max_res", "64", "--start_ramp", "1",
                 "--end_ramp", "3", "--res_step", "16", "--val_res", "32",
                 "--image_size", "64"]) == 0
    assert sizes == [32, 32, 32, 32, 48, 48, 64, 64]  # 2 steps per epoch


def test_recipe_loss_is_label_smoothed_as_configured():
    """Catches: label smoothing ignored by the loss while the config still says 0.1: the
    recipe's own loss factory against torch's ``cross_entropy(label_smoothing=0.1)``."""
    config = load_config(IMAGENET)
    assert config["trainval"]["label_smoothing"] == 0.1
    logits = torch.tensor([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0]])
    target = torch.tensor([0, 1])
    loss = recipe.make_loss(config)(logits, target)
    expected = torch.nn.functional.cross_entropy(logits, target, label_smoothing=0.1)
    assert loss.item() == expected.item()
    assert loss.item() != torch.nn.functional.cross_entropy(logits, target).item()


def test_ema_update_weights_old_by_decay_and_new_by_its_complement():
    """Catches: EMA decay and its complement swapped (or the average replaced by the current
    weights): one update on known tensors, exact values; integer buffers are copied."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 1), torch.nn.BatchNorm1d(1))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, 2.0]]))
        model[0].bias.fill_(4.0)
    ema = recipe.EMA(model, decay=0.75)
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[5.0, -2.0]]))
        model[0].bias.fill_(0.0)
    model[1].num_batches_tracked.fill_(7)
    ema.update(model)
    averaged = ema.model.state_dict()
    assert averaged["0.weight"].tolist() == [[2.0, 1.0]]  # 0.75 * old + 0.25 * new
    assert averaged["0.bias"].tolist() == [3.0]
    assert averaged["1.num_batches_tracked"].item() == 7
    assert model[0].weight.tolist() == [[5.0, -2.0]]  # the trained network is untouched
