"""``anb pipeline``: the main job on embedded defaults, one stage after another.

Each stage reads what the previous ones wrote under ``--out`` and writes its own folder, so the
whole run is a small, inspectable benchmark build:

1. ``space``: sample architectures, count MACs/params, export the first to ONNX;
2. ``accuracy``: train those architectures with the trainer (digits smoke recipe by default)
   and export the records to ``accuracy/accuracy.csv``;
3. ``throughput``: measure them and more (``--num-measured``; the trained ones first) on this
   machine's CPU (onnxruntime) and merge accuracy and speed into one dataset in the released
   JSON shape (``dataset/records/*.json``);
4. ``surrogates``: the base benchmark (the packaged one for the packaged data and config, else
   fitted on ``--released``), scored on the published test split against the baselines;
5. ``adapt``: the base adapted to the measured device from this run's latency measurements;
6. ``search``: multi-objective NAS (NSGA-II) on the adapted benchmark, accuracy against the
   measured device's latency;
7. ``report.html``: measured vs predicted (with intervals), the Pareto front, the OOD flags.

Every input is checked before any work. Every stage is resumable: trained and measured
architectures are skipped on a rerun and a fitted base is reused. ``SUMMARY.json`` lists what
each stage produced.
"""
from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path

import typer
from rich.console import Console

from anb import resources
from anb.cli_support import fail
from anb.io import atomic_write_json, atomic_write_text
from anb.outputs import Kind, exclusive, prepare_folder
from anb.searchspace import ANB_SPACE, Arch, Sampler, count
from anb.version import __version__

console = Console(soft_wrap=True)
CONFIGS = resources.CONFIG_DIR
RELEASED = resources.RELEASED_DATASET
#: The accuracy stage's recipe changes on top of ``--accuracy-config`` (3 full epochs at 32 px:
#: about half a minute per architecture on a laptop core).
TRAIN_DEFAULTS = {"trainval.epochs": "3", "trainval.eval_epochs": "3", "trainval.max_steps": "0",
                  "trainval.min_res": "32", "trainval.max_res": "32", "trainval.val_res": "32",
                  "dataloader.image_size": "32"}
#: The most seconds of timed repetitions per architecture and protocol: the pipeline is a
#: short demonstration on this CPU; a longer budget belongs to `anb measure`.
MAX_MEASURE_BUDGET = 60.0
#: The most surrogate queries of the search: the pipeline runs it without `anb search`'s
#: time estimate, so the budget is capped to keep it to minutes.
MAX_SEARCH_BUDGET = 100_000
_TRAIN_DEFAULTS_TEXT = " ".join(f"{k}={v}" for k, v in TRAIN_DEFAULTS.items())  # for --help
#: The folder ``anb pipeline`` writes and resumes (see :mod:`anb.outputs`).
OUTPUT = Kind("pipeline", "an anb pipeline folder",
              lambda folder: (folder / "SUMMARY.json").is_file()
              or (folder / "space" / "archs.json").is_file())


def stage_space(out: Path, num_archs: int, seed: int) -> list[Arch]:
    """Sample architectures, write their strings, ids and counts, and export the first to ONNX."""
    from anb.searchspace.model import build_model
    from anb.searchspace.onnx_export import export_onnx

    folder = out / "space"
    archs = Sampler(seed, space=ANB_SPACE).sample(num_archs)
    rows = []
    for arch in archs:
        macs, params = count(arch, space=ANB_SPACE)
        rows.append({"arch_id": arch.id, "arch": str(arch), "macs": round(macs / 1e6, 6),
                     "params": round(params / 1e6, 6)})
    atomic_write_text(folder / "archs.txt", "".join(f"{a}\n" for a in archs))
    atomic_write_json(folder / "archs.json", {"space": ANB_SPACE.name, "seed": seed, "archs": rows})
    onnx_path = folder / f"{archs[0].id}.onnx"
    if not onnx_path.exists():
        export_onnx(build_model(archs[0], space=ANB_SPACE), onnx_path)
    console.print(f"[bold]space[/]: {len(archs)} architectures of {ANB_SPACE.size():,} "
                  f"(seed {seed}) -> {folder}")
    for row in rows:
        console.print(f"  {row['arch_id']}  {row['arch']}  {row['macs']:.1f} M MACs  "
                      f"{row['params']:.2f} M params")
    return archs


def parse_settings(items: list[str], option: str) -> dict[str, str]:
    """``["section.key=value", ...]`` as a dict; a malformed item is a clear error."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or "." not in key or not value:
            raise ValueError(f"{option} {item!r} is malformed; expected 'section.key=value', "
                             "e.g. 'trainval.epochs=1'")
        out[key.strip()] = value.strip()
    return out


def stage_accuracy(out: Path, archs: list[Arch], config: Path, settings: dict[str, str]
                   ) -> dict:
    """Train ``archs`` with the trainer (resumable), then export its records to a CSV."""
    from anb.collect_accuracy.export import export
    from anb.collect_accuracy.train import main as train_main

    folder = out / "accuracy"
    overrides = {**TRAIN_DEFAULTS, **settings, "logging.folder": str(folder / "run"),
                 "logging.wandb_mode": settings.get("logging.wandb_mode", "disabled"),
                 "model.archs": ",".join(str(a) for a in archs)}
    argv = ["--config", str(config)] + [part for key, value in overrides.items()
                                        for part in (f"--{key}", value)]
    console.print(f"[bold]accuracy[/]: training {len(archs)} architectures with {config.name} "
                  f"-> {folder / 'run'}")
    status = train_main(argv)
    if status != 0:
        raise RuntimeError(f"the accuracy stage's trainer exited with status {status} "
                           f"(arguments: {' '.join(argv)})")
    summary = export(folder / "accuracy.csv", local=[folder / "run"], space=ANB_SPACE)
    console.print(f"  exported {summary['rows']} records -> {summary['out']}")
    return summary


def stage_throughput(out: Path, archs: list[Arch], accuracy_csv: Path, device: str,
                     budget: float) -> dict:
    """Measure ``archs`` on ``device`` (resumable), then merge with the accuracy records."""
    from anb.collect_throughput.records.merge import merge
    from anb.collect_throughput.targets.base import RunSettings
    from anb.collect_throughput.targets.local import LocalTarget
    from anb.collect_throughput.timing.protocol import load_device

    config = load_device(device, {"stopping": {"budget_seconds": budget},
                                  "warmup": {"max_seconds": budget}}, space=ANB_SPACE.name)
    results = out / "throughput"
    console.print(f"[bold]throughput[/]: {config.name} "
                  f"({', '.join(p.key for p in config.protocols)}) -> {results}")
    summary = LocalTarget(config).measure(archs, results, RunSettings(progress=True))
    report = merge(accuracy_csv, [results], out / "dataset", space=ANB_SPACE)
    console.print(f"  measured {len(summary.measured)}, reused {len(summary.skipped)}; merged "
                  f"{report.merged_records} records -> {out / 'dataset'}")
    return {"device": config.name, "measured": summary.measured, "reused": summary.skipped,
            "merge": report.as_dict()}


def is_packaged(released: Path, config: Path) -> bool:
    """Whether ``released`` and ``config`` are the packaged benchmark's own inputs (then the
    packaged benchmark is the base, fitted already)."""
    from anb.surrogates.fit import FitConfig

    return released.resolve() == RELEASED.resolve() and FitConfig.from_file(config) == FitConfig()


def stage_surrogates(out: Path, released: Path, config: Path, baseline: bool) -> str | Path:
    """The base benchmark the device is adapted on, scored on the released test split: the
    packaged one for the packaged inputs, else fitted (or reused) on ``released``."""
    from anb.surrogates import load
    from anb.surrogates.api import evaluate_artifact, fit
    from anb.surrogates.packaged import packaged_folder

    folder = out / "surrogates"
    model: str | Path
    if is_packaged(released, config):
        model = resources.PACKAGED_BENCHMARK
        console.print(f"[bold]surrogates[/]: the packaged benchmark {model!r} (fitted on "
                      f"{released.name} with {config.name})")
    else:
        model, fitted_with = folder / "model", folder / "fitted_with.json"
        wanted = {"released": str(released.resolve()), "config": json.loads(config.read_text())}
        if (model / "manifest.json").exists() and fitted_with.exists() \
                and json.loads(fitted_with.read_text()) == wanted:
            load(model)  # checks the manifest and checksums before it is reused
            console.print(f"[bold]surrogates[/]: reusing {model} (same data and config)")
        else:
            console.print(f"[bold]surrogates[/]: fitting {config.name} on {released.name} -> "
                          f"{model}")
            start = time.perf_counter()
            _, text = fit(released, model, config, progress=True)
            atomic_write_text(folder / "fit.md", text + "\n")
            atomic_write_json(fitted_with, wanted)
            console.print(f"  fitted in {time.perf_counter() - start:.0f} s")
    scored = packaged_folder(model) if isinstance(model, str) else model
    text = evaluate_artifact(scored, released, report=folder / "report", baseline=baseline)
    atomic_write_text(folder / "evaluation.md", text + "\n")
    console.print(text)
    return model


def stage_adapt(out: Path, base: str | Path, device: str) -> dict:
    """Adapt ``base`` to ``device`` from this run's latency measurements (every measured
    architecture; replaced whole on a rerun, it takes seconds)."""
    from anb.surrogates.adapt.api import adapt

    folder = out / "adapted"
    bench, model = adapt(device, out / "throughput", base, folder, metric="latency")
    assert bench is not None  # adapt returns the benchmark whenever out is given
    console.print(f"[bold]adapt[/]: {model.target} from {model.n_points} measured "
                  f"architectures on {len(model.known)} known devices of {base}; leave-one-out "
                  f"log error {model.loo_rmse:.4f} -> {folder}")
    return {"target": model.target, "n_points": model.n_points, "loo_rmse": model.loo_rmse,
            "base": str(base), "folder": str(folder)}


def search_objectives(target: str) -> list[str]:
    """Accuracy against the measured device's adapted metric."""
    kind = target.split("_", 1)[0]
    return ["val_top1:max", f"{target}:{'min' if kind == 'latency' else 'max'}"]


def stage_search(out: Path, model: Path, target: str, budget: int, seed: int) -> dict:
    """NSGA-II on the adapted benchmark: accuracy against the measured device's latency."""
    from anb.nas.evaluators import combined, surrogate_evaluator
    from anb.nas.objectives import Objective
    from anb.nas.report import headline, write_report
    from anb.nas.search import Problem, nsga2
    from anb.surrogates import load

    objectives = search_objectives(target)
    bench = load(model)
    problem = Problem(combined(surrogate_evaluator(bench, seed=seed), space=bench.space),
                      [Objective.parse(o) for o in objectives], [], space=bench.space)
    console.print(f"[bold]search[/]: NSGA-II, {budget} queries of {model}, "
                  f"objectives {', '.join(objectives)} -> {out / 'search'}")
    summary = write_report(nsga2(problem, budget, seed=seed, progress=True), out / "search")
    console.print(f"  Pareto front of {summary['pareto_size']} architectures")
    for line in headline(summary, problem.metrics):
        console.print(f"  {line}", markup=False)
    return summary


def stage_report(out: Path, adapted: dict, search: dict, trained: int) -> Path:
    """``report.html``: measured vs predicted, the Pareto front and its flags."""
    import pandas as pd

    from anb.pipeline_report import LEVEL, measured_vs_predicted, write_report
    from anb.records import load_dataset
    from anb.surrogates import load

    target = adapted["target"]
    measured = load_dataset(out / "throughput", ANB_SPACE).groupby(
        "arch", as_index=False, sort=False)[target].mean()
    predicted = load(Path(adapted["folder"])).query(measured["arch"].tolist(), [target],
                                                    level=LEVEL)
    table = measured_vs_predicted(measured, predicted, target)
    device = target.split("_", 1)[1]
    notes = [f"{trained} architectures trained on the bundled digits (accuracy/), "
             f"{len(measured)} measured on {device} (throughput/).",
             f"{target} adapted from those measurements on the base benchmark "
             f"{adapted['base']} (adapted/).",
             f"Search: {search['evaluations']} queries of the adapted benchmark, objectives "
             f"{', '.join(search['objectives'])} (search/)."]
    path = write_report(out / "report.html", device, target, table, adapted["loo_rmse"],
                        pd.read_csv(out / "search" / "pareto.csv"), out / "search" / "search.png",
                        search["objectives"], notes)
    console.print(f"[bold]report[/]: {int(table['inside'].sum())} of {len(table)} measured "
                  f"inside the 90% interval -> {path}")
    return path


def check_inputs(accuracy_config: Path, settings: dict[str, str], device: str,
                 released: Path, surrogate_config: Path, num_archs: int, num_measured: int
                 ) -> str:
    """Every input checked before any work: a ValueError naming the option; returns the
    device's name."""
    from anb.collect_accuracy.config import load_config
    from anb.collect_throughput.timing.protocol import load_device
    from anb.records import load_dataset
    from anb.surrogates.adapt.model import MIN_POINTS
    from anb.surrogates.fit import FitConfig

    if num_measured < max(num_archs, MIN_POINTS):
        raise ValueError(f"--num-measured {num_measured} is too small; allowed: at least "
                         f"--num-archs ({num_archs}) and at least {MIN_POINTS} (adapting needs "
                         f"{MIN_POINTS} measured architectures)")
    try:
        Sampler(0, space=ANB_SPACE).check_size(num_measured)
    except ValueError as err:
        raise ValueError(f"--num-measured {num_measured:,}: {err}") from None
    for option, path in (("--accuracy-config", accuracy_config),
                         ("--surrogate-config", surrogate_config), ("--released", released)):
        if not path.exists():
            raise ValueError(f"{option} {str(path)!r}: no such file")
    load_config(accuracy_config, [part for key, value in {**TRAIN_DEFAULTS, **settings}.items()
                                  for part in (f"--{key}", value)])
    try:
        FitConfig.from_file(surrogate_config)
    except ValueError as err:
        raise ValueError(f"--surrogate-config {str(surrogate_config)!r}: {err}") from None
    try:
        name = load_device(device, space=ANB_SPACE.name).name
    except ValueError as err:
        raise ValueError(f"--device: {err}") from None
    try:  # last: it reads every record
        if load_dataset(released, ANB_SPACE).empty:
            raise ValueError("it holds no records")
    except (ValueError, OSError, EOFError, tarfile.TarError) as err:
        raise ValueError(f"--released {str(released)!r} is not a readable dataset: {err}"
                         ) from None
    return name


def pipeline(
    out: Path = typer.Option(Path("outputs/pipeline"), help="Folder for every stage's results."),
    num_archs: int = typer.Option(4, min=1, help="Architectures to sample and train."),
    num_measured: int = typer.Option(
        24, min=1, help="Architectures measured on --device (the trained ones first): the "
        "device model is adapted from these; measuring is cheap next to training."),
    seed: int = typer.Option(0, min=0, help="Sampler and search seed."),
    accuracy_config: Path = typer.Option(CONFIGS / "accuracy" / "digits_tiny.ini",
                                         help="Training recipe (INI) of the accuracy stage."),
    train_set: list[str] | None = typer.Option(
        None, "--train-set", help="Recipe override 'section.key=value' (repeatable), on top "
        f"of the embedded {_TRAIN_DEFAULTS_TEXT}."),
    device: str = typer.Option("cpu-ort", help="Device config of the throughput stage."),
    measure_budget: float = typer.Option(2.0, min=0.01, max=MAX_MEASURE_BUDGET,
                                         help="Seconds of timed repetitions per "
                                         "architecture and protocol (and of warm-up at most)."),
    released: Path = typer.Option(RELEASED, help="Released dataset of the base benchmark (the "
                                  "packaged one for the packaged data and config)."),
    surrogate_config: Path = typer.Option(CONFIGS / "surrogates" / "default.json",
                                          help="Surrogate fit config (JSON) of the base."),
    baseline: bool = typer.Option(True, help="Re-fit the reference baselines to compare with."),
    search_budget: int = typer.Option(2000, min=1, max=MAX_SEARCH_BUDGET,
                                      help="Surrogate queries of the search."),
) -> None:
    """Sample, train, measure this CPU, adapt the benchmark to it, search on it, report."""
    started = time.perf_counter()
    try:
        settings = parse_settings(train_set or [], "--train-set")
        device_name = check_inputs(accuracy_config, settings, device, released,
                                   surrogate_config, num_archs, num_measured)
    except ValueError as err:
        fail(err)
    try:
        with exclusive(prepare_folder(out, OUTPUT), "anb pipeline"):
            measured = stage_space(out, num_measured, seed)
            trained = measured[:num_archs]
            summary: dict = {"archs": [str(a) for a in trained],
                             "measured_archs": [str(a) for a in measured]}
            summary["accuracy"] = stage_accuracy(out, trained, accuracy_config, settings)
            summary["throughput"] = stage_throughput(
                out, measured, out / "accuracy" / "accuracy.csv", device, measure_budget)
            base = stage_surrogates(out, released, surrogate_config, baseline)
            summary["surrogates"] = str(base)
            summary["adapted"] = stage_adapt(out, base, device_name)
            search = stage_search(out, out / "adapted", summary["adapted"]["target"],
                                  search_budget, seed)
            summary["search"] = {k: search[k] for k in ("evaluations", "objectives",
                                                        "pareto_size", "best")}
            summary["report"] = str(stage_report(out, summary["adapted"], search, len(trained)))
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        fail(err)
    summary["seconds"] = round(time.perf_counter() - started, 1)
    summary["anb_version"] = __version__
    atomic_write_text(out / "SUMMARY.json", json.dumps(summary, indent=2) + "\n")
    console.print(f"[green]done[/] in {summary['seconds']:.0f} s: results in {out}")


def register(app: typer.Typer) -> None:
    """Add ``anb pipeline`` to the root app."""
    app.command()(pipeline)
