"""Where an adapted artifact's base surrogate benchmark is, recorded so that the adapted folder
can be copied or moved.

A packaged base is recorded by name (``"packaged"``) and resolved to wherever this anb keeps
it (shipped inside the package or fitted into the user's cache). A folder base is recorded by
its path relative to the adapted folder's parent (``"path"``: survives moving both together)
and by its absolute path (``"abs_path"``: survives moving the adapted folder alone). Either way
the base's ``manifest_sha256`` must match.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def packaged_name(base: str | Path) -> str | None:
    """``base`` as a packaged benchmark name, or None when it is a folder."""
    from anb.surrogates.packaged import PACKAGED

    return str(base) if str(base) in PACKAGED and not Path(base).exists() else None


def base_reference(base: str | Path, out: Path) -> tuple[Path, dict[str, Any]]:
    """The folder behind ``base`` (a packaged name or a folder) and how the adapted manifest
    written to ``out`` refers to it (its ``manifest_sha256`` is added by the caller)."""
    name = packaged_name(base)
    if name is not None:
        from anb.surrogates.packaged import packaged_folder

        return packaged_folder(name), {"packaged": name}
    folder = Path(base).resolve()
    return folder, {"path": os.path.relpath(folder, out.resolve().parent),
                    "abs_path": str(folder)}


def resolve_base(path: Path, reference: dict[str, Any]) -> Path:
    """The base folder of the adapted artifact at ``path`` from its manifest's ``base``;
    a clear error naming every place looked at when none holds it."""
    if reference.get("packaged"):
        from anb.surrogates.packaged import packaged_folder

        return packaged_folder(reference["packaged"])
    tried = [path.parent / reference["path"]]
    if reference.get("abs_path"):
        tried.append(Path(reference["abs_path"]))
    for folder in tried:
        if folder.is_dir():
            return folder
    raise ValueError(f"the base surrogate benchmark of the adapted folder {str(path)!r} is "
                     f"missing: looked in {[str(p) for p in tried]}; move it back there, or "
                     "pass its new place (anb.surrogates.adapt.model.load_adapted(path, base=...))")
