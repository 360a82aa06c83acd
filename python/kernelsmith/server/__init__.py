"""The HTTP evaluation service (``kernelsmith serve``) and its client."""
from .app import EvaluationServer, EvaluationService, JobQueue, QueueFull, build_server, local_devices
from .client import EvaluationClient, ServerError

__all__ = ["EvaluationClient", "EvaluationServer", "EvaluationService", "JobQueue", "QueueFull", "ServerError",
           "build_server", "local_devices"]
