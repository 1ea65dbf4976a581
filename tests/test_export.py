"""wandb offline logging checked against what the trainer logged, and the exporter's round
trip from local folders, offline wandb run folders and a stand-in of ``wandb.Api``."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.collect_accuracy.export import export, from_wandb_offline, merge
from anb.collect_accuracy.train import main
from anb.collect_accuracy.wandb_log import project, run_id
from anb.collect_accuracy.wandb_offline import find_runs, read_run
from anb.records import load_dataset, records_to_frame
from anb.searchspace import Arch
from anb.searchspace.space import ANB_SPACE
from tests.trainer_helpers import CONFIG

ARCHS = ["e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1-e1k3l1",
         "e4k5l1-e1k3l1-e1k3l2-e1k3l1-e1k3l1-e1k3l1-e1k3l1"]
TINY = ["--progress", "false", "--epochs", "2", "--eval_epochs", "2", "--max_steps", "2",
        "--max_val_steps", "1", "--min_res", "32", "--max_res", "32", "--val_res", "32",
        "--wandb_mode", "offline", "--wandb_project", "anb-test"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """Two architectures trained in-process with wandb in offline mode."""
    folder = tmp_path_factory.mktemp("trained")
    assert main(["--config", str(CONFIG), "--folder", str(folder), "--archs", ",".join(ARCHS),
                 *TINY]) == 0
    return folder


@pytest.mark.slow
def test_wandb_offline_files_match_what_was_logged(trained):
    runs = {r.run_id: r for r in map(read_run, find_runs(trained / "wandb"))}
    records = {p.stem: json.loads(p.read_text()) for p in (trained / "records").glob("*.json")}
    assert sorted(records) == sorted(Arch.from_string(a, ANB_SPACE).id for a in ARCHS)
    for record in records.values():
        prov = record["provenance"]
        run = runs[prov["run_id"]]
        assert run.exit_code == 0 and run.project == "anb-test"
        assert run.config["arch"] == prov["arch"]
        assert run.config["recipe_hash"] == prov["recipe_hash"]
        assert run.config["trainval.epochs"] == 2 and run.config["model.archs"] == ",".join(ARCHS)
        assert [h["epoch"] for h in run.history] == [0, 1]
        logged = {h["epoch"]: h for h in run.history}
        for val in prov["val_history"]:
            assert logged[val["epoch"]]["val_top1"] == val["val_top1"]
            assert logged[val["epoch"]]["val_top5"] == val["val_top5"]
        assert logged[1]["train_time"] == pytest.approx(record["metrics"]["train_time"], abs=1e-3)
        # slow nodes can be seen: throughput, data wait, epoch and validation time per epoch
        for row in run.history:
            assert row["images_per_s"] > 0 and row["data_wait_s"] >= 0
            assert row["epoch_seconds"] >= row["val_seconds"] > 0
        # released meanings: best top-5 over the evaluated epochs; train time with validation
        assert record["metrics"]["val_top5"] == max(v["val_top5"] for v in prov["val_history"])
        assert record["metrics"]["train_time"] == pytest.approx(
            sum(h["epoch_seconds"] for h in run.history), abs=0.01)
        assert prov["train_steps_time"] < record["metrics"]["train_time"]
        assert run.config["global_batch"] == prov["global_batch"] == 32
        assert json.loads(run.summary["record"]) == record
        assert run.summary["best_val_top1"] == record["metrics"]["val_top1"]
        (artifact,) = run.artifacts
        assert artifact["type"] == "anb-arch" and artifact["name"] == f"arch-{run.run_id}"
        assert set(artifact["files"]) == {"record.json", "weights.pt"}


def test_export_local_round_trip_and_cli(trained, tmp_path):
    result = CliRunner().invoke(app, ["export", "--out", str(tmp_path / "ds.csv"),
                                      "--local", str(trained)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["rows"] == 2 and summary["duplicates"] == 0 and summary["unresolved"] == 0
    frame = pd.read_csv(tmp_path / "ds.csv")
    assert sorted(frame["arch_id"]) == sorted(Arch.from_string(a, ANB_SPACE).id for a in ARCHS)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "ds.parquet"), frame,
                                  check_dtype=False)
    back = load_dataset(tmp_path / "ds.csv",
                        space=ANB_SPACE)  # loads into the surrogate stage as is
    pd.testing.assert_frame_equal(back.drop(columns="provenance"),
                                  frame.drop(columns="provenance"), check_dtype=False)
    for column in ("val_top1", "val_top5", "train_time", "macs", "params"):
        assert back[column].notna().all()


def test_duplicates_partials_and_skips_are_reported_deterministically(trained, tmp_path):
    other = tmp_path / "node2"
    shutil.copytree(trained / "records", other / "records")
    record_file = sorted((other / "records").glob("*.json"))[0]
    record = json.loads(record_file.read_text())
    record["metrics"]["val_top1"] = 99.0
    record["provenance"]["finished_at"] += 10.0  # finished later than the original
    record_file.write_text(json.dumps(record))
    (other / "checkpoints").mkdir()
    (other / "checkpoints" / "0123456789abcdef.pt").write_bytes(b"not a checkpoint")
    (other / "skipped").mkdir()
    big = Arch.from_string("e6k5l3se-" * 6 + "e6k5l3se", ANB_SPACE)
    (other / "skipped" / f"{big.id}.json").write_text(json.dumps(
        {"architecture": big.to_anb_dict(), "status": "skipped", "reason": "over budget"}))

    outputs = []
    for rule, name in (("first", "a"), ("first", "b"), ("mean", "c")):
        summary = export(tmp_path / f"{name}.csv", local=[other, trained], rule=rule,
                         space=ANB_SPACE)
        # the untouched copy is the same result seen twice; the edited one is a duplicate
        assert summary["rows"] == 2 and summary["duplicates"] == 1
        outputs.append((tmp_path / f"{name}.csv").read_bytes())
    assert outputs[0] == outputs[1]  # deterministic, whatever the input order
    dup = pd.read_csv(tmp_path / "a.duplicates.csv")
    assert list(dup["arch_id"]) == [record_file.stem] and dup.loc[0, "count"] == 2
    first = pd.read_csv(tmp_path / "a.csv").set_index("arch_id")
    mean = pd.read_csv(tmp_path / "c.csv").set_index("arch_id")
    original = json.loads((trained / "records" / record_file.name).read_text())
    assert first.loc[record_file.stem, "val_top1"] == original["metrics"]["val_top1"]
    assert mean.loc[record_file.stem, "val_top1"] == pytest.approx(
        (original["metrics"]["val_top1"] + 99.0) / 2)
    incomplete = pd.read_csv(tmp_path / "a.incomplete.csv")
    assert set(incomplete["status"]) == {"partial", "skipped"}
    assert incomplete.set_index("status").loc["skipped", "arch_id"] == big.id


def test_export_from_offline_wandb_folders(trained, tmp_path):
    summary = export(tmp_path / "w.csv", wandb_dirs=[trained / "wandb"], space=ANB_SPACE)
    assert summary["rows"] == 2 and summary["unresolved"] == 0
    local = export(tmp_path / "l.csv", local=[trained], space=ANB_SPACE)
    a = pd.read_csv(tmp_path / "w.csv").drop(columns="source")
    b = pd.read_csv(tmp_path / "l.csv").drop(columns="source")
    pd.testing.assert_frame_equal(a, b)
    assert local["rows"] == 2


def test_crashed_offline_run_is_listed(trained, tmp_path):
    run_dir = find_runs(trained / "wandb")[0].parent
    crashed = tmp_path / "wandb" / run_dir.name
    shutil.copytree(run_dir, crashed)
    log = next(crashed.glob("run-*.wandb"))
    log.write_bytes(log.read_bytes()[:1500])  # the tail of a killed run is missing
    collected = from_wandb_offline(tmp_path / "wandb", space=ANB_SPACE)
    assert collected.records == []
    (entry,) = collected.incomplete
    assert entry["status"] == "crashed" and "killed" in entry["reason"]


class StandInApi:
    """Stand-in for ``wandb.Api`` (no wandb server is reachable from the tests): serves the
    offline runs through the same attributes the public Api's Run objects have (id, state,
    summary, config, logged_artifacts() -> objects with type and download())."""

    def __init__(self, runs: list[SimpleNamespace]):
        self._runs = runs
        self.paths: list[str] = []

    def runs(self, path: str) -> list[SimpleNamespace]:
        self.paths.append(path)
        return self._runs


def _stand_in_run(offline, tmp_path: Path, with_summary: bool, state: str) -> SimpleNamespace:
    folder = tmp_path / f"artifact-{offline.run_id}"
    folder.mkdir()
    shutil.copy(offline.artifacts[0]["files"]["record.json"], folder / "record.json")
    artifact = SimpleNamespace(type="anb-arch", download=lambda root=None: str(folder))
    summary = dict(offline.summary) if with_summary else {"val_top1": 1.0}
    return SimpleNamespace(id=offline.run_id, state=state, summary=summary,
                           config=dict(offline.config), logged_artifacts=lambda: [artifact])


def test_export_through_the_wandb_api(trained, tmp_path):
    offline = [read_run(p) for p in find_runs(trained / "wandb")]
    runs = [_stand_in_run(offline[0], tmp_path, True, "finished"),
            _stand_in_run(offline[1], tmp_path, False, "finished"),  # record from the artifact
            SimpleNamespace(id="zz-crashed", state="crashed", summary={},
                            config={"arch": ARCHS[0], "arch_id": "x"},
                            logged_artifacts=lambda: [])]
    api = StandInApi(runs)
    summary = export(tmp_path / "api.csv", api=api, projects=["team/anb"], space=ANB_SPACE)
    assert api.paths == ["team/anb"]
    assert summary["rows"] == 2 and summary["incomplete"] == 1
    frame = pd.read_csv(tmp_path / "api.csv")
    assert all(s.startswith("wandb:team/anb/") for s in frame["source"])
    local = records_to_frame([json.loads(p.read_text())
                              for p in sorted((trained / "records").glob("*.json"))], ANB_SPACE)
    assert sorted(frame["val_top1"]) == sorted(local["val_top1"])
    incomplete = pd.read_csv(tmp_path / "api.incomplete.csv")
    assert incomplete.loc[0, "status"] == "crashed" and incomplete.loc[0, "run_id"] == "zz-crashed"


def test_export_errors(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["export", "--out", str(tmp_path / "x.csv"),
                                 "--local", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "does not exist" in result.output
    result = runner.invoke(app, ["export", "--out", str(tmp_path / "x.csv")])
    assert result.exit_code == 2 and "nothing to export" in result.output
    assert not (tmp_path / "x.csv").exists()


def test_same_result_from_several_sources_is_not_a_duplicate(trained, tmp_path):
    summary = export(tmp_path / "both.csv", local=[trained], wandb_dirs=[trained / "wandb"],
                     space=ANB_SPACE)
    assert summary["records"] == 4 and summary["rows"] == 2 and summary["duplicates"] == 0
    frame = pd.read_csv(tmp_path / "both.csv")
    assert all(s.startswith("local:") for s in frame["source"])  # the earliest-sorted source


def _train(folder: Path, *extra: str) -> Path:
    assert main(["--config", str(CONFIG), "--folder", str(folder), "--archs", ARCHS[0],
                 *TINY, *extra]) == 0
    return folder


def test_results_of_different_recipes_are_never_merged(trained, tmp_path):
    smoke = _train(tmp_path / "smoke", "--epochs", "1", "--eval_epochs", "1",
                   "--wandb_mode", "disabled")
    hashes = {json.loads(p.read_text())["provenance"]["recipe_hash"]
              for folder in (trained, smoke) for p in (folder / "records").glob("*.json")}
    assert len(hashes) == 2
    main_hash = json.loads(next((trained / "records").glob("*.json")).read_text())[
        "provenance"]["recipe_hash"]
    result = CliRunner().invoke(app, ["export", "--out", str(tmp_path / "x.csv"),
                                      "--local", str(trained), "--local", str(smoke)])
    assert result.exit_code == 2 and "pick one with --recipe" in result.output
    assert all(h in result.output for h in hashes) and not (tmp_path / "x.csv").exists()
    found = pd.read_csv(tmp_path / "x.recipes.csv")
    assert sorted(found["recipe_hash"]) == sorted(hashes)
    assert sorted(found["records"]) == [1, 2]
    summary = export(tmp_path / "y.csv", local=[trained, smoke], recipe=main_hash[:6],
                     space=ANB_SPACE)
    assert summary["rows"] == 2 and summary["duplicates"] == 0 and summary["recipe"] == main_hash
    assert len(summary["recipes"]) == 2
    records = [json.loads(p.read_text()) for f in (trained, smoke)
               for p in (f / "records").glob("*.json")]
    with pytest.raises(ValueError, match="cannot merge results of 2 recipes"):
        merge(records, space=ANB_SPACE)
    # by default each recipe logs to its own wandb project
    assert project({"logging": {"wandb_project": ""}}, main_hash) == f"anb-{main_hash[:8]}"


def test_seed_replicates_are_separate_wandb_runs(trained, tmp_path):
    replicate = _train(tmp_path / "seed1", "--seed", "1")
    first = {r.run_id for r in map(read_run, find_runs(trained / "wandb"))}
    second = {r.run_id for r in map(read_run, find_runs(replicate / "wandb"))}
    arch_id = Arch.from_string(ARCHS[0], ANB_SPACE).id
    record = json.loads((replicate / "records" / f"{arch_id}.json").read_text())
    recipe_hash = record["provenance"]["recipe_hash"]
    assert run_id(arch_id, recipe_hash, 0) in first
    assert second == {run_id(arch_id, recipe_hash, 1)} and not first & second
    summary = export(tmp_path / "s.csv", wandb_dirs=[trained / "wandb", replicate / "wandb"],
                     space=ANB_SPACE)
    assert summary["rows"] == 2 and summary["duplicates"] == 1  # two results, one arch


def test_empty_and_truncated_wandb_files_are_listed(trained, tmp_path):
    run_dir = find_runs(trained / "wandb")[0].parent
    for name, size in (("offline-run-empty", 0), ("offline-run-cut", 5)):
        copy = tmp_path / "wandb" / name
        shutil.copytree(run_dir, copy)
        log = next(copy.glob("run-*.wandb"))
        log.write_bytes(log.read_bytes()[:size])
    good = tmp_path / "wandb" / run_dir.name
    shutil.copytree(run_dir, good)
    summary = export(tmp_path / "w.csv", wandb_dirs=[tmp_path / "wandb"], space=ANB_SPACE)
    assert summary["rows"] == 1 and summary["unreadable"] == 2
    incomplete = pd.read_csv(tmp_path / "w.incomplete.csv")
    assert sorted(incomplete["source"].str.rsplit("/", n=1).str[-1]) == [
        "offline-run-cut", "offline-run-empty"]
    assert set(incomplete["status"]) == {"unreadable"}
