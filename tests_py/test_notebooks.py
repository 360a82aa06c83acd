"""The notebooks run top to bottom (nbclient), so they cannot rot."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import nbclient
import nbformat

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["quickstart.ipynb"])
def test_notebook_executes(name, monkeypatch):
    import kernelsmith

    path = NOTEBOOKS / name
    # The kernel imports the same kernelsmith as the tests (installed or dev tree).
    root = str(Path(kernelsmith.__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    client.execute()
    outputs = "".join(
        o.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
    )
    assert "Verdict: CORRECT" in outputs and "INCORRECT OUTPUT" in outputs
    assert "self-contained" in outputs
    # the export cell ran and wrote rows (the run's correct steps)
    assert re.search(r"^([1-9]\d*) SFT rows$", outputs, re.M) and "summary.json" in outputs, outputs[-3000:]
    images = [o for cell in notebook.cells for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "the plot cell displayed no image"
