"""Evaluation backends. A backend is one module here (or an entry point in
the ``kernelsmith.backends`` group) exposing a ``Backend`` subclass named
``BACKEND``; :func:`get_backend` finds it by name, so a new backend is a new
file, not a change to the evaluator."""
from __future__ import annotations

from .base import Backend, get_backend, available_backends

__all__ = ["Backend", "get_backend", "available_backends"]
