"""Reading a dataset does each step once: a stage is checked against the space's allowed
combinations (no laxer than the value-by-value check), a file read before is not read again
unless its bytes changed, and the table handed out is the caller's own."""
from __future__ import annotations

import json

import pytest

from anb.records import load_dataset, new_record
from anb.searchspace import EFFICIENTNET_B0
from anb.searchspace.arch import Arch, StageChoice
from anb.searchspace.space import ANB_SPACE


@pytest.mark.parametrize("stage, message", [
    (StageChoice(True, 3, 1, True), "field 'e' has value True"),  # equal to 1, an allowed e
    (StageChoice(1, 3, 1, 1), "field 'se' has value 1"),  # equal to True, an allowed se
])
def test_a_stage_equal_to_an_allowed_one_but_of_another_type_is_refused(stage, message):
    arch = Arch((stage, *EFFICIENTNET_B0.stages[1:]))
    assert arch == Arch((StageChoice(1, 3, 1, True), *EFFICIENTNET_B0.stages[1:]))
    with pytest.raises(ValueError, match=message):
        ANB_SPACE.check(arch)
    assert ANB_SPACE.check(EFFICIENTNET_B0) is EFFICIENTNET_B0


def _write(path, archs):
    records = [{**new_record(a, ANB_SPACE), "metrics": {"val_top1": 70.0 + i}}
               for i, a in enumerate(archs)]
    path.write_text(json.dumps(records))


def test_a_file_is_read_again_only_when_its_bytes_change(tmp_path):
    path = tmp_path / "records.json"
    _write(path, [EFFICIENTNET_B0])
    first = load_dataset(path, ANB_SPACE)
    first.loc[0, "val_top1"] = -1.0  # the caller's own copy: the next load is unchanged
    again = load_dataset(path, ANB_SPACE)
    assert again["val_top1"].tolist() == [70.0]
    other = Arch.from_string("-".join(["e1k3l1"] * 7), ANB_SPACE)
    _write(path, [EFFICIENTNET_B0, other])
    assert load_dataset(path, ANB_SPACE)["arch"].tolist() == [str(EFFICIENTNET_B0), str(other)]
