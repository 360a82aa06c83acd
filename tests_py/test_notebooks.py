"""The notebooks run top to bottom (nbclient), so they cannot rot."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["quickstart.ipynb"])
def test_notebook_executes(name, monkeypatch):
    import kernelsmith

    path = NOTEBOOKS / name
    if not path.exists():
        pytest.skip(f"{path} is not part of this checkout")
    # The kernel imports the same kernelsmith as the tests (installed or dev tree).
    root = str(Path(kernelsmith.__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    outputs = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for o in cell.get("outputs", []))
    assert "Verdict: CORRECT" in outputs and "INCORRECT OUTPUT" in outputs
    assert "self-contained" in outputs
    images = [o for cell in notebook.cells for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "the plot cell displayed no image"
