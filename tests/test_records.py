"""The record contract: the released dataset loads as it is and round-trips through tables."""
import json
import tarfile

import pandas as pd
import pytest

from anb.records import (
    frame_to_records,
    is_perf_metric,
    load_dataset,
    load_records,
    perf_columns,
    perf_key,
    records_to_frame,
    table_archs,
    write_record,
)
from anb.resources import RELEASED_SPLIT_DIR as SPLITS_DIR
from anb.searchspace.space import ANB_SPACE


def test_released_dataset_loads_without_conversion(released_frame):
    frame = released_frame
    assert len(frame) == 5138
    assert frame["arch_id"].nunique() == 5125
    assert sorted(perf_columns(frame)) == sorted(
        ["throughput_a100", "throughput_3090", "throughput_tpuv2", "throughput_tpuv3",
         "throughput_zcu102", "throughput_vck190", "latency_zcu102", "latency_vck190"])
    missing = frame[perf_columns(frame)].isna().sum().to_dict()
    assert missing == {"throughput_a100": 0, "throughput_3090": 3, "throughput_tpuv2": 37,
                       "throughput_tpuv3": 44, "throughput_zcu102": 2, "throughput_vck190": 2,
                       "latency_zcu102": 2, "latency_vck190": 2}
    assert frame["val_top1"].between(42.8, 67.1).all()


def test_twice_trained_architectures_are_the_documented_pairs(released_frame):
    dup = released_frame[released_frame["arch_id"].duplicated(keep=False)]
    numbers = sorted(int(s.split("_")[1].split(".")[0]) for s in dup["source"])
    assert numbers == [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13] + list(range(443, 456))


def test_published_split_names_match_record_sources(released_frame):
    sources = set(released_frame["source"])
    sizes = {}
    for part in ("train", "val", "test"):
        paths = json.loads((SPLITS_DIR / f"{part}_paths.json").read_text())
        names = {p.rsplit("/", 1)[-1] for p in paths}
        assert names <= sources
        sizes[part] = len(names)
    assert sizes == {"train": 4100, "val": 512, "test": 512}


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_table_round_trip(released_frame, tmp_path, suffix):
    part = released_frame.iloc[:300]
    path = tmp_path / f"d{suffix}"
    part.to_csv(path, index=False) if suffix == ".csv" else part.to_parquet(path, index=False)
    back = load_dataset(path, space=ANB_SPACE)
    pd.testing.assert_frame_equal(back.reset_index(drop=True), part.reset_index(drop=True),
                                  check_dtype=False)


def test_records_round_trip_through_frame(released_records):
    records = released_records[:50]
    again = frame_to_records(records_to_frame(records, space=ANB_SPACE), space=ANB_SPACE)
    for a, b in zip(records, again, strict=False):
        assert a["architecture"] == b["architecture"]
        assert a["metrics"] == b["metrics"] and a["model_info"] == b["model_info"]
        assert a["platform_perf"] == b["platform_perf"]


def test_folder_and_jsonl_forms(released_records, tmp_path):
    folder = tmp_path / "records"
    for record in released_records[:5]:
        rec = {k: v for k, v in record.items() if k != "source"}
        write_record(rec, folder / record["source"], space=ANB_SPACE)
    assert ([r["source"] for r in load_records(folder, space=ANB_SPACE)]
            == [r["source"] for r in released_records[:5]])
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in released_records[:5]))
    assert len(load_records(jsonl, space=ANB_SPACE)) == 5


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_tables_read_as_records(released_records, tmp_path, suffix):
    """What ``anb export`` / ``anb merge`` write loads back as records (e.g. for ``anb merge``)."""
    frame = records_to_frame(released_records[:20], space=ANB_SPACE)
    path = tmp_path / f"d{suffix}"
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path, index=False)
    back = load_records(path, space=ANB_SPACE)
    assert [r["source"] for r in back] == [r["source"] for r in released_records[:20]]
    for a, b in zip(released_records[:20], back, strict=True):
        assert (a["architecture"], a["metrics"], a["model_info"], a["platform_perf"]) == \
            (b["architecture"], b["metrics"], b["model_info"], b["platform_perf"])
    frame.drop(columns=["arch", "block3_k"]).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match=r"bad.csv' has no architecture: give an 'arch' column"
                                         r".*missing \['block3_k'\]"):
        load_records(tmp_path / "bad.csv", space=ANB_SPACE)


def test_both_table_conventions_give_the_same_records(released_records, tmp_path):
    """A table with only the ``arch`` string column (``anb query``'s output) and one with only
    the ``block{i}_*`` columns read as the same records."""
    frame = records_to_frame(released_records[:10], space=ANB_SPACE)
    blocks = [c for c in frame.columns if c.startswith("block")]
    frame.drop(columns=blocks).to_csv(tmp_path / "strings.csv", index=False)
    frame.drop(columns=["arch"]).to_csv(tmp_path / "blocks.csv", index=False)
    strings, columns = load_records(tmp_path / "strings.csv",
                                    space=ANB_SPACE), load_records(tmp_path / "blocks.csv",
                                                                   space=ANB_SPACE)
    assert [r["architecture"] for r in strings] == [r["architecture"] for r in columns] == \
        [r["architecture"] for r in released_records[:10]]
    assert table_archs(frame.drop(columns=blocks),
                       space=ANB_SPACE) == table_archs(frame.drop(columns=["arch"]),
                                                       space=ANB_SPACE)
    frame.loc[3, "arch"] = "e1k3l1"
    with pytest.raises(ValueError, match=r"t.csv' row 4: architecture 'e1k3l1' is outside"):
        table_archs(frame, "'t.csv'", space=ANB_SPACE)


def test_bad_records_name_the_file_and_field(tmp_path, released_records):
    good = {k: v for k, v in released_records[0].items() if k != "source"}
    bad = json.loads(json.dumps(good))
    bad["architecture"]["block5_l"] = 5
    with pytest.raises(ValueError,
                       match=r"bad.json: field 'architecture': .*stage 5 field 'l' has value 5"):
        write_record(bad, tmp_path / "bad.json", space=ANB_SPACE)
    assert not (tmp_path / "bad.json").exists()
    with pytest.raises(ValueError, match="platform_perf key 'speed_a100'"):
        write_record({**good, "platform_perf": {"speed_a100": {}}}, tmp_path / "x.json",
                     space=ANB_SPACE)
    with pytest.raises(ValueError, match="missing field 'architecture'"):
        write_record({"metrics": {}}, tmp_path / "y.json", space=ANB_SPACE)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_records(tmp_path / "nope", space=ANB_SPACE)
    with pytest.raises(ValueError, match="unknown metric kind 'speed'"):
        perf_key("speed", "a100")


def test_tarball_with_a_bad_member_names_it(tmp_path, released_records):
    member = tmp_path / "result_7.json"
    rec = {k: v for k, v in released_records[0].items() if k != "source"}
    rec["architecture"] = dict(rec["architecture"], block0_k=4)
    member.write_text(json.dumps(rec))
    tar = tmp_path / "d.tar.gz"
    with tarfile.open(tar, "w:gz") as archive:
        archive.add(member, arcname="anb_dataset_jsons/result_7.json")
    with pytest.raises(ValueError, match=r"result_7.json: field 'architecture': .*stage 0 field "
                                         r"'k' has value 4; allowed values are \[3, 5\]"):
        load_records(tar, space=ANB_SPACE)


def test_device_metrics_are_told_from_training_time_and_accuracy():
    """Catches: ``train_time`` counted as a known device (``benchmarks/new_device.py`` took every
    label but top-1, so the board protocol transferred from the training GPU's time, which
    ``anb adapt`` never sees, and the metric protocol crashed trying to hide it)."""
    for name in ("throughput_zcu102", "latency_vck190", "latency_titan_rtx_256"):
        assert is_perf_metric(name)
    for name in ("train_time", "val_top1", "throughput", "macs"):
        assert not is_perf_metric(name)
