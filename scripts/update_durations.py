"""Write tests/durations.json (seconds per test file, longest first) from a JUnit report of a
full run, so that tests/conftest.py starts the longest files first:

    python -m pytest -n 2 --dist loadfile --junitxml=build/junit.xml
    python scripts/update_durations.py build/junit.xml
"""
from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "durations.json"


def file_seconds(junit: Path) -> dict[str, float]:
    """Seconds per test file name (``test_x.py``) summed over its test cases."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ElementTree.parse(junit).iter("testcase"):
        module = case.get("classname", "").split(".")
        if len(module) >= 2 and module[0] == "tests" and module[1].startswith("test_"):
            seconds[f"{module[1]}.py"] += float(case.get("time", 0.0))
    return dict(sorted(((k, round(v, 1)) for k, v in seconds.items()), key=lambda kv: -kv[1]))


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print("usage: python scripts/update_durations.py JUNIT_XML", file=sys.stderr)
        return 2
    seconds = file_seconds(Path(argv[0]))
    if not seconds:
        print(f"error: {argv[0]} holds no test case of tests/", file=sys.stderr)
        return 2
    OUT.write_text(json.dumps(seconds, indent=1) + "\n")
    print(f"{OUT}: {len(seconds)} files, {sum(seconds.values()) / 60:.1f} min in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
