"""Evaluation backends. A backend is one module here (or an entry point in
the ``kernelsmith.backends`` group) exposing a ``Backend`` subclass named
``BACKEND``; :func:`get_backend` finds it by name, so a new backend is a new
file, not a change to the evaluator."""

from __future__ import annotations

from .base import Backend, LaunchRecord, StaticReport, available_backends, backend_internal, get_backend

#: the backend of a task (``TaskConfig.backend``), an in-place config and
#: ``kernelsmith task init`` that name none
DEFAULT_BACKEND = "triton"

__all__ = [
    "DEFAULT_BACKEND",
    "Backend",
    "LaunchRecord",
    "StaticReport",
    "available_backends",
    "backend_internal",
    "get_backend",
]
