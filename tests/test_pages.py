"""Pages checked as a person sees them: the documentation site (built with ``mkdocs build
--strict``, once per session) and the report page of ``anb measure --report``, opened in headless
Chromium over a localhost server. Each must render its title and main content with every image
loaded and no console error; screenshots are kept under ``build/screenshots/``."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from anb.cli import app
from anb.searchspace import EFFICIENTNET_B0
from tests.browser import SCREENSHOTS, open_page, require_browser, serve

REPO = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DEVICE = "pages-cpu"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The documentation site, built strictly (a broken link or reference fails it)."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(out)], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def assert_seen(check, title: str, text: str) -> None:
    assert title in check.title, check.title
    assert text in check.main_text, check.main_text[:500]
    assert check.broken_images == [], check.broken_images
    assert check.console_errors == [], check.console_errors
    assert check.screenshot is not None and check.screenshot.read_bytes()[:8] == PNG_MAGIC


def test_open_page_reports_broken_images_and_console_errors(tmp_path):
    """The checker itself: a missing image and a script error on a page are both reported."""
    require_browser()
    (tmp_path / "page.html").write_text(
        "<html><head><title>t</title></head><body><main>hello</main>"
        "<img src='missing.png'><script>console.error('boom')</script></body></html>")
    with serve(tmp_path) as base:
        check = open_page(base + "page.html", tmp_path / "shot.png", "main")
    assert check.title == "t" and check.main_text == "hello" and check.images == 1
    assert check.broken_images == [base + "missing.png"]
    assert any("boom" in error for error in check.console_errors), check.console_errors


def test_docs_home_renders(site):
    require_browser()
    with serve(site) as base:
        check = open_page(base, SCREENSHOTS / "docs-home.png", "article")
    assert_seen(check, "anb", "accelerator-aware NAS benchmarks")


def test_docs_api_page_renders(site):
    require_browser()
    with serve(site) as base:
        check = open_page(base + "api/searchspace/", SCREENSHOTS / "docs-api-searchspace.png",
                          "article")
    assert_seen(check, "anb.searchspace", "Stable content hash")  # a docstring, rendered


def test_docs_adapt_page_shows_its_figures(site):
    """The adapt page's two HELP figures (``help_transfer.py --plot``) load in the browser."""
    require_browser()
    with serve(site) as base:
        check = open_page(base + "builder/adapt/", SCREENSHOTS / "docs-builder-adapt.png",
                          "article")
    assert_seen(check, "Adapt", "External yardstick: HELP, NASFLAT, other device families")
    assert check.images >= 2, check.images


def test_measure_report_page_renders(tmp_path):
    """``anb measure --report`` on this CPU (one architecture, a short budget), its page opened."""
    require_browser()
    config = tmp_path / f"{DEVICE}.toml"
    config.write_text(f'name = "{DEVICE}"\nbackend = "onnxruntime"\nresolution = 32\n'
                      "threads = 1\n[latency]\nbatch = 1\n[warmup]\nmax_seconds = 1.0\n"
                      "[stopping]\nmin_reps = 5\nbudget_seconds = 0.4\n")
    result = CliRunner().invoke(app, ["measure", str(config), "--archs", str(EFFICIENTNET_B0),
                                      "--out", str(tmp_path / "out"), "--anchors", "none",
                                      "--no-progress", "--report"])
    assert result.exit_code == 0, result.output
    reports = tmp_path / "out" / DEVICE / "reports"
    with serve(reports) as base:
        check = open_page(f"{base}{EFFICIENTNET_B0.id}.html",
                          SCREENSHOTS / "measure-report.png")
        index = open_page(base + "index.html", SCREENSHOTS / "measure-report-index.png")
    assert_seen(check, f"{DEVICE}: {EFFICIENTNET_B0}", "warm-up")
    assert check.images >= 1, "the report embeds its PNG"
    assert_seen(index, "", EFFICIENTNET_B0.id)


def test_api_docstrings_render_roles_and_doctests_as_markdown():
    """The API reference's Griffe extension: reST roles and literals become code spans, doctest
    lines a fenced block (Markdown would read ``>>>`` as nested quotes); prose is left alone."""
    path = REPO / "docs" / "griffe_sphinx.py"
    spec = importlib.util.spec_from_file_location("griffe_sphinx", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = ("See :func:`~anb.surrogates.load` and ``x``...\n... not code\n"
            ">>> import anb\n... anb.load()\nafter")
    assert module.markdown(text) == ("See `anb.surrogates.load` and `x`...\n... not code\n"
                                     "```pycon\n>>> import anb\n... anb.load()\n```\nafter")
