"""``anb space``: inspect, sample and count architectures of a search space (``--space``, any
registered space; :func:`cli_space` is the option's reader for every command that takes it)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from anb.cli_support import fail
from anb.io import atomic_write
from anb.outputs import check_file
from anb.searchspace.base import MAX_CLASSES, MAX_RESOLUTION, Space
from anb.searchspace.registry import (
    BUILTIN_SPACES,
    DEFAULT_SPACE,
    get_space,
    resolve_space,
    space_names,
)
from anb.searchspace.sampler import Sampler, parse_shard
from anb.searchspace.space import SearchSpace

app = typer.Typer(help="Inspect, sample and count architectures of the search space.",
                  no_args_is_help=True)


def register(root: typer.Typer) -> None:
    """Add the ``anb space`` group to the root app."""
    root.add_typer(app, name="space")


SPACE_OPTION = typer.Option(DEFAULT_SPACE, "--space", help="Search space: "
                            f"{', '.join(BUILTIN_SPACES)} or a plug-in's.")


def cli_space(given: str | None, found: str | None = None, what: str = "the input") -> Space:
    """The space a command works in (:func:`~anb.searchspace.registry.resolve_space`: ``--space``,
    else the one its input names, else the default); an unknown name (the known ones listed)
    or a ``--space`` other than the input's (both named) exits 2."""
    try:
        return resolve_space(given, found, what)
    except ValueError as err:
        fail(err)


@app.command("list")
def list_cmd() -> None:
    """List every space: name, version, size and task (built-in first, then plug-ins)."""
    for name in space_names():
        try:
            space = get_space(name)
        except Exception as err:  # noqa: BLE001 - a broken plug-in is reported, not fatal
            typer.echo(f"{name}: cannot be loaded ({type(err).__name__}: {err})")
            continue
        task = space.task
        typer.echo(f"{name} v{space.version}: {space.size():.3g} architectures; {task.dataset}, "
                   f"input {task.resolution}, {task.num_classes} classes; {space.summary}")


@app.command()
def info(space: str = SPACE_OPTION) -> None:
    """Print the size of the space and its decisions (for MnasNet spaces: the stages)."""
    spec = cli_space(space)
    if isinstance(spec, SearchSpace):
        typer.echo(f"{spec.name}: {spec.num_stages} stages, {spec.size():,} architectures")
        for i, stage in enumerate(spec.stages):
            typer.echo(f"  stage {i}: {stage.in_channels}->{stage.out_channels} stride "
                       f"{stage.stride}  e {list(stage.expansions)} k {list(stage.kernels)}"
                       f" l {list(stage.layers)} se {list(stage.se)}")
        return
    task = spec.task
    typer.echo(f"{spec.name}: {len(spec.variables)} variables, {spec.size():,} architectures; "
               f"{task.dataset} {task.resolution} px, {task.num_classes} classes")
    if spec.summary:
        typer.echo(f"  {spec.summary}")
    for variable in spec.variables:
        typer.echo(f"  {variable.name}: {list(variable.labels or variable.values)}")


@app.command("sample")
def sample_cmd(
    n: int = typer.Option(10, "-n", "--num", min=0, help="How many architectures."),
    seed: int = typer.Option(0, min=0, help="Stream seed."),
    shard: str = typer.Option("0/1", help="Shard 'i/k' of the stream (disjoint across i)."),
    fmt: str = typer.Option("string", "--format", help="string | json | id"),
    space: str = SPACE_OPTION,
) -> None:
    """Print the first N architectures of a seeded, sharded stream, as they are drawn
    (bounded memory for any N; N beyond the space's size is refused)."""
    if fmt not in ("string", "json", "id"):
        fail(f"--format {fmt!r} is not one of ['string', 'json', 'id']")
    spec = cli_space(space)
    sampler = Sampler(seed, space=spec)
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
            typer.echo(json.dumps(spec.to_record(arch)))
        elif fmt == "id":
            typer.echo(arch.id)
        else:
            typer.echo(str(arch))


@app.command("count")
def count_cmd(
    archs: list[str] | None = typer.Argument(None, help="Architecture strings (or stdin)."),
    resolution: int | None = typer.Option(None, min=1, max=MAX_RESOLUTION,
                                          help="Input resolution (default: the "
                                          "architecture's own, e.g. 224 for anb-mnasnet)."),
    num_classes: int | None = typer.Option(None, min=1, max=MAX_CLASSES,
                                           help="Classifier width (default: the "
                                           "space's task, e.g. 1000)."),
    space: str = SPACE_OPTION,
) -> None:
    """Print id, MACs (M) and params (M) of each architecture, benchmark-compatible."""
    spec = cli_space(space)
    lines = archs or [line.strip() for line in sys.stdin if line.strip()]
    try:  # every architecture and the options checked before anything is printed
        parsed = [spec.arch(text) for text in lines]
        tables = [spec.cost_table(spec.to_choices([arch]), resolution, num_classes)
                  for arch in parsed]
    except ValueError as err:
        fail(err)
    typer.echo("arch_id,arch,macs,params")
    for arch, table in zip(parsed, tables, strict=True):
        macs, params = int(table.total("macs")[0]), int(table.total("params")[0])
        text = str(arch)
        quoted = f'"{text}"' if "," in text else text  # OFA-MBv3 strings hold commas
        typer.echo(f"{arch.id},{quoted},{macs / 1e6:.6f},{params / 1e6:.6f}")


@app.command("onnx")
def onnx_cmd(
    arch: str = typer.Argument(..., help="Architecture string."),
    out: Path = typer.Argument(..., help="Output .onnx file."),
    resolution: int | None = typer.Option(None, min=1, max=MAX_RESOLUTION,
                                          help="Example input resolution (axes stay "
                                          "dynamic; default: the architecture's own)."),
    num_classes: int | None = typer.Option(None, min=1, max=MAX_CLASSES,
                                           help="Classifier width (default: the "
                                           "space's task)."),
    activation: str | None = typer.Option(None, help="MnasNet spaces: relu (the default; "
                                          "benchmark, FPGA-safe) | silu"),
    space: str = SPACE_OPTION,
) -> None:
    """Build an architecture's network (the space's builder) and export it to ONNX with the
    space's input (channels, 1-D or 2-D; batch and size dynamic)."""
    from anb.searchspace.onnx_export import export_onnx

    spec = cli_space(space)
    options = {} if activation is None else {"activation": activation}
    try:
        check_file(out, "OUT")
        parsed = spec.arch(arch)
        model = spec.build(parsed, num_classes, **options)
    except ValueError as err:
        fail(err)
    except TypeError as err:  # a builder without the option
        fail(f"space {spec.name!r} cannot build with {options}: {err}")
    size = resolution or int(spec.resolutions(spec.to_choices([parsed]))[0])
    typer.echo(export_onnx(model, out, input_shape=spec.task.input_shape(1, size)))


@app.command("configspace")
def configspace_cmd(
    out: Path = typer.Argument(..., help="Output JSON file (ConfigSpace's own format)."),
    space: str = SPACE_OPTION,
) -> None:
    """Write the space as a ConfigSpace configuration space (JSON)."""
    from anb.searchspace.configspace import to_configspace

    spec = cli_space(space)
    try:
        check_file(out, "OUT")
        cs = to_configspace(spec)
    except ValueError as err:
        fail(err)
    atomic_write(out, lambda tmp: cs.to_json(tmp))
    typer.echo(out)
