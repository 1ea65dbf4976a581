"""``anb plan``: the next batch of architectures to train or measure, and whether to stop."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from anb.cli_support import fail, space_option
from anb.outputs import Kind, has_files

#: The folder ``anb plan`` writes: ``archs.csv`` (what ``anb train --model.archs`` and
#: ``anb queue submit --archs`` read; its ``space`` column names the search space, so the
#: queued jobs carry it) and ``plan.json`` (how the plan was made).
OUTPUT = Kind("plan", "an anb plan", has_files("plan.json", "archs.csv"), replaceable=True)
ARCHS_FILE, PLAN_FILE = "archs.csv", "plan.json"
#: ``plan.json``'s ``format`` (before its ``format_version`` it was ``anb-plan/1``: version 1).
PLAN_FORMAT = "anb-plan"
#: The most candidates --pool samples, and so the largest --batch that can be filled.
MAX_POOL = 1_000_000


def plan_cmd(
    dataset: Path | None = typer.Argument(
        None, help="collected records (any dataset form: tarball, folder of JSON, CSV, "
                   "Parquet); left out: nothing collected yet (a space-filling first batch)"),
    out: Path = typer.Option(..., "--out", "-o", help="plan folder to write"),
    batch: int = typer.Option(100, min=1, max=MAX_POOL,
                              help="architectures in the batch (at most)"),
    gpu_hours: float | None = typer.Option(None, "--gpu-hours", min=1e-6,
                                           help="training budget of the "
                                           "batch in GPU-hours (predicted from train_time)"),
    targets: str | None = typer.Option(None, help="comma-separated targets to learn: val_top1 "
                                       "(training) and/or device metrics such as "
                                       "throughput_zcu102 (default: every target the data has)"),
    candidates: Path | None = typer.Option(None, help="file of candidate architectures "
                                           "(strings, JSON, or a CSV with 'arch'); default: "
                                           "--pool sampled from the space"),
    pool: int = typer.Option(5000, min=1, max=MAX_POOL,
                             help="candidates sampled when --candidates is left out"),
    acquisition: str = typer.Option("kmeans", help="kmeans | penalised | coverage"),
    seed: int = typer.Option(0, min=0, help="seed of the candidate sample and the planner model"),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace --out even when it "
                                   "holds something other than an anb plan"),
    space: str | None = space_option(),
) -> None:
    """Propose the next batch to train and/or measure (uncertainty, diversity and cost), write
    it as OUT/archs.csv with OUT/plan.json, and print the stopping signal."""
    from anb.outputs import check_folder
    from anb.records import detect_space
    from anb.searchspace.cli import cli_space
    from anb.surrogates.plan import PlanConfig

    spec = cli_space(space, detect_space(dataset) if dataset is not None else None,
                     f"dataset {str(dataset)!r}")
    try:
        check_folder(out, OUTPUT, overwrite)
        config = PlanConfig(batch=batch, gpu_hours=gpu_hours, acquisition=acquisition,
                            seed=seed)
        if pool < 1:
            raise ValueError(f"--pool must be >= 1, got {pool}")
        result = _plan(dataset, spec, config, targets, candidates, pool)
        _write(out, overwrite, spec, config, result, dataset, candidates)
    except (ValueError, FileNotFoundError) as err:
        fail(err)
    typer.echo(_summary(result, config, out))


def _plan(dataset: Path | None, space: Any, config: Any, targets: str | None,
          candidates: Path | None, pool: int) -> Any:
    from anb.io import read_text
    from anb.records import load_dataset
    from anb.surrogates.benchmark import check_distinct
    from anb.surrogates.cli import read_archs
    from anb.surrogates.plan import make_plan

    names = [t.strip() for t in targets.split(",") if t.strip()] if targets else None
    if names:
        check_distinct(names, "--targets")
    if dataset is not None and not Path(dataset).exists():
        raise FileNotFoundError(f"dataset {str(dataset)!r} does not exist")
    frame = load_dataset(dataset, space) if dataset is not None else None
    if frame is not None and frame.empty:
        raise ValueError(f"dataset {str(dataset)!r} holds no records; leave it out to plan "
                         "the first batch of a space with nothing collected")
    given = None
    if candidates is not None:
        given = space.to_choices(read_archs(read_text(candidates), f"--candidates {candidates}",
                                            space=space))
    return make_plan(frame, space, config, names, given, pool)


def _write(out: Path, overwrite: bool, space: Any, config: Any, result: Any,
           dataset: Path | None, candidates: Path | None) -> None:
    import pandas as pd

    from anb.formats import stamp
    from anb.io import atomic_write_json
    from anb.outputs import replace_folder
    from anb.surrogates.plan import ENCODING, SPACE_BASES
    from anb.version import __version__

    b = result.batch
    table = pd.DataFrame({"arch": [str(a) for a in space.archs_from_choices(result.choices)],
                          "space": space.name, "rank": range(1, len(result.choices) + 1),
                          "score": b.score,
                          "uncertainty": b.uncertainty, "gpu_hours": b.gpu_hours,
                          **{f"pred_{t}": v for t, v in b.predictions.items()}})
    info = {"format": PLAN_FORMAT, **stamp("plan"), "anb_version": __version__, "space": space.name,
            "seed": config.seed, "config": config.to_dict(), "acquisition": b.how,
            "model": {"family": "xgboost", "params": config.params, "members": config.members,
                      "bootstrap": True, "features": ENCODING,
                      "layer_cost": config.layer_cost,
                      "space_bases": SPACE_BASES},
            "data": None if dataset is None else str(dataset),
            "n_collected": result.n_collected,
            "candidates": {"source": "sampled" if candidates is None else str(candidates),
                           "n": result.n_candidates},
            "batch": table.to_dict(orient="records"),
            "quality": {t: q.to_dict() for t, q in result.quality.items()},
            "suggest_stop": result.stop}
    with replace_folder(out, OUTPUT, overwrite) as folder:
        table.to_csv(folder / ARCHS_FILE, index=False)
        atomic_write_json(folder / PLAN_FILE, info)


def read_plan(folder: str | Path) -> dict[str, Any]:
    """``plan.json`` of the plan folder ``folder``, its format version checked (a plan of a
    newer anb is refused, :class:`anb.formats.NewerFormat`)."""
    from anb.formats import VERSION_FIELD, check
    from anb.io import read_json

    file = Path(folder) / PLAN_FILE
    info = read_json(file)
    if not isinstance(info, dict) or str(info.get("format", "")).split("/")[0] != PLAN_FORMAT:
        raise ValueError(f"{file}: not an {PLAN_FORMAT} file; allowed: the plan.json 'anb plan' "
                         "writes")
    check("plan", info.get(VERSION_FIELD), str(file))
    return info


def _summary(result: Any, config: Any, out: Path) -> str:
    hours = result.batch.gpu_hours
    spent = f", {hours.sum():.1f} predicted GPU-hours" if len(hours) and \
        (hours == hours).all() else ""
    lines = [f"planned {len(result.choices)} of {result.n_candidates} candidates "
             f"({result.n_collected} collected; {result.batch.how}){spent} -> {out / ARCHS_FILE}"]
    for target, q in result.quality.items():
        lines.append(f"{target}: estimated test Kendall tau {q.tau:.3f} +- {q.tau_std:.3f} "
                     f"from {q.n} (cross-validated {q.cv_tau:.3f}, half the data "
                     f"{q.half_tau:.3f}); next batch expected {q.gain:+.3f}")
    if result.quality:
        lines.append("suggested: stop, the next batch is not expected to change the ranking "
                     f"materially (every gain < {config.min_gain})" if result.stop else
                     "suggested: continue")
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    """Add ``anb plan`` to the root app."""
    app.command("plan")(plan_cmd)
