"""Which data is this? A benchmark's identity and citations, read from what it was fitted on.

:func:`identity` answers from a loaded benchmark's manifest: the dataset (name, version,
content hash, record count), the split (name and hash), the hash of the fitting config, the
artifact's own checksum and format, the anb version that wrote it; an adapted benchmark adds
its own manifest and measurements to its base's. :func:`citations` gives the BibTeX of the
data and of the method (``anb cite``).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from anb import resources
from anb.version import __version__

#: Key of a query's ``DataFrame.attrs`` holding the identity of the benchmark that answered.
IDENTITY = "anb"
#: Released datasets a packaged benchmark can be fitted on: name -> (version, citation file).
DATASETS = {
    resources.PACKAGED_BENCHMARK: ("2023-04-12 (afzalxo/Accel-NASBench@dcd4d72)",
                                   "accel-nasbench.bib"),
    **{name: ("HayeonLee/HELP@45f70eb", "help.bib") for name in resources.HELP_BENCHMARKS},
}
#: The citation of the method (this package), with ``VERSION`` replaced by the version.
METHOD_CITATION = "anb.bib"


def config_sha256(config: Mapping[str, Any] | None) -> str | None:
    """The sha256 of a fitting config's canonical JSON (sorted keys), or None without one."""
    if config is None:
        return None
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def _split_sha256(files: Mapping[str, str]) -> str:
    """One hash over a split's files (their names and sha256s)."""
    return hashlib.sha256(json.dumps(dict(files), sort_keys=True).encode()).hexdigest()


def identity(bench: Any) -> dict[str, Any]:
    """``bench``'s identity (a loaded benchmark of either kind) as a JSON-ready dict.

    ``dataset.name`` / ``version`` / ``sha256`` and the split's hash are set for a packaged
    benchmark (loaded by name; a HELP one names its dataset and version in that key itself);
    one fitted on a user's records has its records' hash only.
    """
    info = bench.info
    if hasattr(bench, "base"):  # an adapted benchmark: its base, then its own
        return {**identity(bench.base),
                "adapted": {"format": info["format"], "format_version": info["format_version"],
                            "manifest_sha256": info.get("manifest_sha256"),
                            "targets": sorted(info.get("targets", {}))}}
    key = info.get("released") or {}  # set by anb.load on a packaged benchmark
    data = info.get("training_data") or {}
    name = key.get("name")
    version = key.get("version") or (DATASETS[name][0] if name in DATASETS else None)
    split_files = key.get("split_sha256")
    return {
        "benchmark": name,
        "anb_version": info.get("anb_version"),
        "format": info.get("format"), "format_version": info.get("format_version"),
        "manifest_sha256": info.get("manifest_sha256"),
        "space": info.get("space"),
        "dataset": {"name": key.get("dataset", name), "version": version,
                    "sha256": key.get("data_sha256"),
                    "records_sha256": data.get("sha256"), "n_records": data.get("n_records")},
        "split": {"name": data.get("split"),
                  "sha256": _split_sha256(split_files) if split_files else None},
        "config_sha256": config_sha256(info.get("fit_config")),
    }


def describe(ident: dict[str, Any]) -> str:
    """One line naming a benchmark's data: dataset, version, hashes of data, split and config."""
    data, split = ident["dataset"], ident["split"]
    source = (f"dataset {data['name']} {data['version']} sha256 {data['sha256']}"
              if data["name"] else f"records sha256 {data['records_sha256']}")
    return (f"benchmark {ident['benchmark'] or '(fitted on a user dataset)'}: {source} "
            f"({data['n_records']} records), split {split['name']}"
            + (f" sha256 {split['sha256']}" if split["sha256"] else "")
            + f", config sha256 {ident['config_sha256']}, artifact sha256 "
              f"{ident['manifest_sha256']} (anb {ident['anb_version']})")


def citations(benchmark: str = resources.PACKAGED_BENCHMARK) -> str:
    """The BibTeX of ``benchmark``'s data and of the method (anb at this version)."""
    if benchmark not in DATASETS:
        raise ValueError(f"benchmark {benchmark!r}: no citation known; allowed: "
                         f"{sorted(DATASETS)}")
    folder = resources.CITATIONS_DIR
    data = (folder / DATASETS[benchmark][1]).read_text()
    method = (folder / METHOD_CITATION).read_text().replace("VERSION", __version__)
    return f"% the data\n{data}\n% the method\n{method}"
