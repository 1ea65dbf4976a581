"""The image-folder loader, the memory pre-check and the 1-D sequence tasks, each run through
the real trainer (single process, CPU)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from anb.collect_accuracy import memcheck
from anb.collect_accuracy.config import load_config
from anb.collect_accuracy.data import make_loaders
from anb.collect_accuracy.imagefolder import write_digits_folder
from anb.collect_accuracy.train import main
from anb.searchspace import ANB_SPACE, SEQ1D_SPACE, Arch, count
from tests.trainer_helpers import CONFIG

SMALL = "e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1"
BIG = "e6k5l3se-e6k5l3se-e6k5l3se-e6k5l3se-e6k5l3se-e6k5l4se-e6k5l3se"
QUICK = ["--progress", "false", "--epochs", "1", "--eval_epochs", "1", "--max_steps", "2"]


def _records(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((folder / "records").glob("*.json"))]


@pytest.mark.slow
def test_image_folder_loader_and_training(tmp_path):
    train_dir, val_dir = write_digits_folder(tmp_path / "images", sizes=(24, 36))
    overrides = ["--kind", "folder", "--train_path", str(train_dir), "--val_path", str(val_dir),
                 "--num_workers", "1", "--val_res", "48"]
    config = load_config(CONFIG, overrides)
    loaders = make_loaders(config, 0, 1, torch.device("cpu"))
    a = [(x.clone(), y.clone()) for x, y in loaders.train(3, 48)][:2]
    b = [(x.clone(), y.clone()) for x, y in loaders.train(3, 48)][:2]
    assert a[0][0].shape == (32, 3, 48, 48) and torch.equal(a[0][0], b[0][0])  # seeded by epoch
    assert not torch.equal(a[0][1], next(iter(loaders.train(4, 48)))[1])  # reshuffled per epoch
    x, y = next(iter(loaders.val()))
    assert x.shape == (128, 3, 48, 48) and loaders.num_classes == 10
    # every rank of two takes a disjoint half
    halves = [make_loaders(config, r, 2, torch.device("cpu")) for r in (0, 1)]
    assert halves[0].train_steps() == halves[1].train_steps() == 1437 // 2 // 32

    out = tmp_path / "out"
    assert main(["--config", str(CONFIG), "--folder", str(out), *overrides, *QUICK,
                 "--archs", SMALL, "--max_val_steps", "1"]) == 0
    (record,) = _records(out)
    assert record["provenance"]["dataset"]["kind"] == "folder"


def test_memory_precheck_skips_designs_over_budget(tmp_path, capsys):
    cpu = torch.device("cpu")
    small_arch, big_arch = Arch.from_string(SMALL, ANB_SPACE), Arch.from_string(BIG, ANB_SPACE)
    small_fits, small = memcheck.check(small_arch, ANB_SPACE, 10, 3, 8, 48, 1e9, cpu)
    big_fits, big = memcheck.check(big_arch, ANB_SPACE, 10, 3, 8, 48, 1e9, cpu)
    assert small_fits and big_fits and 0 < small < big
    assert memcheck.check(big_arch, ANB_SPACE, 10, 3, 8, 48, 0, cpu) == (True, 0.0)
    budget = str((small + big) / 2)
    args = ["--config", str(CONFIG), "--folder", str(tmp_path), *QUICK, "--archs",
            f"{SMALL},{BIG}", "--mem_budget_gb", budget, "--mem_check_batch", "8",
            "--max_val_steps", "1"]
    assert main(args) == 0
    assert [r["provenance"]["arch"] for r in _records(tmp_path)] == [SMALL]
    skipped = json.loads((tmp_path / "skipped" / f"{big_arch.id}.json").read_text())
    assert skipped["status"] == "skipped" and "budget" in skipped["reason"]
    capsys.readouterr()
    assert main(args) == 0  # a rerun neither retrains nor re-checks
    out = capsys.readouterr().out
    assert "already done" in out and "already skipped" in out


def _sequences(path: Path, channels: int, length: int, labels: str) -> Path:
    """Small synthetic sequence task: the class sets a sine frequency, plus noise."""
    rng = np.random.default_rng(0)
    n = 160
    cls = rng.integers(0, 4, n)
    t = np.arange(length) / length
    x = np.sin(2 * np.pi * (cls[:, None, None] + 1) * 3 * t)
    x = x + 0.3 * rng.normal(size=(n, channels, length))
    y = cls if labels == "class" else np.stack([cls == 0, cls == 1, cls >= 2], 1).astype(np.float32)
    np.savez(path, x_train=x[:128].astype(np.float32), y_train=y[:128],
             x_val=x[128:].astype(np.float32), y_val=y[128:])
    return path


def test_task_metrics_equal_scikit_learn_on_known_outputs():
    """Catches: macro-F1 averaged otherwise (micro / weighted) or AUROC over the wrong axis,
    on outputs where those differ; a label column with one class is left out of the mean."""
    from sklearn.metrics import f1_score, roc_auc_score

    from anb.collect_accuracy.train import task_metric

    true = np.array([0, 0, 0, 0, 1, 2, 2, 3])
    pred = np.array([0, 0, 0, 1, 1, 2, 0, 0])
    macro = f1_score(true, pred, average="macro")
    assert macro != f1_score(true, pred, average="micro")
    assert task_metric("ecg", pred, true) == {"val_macro_f1": round(100 * macro, 3)}
    labels = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 1], [0, 0, 1]], dtype=float)
    probs = np.array([[0.9, 0.2, 0.5], [0.4, 0.6, 0.1], [0.3, 0.1, 0.7], [0.2, 0.5, 0.3]])
    mean = np.mean([roc_auc_score(labels[:, j], probs[:, j]) for j in range(2)])
    assert task_metric("multilabel", probs, labels) == {"val_auroc": round(100 * mean, 3)}
    assert task_metric("multilabel", probs, labels)["val_auroc"] == 62.5


@pytest.mark.parametrize("task, channels, labels, metric", [
    ("ecg", 1, "class", "val_macro_f1"),           # ECG-like: 4 classes, macro-F1
    ("classification", 1, "class", "val_top1"),    # Satellite-like: plain accuracy
    ("multilabel", 4, "multi", "val_auroc"),       # DeepSEA-like: 4 channels, binary labels
])
@pytest.mark.slow
def test_one_dimensional_tasks(tmp_path, monkeypatch, task, channels, labels, metric):
    """Catches (besides the shapes): the 1-D tasks' macro-F1 / mean AUROC computed otherwise
    than scikit-learn's ``f1_score(average='macro')`` / per-label ``roc_auc_score`` on the
    validation outputs (recorded at the metric boundary and recomputed here)."""
    from sklearn.metrics import f1_score, roc_auc_score

    from anb.collect_accuracy import train

    seen, real = [], train.task_metric
    monkeypatch.setattr(train, "task_metric",
                        lambda t, pred, true: seen.append((pred.copy(), true.copy()))
                        or real(t, pred, true))
    data = _sequences(tmp_path / "task.npz", channels, 64, labels)
    out = tmp_path / "out"
    assert main(["--config", str(CONFIG), "--folder", str(out), "--space", "anb-seq1d",
                 "--kind", "numpy", "--train_path", str(data), "--task", task,
                 *QUICK, "--batch_size", "16", "--num_models", "1"]) == 0
    (record,) = _records(out)
    value = record["metrics"][metric]
    if task == "classification":
        assert 0 <= value <= 100 and not seen
    else:
        ((pred, true),) = seen  # one evaluated epoch, every validation row
        assert len(true) == 32
        expected = 100 * (f1_score(true, pred, average="macro") if task == "ecg" else
                          np.mean([roc_auc_score(true[:, j], pred[:, j]) for j in range(3)]))
        assert value == round(float(expected), 3)
    assert (record["metrics"]["val_top1"] is None) == (task == "multilabel")
    arch = Arch.from_anb_dict(record["architecture"], SEQ1D_SPACE)
    classes = 3 if task == "multilabel" else 4
    expected = count(arch, 64, classes, space=SEQ1D_SPACE, in_channels=channels)
    assert record["model_info"]["params"] == round(expected.params / 1e6, 6)
    assert record["provenance"]["space"] == "anb-seq1d"
