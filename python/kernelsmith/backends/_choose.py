"""Which backend a program is written for, from its source and the devices
present: for a command given a candidate and no ``--backend`` (a plain
KernelBench file names none). Each backend's own static check decides, so a
new backend is recognised without a change here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .base import available_backends, get_backend


@dataclass
class Choice:
    """The backend picked for a source, and why in words."""

    #: the backend's name; None when the source fits none (or several, none runnable here)
    name: Optional[str]
    #: every backend whose static check the source passes
    fitting: list[str]
    reason: str


def fitting_backends(source: str) -> list[str]:
    """Backends whose static check finds no error and no shortcut in ``source``."""
    names = []
    for name in available_backends():
        try:
            report = get_backend(name).static_check(source)
        except Exception:  # noqa: BLE001 -- a backend that cannot even check is not this program's
            continue
        if not report.errors and not report.hacks:
            names.append(name)
    return names


def choose_backend(source: str) -> Choice:
    """The backend ``source`` is written for: the one backend whose static
    check it passes; of several, the one whose device is present (one only)."""
    fitting = fitting_backends(source)
    if len(fitting) == 1:
        return Choice(fitting[0], fitting, f"the candidate's source is written for {fitting[0]}")
    if not fitting:
        return Choice(None, fitting, "the program's source passes no backend's static check")
    runnable = [name for name in fitting if get_backend(name).unavailable_reason() is None]
    if len(runnable) == 1:
        return Choice(
            runnable[0], fitting, f"the program fits {', '.join(fitting)}; only {runnable[0]} can run on this host"
        )
    return Choice(None, fitting, f"the program fits {', '.join(fitting)}")
