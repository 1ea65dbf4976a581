"""Every analysis notebook under notebooks/ executes top to bottom without error."""
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import REPO, SHARED_DATA

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path: Path, monkeypatch, tmp_path):
    monkeypatch.setenv("ANB_SHARED_DATA", str(SHARED_DATA))
    monkeypatch.setenv("ANB_CACHE_DIR", str(tmp_path / "cache"))  # anb.load() caches here
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    assert any(o.get("output_type") == "display_data" for c in notebook.cells
               if c.cell_type == "code" for o in c.get("outputs", [])), "a notebook should plot"
