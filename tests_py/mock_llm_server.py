"""A scripted OpenAI- and Anthropic-compatible HTTP server for tests.

Serves ``POST .../chat/completions`` (OpenAI wire format) and
``POST .../messages`` (Anthropic wire format) on 127.0.0.1 from a thread,
until :meth:`MockLLMServer.stop`. Each request takes the next item of the
script queue -- a :class:`MockResponse`, a plain string (the answer text) or a
callable ``fn(request) -> MockResponse | str`` -- or, when the queue is empty,
the ``handler`` callable; with neither, it answers 500 "script exhausted" so a
test that under-scripts fails loudly. Every request is recorded (path, headers,
JSON body) and the peak number of requests in flight is tracked.

Usage (see the ``mock_llm`` fixture in conftest.py)::

    mock_llm.script(MockResponse.error(429, retry_after=0.1), "hello")
    client = make_client("openai:m", base_url=mock_llm.openai_base_url, api_key="k")
    ...
    assert mock_llm.requests[-1].body["temperature"] == 0.6
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional, Union


@dataclass
class MockResponse:
    """One scripted reply; rendered in the wire format of the endpoint hit."""

    text: str = ""
    reasoning: Optional[str] = None
    # OpenAI: the message field that carries reasoning ("reasoning_content" or
    # "reasoning"); ignored with think_tags. Anthropic: always a thinking block.
    reasoning_field: str = "reasoning_content"
    think_tags: bool = False  # put reasoning inside <think>...</think> in the content
    prompt_tokens: int = 10
    completion_tokens: int = 20
    reasoning_tokens: Optional[int] = None
    finish_reason: str = "stop"  # Anthropic: mapped to stop_reason ("end_turn", "max_tokens")
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # sleep before answering (slow server / timeout tests)
    body: Union[bytes, str, dict, None] = None  # raw body instead of a rendered reply
    model: Optional[str] = None  # default: the model of the request
    drop: bool = False  # close the connection without answering (a proxy or server that died)

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "scripted error",
        retry_after: Optional[float] = None,
        headers: Optional[dict[str, str]] = None,
    ) -> "MockResponse":
        h = dict(headers or {})
        if retry_after is not None:
            h["retry-after"] = f"{retry_after:g}"
        return cls(status=status, text=message, headers=h)

    @classmethod
    def slow(cls, delay_s: float, text: str = "too late") -> "MockResponse":
        return cls(text=text, delay_s=delay_s)

    @classmethod
    def dropped(cls) -> "MockResponse":
        return cls(drop=True)

    @classmethod
    def malformed(cls) -> "MockResponse":
        return cls(body=b'{"id": "x", "choices": [ {"message": ')


@dataclass
class RecordedRequest:
    api: str  # "openai" or "anthropic"
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any  # parsed JSON (None when not JSON)
    raw: bytes
    received_at: float

    @property
    def model(self) -> Optional[str]:
        return self.body.get("model") if isinstance(self.body, dict) else None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", [])) if isinstance(self.body, dict) else []

    @property
    def system(self) -> Optional[str]:
        """Anthropic ``system`` parameter, or the OpenAI system message."""
        if not isinstance(self.body, dict):
            return None
        if "system" in self.body:
            s = self.body["system"]
            return s if isinstance(s, str) else json.dumps(s)
        for m in self.messages:
            if m.get("role") == "system":
                return _text(m.get("content"))
        return None

    @property
    def prompt_text(self) -> str:
        """All prompt text (system and messages) joined, for content asserts."""
        parts = [self.system or ""] if isinstance(self.body, dict) and "system" in self.body else []
        parts += [_text(m.get("content")) for m in self.messages]
        return "\n".join(parts)

    @property
    def last_user(self) -> str:
        users = [m for m in self.messages if m.get("role") == "user"]
        return _text(users[-1].get("content")) if users else ""


def _anthropic_sse(msg: dict[str, Any]) -> bytes:
    """``msg`` as the event stream the messages API sends with stream=true,
    each block split into two deltas so the client must join them."""
    events: list[tuple[str, dict[str, Any]]] = []
    start = dict(
        msg, content=[], stop_reason=None, usage={"input_tokens": msg["usage"]["input_tokens"], "output_tokens": 1}
    )
    events.append(("message_start", {"type": "message_start", "message": start}))
    for i, block in enumerate(msg["content"]):
        kind = block["type"]
        key, delta_type = ("thinking", "thinking_delta") if kind == "thinking" else ("text", "text_delta")
        empty = {"type": kind, key: ""}
        if kind == "thinking":
            empty["signature"] = ""
        events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": empty}))
        full = block[key]
        for piece in (full[: len(full) // 2], full[len(full) // 2 :]):
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": i, "delta": {"type": delta_type, key: piece}},
                )
            )
        if kind == "thinking":
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "signature_delta", "signature": "sig"},
                    },
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": msg["usage"]["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return "" if content is None else str(content)


Reply = Union[MockResponse, str, Callable[[RecordedRequest], Union[MockResponse, str]]]

_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens"}


class MockLLMServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._queue: deque[Reply] = deque()
        self.handler: Optional[Callable[[RecordedRequest], Union[MockResponse, str]]] = None
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._server.block_on_close = False  # a slow reply must not hold up stop()
        self._thread: Optional[threading.Thread] = None
        self._counter = 0

    # -- lifecycle -------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url  # the Anthropic SDK appends /v1/messages

    def start(self) -> "MockLLMServer":
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="mock-llm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in a slow reply
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "MockLLMServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- script ----------------------------------------------------------------
    def script(self, *replies: Reply) -> "MockLLMServer":
        with self._lock:
            self._queue.extend(replies)
        return self

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.handler = None
            self.max_in_flight = 0

    def _next_reply(self, req: RecordedRequest) -> MockResponse:
        with self._lock:
            item: Optional[Reply] = self._queue.popleft() if self._queue else None
        if item is None:
            item = self.handler
        if item is None:
            return MockResponse.error(500, "mock LLM server: script exhausted")
        if callable(item) and not isinstance(item, MockResponse):
            item = item(req)
        if isinstance(item, str):
            item = MockResponse(text=item)
        return item

    # -- wire formats ----------------------------------------------------------
    def _render(self, api: str, req: RecordedRequest, r: MockResponse) -> bytes:
        if r.body is not None:
            if isinstance(r.body, dict):
                return json.dumps(r.body).encode()
            return r.body.encode() if isinstance(r.body, str) else r.body
        if r.status >= 400:
            if api == "anthropic":
                err = {
                    "type": "error",
                    "error": {"type": _ANTHROPIC_ERRORS.get(r.status, "api_error"), "message": r.text},
                }
            else:
                err = {"error": {"message": r.text, "type": "mock_error", "code": r.status}}
            return json.dumps(err).encode()
        with self._lock:
            self._counter += 1
            n = self._counter
        model = r.model or req.model or "mock"
        if api == "anthropic":
            content: list[dict[str, Any]] = []
            text = r.text
            if r.reasoning is not None:
                if r.think_tags:
                    text = f"<think>{r.reasoning}</think>{text}"
                else:
                    content.append({"type": "thinking", "thinking": r.reasoning, "signature": "mock-sig"})
            content.append({"type": "text", "text": text})
            msg = {
                "id": f"msg_{n}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": _ANTHROPIC_STOP.get(r.finish_reason, r.finish_reason),
                "stop_sequence": None,
                "usage": {"input_tokens": r.prompt_tokens, "output_tokens": r.completion_tokens},
            }
            if isinstance(req.body, dict) and req.body.get("stream"):
                return _anthropic_sse(msg)
            return json.dumps(msg).encode()
        message: dict[str, Any] = {"role": "assistant", "content": r.text}
        if r.reasoning is not None:
            if r.think_tags:
                message["content"] = f"<think>{r.reasoning}</think>{r.text}"
            else:
                message[r.reasoning_field] = r.reasoning
        usage: dict[str, Any] = {
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.completion_tokens,
            "total_tokens": r.prompt_tokens + r.completion_tokens,
        }
        if r.reasoning_tokens is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": r.reasoning_tokens}
        body = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": r.finish_reason}],
            "usage": usage,
        }
        return json.dumps(body).encode()

    def _handler_class(self) -> type:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- quiet tests
                pass

            def do_POST(self) -> None:  # noqa: N802 -- http.server API
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                if path.endswith("/chat/completions"):
                    api = "openai"
                elif path.endswith("/messages"):
                    api = "anthropic"
                else:
                    self._send(404, b'{"error": {"message": "no such endpoint"}}', {})
                    return
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                req = RecordedRequest(
                    api, path, {k.lower(): v for k, v in self.headers.items()}, body, raw, time.monotonic()
                )
                with server._lock:
                    server.requests.append(req)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    reply = server._next_reply(req)
                    if reply.delay_s > 0 and server._stopping.wait(reply.delay_s):
                        return
                    if reply.drop:
                        import socket

                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    payload = server._render(api, req, reply)
                    sse = payload.startswith(b"event: ") and reply.body is None
                    self._send(reply.status, payload, reply.headers, "text/event-stream" if sse else "application/json")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _send(
                self, status: int, payload: bytes, headers: dict[str, str], content_type: str = "application/json"
            ) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(payload)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

        return Handler
