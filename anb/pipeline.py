"""``anb pipeline``: the main job on embedded defaults, one stage after another.

Each stage reads what the previous ones wrote under ``--out`` and writes its own folder, so the
whole run is a small, inspectable benchmark build:

1. ``space``: sample architectures, count MACs/params, export the first to ONNX;
2. ``accuracy``: train those architectures with the trainer (digits smoke recipe by default)
   and export the records to ``accuracy/accuracy.csv``;
3. ``throughput``: measure them on this machine's CPU (onnxruntime) and merge accuracy and
   speed into one dataset in the released JSON shape (``dataset/records/*.json``);
4. ``surrogates``: fit the benchmark's surrogates on the released dataset, score them on the
   published test split against the reference baselines;
5. ``search``: multi-objective NAS (NSGA-II) on the fitted surrogates.

Every stage is resumable: trained and measured architectures are skipped on a rerun and a
saved surrogate is reused. ``SUMMARY.json`` lists what each stage produced.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.console import Console

from anb import resources
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
_TRAIN_DEFAULTS_TEXT = " ".join(f"{k}={v}" for k, v in TRAIN_DEFAULTS.items())  # for --help
SEARCH_OBJECTIVES = ("val_top1:max", "throughput_zcu102:max")
#: The folder ``anb pipeline`` writes and resumes (see :mod:`anb.outputs`).
OUTPUT = Kind("pipeline", "an anb pipeline folder",
              lambda folder: (folder / "SUMMARY.json").is_file()
              or (folder / "space" / "archs.json").is_file())


def stage_space(out: Path, num_archs: int, seed: int) -> list[Arch]:
    """Sample architectures, write their strings, ids and counts, and export the first to ONNX."""
    from anb.searchspace.model import build_model
    from anb.searchspace.onnx_export import export_onnx

    folder = out / "space"
    archs = Sampler(seed).sample(num_archs)
    rows = []
    for arch in archs:
        macs, params = count(arch)
        rows.append({"arch_id": arch.id, "arch": str(arch), "macs": round(macs / 1e6, 6),
                     "params": round(params / 1e6, 6)})
    atomic_write_text(folder / "archs.txt", "".join(f"{a}\n" for a in archs))
    atomic_write_json(folder / "archs.json", {"space": ANB_SPACE.name, "seed": seed, "archs": rows})
    onnx_path = folder / f"{archs[0].id}.onnx"
    if not onnx_path.exists():
        export_onnx(build_model(archs[0]), onnx_path)
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
    summary = export(folder / "accuracy.csv", local=[folder / "run"])
    console.print(f"  exported {summary['rows']} records -> {summary['out']}")
    return summary


def stage_throughput(out: Path, archs: list[Arch], accuracy_csv: Path, device: str,
                     budget: float) -> dict:
    """Measure ``archs`` on ``device`` (resumable), then merge with the accuracy records."""
    from anb.collect_throughput.driver import measure_archs
    from anb.collect_throughput.merge import merge
    from anb.collect_throughput.protocol import load_device

    config = load_device(device, {"stopping": {"budget_seconds": budget},
                                  "warmup": {"max_seconds": budget}})
    results = out / "throughput"
    console.print(f"[bold]throughput[/]: {config.name} "
                  f"({', '.join(p.key for p in config.protocols)}) -> {results}")
    summary = measure_archs(config, archs, results, progress=True)
    report = merge(accuracy_csv, [results], out / "dataset")
    console.print(f"  measured {len(summary.measured)}, reused {len(summary.skipped)}; merged "
                  f"{report.merged_records} records -> {out / 'dataset'}")
    return {"device": config.name, "measured": summary.measured, "reused": summary.skipped,
            "merge": report.as_dict()}


def stage_surrogates(out: Path, released: Path, config: Path, baseline: bool) -> Path | None:
    """Fit (or reuse) the surrogates on the released dataset and score them on its test split."""
    from anb.surrogates import load
    from anb.surrogates.api import evaluate_artifact, fit

    folder = out / "surrogates"
    if not released.exists():
        console.print(f"[yellow]surrogates: skipped[/]: the released dataset {released} is not "
                      "there (pass --released PATH)")
        return None
    model, fitted_with = folder / "model", folder / "fitted_with.json"
    wanted = {"released": str(released.resolve()), "config": json.loads(config.read_text())}
    if (model / "manifest.json").exists() and fitted_with.exists() \
            and json.loads(fitted_with.read_text()) == wanted:
        load(model)  # checks the manifest and checksums before it is reused
        console.print(f"[bold]surrogates[/]: reusing {model} (same data and config)")
    else:
        console.print(f"[bold]surrogates[/]: fitting {config.name} on {released.name} -> {model}")
        start = time.perf_counter()
        _, text = fit(released, model, config, progress=True)
        atomic_write_text(folder / "fit.md", text + "\n")
        atomic_write_json(fitted_with, wanted)
        console.print(f"  fitted in {time.perf_counter() - start:.0f} s")
    text = evaluate_artifact(model, released, report=folder / "report", baseline=baseline)
    atomic_write_text(folder / "evaluation.md", text + "\n")
    console.print(text)
    return model


def stage_search(out: Path, model: Path, budget: int, seed: int) -> dict:
    """NSGA-II on the surrogates: accuracy against FPGA throughput."""
    from anb.nas.evaluators import combined, surrogate_evaluator
    from anb.nas.objectives import Objective
    from anb.nas.report import headline, write_report
    from anb.nas.search import Problem, nsga2
    from anb.surrogates import load

    problem = Problem(combined(surrogate_evaluator(load(model), seed=seed)),
                      [Objective.parse(o) for o in SEARCH_OBJECTIVES], [])
    console.print(f"[bold]search[/]: NSGA-II, {budget} surrogate queries, "
                  f"objectives {', '.join(SEARCH_OBJECTIVES)} -> {out / 'search'}")
    summary = write_report(nsga2(problem, budget, seed=seed, progress=True), out / "search")
    console.print(f"  Pareto front of {summary['pareto_size']} architectures")
    for line in headline(summary, problem.metrics):
        console.print(f"  {line}", markup=False)
    return summary


def pipeline(
    out: Path = typer.Option(Path("outputs/pipeline"), help="Folder for every stage's results."),
    num_archs: int = typer.Option(4, min=1, help="Architectures to sample, train and measure."),
    seed: int = typer.Option(0, help="Sampler and search seed."),
    accuracy_config: Path = typer.Option(CONFIGS / "accuracy" / "digits_tiny.ini",
                                         help="Training recipe (INI) of the accuracy stage."),
    train_set: list[str] | None = typer.Option(
        None, "--train-set", help="Recipe override 'section.key=value' (repeatable), on top "
        f"of the embedded {_TRAIN_DEFAULTS_TEXT}."),
    device: str = typer.Option("cpu-ort", help="Device config of the throughput stage."),
    measure_budget: float = typer.Option(2.0, min=0.01, help="Seconds of timed repetitions per "
                                         "architecture and protocol (and of warm-up at most)."),
    released: Path = typer.Option(RELEASED, help="Released dataset the surrogates are fitted on."),
    surrogate_config: Path = typer.Option(CONFIGS / "surrogates" / "default.json",
                                          help="Surrogate fit config (JSON)."),
    baseline: bool = typer.Option(True, help="Re-fit the reference baselines to compare with."),
    search_budget: int = typer.Option(2000, min=1, help="Surrogate queries of the search."),
) -> None:
    """Run every stage on embedded defaults (small sizes that finish on a laptop CPU)."""
    started = time.perf_counter()
    try:
        settings = parse_settings(train_set or [], "--train-set")
        for option, path in (("--accuracy-config", accuracy_config),
                             ("--surrogate-config", surrogate_config)):
            if not path.is_file():
                raise ValueError(f"{option} {str(path)!r}: no such file")
        with exclusive(prepare_folder(out, OUTPUT), "anb pipeline"):
            archs = stage_space(out, num_archs, seed)
            summary: dict = {"archs": [str(a) for a in archs]}
            summary["accuracy"] = stage_accuracy(out, archs, accuracy_config, settings)
            summary["throughput"] = stage_throughput(
                out, archs, out / "accuracy" / "accuracy.csv", device, measure_budget)
            model = stage_surrogates(out, released, surrogate_config, baseline)
            summary["surrogates"] = str(model) if model else None
            if model is not None:
                search = stage_search(out, model, search_budget, seed)
                summary["search"] = {k: search[k] for k in ("evaluations", "pareto_size",
                                                            "best")}
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        console.print(f"[red]error[/]: {err}")
        raise typer.Exit(2) from None
    summary["seconds"] = round(time.perf_counter() - started, 1)
    summary["anb_version"] = __version__
    atomic_write_text(out / "SUMMARY.json", json.dumps(summary, indent=2) + "\n")
    console.print(f"[green]done[/] in {summary['seconds']:.0f} s: results in {out}")


def register(app: typer.Typer) -> None:
    """Add ``anb pipeline`` to the root app."""
    app.command()(pipeline)
