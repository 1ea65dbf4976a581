"""``anb adapt``: a surrogate for a new device from a few measurements, and what to measure next."""
from __future__ import annotations

from pathlib import Path

import typer

from anb import resources
from anb.cli_support import fail, queue_option, space_option


def adapt_cmd(
    device: str = typer.Option(..., "--device", help="Device name: the CSV column is "
                               "throughput_<NAME> or latency_<NAME>."),
    base: str = typer.Option(resources.PACKAGED_BENCHMARK, "--base", help="Surrogate "
                             "benchmark of the known devices: an 'anb fit' folder or the "
                             "packaged name."),
    measured: Path | None = typer.Option(
        None, "--measured", help="CSV with 'arch' (or block{i}_* columns) and <kind>_<NAME> "
        "columns, or an 'anb measure' folder; repeats of a design are averaged."),
    out: Path | None = typer.Option(None, "--out", help="Adapted artifact folder to write."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even when it "
                                   "holds something other than an adapted surrogate."),
    metric: str | None = typer.Option(None, "--metric", help="throughput | latency (when "
                                         "the file has both)."),
    suggest: int = typer.Option(0, "--suggest", min=0, help="Print the K most informative "
                                "architectures to measure next (none already measured)."),
    candidates: int = typer.Option(5000, min=1, max=1_000_000,
                                   help="Sampled candidates --suggest chooses from."),
    seed: int = typer.Option(0, min=0, help="Seed of the candidate sample."),
    submit: bool = typer.Option(False, "--submit", help="Queue a measure job per suggested "
                                "architecture (--device is then a device config name or TOML)."),
    queue: str = queue_option("Measurement queue for --submit: SQLite file or postgresql:// "
                              "URL."),
    space: str | None = space_option("search space; must be the base benchmark's (default: "
                                     "it)"),
) -> None:
    """Adapt a surrogate to a new device from measured architectures; suggest what to measure."""
    from anb.surrogates.adapt.api import adapt, base_space, check_suggest
    from anb.surrogates.adapt.api import submit as submit_jobs
    from anb.surrogates.adapt.api import suggest as suggest_archs
    from anb.surrogates.adapt.model import CHOICE_MIN_POINTS

    if submit and not suggest:
        fail("--submit queues the suggested architectures: give --suggest K")
    if suggest == 0 and (measured is None or out is None):
        fail("give --measured and --out to adapt, or --suggest K to choose architectures "
             "to measure")
    try:
        if suggest:
            check_suggest(suggest, candidates)  # before adapting writes --out
        if measured is not None and out is not None:
            bench, model = adapt(device, measured, base, out, metric, overwrite, space)
            assert bench is not None  # adapt returns the benchmark whenever out is given
            rows = bench.info["measured"]["rows"]
            repeats = f" ({rows} measurements, repeats averaged)" if rows > model.n_points else ""
            typer.echo(f"{model.target}: adapted from {model.n_points} measured architectures"
                       f"{repeats} on {len(model.known)} known devices; leave-one-out log error "
                       f"{model.loo_rmse:.4f} -> {out}")
            if model.n_points < CHOICE_MIN_POINTS:
                typer.echo(f"{model.target}: below {CHOICE_MIN_POINTS} measurements the "
                           "known devices' additive transfer alone predicts; a device unlike "
                           f"every known one needs {CHOICE_MIN_POINTS} or more (anb adapt "
                           "--suggest K chooses them)")
            if model.proxy:
                typer.echo(f"{model.target}: the {model.proxy} proxy predicts (leave-one-out "
                           f"{model.proxy_rmse:.4f}), not the transfer "
                           f"({model.transfer_rmse:.4f})")
        if suggest:
            archs = suggest_archs(base, suggest, measured, device, metric,
                                  n_candidates=candidates, seed=seed, space=space)
            for arch in archs:
                typer.echo(arch)
            if submit:
                added, queued = submit_jobs(archs, device, queue, base_space(base, space))
                typer.echo(f"queued {added} measure job(s) on {device} ({queued} already "
                           f"in the queue) -> {queue}", err=True)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        fail(err)


def register(app: typer.Typer) -> None:
    """Add ``anb adapt`` to the root app."""
    app.command("adapt")(adapt_cmd)
