"""Saving and loading surrogate benchmarks without pickle.

An artifact is a folder: native model files (XGBoost JSON, LightGBM text, ``.npz`` arrays) and
``manifest.json`` with the search-space version, feature schema, per-target transform and model
spec, library versions, training-data hash, metrics and a SHA-256 per file. Loading verifies every
checksum and compatibility field before reading any model; nothing in the artifact is executed.
"""
from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

from anb.extras import MissingExtra, message
from anb.formats import VERSION_FIELD, check, stamp
from anb.io import atomic_write_json, sha256_file
from anb.outputs import Kind, has_manifest_format, replace_folder
from anb.searchspace.registry import get_space
from anb.surrogates.benchmark import SurrogateBenchmark
from anb.surrogates.ensemble import TargetSurrogate
from anb.surrogates.features import FeatureBuilder
from anb.surrogates.layer_cost import LayerCostModel
from anb.version import __version__

FORMAT = "anb-surrogate"
MANIFEST = "manifest.json"
LAYER_COST_FILE = "layer_cost.npz"
SUPPORT_FILE = "support.npz"
#: The output folder ``anb fit`` writes (see :mod:`anb.outputs`).
OUTPUT = Kind("surrogate", "an anb surrogate artifact", has_manifest_format(FORMAT),
              replaceable=True)
_FAMILY_LIBRARY = {"xgboost": "xgboost", "random_forest": "xgboost", "lightgbm": "lightgbm"}


def library_versions() -> dict[str, str]:
    """Versions of the libraries whose formats an artifact depends on."""
    out = {"anb": __version__}
    for name in ("numpy", "xgboost", "lightgbm", "scikit-learn", "torch"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _digest(manifest: dict[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def save(bench: SurrogateBenchmark, path: str | Path, overwrite: bool = False,
         compiled: bool = False) -> Path:
    """Write ``bench`` to the folder ``path``, replacing an artifact there as a whole once the
    new one is complete (see :func:`anb.outputs.replace_folder`: a folder holding anything
    else is refused unless ``overwrite``). ``compiled``: XGBoost members as numpy node tables
    (:mod:`anb.surrogates.compiled`), loadable without xgboost."""
    with replace_folder(path, OUTPUT, overwrite) as tmp:
        files: list[Path] = []
        if bench.builder.layer_cost is not None:
            bench.builder.layer_cost.save(tmp / LAYER_COST_FILE)
            files.append(tmp / LAYER_COST_FILE)
        if bench.support is not None:
            bench.support.save(tmp / SUPPORT_FILE)
            files.append(tmp / SUPPORT_FILE)
        targets = {}
        for name, model in bench.models.items():
            paths = model.save(tmp, name, compiled)
            files += paths + (model.save_native(tmp, name) if compiled else [])
            targets[name] = {**bench.info.get("targets", {}).get(name, {}),
                             "transform": bench.transforms[name], "model": model.spec(),
                             "files": [p.name for p in paths]}
        manifest = {
            **{k: v for k, v in bench.info.items() if k not in ("targets", "manifest_sha256")},
            "format": FORMAT, **stamp("surrogate"), "anb_version": __version__,
            "space": {"name": bench.space.name, "version": bench.space.version},
            "feature_schema": {"feature_set": bench.builder.feature_set,
                               "names": bench.builder.names(),
                               "layer_cost": LAYER_COST_FILE if bench.builder.layer_cost else None},
            "support": SUPPORT_FILE if bench.support is not None else None,
            "targets": targets,
            "libraries": library_versions(),
            "files": {p.name: sha256_file(p) for p in files},
        }
        manifest["manifest_sha256"] = _digest(manifest)
        atomic_write_json(tmp / MANIFEST, manifest)
    return Path(path)


def read_manifest(path: str | Path) -> dict[str, Any]:
    """Read and verify the manifest and every file checksum of an artifact folder."""
    path = Path(path)
    file = path / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"surrogate artifact {str(path)!r} does not exist; allowed: a "
                                "folder written by 'anb fit', or 'accel-nasbench'")
    if not file.is_file():
        raise ValueError(f"{str(path)!r} is not a surrogate artifact: no {MANIFEST}")
    try:
        manifest = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{str(file)!r} is corrupted: not valid JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{str(file)!r} is not an {FORMAT} manifest")
    check("surrogate", manifest.get(VERSION_FIELD), str(file))
    if manifest.get("manifest_sha256") != _digest(manifest):
        raise ValueError(f"{str(file)!r} was modified after it was written "
                         "(manifest checksum mismatch)")
    for name, expected in manifest["files"].items():
        member = path / name
        if Path(name).name != name or not member.is_file():
            raise ValueError(f"artifact file {name!r} listed in the manifest is missing")
        actual = sha256_file(member)
        if actual != expected:
            raise ValueError(f"artifact file {name!r} is corrupted or tampered with: "
                             f"sha256 {actual[:12]}... != manifest {expected[:12]}...")
    return manifest


def _check_compatible(manifest: dict[str, Any]) -> None:
    space_info = manifest["space"]
    space = get_space(space_info["name"])
    if space.version != space_info["version"]:
        raise ValueError(f"artifact was made for search space {space_info['name']!r} version "
                         f"{space_info['version']!r}; this anb has version {space.version!r}")
    schema = manifest["feature_schema"]
    builder = FeatureBuilder(schema["feature_set"], None, space=space)
    ours = builder.names()
    theirs = [n for n in schema["names"] if not n.startswith("lc_")]
    if ours != theirs:
        # the lengths may differ: the '' added to each marks where the shorter one ends
        pairs = zip(theirs + [""], ours + [""], strict=False)
        raise ValueError(f"artifact feature schema {schema['feature_set']!r} does not match this "
                         f"anb's ({len(theirs)} vs {len(ours)} columns, first difference at "
                         f"{next((a, b) for a, b in pairs if a != b)})")
    installed = library_versions()
    for name, spec in manifest["targets"].items():
        families = spec["model"]["family"]
        for family in [families] if isinstance(families, str) else families:
            library = _FAMILY_LIBRARY.get(family)
            if library is None:
                continue
            made, have = manifest["libraries"].get(library), installed.get(library)
            if library == "xgboost" and (have is None or not any(
                    str(f).endswith(".json") for f in spec["files"])):
                continue  # node tables, or XGBoost JSON read into them: numpy alone
            if have is None:
                raise MissingExtra(message(library, what=f"target {name!r} (artifact made "
                                                         f"with {library} {made})"))
            if made and made.split(".")[0] != have.split(".")[0]:
                raise ValueError(f"target {name!r} was saved with {library} {made}; installed "
                                 f"{library} {have} has another major version")


def _check_references(target: str, spec: dict[str, Any], listed: dict[str, str]) -> None:
    """Every file a target names must be a checksummed plain name inside the artifact, and its
    model family one anb knows."""
    from anb.surrogates.estimators import FAMILIES

    families = spec["model"]["family"]
    for family in [families] if isinstance(families, str) else families:
        if family not in FAMILIES:
            raise ValueError(f"target {target!r} uses unknown model family {family!r}; "
                             f"allowed: {sorted(FAMILIES)}")
    for name in spec["files"]:
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise ValueError(f"target {target!r} references {name!r}, a path outside the "
                             "artifact folder; members must be plain file names inside it")
        if name not in listed:
            raise ValueError(f"target {target!r} references {name!r}, which is not in the "
                             "manifest's checksummed file list")
    if len(spec["files"]) != spec["model"]["n_members"]:
        raise ValueError(f"target {target!r} lists {len(spec['files'])} member files for "
                         f"n_members={spec['model']['n_members']}")


def load(path: str | Path, n_jobs: int | None = None) -> SurrogateBenchmark:
    """Load a surrogate benchmark folder written by :func:`save` (verified, no code executed).
    ``n_jobs``: members predicted concurrently on large batches (default: up to 2 CPUs)."""
    path = Path(path)
    manifest = read_manifest(path)
    _check_compatible(manifest)
    space = get_space(manifest["space"]["name"])
    schema = manifest["feature_schema"]
    if schema["layer_cost"] and schema["layer_cost"] not in manifest["files"]:
        raise ValueError(f"feature schema references {schema['layer_cost']!r}, which is not in "
                         "the manifest's checksummed file list")
    layer_cost = (LayerCostModel.load(path / schema["layer_cost"], space)
                  if schema["layer_cost"] else None)
    builder = FeatureBuilder(schema["feature_set"], layer_cost, space=space)
    if builder.names() != schema["names"]:
        raise ValueError("artifact layer-cost targets do not match its feature schema")
    support = None
    if manifest.get("support"):
        if manifest["support"] != SUPPORT_FILE or SUPPORT_FILE not in manifest["files"]:
            raise ValueError(f"manifest references support file {manifest['support']!r}, "
                             f"which is not the checksummed {SUPPORT_FILE!r}")
        from anb.surrogates.uncertainty.support import Support

        support = Support.load(path / SUPPORT_FILE, space)
    models, transforms = {}, {}
    for name, spec in manifest["targets"].items():
        _check_references(name, spec, manifest["files"])
        models[name] = TargetSurrogate.from_spec(spec["model"], [path / f for f in spec["files"]])
        transforms[name] = spec["transform"]
    threads = n_jobs if n_jobs is not None else min(2, os.cpu_count() or 1)
    return SurrogateBenchmark(builder, models, transforms, info=manifest, space=space,
                              n_jobs=threads, support=support)
