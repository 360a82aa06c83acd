"""Evaluation backends. A backend is one module here (or an entry point in
the ``kernelsmith.backends`` group) exposing a ``Backend`` subclass named
``BACKEND``; :func:`get_backend` finds it by name, so a new backend is a new
file, not a change to the evaluator."""
from __future__ import annotations

from .base import Backend, LaunchRecord, StaticReport, available_backends, backend_internal, get_backend

__all__ = ["Backend", "LaunchRecord", "StaticReport", "available_backends", "backend_internal", "get_backend"]
