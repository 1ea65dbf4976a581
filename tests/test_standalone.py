"""The repository stands alone (``scripts/check_standalone.py``): nothing outside docs/ and
CHANGELOG.md reads or cites the reference folder beside the checkout, and citations of the
background pages name headings that exist."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "check_standalone.py"


def _check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(root / "scripts" / "check_standalone.py")],
                          cwd=root, capture_output=True, text=True, timeout=120)


def test_the_repository_passes_its_own_check():
    proc = _check(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_check_names_every_planted_offence_and_nothing_else(tmp_path):
    """Catches: a pattern dropped from the check, a citation of a missing page or heading let
    through, a citation split over comment lines missed, exempt or untracked files flagged."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts")
    files = {
        "docs/background/page.md": "# Page\n\n## Alpha one\n\ntext\n",
        "docs/guide.md": "Data once came from ../shared/data/anb.\n",  # exempt
        "CHANGELOG.md": "- tests no longer read ../shared\n",  # exempt
        "a.py": 'DATA = ROOT.parent / "shared" / "data"\n',
        "b.md": "the tables in `../shared/data/help/`\n",
        "c.toml": "# batch 128 (REFERENCE.md section 4)\n",
        "d.py": "HELP = Path(__file__).resolve().parents[2] / \"shared\" / \"help\"\n",
        "e.py": 'os.environ.get("ANB_SHARED_DATA")\n',
        "f.py": '"""As docs/background/page.md, "Beta" says."""\n',
        "g.py": '"""See docs/background/other.md."""\n',
        "h.py": '# as docs/background/page.md, "Alpha\n# one" says\nx = tmp_path / "shared"\n',
        "i.ipynb": '{"source": ["(docs/background/page.md, \\"Alpha one\\")"]}\n',
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "untracked.py").write_text("see ../shared\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "scripts", *files], cwd=tmp_path, check=True)
    proc = _check(tmp_path)
    assert proc.returncode == 1
    flagged = sorted({line.split(":")[0] for line in proc.stdout.splitlines()})
    assert flagged == ["a.py", "b.md", "c.toml", "d.py", "e.py", "f.py", "g.py"], proc.stdout
    assert 'f.py: cites docs/background/page.md, "Beta": no such heading' in proc.stdout
    assert "g.py: cites docs/background/other.md, which does not exist" in proc.stdout
    assert "7 offence(s)" in proc.stderr
