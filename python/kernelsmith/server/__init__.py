"""The HTTP evaluation service (``kernelsmith serve``) and its client.

The client needs nothing beyond the standard library (it runs inside
trainers' environments); the service (FastAPI, uvicorn) is imported only when
one of its names is used."""

from typing import Any

from .client import EvaluationClient, ServerError

_SERVICE = ("EvaluationServer", "EvaluationService", "JobQueue", "QueueFull", "build_server", "local_devices")

__all__ = [
    "EvaluationClient",
    "EvaluationServer",
    "EvaluationService",
    "JobQueue",
    "QueueFull",
    "ServerError",
    "build_server",
    "local_devices",
]


def __getattr__(name: str) -> Any:
    if name in _SERVICE:
        from . import app  # lazy: server.app pulls in fastapi, which server does not load on its own

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
