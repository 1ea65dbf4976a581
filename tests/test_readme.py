"""The code blocks of README.md and of every page of the documentation site (docs/, in the order
of mkdocs.yml's nav) run as written: every ```python block (the blocks of one section of one page
share one namespace, as a reader's session would) and every ``anb ...`` line of every ```bash
block, in that order, in one fresh working folder (a reader's, not the checkout), so a page may use
what an earlier one wrote (``anb fit --out outputs/surrogates``, then ``anb.load`` of it).

A block that needs what CI lacks (a GPU, a board, a cluster, a wheel install, a long run) is
marked right before it with ``<!-- skip: REASON -->`` and skipped with that reason; a bash block
with no ``anb`` line must be marked (nothing of it would run otherwise).

The accuracy smoke run (``anb train --config digits_tiny.ini --num_models 3``) must also learn:
the architecture trained ends at >= 90 % top-1 on the bundled digits (10 classes, chance 10 %)
within the shipped epochs, with a validation loss below that of a uniform guess at every
evaluated epoch (the run once ended at chance with losses up to 4e11: 8 optimiser steps left
BatchNorm's running statistics at 43 % of their initial values). To keep the suite short it runs
with ``--num_models 1``, the first of the three (the shipped recipe, every stage of the run);
``test_smoke_command_plans_the_documented_run`` checks that the line as written plans all
three.

``anb fit --config surrogates.json`` fits the copy of the packaged default the line before
writes (checked byte for byte), edited here as the page invites: at most ``FIT_ROUNDS``
boosting rounds per member (the default is fitted by ``scripts/build_packaged.py``, and
``tests/test_packaged.py`` checks the shipped benchmark was fitted under it)."""
from __future__ import annotations

import json
import math
import os
import re
import shlex
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MARK = re.compile(r"^<!--\s*skip:\s*(?P<reason>.+?)\s*-->\s*$")
OLD_MARK = "readme-test: skip"  # the README's marker before the docs site; refused, not ignored
FENCE = re.compile(r"^```(?P<lang>\w*)\s*$")
SMOKE = "anb train --config digits_tiny.ini"
#: The documented smoke run's size, and the size the suite trains (its first architecture).
SMOKE_MODELS = ("--num_models 3", "--num_models 1")
#: The line that copies the default surrogate config, and the rounds the suite fits it with.
FIT_CONFIG = "anb config surrogates/default.json > surrogates.json"
FIT_ROUNDS = 100


@dataclass
class Block:
    """One fenced block: its page, section heading, language, code, first line, skip reason."""

    page: str
    section: str
    lang: str
    code: str
    line: int
    skip: str | None


def pages() -> list[Path]:
    """README.md, then the site's pages in the order of mkdocs.yml's nav (``mkdocs build
    --strict`` refuses a page left out of the nav)."""
    def walk(node) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, dict):
            return [p for value in node.values() for p in walk(value)]
        return [p for item in node for p in walk(item)]
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    return [README] + [REPO / "docs" / page for page in walk(nav)]


def read_blocks(text: str, page: str = "README.md") -> list[Block]:
    """The fenced ```bash / ```python blocks of a Markdown text; a skip marker must be the
    last non-blank line before the block it marks."""
    blocks, section, marker, lines = [], "", None, text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        if OLD_MARK in line:
            raise AssertionError(f"{page} line {i + 1}: mark a block with <!-- skip: REASON -->")
        found = MARK.match(line.strip())
        fence = FENCE.match(line)
        if found:
            marker = (found["reason"].strip(), i + 1)
        elif fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            if fence["lang"] in ("bash", "python"):
                blocks.append(Block(page, section, fence["lang"], "\n".join(lines[i + 1:end]),
                                    i + 2, marker[0] if marker else None))
            elif marker:
                raise AssertionError(f"{page} line {marker[1]}: skip marker before a "
                                     f"```{fence['lang']} block (only bash/python run)")
            marker, i = None, end
        elif line.strip() and marker:
            raise AssertionError(f"{page} line {marker[1]}: skip marker not right "
                                 "before a block")
        i += 1
    return blocks


def anb_lines(code: str) -> list[str]:
    """The shell commands of a bash block that start with ``anb`` (continuations joined)."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line.strip() for line in joined.splitlines() if re.match(r"\s*anb\s", line)]


def all_blocks() -> list[Block]:
    return [block for page in pages()
            for block in read_blocks(page.read_text(), str(page.relative_to(REPO)))]


def cases() -> list:
    """Python blocks grouped per page and section (shared namespace), bash blocks one by one."""
    out: list = []
    for block in all_blocks():
        last = out[-1].values[0] if out else None
        if (block.lang == "python" and isinstance(last, list) and last[0].lang == "python"
                and (last[0].page, last[0].section) == (block.page, block.section)):
            last.append(block)
            continue
        group = [block] if block.lang == "python" else block
        out.append(pytest.param(group, id=f"{block.page}:L{block.line}-{block.lang}"))
    return out


def test_blocks_are_found_and_markers_well_placed():
    blocks = all_blocks()
    assert {b.page for b in blocks} >= {"README.md", "docs/use/query.md", "docs/builder/fit.md"}
    assert sum(b.lang == "python" and b.skip is None for b in blocks) >= 8
    assert sum(b.lang == "bash" and b.skip is None for b in blocks) >= 9
    for block in blocks:
        if block.lang == "bash" and block.skip is None:
            assert anb_lines(block.code), (f"{block.page} line {block.line}: a bash block with "
                                           "no `anb` line must be marked <!-- skip: why -->")
    marked = read_blocks("<!-- skip: needs a CUDA GPU -->\n```bash\nanb x\n```\n", "p.md")
    assert [(b.page, b.skip, b.line) for b in marked] == [("p.md", "needs a CUDA GPU", 3)]
    with pytest.raises(AssertionError, match="p.md line 2: mark a block with <!-- skip"):
        read_blocks("text\n<!-- readme-test: skip (x) -->\n```bash\nanb x\n```\n", "p.md")
    with pytest.raises(AssertionError, match="p.md line 1: skip marker not right before"):
        read_blocks("<!-- skip: x -->\ntext\n```bash\nanb x\n```\n", "p.md")


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> dict:
    """A reader's working folder and environment: ``anb`` on PATH runs this checkout."""
    root = tmp_path_factory.mktemp("reader")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "anb"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m anb "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    work = root / "work"
    work.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "ANB_CACHE_DIR": os.environ.get("ANB_CACHE_DIR", str(root / "cache")),
           "WANDB_MODE": "disabled"}
    return {"work": work, "env": env}


def smoke_command() -> str:
    """The one documented ``anb train`` smoke line."""
    (line,) = [line for block in all_blocks() if block.lang == "bash" and not block.skip
               for line in anb_lines(block.code) if line.startswith(SMOKE)]
    return line


def smoke_plan(command: str) -> list[str]:
    """The architectures ``command`` (an ``anb train`` line) trains, as the trainer plans them
    from the packaged recipe the docs copy to ``digits_tiny.ini``."""
    from anb.collect_accuracy.config import load_config
    from anb.collect_accuracy.train import architectures, parse_args, trainer_space
    from anb.resources import config_path

    config_file, overrides = parse_args(shlex.split(command, comments=True)[2:])
    assert config_file == "digits_tiny.ini", config_file
    config = load_config(config_path("accuracy", "digits_tiny.ini"), overrides)
    return [a.id for a in architectures(config, trainer_space(config["model"]["space"]))]


def test_smoke_command_plans_the_documented_run():
    """The line as written plans 3 architectures; the suite's run trains the first of them."""
    command = smoke_command()
    planned = smoke_plan(command)
    assert SMOKE_MODELS[0] in command and len(planned) == 3 == len(set(planned))
    assert smoke_plan(command.replace(*SMOKE_MODELS)) == planned[:1]


def cap_fit_rounds(path: Path) -> None:
    """Check ``path`` is the packaged default surrogate config; cap its rounds at FIT_ROUNDS."""
    from anb.resources import config_path

    text = path.read_text()
    assert text == config_path("surrogates", "default.json").read_text()
    config = json.loads(text)
    for entry in [config["default"], *config["per_target"].values()]:
        for params in entry["params"] if isinstance(entry["params"], list) else [entry["params"]]:
            if "n_estimators" in params:
                params["n_estimators"] = min(params["n_estimators"], FIT_ROUNDS)
    path.write_text(json.dumps(config))


def check_smoke_run_learned(work: Path) -> None:
    """The record of the suite's smoke run (the first planned architecture): >= 90 % top-1,
    validation loss finite and below ln 10."""
    paths = sorted((work / "results" / "digits" / "records").glob("*.json"))
    assert [p.stem for p in paths] == smoke_plan(smoke_command())[:1], paths
    records = [json.loads(p.read_text()) for p in paths]
    uniform = math.log(10)  # cross-entropy of predicting every class alike
    for record in records:
        history = record["provenance"]["val_history"]
        assert record["metrics"]["val_top1"] >= 90.0, (record["provenance"]["arch"], history)
        assert all(math.isfinite(h["val_loss"]) and h["val_loss"] < uniform
                   for h in history), (record["provenance"]["arch"], history)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("case", cases())
def test_readme_block(case, reader, monkeypatch):
    blocks = case if isinstance(case, list) else [case]
    if all(b.skip for b in blocks):
        pytest.skip(f"{blocks[0].page} line {blocks[0].line}: {blocks[0].skip}")
    work = reader["work"]
    if blocks[0].lang == "python":
        monkeypatch.chdir(work)
        monkeypatch.setenv("ANB_CACHE_DIR", reader["env"]["ANB_CACHE_DIR"])
        namespace: dict = {"__name__": "__readme__"}
        for block in blocks:
            if block.skip:
                continue
            exec(compile(block.code, f"{block.page}:{block.line}", "exec"), namespace)
        return
    for command in anb_lines(blocks[0].code):
        if command.startswith(SMOKE):
            assert SMOKE_MODELS[0] in command, command
            command = command.replace(*SMOKE_MODELS)
        done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=work,
                              env=reader["env"], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, (f"{blocks[0].page} line {blocks[0].line}: {command}\n"
                                      f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        if command.startswith(SMOKE):
            check_smoke_run_learned(work)
        if command.startswith(FIT_CONFIG):
            cap_fit_rounds(work / "surrogates.json")
