"""The HTTP evaluation service behind ``kernelsmith serve``.

Stdlib only (``ThreadingHTTPServer``). Each request is handled on its own
thread; evaluations go through one bounded queue to ``workers`` worker
threads, one per device, each evaluating in the Evaluator's sandboxed
processes. A request that finds the queue full waits for room (first come,
first admitted) for up to ``admission_wait_s`` and only then gets 503:
trainers such as OpenRLHF treat any error status as a failed rollout, so
backpressure is a slower answer, not a refusal. Connections beyond the
handler threads wait in a listen backlog sized for bursts of hundreds of
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

Errors: 400 bad request, 401 missing/wrong bearer token, 404 unknown path or
task, 411 no Content-Length, 413 body over the size limit, 503 the queue
stayed full for ``admission_wait_s``.

The token goes in ``Authorization: Bearer TOKEN`` or, for clients that can
only be given a URL (OpenRLHF's ``--remote_rm_url``), in its query string
(``/get_reward?token=TOKEN``). Without a token the server binds loopback
only, unless told otherwise.
"""
from __future__ import annotations

import collections
import hmac
import json
import logging
import threading
import time
import urllib.parse
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping, Optional, Sequence

from ..rewards.core import STATUSES, Reward, RewardConfig
from ..rewards.scorer import LocalScorer, TaskRegistry, completion_text, item_from_verl

log = logging.getLogger("kernelsmith.server")


#: how long a request waits for room in a full queue before its 503: below
#: OpenRLHF's 180 s request timeout, so that it sees an answer it retries on
#: rather than a dropped connection while its request still waits here
ADMISSION_WAIT_S = 150.0


class QueueFull(Exception):
    pass


class HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


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
        self._cond = threading.Condition()
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
                        raise QueueFull(f"queue full ({len(self._jobs)} waiting, {self.running} running, "
                                        f"{self.workers} workers, queue capacity {self.capacity}, "
                                        f"waited {max(0.0, wait_s):.0f} s)")
                    waited = True
                    self._cond.wait(left)
            except QueueFull:
                self._give_up(ticket)
                raise
            finally:
                self.waiting_admission -= 1
            self._advance()
            self.admitted_after_waiting += waited
            futures = []
            for payload in payloads:
                future: Future = Future()
                self._jobs.append((payload, future))
                futures.append(future)
            self._cond.notify_all()
            return futures

    def _give_up(self, ticket: int) -> None:
        # Skipped when its turn comes, so the requests behind it are not blocked by it.
        self._abandoned.add(ticket)
        if ticket == self._serving_ticket:
            self._advance()
        self._cond.notify_all()

    def _advance(self) -> None:
        self._serving_ticket += 1
        while self._serving_ticket in self._abandoned:
            self._abandoned.discard(self._serving_ticket)
            self._serving_ticket += 1

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
                    self._cond.notify_all()  # room for a request waiting for admission

    def length(self) -> int:
        with self._cond:
            return len(self._jobs)

    def close(self) -> None:
        """Stops admitting; jobs already admitted still run to the end."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
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

    def __init__(self, scorer: LocalScorer, workers: int, queue_size: int = 64,
                 devices: Sequence[Optional[str]] = (), admission_wait_s: float = ADMISSION_WAIT_S) -> None:
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

    def submit(self, kind: str, items: Sequence[Mapping[str, Any]],
               config: Optional[RewardConfig] = None) -> list[Any]:
        # Bad requests fail here, before they take a queue slot.
        for item in items:
            self.scorer.tasks.resolve(item)
        futures = self.queue.submit_many([(kind, item, config) for item in items], self.admission_wait_s)
        self.count("evaluations_queued", len(items))
        out = [f.result() for f in futures]
        for value in out:
            status = value.status if isinstance(value, Reward) else (
                (value.get("result") or {}).get("category") or "edit")
            self.count(f"{kind}:{status}")
        return out

    def status(self) -> dict[str, Any]:
        with self._counts_lock:
            counts = dict(sorted(self.counts.items()))
        return {
            "workers": self.queue.workers, "devices": [d if d is not None else "cpu" for d in self.devices],
            "queue_length": self.queue.length(), "queue_capacity": self.queue.capacity,
            "running": self.queue.running, "waiting_admission": self.queue.waiting_admission,
            "admitted_after_waiting": self.queue.admitted_after_waiting,
            "admission_wait_s": self.admission_wait_s, "counts": counts, "tasks": self.scorer.tasks.ids(),
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
        response = query[len(prompt):] if prompt and isinstance(query, str) and query.startswith(prompt) else query
        items.append(item_from_verl(completion_text(response), label, None))
    return items


def make_handler(service: EvaluationService, token: Optional[str], max_body: int) -> type:
    class Handler(BaseHTTPRequestHandler):
        server_version = "kernelsmith-serve"
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server API
            log.info("%s %s", self.address_string(), format % args)

        # -- plumbing ---------------------------------------------------
        def _send(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        @property
        def route(self) -> str:
            return urllib.parse.urlsplit(self.path).path

        def _authorized(self) -> bool:
            if not token:
                return True
            given = self.headers.get("Authorization", "")
            if hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return True
            # OpenRLHF's --remote_rm_url is a bare URL: the token can only travel in it.
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("token", [""])
            return hmac.compare_digest(query[-1].encode(), token.encode())

        def handle_expect_100(self) -> bool:
            # A client that asks first is told 413 before it sends an oversize body.
            try:
                size = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                size = 0
            if size > max_body:
                service.count("http_413")
                self.close_connection = True
                self._send(413, {"error": f"request body of {size} bytes is over the limit of {max_body}"})
                return False
            return super().handle_expect_100()

        def _body(self) -> Any:
            length = self.headers.get("Content-Length")
            if length is None:
                raise HTTPError(411, "Content-Length required")
            try:
                size = int(length)
            except ValueError:
                raise HTTPError(400, "bad Content-Length") from None
            if size < 0:
                raise HTTPError(400, "bad Content-Length")
            if size > max_body:
                self.close_connection = True  # what is left unread must not be parsed as the next request
                self._discard(size)
                raise HTTPError(413, f"request body of {size} bytes is over the limit of {max_body}")
            try:
                return json.loads(self.rfile.read(size) or b"{}")
            except json.JSONDecodeError as exc:
                raise HTTPError(400, f"request body is not JSON: {exc}") from None

        def _discard(self, size: int) -> None:
            # Closing a socket with unread data makes the kernel send a reset,
            # and the client sees "connection reset" instead of the 413: read
            # (and drop) a body of up to DISCARD_LIMIT first.
            left = min(size, DISCARD_LIMIT)
            while left > 0:
                chunk = self.rfile.read(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)

        def _handle(self, fn: Callable[[], Any]) -> None:
            try:
                self._send(200, fn())
            except HTTPError as exc:
                service.count(f"http_{exc.status}")
                self._send(exc.status, {"error": str(exc)})
            except QueueFull as exc:
                service.count("rejected_queue_full")
                self._send(503, {"error": str(exc)}, {"Retry-After": "1"})
            except KeyError as exc:
                service.count("http_404")
                self._send(404, {"error": str(exc.args[0]) if exc.args else "not found"})
            except (ValueError, TypeError, PermissionError) as exc:
                service.count("http_400")
                self._send(400, {"error": str(exc)})
            except Exception as exc:  # noqa: BLE001 - the server stays up
                log.exception("request failed")
                service.count("http_500")
                self._send(500, {"error": f"{type(exc).__name__}: {exc}"})

        # -- routes -----------------------------------------------------
        def do_GET(self) -> None:  # noqa: N802 - http.server API
            if self.route == "/health":
                self._send(200, {"status": "ok"})
                return
            if not self._authorized():
                self._send(401, {"error": "missing or wrong bearer token"}, {"WWW-Authenticate": "Bearer"})
                return
            if self.route == "/status":
                self._handle(service.status)
            else:
                self._send(404, {"error": f"no route GET {self.route}"})

        def do_POST(self) -> None:  # noqa: N802 - http.server API
            if not self._authorized():
                service.count("http_401")
                self.close_connection = True
                self._send(401, {"error": "missing or wrong bearer token"}, {"WWW-Authenticate": "Bearer"})
                return
            routes = {"/evaluate": self._evaluate, "/reward": self._reward, "/get_reward": self._openrlhf,
                      "/tasks": self._tasks}
            route = routes.get(self.route)
            if route is None:
                self.close_connection = True
                self._send(404, {"error": f"no route POST {self.route}"})
                return
            self._handle(route)

        def _object(self) -> dict[str, Any]:
            body = self._body()
            if not isinstance(body, dict):
                raise HTTPError(400, "request body must be a JSON object")
            service.count("requests")
            return body

        def _evaluate(self) -> Any:
            return service.submit("evaluate", [self._object()])[0]

        def _reward(self) -> Any:
            body = self._object()
            config = RewardConfig.from_dict(body.pop("config", None)) if body.get("config") else None
            if "items" in body:
                items = body["items"]
                if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                    raise HTTPError(400, "'items' must be a list of objects")
                rewards = service.submit("reward", items, config)
                return {"rewards": [r.reward for r in rewards], "details": [_brief(r) for r in rewards]}
            return _brief(service.submit("reward", [body], config)[0])

        def _openrlhf(self) -> Any:
            items = _openrlhf_items(self._object())
            return openrlhf_response(service.submit("reward", items))

        def _tasks(self) -> Any:
            body = self._object()
            spec = body.get("task") if body.get("task") is not None else body.get("task_path")
            if spec is None:
                raise HTTPError(400, "POST /tasks needs 'task' (a task dict) or 'task_path'")
            if isinstance(spec, str) and not service.scorer.tasks.allow_paths:
                raise PermissionError("task paths are not accepted by this server (start it with --allow-task-paths)")
            task = service.scorer.tasks.register(spec)
            return {"task_id": task.id, "name": task.name}

    return Handler


def openrlhf_response(rewards: Sequence[Reward]) -> dict[str, Any]:
    """OpenRLHF's remote reward answer. ``extra_logs`` has the same keys for
    every response whatever its verdict: OpenRLHF turns them into per-sample
    tensors and stacks samples into batches, which fails when keys differ.
    Each value is a list with one number per query."""
    values = [float(r.reward) for r in rewards]
    logs: dict[str, list[float]] = {f"kernelsmith/{status}": [float(r.status == status) for r in rewards]
                                    for status in STATUSES}
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
        raise ValueError(f"refusing to serve on {host} without a token: set one (--token-env), bind 127.0.0.1, "
                         "or pass --allow-no-token on a trusted network")


class _HTTPServer(ThreadingHTTPServer):
    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True


class EvaluationServer:
    """The service on a socket. ``port=0`` picks a free port (see ``.port``).

    Without a token the server only binds a loopback address, unless
    ``allow_no_token`` says that the network is trusted."""

    def __init__(self, service: EvaluationService, host: str = "127.0.0.1", port: int = 8000,
                 token: Optional[str] = None, max_request_bytes: int = 8 * 1024 * 1024,
                 allow_no_token: bool = False) -> None:
        check_exposure(host, token, allow_no_token)
        self.service = service
        self.httpd = _HTTPServer((host, port), make_handler(service, token, max_request_bytes))
        self._thread: Optional[threading.Thread] = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        host = self.httpd.server_address[0]
        return f"http://{host}:{self.port}"

    def start(self) -> "EvaluationServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="ks-serve-http", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.service.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "EvaluationServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def build_server(*, host: str = "127.0.0.1", port: int = 8000, workers: Optional[int] = None,
                 devices: Optional[Sequence[Optional[str]]] = None, queue_size: int = 64,
                 admission_wait_s: float = ADMISSION_WAIT_S, allow_no_token: bool = False,
                 token: Optional[str] = None, max_request_bytes: int = 8 * 1024 * 1024,
                 reward_config: Optional[RewardConfig] = None, tasks: Sequence[str] = (),
                 run_dirs: Sequence[str] = (), allow_task_paths: bool = False,
                 evaluator: Any = None, trials: Optional[int] = None, **evaluator_options: Any) -> EvaluationServer:
    """A server with one evaluation slot per device (CUDA devices when any,
    else ``workers`` CPU slots)."""
    check_exposure(host, token, allow_no_token)  # before any evaluation worker starts
    if devices is None:
        devices = local_devices(workers or 1)
    slots = list(devices)
    cuda = [d for d in slots if d is not None]
    if evaluator is None:
        from ..evaluator import Evaluator

        evaluator = Evaluator(workers=len(slots), devices=cuda or None, **evaluator_options)
    registry = TaskRegistry(allow_paths=allow_task_paths)
    for path in tasks:
        registry.register(path)
    for run_dir in run_dirs:
        registry.register_run(run_dir)
    scorer = LocalScorer(evaluator, reward_config, registry, trials=trials)
    service = EvaluationService(scorer, workers=len(slots), queue_size=queue_size, devices=slots,
                                admission_wait_s=admission_wait_s)
    return EvaluationServer(service, host=host, port=port, token=token, max_request_bytes=max_request_bytes,
                            allow_no_token=allow_no_token)
