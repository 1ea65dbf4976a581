"""Every analysis notebook under notebooks/ executes top to bottom, plots, and shows the right
numbers: after the last cell a probe cell (appended here, not in the notebook) writes what the
notebook computed and displayed, and the test recomputes it independently (scipy, pymoo, the
dataset and split files) and compares.

Bug class: a notebook that runs without error but shows wrong figures (a metric computed on the
wrong rows, a hypervolume counting dominated or infeasible points, a front that is not one, split
sizes that are not the published split's).

The two notebooks that fit a benchmark run here with fewer boosting rounds, without the
internal hold-outs that learn how far the std widens, and (search) shorter searches: their cell
tagged ``parameters`` (papermill's convention) sets ``MAX_ROUNDS``, ``LEARN_WIDENING`` and the
search budgets, and a cell inserted right after it sets the values of ``PARAMETERS`` (the same
cells on a coarser benchmark; every check below recomputes what the notebook showed, whatever
the fit's quality or the searches' length)."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
from nbclient import NotebookClient
from scipy.stats import kendalltau

from anb import resources
from anb.searchspace.space import ANB_SPACE
from tests.conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
PROBES = {
    "searchspace.ipynb": """
import json
json.dump({"n_records": len(frame), "n_unique": int(frame.arch_id.nunique()),
           "se_released": se_released.tolist(), "se_uniform": se_uniform.tolist()},
          open(PROBE_OUT, "w"))
""",
    "surrogates.ipynb": """
import json
json.dump({"split_sizes": {k: int(m.sum()) for k, m in prepared.masks.items()},
           "table": ours[["kendall_tau", "coverage90", "n"]].to_dict("index"),
           "test_rows": np.flatnonzero(prepared.masks["test"]).tolist(),
           "pred": {t: pred[t].tolist() for t in bench.metrics},
           "std": {t: pred[f"{t}_std"].tolist() for t in bench.metrics},
           "draws": draws["val_top1"].tolist()},
          open(PROBE_OUT, "w"))
""",
    "search.ipynb": """
import json
json.dump({"floor": floor,
           "best": {name: [r.best()[["val_top1", "throughput_zcu102"]].to_dict() for r in results]
                    for name, results in runs.items()},
           "fronts": {d: f[["val_top1", f"throughput_{d}"]].to_numpy().tolist()
                      for d, f in fronts.items()},
           "hv": hv},
          open(PROBE_OUT, "w"))
""",
}
#: The smaller fit and searches the suite runs (the notebooks' own values: 300 and 400 rounds,
#: the widening learned, 600 queries per single-objective run and 1,000 per NSGA-II front; 150
#: and 200 still exceed the searches' population of 64, so evolution and NSGA-II breed).
PARAMETERS = {"search.ipynb": {"MAX_ROUNDS": 20, "LEARN_WIDENING": False, "BUDGET": 150,
                               "FRONT_BUDGET": 200},
              "surrogates.ipynb": {"MAX_ROUNDS": 20, "LEARN_WIDENING": False}}


def parameters_cell(notebook: nbformat.NotebookNode) -> int:
    """The index of the notebook's one cell tagged ``parameters``."""
    (index,) = [i for i, c in enumerate(notebook.cells)
                if "parameters" in c.get("metadata", {}).get("tags", [])]
    return index


def inject(notebook: nbformat.NotebookNode, values: dict) -> None:
    """Insert a cell setting ``values`` right after the ``parameters`` cell; each must be a name
    that cell assigns (an injected name the notebook never reads would test nothing)."""
    index = parameters_cell(notebook)
    assigned = {line.split("=", 1)[0].strip() for line in notebook.cells[index].source.splitlines()
                if "=" in line and not line.lstrip().startswith("#")}
    assert set(values) <= assigned, (sorted(values), sorted(assigned))
    cell = nbformat.v4.new_code_cell("".join(f"{k} = {v!r}\n" for k, v in values.items()))
    cell.metadata["tags"] = ["injected-parameters"]
    notebook.cells.insert(index + 1, cell)


def execute(path: Path, tmp_path: Path, monkeypatch) -> tuple[nbformat.NotebookNode, dict]:
    """Run the notebook plus its probe cell; return the notebook and what the probe wrote."""
    monkeypatch.setenv("ANB_CACHE_DIR", str(tmp_path / "cache"))  # anb.load() caches here
    notebook = nbformat.read(path, as_version=4)
    if path.name in PARAMETERS:
        inject(notebook, PARAMETERS[path.name])
    out = tmp_path / "probe.json"
    notebook.cells.append(nbformat.v4.new_code_cell(f"PROBE_OUT = {str(out)!r}\n"
                                                    + PROBES[path.name]))
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    assert any(o.get("output_type") == "display_data" for c in notebook.cells
               if c.cell_type == "code" for o in c.get("outputs", [])), "a notebook should plot"
    return notebook, json.loads(out.read_text())


def printed(notebook: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code"
                   for o in c.get("outputs", []) if o.get("output_type") == "stream")


def test_every_notebook_has_a_probe():
    assert sorted(p.name for p in NOTEBOOKS) == sorted(PROBES)


def test_parameters_are_injected_after_the_parameters_cell():
    for name, values in PARAMETERS.items():
        notebook = nbformat.read(REPO / "notebooks" / name, as_version=4)
        index = parameters_cell(notebook)
        later = "".join(c.source for c in notebook.cells[index + 1:])
        # later cells cap the fit's rounds at the parameter and drop its hold-outs without
        # the widening
        assert "min(p[\"n_estimators\"], MAX_ROUNDS)" in later, name
        assert "hole_folds=config.hole_folds if LEARN_WIDENING else 0" in later, name
        inject(notebook, values)
        assert notebook.cells[index + 1].source == (
            "MAX_ROUNDS = 20\nLEARN_WIDENING = False\n" + (
                "BUDGET = 150\nFRONT_BUDGET = 200\n" if name == "search.ipynb" else ""))
    # the searches' budgets are the parameters
    search = "".join(c.source for c in nbformat.read(REPO / "notebooks" / "search.ipynb",
                                                     as_version=4).cells)
    assert "budget, seeds = BUDGET, [0, 1, 2]" in search and "FRONT_BUDGET, seed=0)" in search
    notebook = nbformat.read(REPO / "notebooks" / "search.ipynb", as_version=4)
    with pytest.raises(AssertionError, match="ROUNDS"):
        inject(notebook, {"ROUNDS": 20})  # a name the parameters cell does not assign


@pytest.mark.slow
def test_searchspace_notebook(monkeypatch, tmp_path):
    from anb.records import load_dataset

    notebook, probe = execute(REPO / "notebooks" / "searchspace.ipynb", tmp_path, monkeypatch)
    frame = load_dataset(resources.RELEASED_DATASET, space=ANB_SPACE)
    text = printed(notebook)
    assert f"{len(frame)} records, {frame.arch_id.nunique()} unique architectures" in text
    assert f"Kendall tau MACs vs top-1: {kendalltau(frame.macs, frame.val_top1)[0]:.3f}" in text
    tau = kendalltau(frame.throughput_a100, frame.throughput_zcu102, nan_policy="omit")[0]
    assert f"Kendall tau A100 vs ZCU102 throughput: {tau:.3f}" in text
    # squeeze-excite share per stage, recomputed from the block columns
    se = [frame[f"block{i}_se"].astype(bool).mean() for i in range(7)]
    np.testing.assert_allclose(probe["se_released"], se)
    np.testing.assert_allclose(probe["se_uniform"], 0.5, atol=0.02)  # uniform over {off, on}


@pytest.mark.slow
def test_surrogates_notebook(monkeypatch, tmp_path):
    notebook, probe = execute(REPO / "notebooks" / "surrogates.ipynb", tmp_path, monkeypatch)
    split = resources.RELEASED_SPLIT_DIR
    sizes = {name: len(json.loads((split / f"{name}_paths.json").read_text()))
             for name in ("train", "val", "test")}
    assert {k: probe["split_sizes"][k] for k in sizes} == sizes
    from anb.surrogates import prepare
    from anb.surrogates.data import transform_for

    prepared = prepare(resources.RELEASED_DATASET, split_dir=split, space=ANB_SPACE)
    test = prepared.masks["test"]
    assert probe["test_rows"] == np.flatnonzero(test).tolist()
    for target, row in probe["table"].items():
        lab = prepared.labels[target]
        ok = lab.present[test]
        y = lab.values[test][ok]
        mu = np.asarray(probe["pred"][target])[ok]
        sd = np.asarray(probe["std"][target])[ok]
        assert row["n"] == int(ok.sum())
        assert row["kendall_tau"] == pytest.approx(kendalltau(y, mu)[0], abs=1e-9), target
        if transform_for(target) == "log":  # the predictive distribution's log-space quantiles
            sigma = np.sqrt(np.log1p((sd / mu) ** 2))
            inside = np.abs(np.log(y) - np.log(mu)) <= 1.6448536269514722 * sigma
        else:
            inside = np.abs(y - mu) <= 1.6448536269514722 * sd
        assert row["coverage90"] == pytest.approx(inside.mean(), abs=1e-9), target
    draws = probe["draws"]
    assert len(set(draws)) == 5  # seeded noisy draws differ from each other


@pytest.mark.slow
def test_search_notebook(monkeypatch, tmp_path):
    from pymoo.indicators.hv import HV

    from anb.records import load_dataset

    _, probe = execute(REPO / "notebooks" / "search.ipynb", tmp_path, monkeypatch)
    for results in probe["best"].values():
        assert all(r["throughput_zcu102"] >= probe["floor"] for r in results)  # feasible
    released = load_dataset(resources.RELEASED_DATASET, space=ANB_SPACE)
    hv = pd.DataFrame(probe["hv"]).set_index("device")
    for device, front in probe["fronts"].items():
        points = np.asarray(front)
        for p in points:  # a front: no member is dominated by another
            assert not ((points >= p).all(axis=1) & (points > p).any(axis=1)).any()
        data = released[["val_top1", f"throughput_{device}"]].dropna().to_numpy()
        ref = data.min(axis=0)
        above = points[(points > ref).all(axis=1)]
        expected = float(HV(ref_point=-ref)(-above)) if len(above) else 0.0
        assert hv.loc[device, "hypervolume searched"] == pytest.approx(expected, rel=1e-9)
        assert hv.loc[device, "front size"] == len(points)
