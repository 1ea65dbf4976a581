"""Files the package reads at run time, shipped inside it and found with ``importlib.resources``.

- ``configs/``: device configs (``devices/*.toml``), training recipes (``accuracy/*.ini``),
  surrogate configs (``surrogates/*.json``) and the SLURM template (``slurm/train.sbatch``).
  The repository's top-level ``configs`` is a link to this folder: the user-editable copy.
- ``data/accel_nasbench/``: the released Accel-NASBench dataset, its published split, licence
  (Apache-2.0) and attribution (``NOTICE``, ``SOURCE.md``).
- ``data/help/``: HELP's NAS-Bench-201 and FBNet latency tables (27 devices each), their licence
  (MIT) and provenance (``SOURCE.md``).
- ``data/citations/``: BibTeX of the data and of the method (``anb cite``).
- ``data/packaged/accel-nasbench/``: the benchmark fitted on it with the default config, its
  XGBoost members compiled to numpy node tables (loads in a second, without xgboost).
- ``data/packaged/help-nasbench201/``, ``data/packaged/help-fbnet/``: HELP's tables as latency
  benchmarks, fitted and compiled the same way (``anb.surrogates.help_benchmark``).
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path

_ROOT = Path(str(files("anb")))
CONFIG_DIR = _ROOT / "configs"
RELEASED_DIR = _ROOT / "data" / "accel_nasbench"
#: The released dataset (5,138 records) and the benchmark's published 4,100 / 512 / 512 split.
RELEASED_DATASET = RELEASED_DIR / "anb_dataset_jsons.tar.gz"
RELEASED_SPLIT_DIR = RELEASED_DIR / "splits"
#: HELP's latency tables: ``nasbench201_latency.csv.gz`` and ``fbnet_latency.csv.gz``.
HELP_DIR = _ROOT / "data" / "help"
#: BibTeX of the packaged data and of anb itself (``anb cite``).
CITATIONS_DIR = _ROOT / "data" / "citations"
#: The name of the benchmark fitted on the released dataset (``anb.load()``'s default).
PACKAGED_BENCHMARK = "accel-nasbench"
#: The fitted benchmarks that ship inside the package, one folder each.
PACKAGED_DIR = _ROOT / "data" / "packaged"
#: That benchmark fitted with the packaged default config, in compiled form
#: (``scripts/build_packaged.py`` writes it).
SHIPPED_DIR = PACKAGED_DIR / PACKAGED_BENCHMARK
#: The names of HELP's tables as packaged latency benchmarks (``anb.load("help-fbnet")``).
HELP_BENCHMARKS = ("help-nasbench201", "help-fbnet")


def config_path(kind: str, name: str) -> Path:
    """A shipped config: ``config_path("devices", "a100.toml")``; a clear error if absent.

    ``kind`` and ``name`` are names inside the package's config folder, never paths out of
    it: ``..``, an absolute path or a link leading outside is refused (ValueError)."""
    for label, value, parts in (("kind", kind, (kind,)), ("name", name, Path(name).parts)):
        if not value or Path(value).is_absolute() or any(p in ("..", ".") or "/" in p
                                                         for p in parts):
            raise ValueError(f"config {label} {value!r} is not a name inside the shipped "
                             "configs; allowed: <kind>/<name> as `anb config` lists them")
    path = CONFIG_DIR / kind / name
    if not path.resolve().is_relative_to(CONFIG_DIR.resolve()):
        raise ValueError(f"config {kind}/{name!r} leads outside the shipped configs")
    if not path.is_file():
        folder = CONFIG_DIR / kind
        shipped = sorted(p.name for p in folder.glob("*")) if folder.is_dir() else []
        raise FileNotFoundError(f"no shipped config {kind}/{name!r}; "
                                f"shipped: {', '.join(shipped) or 'none'}")
    return path
