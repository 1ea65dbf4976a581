"""HELP's tables as packaged latency benchmarks (``help-nasbench201``, ``help-fbnet``): loaded
by name without xgboost, measured architectures answered exactly from the table, the others by
the shipped surrogate with intervals and flags, compiled like the fitted one, and a base for
``anb adapt``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau
from typer.testing import CliRunner

import anb
from anb import resources
from anb.io import sha256_file
from anb.surrogates import artifact, help_benchmark, help_tables, packaged
from anb.surrogates.benchmark import SMALL_BATCH
from anb.surrogates.help_benchmark import MEASURED
from tests.conftest import REPO
from tests.test_light_install import BLOCKER

#: An FBNet architecture outside HELP's 5,000 (checked below; row 0 with its first layer
#: changed): the surrogate answers it, inside the training data's range.
UNMEASURED = ("k3_e1-skip-k3_e1_g2-skip-k5_e1-skip-skip-skip-k5_e6-k5_e1-k3_e1_g2-k5_e1-k5_e6-"
              "k3_e6-k3_e3-k5_e6-k3_e6-k3_e3-k5_e1-k3_e3-k5_e1-k5_e1_g2")


def _table(name: str) -> pd.DataFrame:
    return pd.read_csv(help_benchmark.table_path(name))


@pytest.fixture(scope="module")
def fbnet():
    return anb.load("help-fbnet", quiet=True)


def test_load_by_name_in_a_fresh_process_without_xgboost(tmp_path):
    """A light install loads either by name from the shipped folder: no fit, no cache, no
    xgboost; 27 latency targets, one per HELP column (both loaded in one fresh process)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "ANB_CACHE_DIR": str(tmp_path / "cache"),
           "OMP_NUM_THREADS": "1"}
    probes = {name: _table(name)["arch"][7] for name in resources.HELP_BENCHMARKS}
    code = BLOCKER + textwrap.dedent(f"""
        import json, sys
        import anb
        for name, arch in {probes!r}.items():
            bench = anb.load(name)
            frame = bench.query([arch])
            print(json.dumps({{"metrics": bench.metrics, "measured": bool(frame["measured"][0]),
                              "xgboost": "xgboost" in sys.modules}}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    outs = [json.loads(line) for line in proc.stdout.splitlines()[-len(probes):]]
    for name, out in zip(probes, outs, strict=True):
        space = help_benchmark.SPACES[name]
        assert out == {"metrics": sorted(help_tables.target(c)
                                         for c in help_tables.TABLE_COLUMNS[space]),
                       "measured": True, "xgboost": False}
        assert f"loaded the packaged benchmark {name!r}" in proc.stderr
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("name", resources.HELP_BENCHMARKS)
def test_measured_architectures_give_the_table_values_exactly(name):
    """Rows of the table (first, middle, last) answer HELP's numbers, std 0, the interval that
    number alone, marked measured and not flagged, with or without noise."""
    table = _table(name)
    rows = [0, len(table) // 2, len(table) - 1]
    bench = anb.load(name, quiet=True)
    # every row's string is the space's canonical one, so every row is found
    assert bench.query(list(table["arch"]), "latency_fpga")[MEASURED].all()
    for noise in (False, True):
        frame = bench.query(list(table["arch"][rows]), level=0.9, noise=noise, seed=3)
        assert frame[MEASURED].tolist() == [True] * 3 and not frame["ood"].any()
        assert list(frame.columns).index(MEASURED) == list(frame.columns).index("ood") - 1
        for column in help_tables.TABLE_COLUMNS[help_benchmark.SPACES[name]]:
            target = help_tables.target(column)
            want = table[column].to_numpy()[rows]
            assert frame[target].tolist() == want.tolist(), target
            assert frame[f"{target}_lo"].tolist() == want.tolist()
            assert frame[f"{target}_hi"].tolist() == want.tolist()
            assert (frame[f"{target}_std"] == 0).all()


#: A table row of each benchmark that its surrogate flags out of distribution.
FLAGGED_ROW = {"help-nasbench201": 1462, "help-fbnet": 112}


@pytest.mark.parametrize("name", resources.HELP_BENCHMARKS)
def test_a_measured_architecture_is_not_flagged_where_the_surrogate_is(name):
    """The flag warns of an extrapolated prediction; a measured row is no prediction."""
    arch = _table(name)["arch"][FLAGGED_ROW[name]]
    plain = artifact.load(help_benchmark.shipped_dir(name)).query([arch], "latency_fpga")
    frame = anb.load(name, quiet=True).query([arch], "latency_fpga")
    assert plain["ood"][0] and plain["ood_reason"][0]
    assert frame[MEASURED][0] and not frame["ood"][0] and frame["ood_reason"][0] == ""
    assert frame["ood_distance"][0] == plain["ood_distance"][0]


def test_an_unmeasured_fbnet_architecture_gets_the_surrogate_with_intervals(fbnet):
    """Outside the 5,000 the surrogate answers: its own mean and std, an interval around it,
    not marked measured; an architecture far from the table is flagged out of distribution."""
    assert UNMEASURED not in set(_table("help-fbnet")["arch"])
    far = "-".join(["skip"] * 22)
    frame = fbnet.query([UNMEASURED, far], ["latency_fpga", "latency_pixel2"], level=0.9)
    plain = artifact.load(help_benchmark.shipped_dir("help-fbnet")).query(
        [UNMEASURED, far], ["latency_fpga", "latency_pixel2"], level=0.9)
    assert frame[MEASURED].tolist() == [False, False]
    pd.testing.assert_frame_equal(frame.drop(columns=MEASURED), plain)
    for target in ("latency_fpga", "latency_pixel2"):
        assert (frame[f"{target}_std"] > 0).all()
        assert (frame[f"{target}_lo"] < frame[target]).all()
        assert (frame[target] < frame[f"{target}_hi"]).all()
    assert frame["ood"].tolist() == [False, True] and frame["ood_reason"][1]


@pytest.mark.parametrize("name", resources.HELP_BENCHMARKS)
def test_shipped_benchmark_is_current_compiled_and_predicts_like_the_fitted_one(name):
    """The shipped folder was fitted under the current key (table, config, fitting code, anb
    version), its members are node tables, its predictions equal the fitted artifact's
    reference ones, and its manifest names the data: table sha256 (SOURCE.md's), HELP's
    commit, the split's rows."""
    config = help_benchmark.fit_config()
    assert help_benchmark.shipped(name, config) == help_benchmark.shipped_dir(name)
    bench = artifact.load(help_benchmark.shipped_dir(name))
    members = [f for spec in bench.info["targets"].values() for f in spec["files"]]
    assert members and all(f.endswith(".npz") for f in members)
    absolute, relative = packaged.reference_diff(bench)  # large batch: the XGBoost JSON
    print(f"{name}: shipped vs fitted: max abs diff {absolute:.3g}, max rel {relative:.3g}")
    reference = bench.info[packaged.REFERENCE]
    assert relative < 1e-5 and len(reference["archs"]) == packaged.N_REFERENCE
    small = bench.query(reference["archs"][:SMALL_BATCH])  # small batch: the node tables
    for column, values in reference["values"].items():
        # float32 node sums: a std (two members' spread, often a tiny difference) keeps fewer
        # digits than a mean (NAS-Bench-201's Pixel 3 std: 8e-5 relative)
        rtol = 1e-3 if column.endswith("_std") else 1e-5
        assert np.allclose(small[column], values[:SMALL_BATCH], rtol=rtol, atol=0), column
    data = bench.info[help_benchmark.HELP]
    sha = sha256_file(help_benchmark.table_path(name))
    assert data["table_sha256"] == sha and sha in (resources.HELP_DIR / "SOURCE.md").read_text()
    assert data["help_commit"] == "45f70eb"
    rows = help_benchmark.split_rows(help_benchmark.records(name), config) \
        if name == "help-fbnet" else None  # the NAS-Bench-201 table takes a minute to convert
    if rows is not None:
        assert data["split"]["val_rows"] == rows["val"]
        assert data["split"]["test_rows"] == rows["test"]
    n = len(_table(name))
    assert 0.08 * n < len(data["split"]["test_rows"]) < 0.12 * n
    size = sum(p.stat().st_size for p in help_benchmark.shipped_dir(name).iterdir())
    print(f"{name}: {size / 1e6:.1f} MB")


def test_a_stale_shipped_benchmark_is_not_used(monkeypatch):
    """A change of the config (or table, code, version) makes the shipped folder stale."""
    config = help_benchmark.fit_config()
    other = type(config).from_dict({**config.to_dict(), "seed": config.seed + 1})
    assert help_benchmark.shipped("help-fbnet", other) is None
    monkeypatch.setattr(help_benchmark, "table_sha256", lambda name: "0" * 64)
    assert help_benchmark.shipped("help-fbnet", config) is None


def test_identity_names_the_help_tables(fbnet):
    """The identity (query attrs, packaged_identity) names the dataset, HELP's commit and
    the table's sha256."""
    ident = fbnet.query([UNMEASURED]).attrs["anb"]
    assert ident["benchmark"] == "help-fbnet"
    assert ident["dataset"]["name"] == "HELP latency tables"
    assert ident["dataset"]["version"] == "HayeonLee/HELP@45f70eb"
    assert ident["dataset"]["sha256"] == sha256_file(help_benchmark.table_path("help-fbnet"))
    assert ident["split"]["name"] == "random" and ident["split"]["sha256"]
    assert packaged.packaged_identity("help-fbnet") == ident
    assert packaged.benchmark_space("help-fbnet").name == "fbnet"


def test_unknown_name_lists_the_help_benchmarks():
    with pytest.raises(ValueError, match=r"unknown packaged benchmark 'help-nope'.*help-fbnet"):
        anb.load("help-nope")


def test_adapt_a_new_device_on_the_help_fbnet_base(tmp_path):
    """``anb adapt --base help-fbnet``: a new device measured on 30 FBNet architectures (a
    stand-in: the geometric mean of HELP's Pixel 2 and Gold 6226 latencies, a device none of
    the 27 targets is) ranks 30 held-out architectures close to its truth."""
    from anb.cli import app

    table = _table("help-fbnet")
    rng = np.random.default_rng(0)
    rows = rng.choice(len(table), 60, replace=False)
    seen, held = rows[:30], rows[30:]
    truth = np.sqrt(table["pixel2"] * table["gold_6226"])
    pd.DataFrame({"arch": table["arch"][seen], "latency_newboard": truth[seen]}).to_csv(
        tmp_path / "m.csv", index=False)
    result = CliRunner().invoke(app, ["adapt", "--device", "newboard", "--base", "help-fbnet",
                                      "--measured", str(tmp_path / "m.csv"),
                                      "--out", str(tmp_path / "adapted")])
    assert result.exit_code == 0, result.output
    assert "latency_newboard: adapted from 30 measured architectures" in result.output
    manifest = json.loads((tmp_path / "adapted" / "manifest.json").read_text())
    assert manifest["base"]["packaged"] == "help-fbnet"
    adapted = anb.load(tmp_path / "adapted")
    frame = adapted.query(list(table["arch"][held]), "latency_newboard")
    tau = kendalltau(frame["latency_newboard"], truth[held]).statistic
    print(f"adapted newboard vs truth on 30 held-out archs: tau {tau:.3f}")
    assert tau > 0.75
    assert packaged.benchmark_space(tmp_path / "adapted").name == "fbnet"
    # the base's own targets still answer HELP's measurements where the table has them
    base = adapted.query(list(table["arch"][held[:3]]), "latency_pixel2")
    np.testing.assert_array_equal(base["latency_pixel2"], table["pixel2"][held[:3]])
    assert (base["latency_pixel2_std"] == 0).all()


def test_anb_cite_names_helps_paper_for_both():
    from anb.surrogates.identity import citations

    for name in ("help-nasbench201", "help-fbnet"):
        text = citations(name)
        assert "@inproceedings{lee2021help" in text and "% the method" in text
