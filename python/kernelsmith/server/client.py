"""A small client for ``kernelsmith serve`` (stdlib urllib only, so it
works inside any trainer's environment)."""

from __future__ import annotations

import http.client
import json
import random
import time
import urllib.error
import urllib.request
from typing import Any, Mapping, Optional, Sequence

from ..rewards.core import RewardConfig


class ServerError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


#: transport failures worth another try: the server restarting, a reset
#: connection, a burst that overflowed a listen backlog
RETRIABLE = (ConnectionError, http.client.RemoteDisconnected, http.client.IncompleteRead, TimeoutError)


class EvaluationClient:
    """``url`` like ``http://127.0.0.1:8000``; ``token`` the server's bearer
    token if it has one. A 503 (queue full) and connection errors (refused,
    reset, dropped) are retried with exponential back-off and jitter for up
    to ``busy_wait_s`` seconds. Scoring is idempotent, so a request whose
    connection dropped after it was sent is safe to send again."""

    def __init__(
        self, url: str, token: Optional[str] = None, timeout_s: float = 1800.0, busy_wait_s: float = 600.0
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.busy_wait_s = busy_wait_s

    def _request(self, method: str, path: str, payload: Any = None) -> Any:
        data = json.dumps(payload).encode() if payload is not None else None
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        deadline = time.monotonic() + self.busy_wait_s
        delay = 0.5
        while True:
            request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read() or b"null")
            except urllib.error.HTTPError as exc:
                body = exc.read().decode(errors="replace")
                try:
                    message = json.loads(body).get("error", body)
                except (json.JSONDecodeError, AttributeError):
                    message = body
                if exc.code != 503 or time.monotonic() + delay > deadline:
                    raise ServerError(exc.code, message) from None
            except (urllib.error.URLError, *RETRIABLE) as exc:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                if not isinstance(reason, RETRIABLE) or time.monotonic() + delay > deadline:
                    raise
            # Jitter keeps a burst of clients that failed together from retrying together.
            time.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, 10.0)

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health")

    def status(self) -> dict[str, Any]:
        return self._request("GET", "/status")

    def register_task(self, task: Mapping[str, Any] | str) -> str:
        key = "task_path" if isinstance(task, str) else "task"
        return self._request("POST", "/tasks", {key: task})["task_id"]

    def evaluate(self, item: Mapping[str, Any]) -> dict[str, Any]:
        return self._request("POST", "/evaluate", dict(item))

    def reward(self, item: Mapping[str, Any], config: Optional[RewardConfig] = None) -> dict[str, Any]:
        payload = dict(item)
        if config is not None:
            payload["config"] = config.to_dict()
        return self._request("POST", "/reward", payload)

    def rewards(self, items: Sequence[Mapping[str, Any]], config: Optional[RewardConfig] = None) -> list[float]:
        payload: dict[str, Any] = {"items": [dict(i) for i in items]}
        if config is not None:
            payload["config"] = config.to_dict()
        return [float(r) for r in self._request("POST", "/reward", payload)["rewards"]]
