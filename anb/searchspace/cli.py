"""``anb space``: inspect, sample and count architectures of the search space."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from anb.cli_support import fail
from anb.io import atomic_write
from anb.outputs import check_file
from anb.searchspace.arch import as_arch
from anb.searchspace.counting import count
from anb.searchspace.registry import get_space
from anb.searchspace.sampler import Sampler, parse_shard

app = typer.Typer(help="Inspect, sample and count architectures of the search space.",
                  no_args_is_help=True)



def register(root: typer.Typer) -> None:
    """Add the ``anb space`` group to the root app."""
    root.add_typer(app, name="space")


SPACE_OPTION = typer.Option("anb-mnasnet", "--space", help="Search space name.")


@app.command()
def info(space: str = SPACE_OPTION) -> None:
    """Print the stages, their allowed choices and the size of the space."""
    try:
        spec = get_space(space)
    except ValueError as err:
        fail(err)
    typer.echo(f"{spec.name}: {spec.num_stages} stages, {spec.size():,} architectures")
    for i, stage in enumerate(spec.stages):
        typer.echo(f"  stage {i}: {stage.in_channels}->{stage.out_channels} stride {stage.stride}"
                   f"  e {list(stage.expansions)} k {list(stage.kernels)}"
                   f" l {list(stage.layers)} se {list(stage.se)}")


@app.command("sample")
def sample_cmd(
    n: int = typer.Option(10, "-n", "--num", min=0, help="How many architectures."),
    seed: int = typer.Option(0, help="Stream seed."),
    shard: str = typer.Option("0/1", help="Shard 'i/k' of the stream (disjoint across i)."),
    fmt: str = typer.Option("string", "--format", help="string | json | id"),
    space: str = SPACE_OPTION,
) -> None:
    """Print the first N architectures of a seeded, sharded stream, as they are drawn
    (bounded memory for any N; N beyond the space's size is refused)."""
    if fmt not in ("string", "json", "id"):
        fail(f"--format {fmt!r} is not one of ['string', 'json', 'id']")
    try:
        sampler = Sampler(seed, get_space(space))
    except ValueError as err:
        fail(err)
    try:
        parse_shard(shard)
    except ValueError as err:
        fail(f"--shard: {err}")
    try:
        sampler.check_size(n, shard)
    except ValueError as err:
        fail(f"-n {n:,}: {err}")
    for arch in sampler.iter_sample(n, shard=shard):
        if fmt == "json":
            typer.echo(json.dumps(arch.to_anb_dict()))
        elif fmt == "id":
            typer.echo(arch.id)
        else:
            typer.echo(str(arch))


@app.command("count")
def count_cmd(
    archs: list[str] | None = typer.Argument(None, help="Architecture strings (or stdin)."),
    resolution: int = typer.Option(224, help="Input resolution."),
    num_classes: int = typer.Option(1000, help="Classifier width."),
    space: str = SPACE_OPTION,
) -> None:
    """Print id, MACs (M) and params (M) of each architecture, benchmark-compatible."""
    lines = archs or [line.strip() for line in sys.stdin if line.strip()]
    typer.echo("arch_id,arch,macs,params")
    for text in lines:
        try:
            arch = as_arch(text, get_space(space))
        except ValueError as err:
            fail(err)
        macs, params = count(arch, resolution, num_classes, space=get_space(space))
        typer.echo(f"{arch.id},{arch},{macs / 1e6:.6f},{params / 1e6:.6f}")


@app.command("onnx")
def onnx_cmd(
    arch: str = typer.Argument(..., help="Architecture string."),
    out: Path = typer.Argument(..., help="Output .onnx file."),
    resolution: int = typer.Option(224, help="Example input resolution (axes stay dynamic)."),
    num_classes: int = typer.Option(1000, help="Classifier width."),
    activation: str = typer.Option("relu", help="relu (benchmark, FPGA-safe) | silu"),
    space: str = SPACE_OPTION,
) -> None:
    """Build an architecture's network and export it to ONNX (batch and size dynamic)."""
    from anb.searchspace.model import build_model
    from anb.searchspace.onnx_export import export_onnx

    try:
        check_file(out, "OUT")
        spec = get_space(space)
        model = build_model(as_arch(arch, spec), num_classes, activation, space=spec)
    except ValueError as err:
        fail(err)
    typer.echo(export_onnx(model, out, resolution=resolution))


@app.command("configspace")
def configspace_cmd(
    out: Path = typer.Argument(..., help="Output JSON file (ConfigSpace's own format)."),
    space: str = SPACE_OPTION,
) -> None:
    """Write the space as a ConfigSpace configuration space (JSON)."""
    from anb.searchspace.configspace import to_configspace

    try:
        check_file(out, "OUT")
        cs = to_configspace(get_space(space))
    except ValueError as err:
        fail(err)
    atomic_write(out, lambda tmp: cs.to_json(tmp))
    typer.echo(out)
