"""The repository stands alone: no tracked file outside docs/ and CHANGELOG.md reads or cites
the reference folder beside the checkout (``../shared``, its ``REFERENCE.md``), and every
citation of a background page (``docs/background/<page>.md, "<Heading>"``) names a page and a
heading that exist. Prints each offence as ``path:line: ...`` and exits 1 if there is one.

    python scripts/check_standalone.py
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where the outside folder may still be named: the history (CHANGELOG.md) and the docs.
EXEMPT = ("CHANGELOG.md", "docs/")
#: This check and its test spell out what they look for.
SELF = ("scripts/check_standalone.py", "tests/test_standalone.py")
FORBIDDEN = re.compile(r"""\.\./shared|shared/data|\.parents?(\[\d+\])? / "shared"|REFERENCE\.md"""
                       r"|ANB_SHARED_DATA")
#: A citation, once line breaks and comment markers are folded into spaces; a notebook's JSON
#: escapes the quotes.
CITATION = re.compile(r'docs/background/([\w.-]+\.md)(?:,\s*\\?"([^"\\]+)\\?")?')
LINE_BREAK = re.compile(r"\s*\n\s*(?:#:?\s+)?")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.M)


def tracked_texts(root: Path) -> dict[str, str]:
    """Every tracked text file by its path (binary files are skipped)."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True,
                           capture_output=True).stdout.decode().split("\0")
    texts = {}
    for name in filter(None, names):
        path = root / name
        if not path.is_file():  # deleted in the working tree, or a submodule
            continue
        try:
            texts[name] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    return texts


def headings(page: Path) -> set[str]:
    return set(HEADING.findall(page.read_text(encoding="utf-8"))) if page.is_file() else set()


def offences(root: Path) -> list[str]:
    found = []
    pages: dict[str, set[str]] = {}
    for name, text in sorted(tracked_texts(root).items()):
        if name in SELF:
            continue
        if not name.startswith(EXEMPT):
            for number, line in enumerate(text.splitlines(), 1):
                if FORBIDDEN.search(line):
                    found.append(f"{name}:{number}: reads or cites the folder beside the "
                                 f"checkout: {line.strip()}")
        folded = LINE_BREAK.sub(" ", text)
        for match in CITATION.finditer(folded):
            page, section = match.group(1), match.group(2)
            if page not in pages:
                pages[page] = headings(root / "docs" / "background" / page)
            if not (root / "docs" / "background" / page).is_file():
                found.append(f"{name}: cites docs/background/{page}, which does not exist")
            elif section is not None and section not in pages[page]:
                found.append(f"{name}: cites docs/background/{page}, \"{section}\": no such "
                             f"heading (headings: {', '.join(sorted(pages[page]))})")
    return found


def main() -> int:
    found = offences(ROOT)
    for offence in found:
        print(offence)
    if found:
        print(f"{len(found)} offence(s): the repository must not read or cite ../shared, and "
              "citations of docs/background/ must name existing pages and headings",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
