"""Small helpers for the processes kernelsmith starts (workers, the curation
runner's workers, the evaluation daemon)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

#: the folder that holds the ``kernelsmith`` package this process runs
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


def package_python_path(env: Optional[Mapping[str, str]] = None) -> str:
    """A PYTHONPATH for a child process that imports this very package first
    (whatever the child's working directory), then what ``env``'s
    PYTHONPATH (default: this process's) already had."""
    rest = (os.environ if env is None else env).get("PYTHONPATH", "")
    return PACKAGE_ROOT + (os.pathsep + rest if rest else "")
