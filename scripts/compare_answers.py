"""Hold the version matrix's answers (``noxfile.py``) to the pinned environment's: every number
within 1e-6 relative, everything else equal. Exit 1, naming each difference, if any differs.

    .venv/bin/python scripts/compare_answers.py NATIVE.json TABLES.json OTHER.json [...]

``NATIVE`` / ``TABLES``: the pinned environment's answers with xgboost's own predictor and with
tree tables (``query_answers.py --tables``); an answer is held to the one of its kind (its
``predictor``); a fit's answers to the native ones (fitting needs xgboost).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

RTOL = 1e-6
#: Absolute floor for values that are zero in one answer (a std of 0, a margin of 0).
ATOL = 1e-9


def differences(want: Any, got: Any, where: str = "") -> list[str]:
    """Every place ``got`` differs from ``want`` (numbers by :data:`RTOL`)."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}/{k}: missing" for k in want if k not in got]
        out += [f"{where}/{k}: not expected" for k in got if k not in want]
        for k in [k for k in want if k in got]:
            out += differences(want[k], got[k], f"{where}/{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{where}: {len(got)} items, expected {len(want)}"]
        return [d for i, (w, g) in enumerate(zip(want, got, strict=True)) for d in
                differences(w, g, f"{where}[{i}]")]
    numbers = (int, float)
    if isinstance(want, numbers) and isinstance(got, numbers) \
            and not isinstance(want, bool) and not isinstance(got, bool):
        if math.isnan(want) and math.isnan(got):
            return []
        if math.isclose(want, got, rel_tol=RTOL, abs_tol=ATOL):
            return []
        return [f"{where}: {got!r}, expected {want!r}"]
    return [] if want == got else [f"{where}: {got!r}, expected {want!r}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("native", type=Path)
    parser.add_argument("tables", type=Path)
    parser.add_argument("others", type=Path, nargs="+")
    args = parser.parse_args()
    native, tables = (json.loads(p.read_text()) for p in (args.native, args.tables))
    failed = False
    for path in args.others:
        other = json.loads(path.read_text())
        reference = native if other["predictor"] == "native" else tables
        reference = {**reference, "fit": native.get("fit")}  # a fit is always native
        shared = {k: reference[k] for k in other if k != "versions" and k in reference}
        missing = sorted(set(other) - set(reference) - {"versions"})
        if missing:
            print(f"{path.stem}: no reference for {missing}")
            failed = True
        found = differences(shared, {k: other[k] for k in shared})
        versions = ", ".join(f"{k} {v}" for k, v in other["versions"].items() if v)
        print(f"{path.stem}: {len(shared)} answer groups ({versions}): "
              f"{'agree' if not found else f'{len(found)} differ'}")
        for line in found[:20]:
            print(f"  {line}")
        failed |= bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
