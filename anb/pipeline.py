"""``anb pipeline``: the main job on embedded defaults, one stage after another.

Each stage reads what the previous ones wrote under ``--out`` and writes its own folder, so the
whole run is a small, inspectable benchmark build. Stages: ``space`` (sample architectures,
count them, export one to ONNX).
"""
from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from anb.io import atomic_write_json, atomic_write_text
from anb.searchspace import ANB_SPACE, Sampler, count

console = Console()


def stage_space(out: Path, num_archs: int, seed: int) -> list[str]:
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
    export_onnx(build_model(archs[0]), folder / f"{archs[0].id}.onnx")
    console.print(f"[bold]space[/]: {len(archs)} architectures of {ANB_SPACE.size():,} "
                  f"(seed {seed}) -> {folder}")
    for row in rows:
        console.print(f"  {row['arch_id']}  {row['arch']}  {row['macs']:.1f} M MACs  "
                      f"{row['params']:.2f} M params")
    return [str(a) for a in archs]


def pipeline(
    out: Path = typer.Option(Path("outputs/pipeline"), help="Folder for every stage's results."),
    num_archs: int = typer.Option(4, min=1, help="Architectures to sample."),
    seed: int = typer.Option(0, help="Sampler seed."),
) -> None:
    """Run every stage on embedded defaults (small sizes that finish on a laptop CPU)."""
    out.mkdir(parents=True, exist_ok=True)
    archs = stage_space(out, num_archs, seed)
    atomic_write_text(out / "SUMMARY.json", json.dumps({"archs": archs}, indent=2) + "\n")
    console.print(f"[green]done[/]: results in {out}")
