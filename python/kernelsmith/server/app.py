"""The HTTP evaluation service behind ``kernelsmith serve``.

FastAPI on uvicorn: each request and answer is a pydantic model
(:mod:`.schemas`), validated on the way in and out and described at
``/openapi.json`` (browsable at ``/docs``). Evaluations go through one
bounded queue to ``workers`` worker threads, one per device, each evaluating
in the Evaluator's sandboxed processes: candidate code never runs in this
process. A request that finds the queue full waits for room (first come,
first admitted) for up to ``admission_wait_s`` and only then gets 503:
trainers such as OpenRLHF treat any error status as a failed rollout, so
backpressure is a slower answer, not a refusal. Connections beyond those
being served wait in a listen backlog sized for bursts of hundreds of
requests from one machine instead of being reset.

Endpoints (JSON in, JSON out):

  GET  /health                  {"status": "ok"} (no token needed)
  GET  /status                  workers, devices, queue length/capacity, running, counts, tasks
  POST /tasks                   {"task": {...} | "task_path": "..."} -> {"task_id"}
  POST /evaluate                {task|task_id|task_path, source | completion+parent_source, trials?}
                                -> {"result": EvalResult, "edit_error": str|null}
  POST /reward                  one scoring item (kernelsmith.rewards.scorer) -> Reward
                                or {"items": [...], "config"?: {...}} -> {"rewards": [...], "details": [...]}
  POST /get_reward              OpenRLHF remote reward model: {"query", "prompts", "labels"}
                                -> {"rewards", "scores", "extra_logs"}
  GET  /docs, /openapi.json     the schemas of all of the above (no token needed)

Errors answer ``{"error": "..."}``: 400 bad request (not JSON, not an object,
a field of the wrong type, a body not sent as ``application/json``), 401
missing/wrong bearer token, 404 unknown path or task, 411 no Content-Length,
413 body over the size limit, 503 the queue stayed full for
``admission_wait_s``.

The token goes in ``Authorization: Bearer TOKEN`` or, for clients that can
only be given a URL (OpenRLHF's ``--remote_rm_url``), in its query string
(``/get_reward?token=TOKEN``). Without a token the server binds loopback
only, unless told otherwise.
"""

from __future__ import annotations

import collections
import hmac
import logging
import socket
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import anyio
import uvicorn
from fastapi import FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyQuery, HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..rewards.core import STATUSES, Reward, RewardConfig
from ..rewards.scorer import LocalScorer, TaskRegistry, completion_text, item_from_verl
from . import schemas
from .. import __version__
from ..evaluator import Evaluator

log = logging.getLogger("kernelsmith.server")


#: how long a request waits for room in a full queue before its 503: below
#: OpenRLHF's 180 s request timeout, so that it sees an answer it retries on
#: rather than a dropped connection while its request still waits here
ADMISSION_WAIT_S = 150.0


class QueueFull(Exception):
    pass


class HTTPError(Exception):
    """An answer other than 200: ``{"error": message}`` with ``status``."""

    def __init__(
        self, status: int, message: str, headers: Optional[Mapping[str, str]] = None, counted: bool = False
    ) -> None:
        super().__init__(message)
        self.status = status
        self.headers = dict(headers or {})
        self.counted = counted  # in the service's counts already (under another name)


class JobQueue:
    """A bounded queue of evaluation jobs and one worker thread per device slot.

    ``capacity`` counts jobs waiting (not running). A batch is admitted whole,
    so a trainer never gets half its rewards; when there is no room it waits
    (admission in arrival order, so a large batch is not starved by small
    ones) up to ``wait_s`` and then raises :class:`QueueFull`. A batch larger
    than ``workers + capacity`` is admitted once nothing else is outstanding,
    else it could never be.
    """

    def __init__(self, run: Callable[[Any], Any], workers: int, capacity: int) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        if capacity < 0:
            raise ValueError("queue capacity must be >= 0")
        self._run = run
        self.workers = workers
        self.capacity = capacity
        self._jobs: "collections.deque[tuple[Any, Future]]" = collections.deque()
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)  # the worker threads wait on it for jobs
        # Each request waiting for room waits on a condition of its own, and
        # only the one whose turn it is is woken when room appears: with one
        # shared condition every finished job woke every waiting request (a
        # burst holds hundreds), each to take the GIL and wait again.
        self._turns: dict[int, threading.Condition] = {}
        self.running = 0
        self.waiting_admission = 0
        self.admitted_after_waiting = 0  # requests that found no room and waited for it
        self._next_ticket = 0  # admission order of requests that had to wait
        self._serving_ticket = 0
        self._abandoned: set[int] = set()  # tickets of requests that stopped waiting
        self._closed = False
        self._threads = [threading.Thread(target=self._loop, name=f"ks-serve-{i}", daemon=True) for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def _fits(self, size: int) -> bool:
        outstanding = len(self._jobs) + self.running
        return outstanding + size <= self.workers + self.capacity or outstanding == 0

    def submit_many(self, payloads: Sequence[Any], wait_s: float = 0.0) -> list[Future]:
        deadline = time.monotonic() + max(0.0, wait_s)
        with self._cond:
            if self._closed:
                raise QueueFull("the server is shutting down")
            ticket = self._next_ticket
            self._next_ticket += 1
            self.waiting_admission += 1
            waited = False
            try:
                while self._closed or ticket != self._serving_ticket or not self._fits(len(payloads)):
                    left = deadline - time.monotonic()
                    if self._closed or left <= 0:
                        raise QueueFull(
                            f"queue full ({len(self._jobs)} waiting, {self.running} running, "
                            f"{self.workers} workers, queue capacity {self.capacity}, "
                            f"waited {max(0.0, wait_s):.0f} s)"
                        )
                    waited = True
                    turn = self._turns.get(ticket)
                    if turn is None:
                        turn = self._turns[ticket] = threading.Condition(self._lock)
                    turn.wait(left)
            except QueueFull:
                self._give_up(ticket)
                raise
            finally:
                self.waiting_admission -= 1
                self._turns.pop(ticket, None)
            self._advance()
            self.admitted_after_waiting += waited
            futures = []
            for payload in payloads:
                future: Future = Future()
                self._jobs.append((payload, future))
                futures.append(future)
            self._cond.notify_all()  # the workers
            return futures

    def _give_up(self, ticket: int) -> None:
        # Skipped when its turn comes, so the requests behind it are not blocked by it.
        self._abandoned.add(ticket)
        if ticket == self._serving_ticket:
            self._advance()

    def _advance(self) -> None:
        self._serving_ticket += 1
        while self._serving_ticket in self._abandoned:
            self._abandoned.discard(self._serving_ticket)
            self._serving_ticket += 1
        self._wake_next()

    def _wake_next(self) -> None:
        """Wakes the request whose turn it is, if it waits (call with the lock held)."""
        turn = self._turns.get(self._serving_ticket)
        if turn is not None:
            turn.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._cond.wait()
                if self._closed and not self._jobs:
                    return
                payload, future = self._jobs.popleft()
                self.running += 1
            try:
                if future.set_running_or_notify_cancel():
                    future.set_result(self._run(payload))
            except BaseException as exc:  # noqa: BLE001 - delivered to the waiting request
                future.set_exception(exc)
            finally:
                with self._cond:
                    self.running -= 1
                    self._wake_next()  # room for the request whose turn it is

    def length(self) -> int:
        with self._cond:
            return len(self._jobs)

    def stop_admitting(self) -> None:
        """Refuses new requests and those waiting for room (QueueFull), at once;
        jobs already admitted still run. Does not wait for them: see close()."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            for turn in self._turns.values():
                turn.notify()

    def close(self) -> None:
        """Stops admitting; jobs already admitted still run to the end."""
        self.stop_admitting()
        for thread in self._threads:
            thread.join()


def local_devices(cpu_workers: int = 1) -> list[Optional[str]]:
    """One slot per CUDA device when torch sees any, else ``cpu_workers`` CPU slots."""
    try:
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no torch or no driver: CPU
        count = 0
    if count:
        return [str(i) for i in range(count)]
    return [None] * max(1, cpu_workers)


class EvaluationService:
    """What the HTTP handlers call; usable without HTTP (tests, notebooks)."""

    def __init__(
        self,
        scorer: LocalScorer,
        workers: int,
        queue_size: int = 64,
        devices: Sequence[Optional[str]] = (),
        admission_wait_s: float = ADMISSION_WAIT_S,
    ) -> None:
        self.scorer = scorer
        self.devices = list(devices)
        self.admission_wait_s = admission_wait_s
        self.queue = JobQueue(self._run_job, workers, queue_size)
        self.counts: "collections.Counter[str]" = collections.Counter()
        self._counts_lock = threading.Lock()
        self.started = time.time()

    def count(self, key: str, n: int = 1) -> None:
        with self._counts_lock:
            self.counts[key] += n

    def _run_job(self, job: tuple[str, Mapping[str, Any], Optional[RewardConfig]]) -> Any:
        kind, item, config = job
        if kind == "evaluate":
            result, error = self.scorer.evaluate(item)
            return {"result": result.to_dict() if result is not None else None, "edit_error": error}
        return self.scorer.score(item, config)

    def submit(self, kind: str, items: Sequence[Mapping[str, Any]], config: Optional[RewardConfig] = None) -> list[Any]:
        # Bad requests fail here, before they take a queue slot.
        for item in items:
            self.scorer.tasks.resolve(item)
        futures = self.queue.submit_many([(kind, item, config) for item in items], self.admission_wait_s)
        self.count("evaluations_queued", len(items))
        out = [f.result() for f in futures]
        for value in out:
            status = (
                value.status if isinstance(value, Reward) else ((value.get("result") or {}).get("category") or "edit")
            )
            self.count(f"{kind}:{status}")
        return out

    def status(self) -> dict[str, Any]:
        with self._counts_lock:
            counts = dict(sorted(self.counts.items()))
        return {
            "workers": self.queue.workers,
            "devices": [d if d is not None else "cpu" for d in self.devices],
            "queue_length": self.queue.length(),
            "queue_capacity": self.queue.capacity,
            "running": self.queue.running,
            "waiting_admission": self.queue.waiting_admission,
            "admitted_after_waiting": self.queue.admitted_after_waiting,
            "admission_wait_s": self.admission_wait_s,
            "counts": counts,
            "tasks": self.scorer.tasks.ids(),
            "uptime_s": round(time.time() - self.started, 1),
        }

    def close(self) -> None:
        self.queue.close()


def _openrlhf_items(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    queries, prompts = body.get("query"), body.get("prompts")
    labels = body.get("labels")
    if not isinstance(queries, list):
        raise HTTPError(400, "'query' must be a list of strings")
    prompts = prompts if isinstance(prompts, list) else [""] * len(queries)
    labels = labels if isinstance(labels, list) else [None] * len(queries)
    if not (len(queries) == len(prompts) == len(labels)):
        raise HTTPError(400, "'query', 'prompts' and 'labels' must have the same length")
    items = []
    for query, prompt, label in zip(queries, prompts, labels):
        # OpenRLHF sends prompt + response as the query: the response is what follows the prompt.
        response = query[len(prompt) :] if prompt and isinstance(query, str) and query.startswith(prompt) else query
        items.append(item_from_verl(completion_text(response), label, None))
    return items


def _docs_page(app: Any) -> None:
    """``/docs``: Swagger UI over /openapi.json. Its script and styles come
    from the swagger-ui-bundle package, served under /docs-assets, so the
    page works on a cluster without internet (FastAPI's default page loads
    them from a CDN in the browser); without the package, that default."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse

    try:
        from swagger_ui_bundle import swagger_ui_path
        from starlette.staticfiles import StaticFiles
    except ImportError:
        swagger_ui_path = None
    assets: dict[str, str] = {}
    if swagger_ui_path is not None:
        app.mount("/docs-assets", StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")
        assets = {
            "swagger_js_url": "/docs-assets/swagger-ui-bundle.js",
            "swagger_css_url": "/docs-assets/swagger-ui.css",
            "swagger_favicon_url": "/docs-assets/favicon-32x32.png",
        }

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="kernelsmith serve: API", **assets)


def make_app(service: EvaluationService, token: Optional[str], max_body: int) -> Any:
    """The routes as a FastAPI application; without a token no route asks for one."""
    app = FastAPI(
        title="kernelsmith serve",
        version=__version__,
        description=API_DESCRIPTION,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    _docs_page(app)
    app.add_middleware(BodyLimit, max_body=max_body, service=service)
    limiter: list[Any] = []  # made on first use: a CapacityLimiter belongs to the running event loop

    async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
        """``fn`` on a thread of its own, its exceptions as HTTP answers. The
        service blocks (admission waits for room, then for the verdict), so
        each request waits on a thread, as many as are waiting (not the
        default pool of 40, behind which requests would wait unseen and
        without the admission deadline)."""
        if not limiter:
            limiter.append(anyio.CapacityLimiter(MAX_WAITING_REQUESTS))
        try:
            return await anyio.to_thread.run_sync(fn, *args, limiter=limiter[0])
        except HTTPError:
            raise
        except QueueFull as exc:
            service.count("rejected_queue_full")
            raise HTTPError(503, str(exc), {"Retry-After": "1"}, counted=True) from None
        except KeyError as exc:
            raise HTTPError(404, str(exc.args[0]) if exc.args else "not found") from None
        except (ValueError, TypeError, PermissionError) as exc:
            raise HTTPError(400, str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - the server stays up
            log.exception("request failed")
            raise HTTPError(500, f"{type(exc).__name__}: {exc}") from None

    @app.exception_handler(HTTPError)
    async def _error(request: Request, exc: HTTPError) -> JSONResponse:
        if not exc.counted:
            service.count(f"http_{exc.status}")
        return JSONResponse({"error": str(exc)}, exc.status, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _no_route(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # 404 and 405 alike: "no route" (a GET of a POST route was a 404 before, and stays one)
        if exc.status_code in (404, 405):
            return JSONResponse({"error": f"no route {request.method} {request.url.path}"}, 404)
        return JSONResponse({"error": str(exc.detail)}, exc.status_code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        service.count("http_400")
        return JSONResponse({"error": _validation_message(exc.errors(), request.headers.get("content-type"))}, 400)

    auth: list[Any] = []
    if token:
        bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer TOKEN")
        in_url = APIKeyQuery(
            name="token", auto_error=False, description="?token=TOKEN, for clients that are given only a URL (OpenRLHF)"
        )

        async def authorized(
            header: Optional[HTTPAuthorizationCredentials] = Security(bearer), query: Optional[str] = Security(in_url)
        ) -> None:
            # async: checked on the event loop, not on a pool thread per request
            given = header.credentials if header is not None else ""
            if hmac.compare_digest(given.encode(), token.encode()):
                return
            if query is not None and hmac.compare_digest(query.encode(), token.encode()):
                return
            raise HTTPError(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})

        auth = [Security(authorized)]
    errors = {
        code: {"model": schemas.ErrorAnswer, "description": text}
        for code, text in (
            (400, "bad request: not JSON, not an object, a field of the wrong type, no task"),
            (401, "missing or wrong token"),
            (404, "unknown task"),
            (411, "no Content-Length"),
            (413, "body over the size limit"),
            (503, "the queue stayed full for the admission wait; retry"),
        )
    }
    answers = dict(dependencies=auth, responses=errors, response_model_exclude_unset=True)

    @app.get("/health", response_model=schemas.HealthAnswer, summary="Is it up (no token needed)")
    async def health() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/status", response_model=schemas.StatusAnswer, summary="Workers, queue and counts", **answers)
    async def status() -> dict[str, Any]:
        return service.status()

    @app.post("/tasks", response_model=schemas.TaskAnswer, summary="Register a task", **answers)
    async def tasks(body: schemas.TaskRequest) -> Any:
        service.count("requests")
        return await in_thread(_register, service, body.task if body.task is not None else body.task_path)

    @app.post(
        "/evaluate", response_model=schemas.EvaluateAnswer, summary="Evaluate one program or completion", **answers
    )
    async def evaluate(body: schemas.EvaluateRequest) -> Any:
        service.count("requests")
        return await in_thread(lambda: service.submit("evaluate", [_sent(body)])[0])

    @app.post(
        "/reward",
        response_model=Union[schemas.RewardBatchAnswer, schemas.RewardDetail],
        summary="Score one completion, or a batch in 'items'",
        **answers,
    )
    async def reward(body: schemas.RewardRequest) -> Any:
        service.count("requests")
        return await in_thread(_reward, service, _sent(body))

    @app.post(
        "/get_reward",
        response_model=schemas.OpenRLHFAnswer,
        summary="OpenRLHF's remote reward model (--remote_rm_url)",
        **answers,
    )
    async def get_reward(body: schemas.OpenRLHFRequest) -> Any:
        service.count("requests")
        return await in_thread(lambda: openrlhf_response(service.submit("reward", _openrlhf_items(_sent(body)))))

    def openapi() -> dict[str, Any]:
        # A request that does not fit its schema is answered 400 (as before
        # FastAPI), not FastAPI's 422: the generated 422 entries would be untrue.
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            for path in spec["paths"].values():
                for operation in path.values():
                    operation.get("responses", {}).pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                spec.get("components", {}).get("schemas", {}).pop(name, None)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _register(service: EvaluationService, spec: Any) -> dict[str, Any]:
    if spec is None:
        raise HTTPError(400, "POST /tasks needs 'task' (a task dict) or 'task_path'")
    if isinstance(spec, str) and not service.scorer.tasks.allow_paths:
        raise PermissionError("task paths are not accepted by this server (start it with --allow-task-paths)")
    task = service.scorer.tasks.register(spec)
    return {"task_id": task.id, "name": task.name}


def _reward(service: EvaluationService, body: dict[str, Any]) -> Any:
    config = RewardConfig.from_dict(body.pop("config", None)) if body.get("config") else None
    if "items" in body:
        items = body["items"]
        if not isinstance(items, list):
            raise HTTPError(400, "'items' must be a list of objects")
        rewards = service.submit("reward", items, config)
        return {"rewards": [r.reward for r in rewards], "details": [_brief(r) for r in rewards]}
    return _brief(service.submit("reward", [body], config)[0])


def _sent(body: Any) -> dict[str, Any]:
    """A request model back as the dict the client sent (fields it left out stay out)."""
    return body.model_dump(exclude_unset=True)


def _validation_message(errors: Sequence[Mapping[str, Any]], content_type: Optional[str]) -> str:
    """Pydantic's errors as one line that names the field."""
    first = errors[0] if errors else {}
    where = [str(part) for part in first.get("loc", ())[1:]]
    if first.get("type") == "json_invalid":
        return f"request body is not JSON: {(first.get('ctx') or {}).get('error', first.get('msg'))}"
    if not where and first.get("type") in ("model_attributes_type", "dict_type", "missing"):
        if content_type is None or "json" not in content_type:
            return "send the body as JSON, with 'Content-Type: application/json'"
        return "request body must be a JSON object"
    said = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'body'}: {e.get('msg')}" for e in errors[:3])
    return said + (f" (and {len(errors) - 3} more)" if len(errors) > 3 else "")


class BodyLimit:
    """The size rule of every POST, before its body is read: no
    Content-Length is a 411, more than ``max_body`` bytes a 413. A client
    that asks first (``Expect: 100-continue``) is told before it sends; one
    that sends anyway has its body read and dropped (up to DISCARD_LIMIT)
    first: closing a socket with unread data makes the kernel send a reset,
    and the client would see "connection reset" instead of the 413."""

    def __init__(self, app: Any, max_body: int, service: EvaluationService) -> None:
        self.app, self.max_body, self.service = app, max_body, service

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is None:
            await self._answer(scope, send, 411, "Content-Length required")
            return
        size = int(length)  # the HTTP parser has refused a Content-Length that is not a number
        if size <= self.max_body:
            await self.app(scope, receive, send)
            return
        if headers.get(b"expect", b"").lower() != b"100-continue":
            left = min(size, DISCARD_LIMIT)
            while left > 0:
                message = await receive()
                if message["type"] != "http.request":
                    break
                left -= len(message.get("body", b""))
                if not message.get("more_body"):
                    break
        await self._answer(scope, send, 413, f"request body of {size} bytes is over the limit of {self.max_body}")

    async def _answer(self, scope: dict, send: Callable, status: int, error: str) -> None:
        self.service.count(f"http_{status}")
        # "close": what the client did not send (or we did not read) is never parsed as a next request
        await JSONResponse({"error": error}, status, {"Connection": "close"})(scope, _nothing, send)


async def _nothing() -> dict:
    return {"type": "http.disconnect"}


API_DESCRIPTION = """\
Evaluation and reward service for RL trainers (`kernelsmith serve`). Candidate
code runs only in the evaluator's sandboxed workers, never in this process.

Requests wait for room when the queue is full (first come, first admitted) and
get a 503 with `Retry-After` only after the admission wait. Errors answer
`{"error": "..."}`. With a token, every route but `/health`, `/docs` and
`/openapi.json` needs `Authorization: Bearer TOKEN` or `?token=TOKEN`.
"""


def openrlhf_response(rewards: Sequence[Reward]) -> dict[str, Any]:
    """OpenRLHF's remote reward answer. ``extra_logs`` has the same keys for
    every response whatever its verdict: OpenRLHF turns them into per-sample
    tensors and stacks samples into batches, which fails when keys differ.
    Each value is a list with one number per query."""
    values = [float(r.reward) for r in rewards]
    logs: dict[str, list[float]] = {
        f"kernelsmith/{status}": [float(r.status == status) for r in rewards] for status in STATUSES
    }
    logs["kernelsmith/speedup"] = [float(r.speedup or 0.0) for r in rewards]
    return {"rewards": values, "scores": values, "extra_logs": logs}


def _brief(reward: Reward) -> dict[str, Any]:
    """A reward as /reward and /evaluate_batch answer it. Each speedup says
    what it is against: ``speedup_vs_parent`` (what the reward pays, after
    the CI rule) and ``speedup_vs_reference`` (the completion over PyTorch);
    ``speedup`` and ``speedup_ci`` are the first's old names, kept for
    clients that read them."""
    data = reward.to_dict()
    result = data.pop("result", None) or {}
    data["speedup_vs_parent"] = data["speedup"]
    data["speedup_vs_parent_ci"] = data["speedup_ci"]
    data["speedup_vs_reference"] = result.get("speedup")
    data["category"] = result.get("category")
    data["hack_reasons"] = result.get("hack_reasons", [])
    return data


#: oversize bodies up to this size are read and dropped so the client gets its 413
DISCARD_LIMIT = 256 * 1024 * 1024

#: listen backlog: connections the kernel holds before a handler thread accepts
#: them (the stdlib default of 5 resets a burst of a few hundred connections)
LISTEN_BACKLOG = 4096

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def check_exposure(host: str, token: Optional[str], allow_no_token: bool) -> None:
    """Anyone who can reach a token-free server can make it run code in its
    sandbox and occupy its devices: without a token, loopback only."""
    if not token and host not in LOOPBACK and not allow_no_token:
        raise ValueError(
            f"refusing to serve on {host} without a token: set one (--token-env), bind 127.0.0.1, "
            "or pass --allow-no-token on a trusted network"
        )


#: requests that may wait on a thread of their own at once (for admission,
#: then for their verdict); beyond it a request waits for a thread unseen
MAX_WAITING_REQUESTS = 4096

#: on shutdown (SIGTERM, Ctrl-C, stop()), how long answers still being
#: worked on may take before their connections are dropped
GRACEFUL_SHUTDOWN_S = 30


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound now: ``port=0`` has its number at once, and
    a port in use fails the constructor, not a background thread."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


class EvaluationServer:
    """The service on a socket, served by uvicorn. ``port=0`` picks a free
    port (see ``.port``).

    Without a token the server only binds a loopback address, unless
    ``allow_no_token`` says that the network is trusted."""

    def __init__(
        self,
        service: EvaluationService,
        host: str = "127.0.0.1",
        port: int = 8000,
        token: Optional[str] = None,
        max_request_bytes: int = 8 * 1024 * 1024,
        allow_no_token: bool = False,
    ) -> None:
        check_exposure(host, token, allow_no_token)
        self.service = service
        self.app = make_app(service, token, max_request_bytes)
        self.socket = _listen(host, port)
        config = uvicorn.Config(
            self.app,
            lifespan="off",
            log_config=None,
            proxy_headers=False,
            backlog=LISTEN_BACKLOG,
            server_header=False,
            headers=[("server", "kernelsmith-serve")],
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )

        class Server(uvicorn.Server):
            async def shutdown(self, sockets: Any = None) -> None:
                # Requests waiting for room get their 503 now, not after the
                # admission wait; admitted ones finish and are answered.
                service.queue.stop_admitting()
                await super().shutdown(sockets)

        self._uvicorn = Server(config)
        self._thread: Optional[threading.Thread] = None

    @property
    def port(self) -> int:
        return int(self.socket.getsockname()[1])

    @property
    def url(self) -> str:
        host = self.socket.getsockname()[0]
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def start(self) -> "EvaluationServer":
        """Serves on a background thread; returns once it accepts connections."""
        self._thread = threading.Thread(target=self.serve_forever, name="ks-serve-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._uvicorn.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def serve_forever(self) -> None:
        """Serves until SIGINT or SIGTERM (in the main thread) or :meth:`stop`."""
        self._uvicorn.run(sockets=[self.socket])

    def stop(self) -> None:
        self._uvicorn.should_exit = True
        self.service.queue.stop_admitting()
        if self._thread is not None:
            self._thread.join(timeout=GRACEFUL_SHUTDOWN_S + 5)
        self.close()

    def close(self) -> None:
        """Releases the socket and the service (after serving, or instead of it)."""
        self.socket.close()
        self.service.close()

    def __enter__(self) -> "EvaluationServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def build_server(
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: Optional[int] = None,
    devices: Optional[Sequence[Optional[str]]] = None,
    queue_size: int = 64,
    admission_wait_s: float = ADMISSION_WAIT_S,
    allow_no_token: bool = False,
    token: Optional[str] = None,
    max_request_bytes: int = 8 * 1024 * 1024,
    reward_config: Optional[RewardConfig] = None,
    tasks: Sequence[str] = (),
    run_dirs: Sequence[str] = (),
    allow_task_paths: bool = False,
    evaluator: Any = None,
    trials: Optional[int] = None,
    **evaluator_options: Any,
) -> EvaluationServer:
    """A server with one evaluation slot per device (CUDA devices when any,
    else ``workers`` CPU slots)."""
    check_exposure(host, token, allow_no_token)  # before any evaluation worker starts
    if devices is None:
        devices = local_devices(workers or 1)
    slots = list(devices)
    cuda = [d for d in slots if d is not None]
    if evaluator is None:
        evaluator = Evaluator(workers=len(slots), devices=cuda or None, **evaluator_options)
    registry = TaskRegistry(allow_paths=allow_task_paths)
    for path in tasks:
        registry.register(path)
    for run_dir in run_dirs:
        registry.register_run(run_dir)
    scorer = LocalScorer(evaluator, reward_config, registry, trials=trials)
    service = EvaluationService(
        scorer, workers=len(slots), queue_size=queue_size, devices=slots, admission_wait_s=admission_wait_s
    )
    return EvaluationServer(
        service, host=host, port=port, token=token, max_request_bytes=max_request_bytes, allow_no_token=allow_no_token
    )
