"""``anb export``: one CSV / Parquet dataset (one row per architecture) from local results
folders, offline wandb run folders and a wandb project (through ``wandb.Api``).

Records are grouped by (architecture, recipe hash): results of different recipes (a smoke run
and ImageNet, 2 and 4 GPUs) are never merged into one column. The recipes found are reported;
with more than one, ``recipe`` picks the one to export (else it is an error naming them).
Duplicates within a recipe are reported and merged by a fixed rule (``first``: the earliest
finished, ties broken by source; ``mean``: metrics averaged). Crashed, partial, skipped and
failed architectures, and unreadable record files and wandb run files, are listed beside the
dataset, never dropped silently. The table is exactly :func:`anb.records.records_to_frame` of
the merged records, so it loads back with :func:`anb.records.load_dataset`.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from anb.extras import missing

try:
    import torch
except ModuleNotFoundError as err:
    raise missing(err, "train", "anb.collect_accuracy.export") from None

from anb.io import atomic_write
from anb.records import (
    METRIC_KEYS,
    curve_epochs,
    curve_key,
    read_records,
    records_to_frame,
    validate_record,
)
from anb.searchspace.space import SearchSpace

ARTIFACT_TYPE = "anb-arch"
DUPLICATE_RULES = ("first", "mean")


@dataclass
class Collected:
    records: list[dict[str, Any]] = field(default_factory=list)
    incomplete: list[dict[str, Any]] = field(default_factory=list)

    def extend(self, other: Collected) -> None:
        self.records += other.records
        self.incomplete += other.incomplete


def _arch_fields(record: dict, space: SearchSpace) -> dict[str, str]:
    arch = validate_record(record, space=space)
    return {"arch_id": arch.id, "arch": str(arch)}


def from_local(folder: Path, space: SearchSpace) -> Collected:
    """``records/``, ``skipped/`` and in-progress ``checkpoints/`` of a trainer folder."""
    if not folder.is_dir():
        raise FileNotFoundError(f"results folder {str(folder)!r} does not exist")
    out = Collected()
    if (folder / "records").is_dir():
        records, bad = read_records(folder / "records", space)
        for record in records:
            source = f"local:{folder / 'records' / record['source']}"
            out.records.append({**record, "source": source})
        for where, why in bad:  # listed, not fatal: the other records still export
            out.incomplete.append({"arch_id": Path(where).stem, "arch": "",
                                   "status": "unreadable", "reason": why[:300],
                                   "source": f"local:{where}"})
    for path in sorted((folder / "skipped").glob("*.json")):
        try:
            entry = json.loads(path.read_text())
            fields, reason = _arch_fields(entry, space), entry.get("reason", "")
        except (OSError, ValueError) as err:  # listed, not fatal: it is not a result
            fields = {"arch_id": path.stem, "arch": ""}
            reason = f"unreadable skip marker: {type(err).__name__}"
        out.incomplete.append({**fields, "status": "skipped", "reason": reason,
                               "source": f"local:{path}"})
    from anb.collect_accuracy.failures import all_failed

    for arch_id, failed in all_failed(folder).items():
        last = failed[-1]
        out.incomplete.append({
            "arch_id": arch_id, "arch": last.get("arch", ""), "status": "failed",
            "reason": f"{len({e.get('job_id') for e in failed})} failed attempt(s), last: "
                      f"{last.get('error', '')}"[:500],
            "source": f"local:{folder / 'failed' / arch_id}"})
    for path in sorted((folder / "checkpoints").glob("*.pt")):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            reason, arch = f"stopped after epoch {state['epoch']}", state["arch"]
        except Exception as err:  # noqa: BLE001 - a damaged checkpoint is still listed
            reason, arch = f"unreadable checkpoint: {type(err).__name__}", ""
        out.incomplete.append({"arch_id": path.stem, "arch": arch, "status": "partial",
                               "reason": reason, "source": f"local:{path}"})
    return out


def _run_entry(run_id: str, config: dict, status: str, reason: str, source: str) -> dict:
    return {"arch_id": str(config.get("arch_id", "")), "arch": str(config.get("arch", "")),
            "status": status, "reason": reason, "source": source, "run_id": run_id}


def from_wandb_offline(root: Path, space: SearchSpace) -> Collected:
    """Offline run folders under ``root`` (read with :mod:`.wandb_offline`)."""
    from anb.collect_accuracy.wandb_offline import find_runs, read_run

    if not root.exists():
        raise FileNotFoundError(f"wandb folder {str(root)!r} does not exist")
    out = Collected()
    for run_file in find_runs(root):
        source = f"wandb-offline:{run_file.parent}"
        try:
            run = read_run(run_file)
        except Exception as err:  # noqa: BLE001 - an empty / damaged file is listed, not fatal
            out.incomplete.append({"arch_id": "", "arch": "", "status": "unreadable",
                                   "reason": f"{type(err).__name__}: {err}"[:300],
                                   "source": source, "run_id": run_file.stem[4:]})
            continue
        record = _record_from(run.summary, [a for a in run.artifacts if a["type"] == ARTIFACT_TYPE])
        if run.exit_code == 0 and record is not None:
            validate_record(record, where=source, space=space)
            out.records.append({**record, "source": source})
        else:
            reason = ("killed (no exit record)" if run.exit_code is None
                      else f"exit code {run.exit_code}")
            out.incomplete.append(_run_entry(run.run_id, run.config, "crashed", reason, source))
    return out


def _record_from(summary: dict, artifacts: list[dict]) -> dict | None:
    if isinstance(summary.get("record"), str):
        return json.loads(summary["record"])
    for artifact in artifacts:
        local = artifact["files"].get("record.json")
        if local and Path(local).exists():
            return json.loads(Path(local).read_text())
    return None


def from_wandb_api(api: Any, path: str, space: SearchSpace) -> Collected:
    """Runs of ``entity/project`` through the public ``wandb.Api`` (``api.runs``): the record
    from the run summary, else from the run's ``anb-arch`` artifact."""
    out = Collected()
    try:
        runs = list(api.runs(path))
    except Exception as err:  # noqa: BLE001 - wandb's types: unknown project, no access, network
        raise ValueError(f"option --project: cannot list the runs of wandb project {path!r} "
                         f"({type(err).__name__}: {err})") from None
    for run in runs:
        source = f"wandb:{path}/{run.id}"
        record = None
        if run.state == "finished":
            summary = dict(run.summary)
            record = _record_from(summary, [])
            if record is None:
                for artifact in run.logged_artifacts():
                    if artifact.type == ARTIFACT_TYPE:
                        folder = Path(artifact.download())
                        record = json.loads((folder / "record.json").read_text())
                        break
        if record is not None:
            validate_record(record, where=source, space=space)
            out.records.append({**record, "source": source})
        else:
            out.incomplete.append(_run_entry(run.id, dict(run.config), str(run.state),
                                             f"run state {run.state!r}, no record", source))
    return out


def _finished_at(record: dict) -> float:
    return float((record.get("provenance") or {}).get("finished_at") or float("inf"))


def _result_key(record: dict) -> str:
    """Identity of one training result: the same run seen through several sources (local
    folder, offline wandb, wandb server) is one result, not a duplicate."""
    prov = record.get("provenance") or {}
    return json.dumps([prov.get("run_id"), prov.get("finished_at"), record.get("metrics")],
                      sort_keys=True)


def recipe_of(record: dict) -> str:
    return str((record.get("provenance") or {}).get("recipe_hash") or "unknown")


def recipes(records: Iterable[dict]) -> pd.DataFrame:
    """The recipes found: hash, record count, and what tells them apart at a glance."""
    rows: dict[str, dict] = {}
    for record in records:
        prov = record.get("provenance") or {}
        config = prov.get("config") or {}
        row = rows.setdefault(recipe_of(record), {
            "recipe_hash": recipe_of(record), "records": 0,
            "dataset": json.dumps((prov.get("dataset") or {}).get("kind")),
            "epochs": (config.get("trainval") or {}).get("epochs"),
            "global_batch": prov.get("global_batch")})
        row["records"] += 1
    ordered = sorted(rows.values(), key=lambda r: -r["records"])
    return pd.DataFrame(ordered,
                        columns=["recipe_hash", "records", "dataset", "epochs", "global_batch"])


def select_recipe(records: list[dict], recipe: str | None) -> list[dict]:
    """The records of one recipe: ``recipe`` (a hash or its prefix), or the only one found;
    several recipes and no choice is an error naming them."""
    found = sorted({recipe_of(r) for r in records})
    if recipe:
        chosen = [h for h in found if h.startswith(recipe)]
        if len(chosen) != 1:
            raise ValueError(f"option --recipe: value {recipe!r} matches {len(chosen)} of the "
                             f"recipes found; allowed: {found}")
        return [r for r in records if recipe_of(r) == chosen[0]]
    if len(found) > 1:
        raise ValueError(f"the sources hold {len(found)} recipes {found}; results of different "
                         "recipes are not merged into one column: pick one with --recipe "
                         "(see the .recipes.csv written beside --out)")
    return records


def merge(records: Iterable[dict], rule: str = "first",
          *, space: SearchSpace) -> tuple[list[dict], pd.DataFrame]:
    """One record per architecture, sorted by id; and the duplicate report (distinct
    results of one architecture; the same result from several sources counts once). The
    records must be of one recipe (:func:`select_recipe`)."""
    if rule not in DUPLICATE_RULES:
        raise ValueError(f"duplicate rule {rule!r} is unknown; allowed are {list(DUPLICATE_RULES)}")
    records = list(records)
    found = sorted({recipe_of(r) for r in records})
    if len(found) > 1:
        raise ValueError(f"cannot merge results of {len(found)} recipes {found} into one "
                         "column; select one recipe first")
    groups: dict[str, list[dict]] = {}
    for record in records:
        groups.setdefault(validate_record(record, space=space).id, []).append(record)
    merged, report = [], []
    for arch_id in sorted(groups):
        group = sorted(groups[arch_id], key=lambda r: (_finished_at(r), r.get("source", "")))
        group = list({_result_key(r): r for r in reversed(group)}.values())[::-1]
        chosen = dict(group[0])
        if len(group) > 1:
            top1 = [(r.get("metrics") or {}).get("val_top1") for r in group]
            report.append({"arch_id": arch_id, "count": len(group), "rule": rule,
                           "val_top1": json.dumps(top1),
                           "sources": json.dumps([r.get("source") for r in group])})
            if rule == "mean":
                metrics = dict(chosen.get("metrics") or {})
                curve = curve_epochs({k for r in group for k in (r.get("metrics") or {})})
                for key in [*METRIC_KEYS, *map(curve_key, curve)]:
                    given = [(r.get("metrics") or {}).get(key) for r in group]
                    values = [v for v in given if v is not None]
                    metrics[key] = round(sum(values) / len(values), 6) if values else None
                chosen["metrics"] = metrics
            chosen["provenance"] = {**(chosen.get("provenance") or {}),
                                    "merged_from": [r.get("source") for r in group]}
        merged.append(chosen)
    columns = ["arch_id", "count", "rule", "val_top1", "sources"]
    return merged, pd.DataFrame(report, columns=columns)


def export(out: Path, local: Iterable[Path] = (), wandb_dirs: Iterable[Path] = (),
           api: Any = None, projects: Iterable[str] = (), rule: str = "first",
           *, space: SearchSpace, parquet: bool = True,
           recipe: str | None = None) -> dict[str, Any]:
    """Collect, merge and write ``out`` (.csv) plus ``.parquet``, ``.duplicates.csv``,
    ``.incomplete.csv`` and ``.recipes.csv`` beside it. Returns a summary."""
    if rule not in DUPLICATE_RULES:  # before anything is read or written
        raise ValueError(f"duplicate rule {rule!r} is unknown; allowed are {list(DUPLICATE_RULES)}")
    collected = Collected()
    for folder in local:
        collected.extend(from_local(Path(folder), space))
    for root in wandb_dirs:
        collected.extend(from_wandb_offline(Path(root), space))
    for project in projects:
        collected.extend(from_wandb_api(api, project, space))
    out = Path(out)
    stem = out.with_suffix("")
    found = recipes(collected.records)

    def write_recipes() -> None:
        atomic_write(Path(f"{stem}.recipes.csv"), lambda tmp: found.to_csv(tmp, index=False))

    try:
        chosen = select_recipe(collected.records, recipe)
    except ValueError:
        if recipe is None:  # several recipes: the error points to this list to pick from
            write_recipes()
        raise
    write_recipes()
    merged, duplicates = merge(chosen, rule, space=space)
    finished = {validate_record(r, space=space).id for r in merged}
    incomplete = pd.DataFrame(
        [{**e, "finished_elsewhere": e["arch_id"] in finished} for e in collected.incomplete],
        columns=["arch_id", "arch", "status", "reason", "source", "run_id",
                 "finished_elsewhere"])
    frame = records_to_frame(merged, space)
    atomic_write(out, lambda tmp: frame.to_csv(tmp, index=False))
    if parquet:
        atomic_write(stem.with_suffix(".parquet"), lambda tmp: frame.to_parquet(tmp, index=False))
    atomic_write(Path(f"{stem}.duplicates.csv"), lambda tmp: duplicates.to_csv(tmp, index=False))
    atomic_write(Path(f"{stem}.incomplete.csv"), lambda tmp: incomplete.to_csv(tmp, index=False))
    return {"rows": len(frame), "records": len(collected.records),
            "duplicates": len(duplicates), "incomplete": len(incomplete),
            "unresolved": int((~incomplete["finished_elsewhere"]).sum()), "out": str(out),
            "recipes": found["recipe_hash"].tolist(),
            "recipe": recipe_of(chosen[0]) if chosen else None,
            "failed": int((incomplete["status"] == "failed").sum()),
            "unreadable": int((incomplete["status"] == "unreadable").sum())}
