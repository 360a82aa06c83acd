"""The Backend interface: everything the evaluator needs to know about one
kind of kernel (Triton, OpenCL, ...).

The evaluator never branches on the backend's name. It asks the backend to
check a candidate statically, to prepare the worker process, to load the
candidate, to record which of its kernels really launched during forward, to
synchronize and time, and to describe the hardware for prompts.
"""
from __future__ import annotations

import abc
import contextlib
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Iterator


@dataclass
class StaticReport:
    """Findings of a static (AST) check of candidate source.

    errors: the candidate cannot be run (syntax error, no ModelNew, ...):
        reported as compile-failed, with messages an LLM can act on.
    hacks: the candidate tries to cheat (fallback to the reference, patched
        timers, extra streams, ...): reported as hacked.
    warnings: suspicious but allowed (e.g. a precision-lowering cast); they
        go into the feedback.
    """

    errors: list[str] = field(default_factory=list)
    hacks: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class LaunchRecord:
    """Which of the backend's kernels launched inside a guarded region."""

    kernels: list[str] = field(default_factory=list)


class Backend(abc.ABC):
    """One kind of kernel. Subclasses live in ``kernelsmith/backends/<name>.py``."""

    #: short name used in configs and on the command line
    name: str = ""

    def prepare_worker(self) -> None:
        """Called once in a fresh worker process before anything is loaded
        (environment variables, device selection)."""

    @abc.abstractmethod
    def static_check(self, source: str) -> StaticReport:
        """Inspect the candidate's source without running it."""

    @abc.abstractmethod
    def device(self) -> str:
        """The torch device string the task's inputs and modules live on."""

    @contextlib.contextmanager
    def launch_guard(self) -> Iterator[LaunchRecord]:
        """Record this backend's kernel launches inside the ``with`` block."""
        record = LaunchRecord()
        yield record

    def synchronize(self) -> None:
        """Wait for all work this backend queued."""

    def hardware_info(self) -> dict[str, Any]:
        """Device name, driver and library versions (stored with results)."""
        return {}

    def prompt_tips(self, hardware: dict[str, Any] | None = None) -> str:
        """Optimization advice for the system prompt, specific to the device."""
        return ""


def available_backends() -> list[str]:
    """Names of the backend modules shipped in this package."""
    from . import __path__ as package_path

    return sorted(
        info.name for info in pkgutil.iter_modules(package_path) if info.name not in {"base"}
    )


def get_backend(name: str, **options: Any) -> Backend:
    """Instantiate the backend called ``name`` (``kernelsmith.backends.<name>``
    or an installed ``kernelsmith.backends`` entry point)."""
    try:
        module = importlib.import_module(f"kernelsmith.backends.{name}")
        cls = module.BACKEND
    except ModuleNotFoundError as exc:
        if exc.name != f"kernelsmith.backends.{name}":
            raise
        from importlib.metadata import entry_points

        matches = [ep for ep in entry_points(group="kernelsmith.backends") if ep.name == name]
        if not matches:
            raise ValueError(
                f"unknown backend '{name}'; available: {', '.join(available_backends())}"
            ) from None
        cls = matches[0].load()
    return cls(**options)
