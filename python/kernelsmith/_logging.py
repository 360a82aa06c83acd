"""Bridge from the C++ core's spdlog logger to Python's ``logging``.

C++ records arrive on the ``kernelsmith.core`` logger. The C++ side only
formats records at or above the level this logger had when the bridge was
installed; call :func:`sync_core_log_level` after changing it.
"""

from __future__ import annotations

import atexit
import logging

from . import _core

CORE_LOGGER = logging.getLogger("kernelsmith.core")

# spdlog levels: 0 trace, 1 debug, 2 info, 3 warn, 4 err, 5 critical, 6 off.
_SPDLOG_TO_LOGGING = {
    0: 5,
    1: logging.DEBUG,
    2: logging.INFO,
    3: logging.WARNING,
    4: logging.ERROR,
    5: logging.CRITICAL,
}


def _spdlog_level_for(python_level: int) -> int:
    if python_level <= 5:
        return 0
    if python_level <= logging.DEBUG:
        return 1
    if python_level <= logging.INFO:
        return 2
    if python_level <= logging.WARNING:
        return 3
    if python_level <= logging.ERROR:
        return 4
    return 5


def _forward(level: int, message: str) -> None:
    CORE_LOGGER.log(_SPDLOG_TO_LOGGING.get(level, logging.INFO), message)


def sync_core_log_level() -> None:
    """Make the C++ logger emit exactly what ``kernelsmith.core`` would keep."""
    _core._set_log_level(_spdlog_level_for(CORE_LOGGER.getEffectiveLevel()))


def install_core_logging() -> None:
    _core._set_log_callback(_forward)
    sync_core_log_level()
    # Drop the Python callback before the interpreter finalizes, so the C++
    # logger never calls into a dead interpreter.
    atexit.register(_core._set_log_callback, None)
