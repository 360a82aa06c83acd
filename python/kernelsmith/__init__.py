"""kernelsmith: evolve fast, verified GPU kernels with LLMs.

The C++ core (``kernelsmith._core``) holds the evolution engine, the timing
statistics, code edits and the OpenCL runtime; this package wraps it with task
loading, backends, the evaluator, LLM clients, the evolve loop and data export.
"""

from __future__ import annotations

from . import _core
from ._core import KernelsmithError, CorruptStateError, OpenCLError
from ._logging import install_core_logging as _install_core_logging

__version__ = _core.__version__

_install_core_logging()

__all__ = [
    "__version__",
    "KernelsmithError",
    "CorruptStateError",
    "OpenCLError",
]
