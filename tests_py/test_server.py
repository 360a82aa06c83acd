"""The HTTP evaluation service: bound to 127.0.0.1 on a free port, stopped
by each test. Queue behaviour is tested with a scorer that blocks until told
(no timing); one real sandboxed evaluation checks /evaluate end to end."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kernelsmith.rewards import RewardBackend, RewardConfig, compute_score
from kernelsmith.rewards.core import Reward
from kernelsmith.rewards.scorer import TaskRegistry
from kernelsmith.server import EvaluationClient, EvaluationServer, EvaluationService, JobQueue, QueueFull, build_server
from kernelsmith.server.client import ServerError
from kernelsmith.task import Task

SOFTMAX = Path(__file__).resolve().parent.parent / "examples" / "opencl" / "softmax"
SEED = (SOFTMAX / "seed.py").read_text()
TOKEN = "test-token-123"


def post(url: str, payload: Any, token: str | None = TOKEN, raw: bytes | None = None) -> tuple[int, dict]:
    data = raw if raw is not None else json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def get(url: str, token: str | None = TOKEN) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


class BlockingScorer:
    """Scores every item 1.0, but only once released: makes queue states observable."""

    def __init__(self) -> None:
        self.tasks = TaskRegistry()
        self.release = threading.Event()
        self.started = threading.Semaphore(0)

    def score(self, item: dict, config: Any = None) -> Reward:
        self.started.release()
        assert self.release.wait(30)
        return Reward(1.0, "correct", speedup=1.0)

    def evaluate(self, item: dict) -> Any:
        raise AssertionError("not used")


def test_job_queue_waits_for_room_in_arrival_order():
    gate = threading.Event()
    done: list[str] = []
    queue = JobQueue(lambda payload: gate.wait(30) and done.append(payload) or payload, workers=1, capacity=1)
    try:
        first = queue.submit_many(["a"])  # running, once the worker thread has taken it
        while queue.running < 1:
            threading.Event().wait(0.01)
        second = queue.submit_many(["b"])  # waiting: the queue is full now
        with pytest.raises(QueueFull, match="queue full"):
            queue.submit_many(["x"], wait_s=0.0)  # no patience: refused at once
        admitted: dict[str, list] = {}
        big = threading.Thread(target=lambda: admitted.update(big=queue.submit_many(["c", "d", "e"], wait_s=30)))
        big.start()
        while queue.waiting_admission < 1:
            threading.Event().wait(0.01)
        small = threading.Thread(target=lambda: admitted.update(small=queue.submit_many(["f"], wait_s=30)))
        small.start()
        while queue.waiting_admission < 2:
            threading.Event().wait(0.01)
        assert queue.length() == 1 and not admitted  # both wait for room, nothing was refused
        gate.set()
        big.join(30)
        small.join(30)
        results = [f.result(30) for f in first + second + admitted["big"] + admitted["small"]]
        # The batch larger than the queue got in whole once it drained, and before the later small request.
        assert results == ["a", "b", "c", "d", "e", "f"] and done == results
        assert queue.waiting_admission == 0
    finally:
        gate.set()
        queue.close()


def test_job_queue_close_finishes_admitted_jobs():
    gate = threading.Event()
    queue = JobQueue(lambda payload: gate.wait(30) and payload, workers=1, capacity=4)
    futures = queue.submit_many(["a", "b", "c"])
    closer = threading.Thread(target=queue.close)
    closer.start()
    with pytest.raises(QueueFull, match="shutting down"):
        threading.Event().wait(0.05)
        queue.submit_many(["late"])
    gate.set()
    closer.join(30)
    assert [f.result(0) for f in futures] == ["a", "b", "c"]  # accepted before close: none lost


def test_an_inline_task_is_built_once_however_many_requests_carry_it(monkeypatch):
    """Every OpenRLHF label carries its task inline: a burst's request
    threads build it once (one at a time: CPython 3.11's ast.parse, which a
    Task's construction runs, fails now and then when threads run it at once)."""
    from kernelsmith.rewards import scorer as scorer_module

    task = Task.load(SOFTMAX)
    spec = {"reference_source": task.reference_source, "config": task.to_dict()["config"], "path": task.path}
    built: list[int] = []
    real = scorer_module.task_from_spec
    monkeypatch.setattr(scorer_module, "task_from_spec", lambda s: built.append(1) or real(s))
    registry = TaskRegistry(allow_paths=False)
    start = threading.Barrier(32)
    got: list[Any] = []

    def one() -> None:
        start.wait(30)
        got.append(registry.resolve({"task": dict(spec)}))

    threads = [threading.Thread(target=one) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(got) == 32 and len({id(t) for t in got}) == 1 and got[0].id == task.id
    assert built == [1] and registry.ids() == [task.id]
    other = dict(spec, config=dict(spec["config"], trials=2))  # other content: another task
    assert registry.resolve({"task": other}).id != task.id and len(built) == 2


def _one_worker_server(admission_wait_s: float) -> tuple:
    """A server with one worker and no queue, whose scorer blocks until released."""
    scorer = BlockingScorer()
    task = Task.load(SOFTMAX)
    scorer.tasks.register(task)
    service = EvaluationService(
        scorer,
        workers=1,
        queue_size=0,  # type: ignore[arg-type]
        admission_wait_s=admission_wait_s,
    )
    return scorer, task, service, EvaluationServer(service, port=0, token=TOKEN).start()


def test_full_queue_waits_then_503_and_status_counts():
    scorer, task, service, server = _one_worker_server(admission_wait_s=0.3)
    try:
        assert server.url.startswith("http://127.0.0.1:")
        item = {"task_id": task.id, "source": SEED}
        results: list[tuple[int, dict]] = []
        worker = threading.Thread(target=lambda: results.append(post(server.url + "/reward", item)))
        worker.start()
        assert scorer.started.acquire(timeout=30)  # the one worker is busy now
        code, body = get(server.url + "/status")
        assert code == 200 and body["running"] == 1 and body["queue_length"] == 0 and body["workers"] == 1
        code, body = post(server.url + "/reward", item)  # waited 0.3 s for room, then gave up
        assert code == 503 and "queue full" in body["error"] and "waited" in body["error"]
        late: list[tuple[int, dict]] = []
        waiter = threading.Thread(target=lambda: late.append(post(server.url + "/reward", item)))
        service.admission_wait_s = 30.0
        waiter.start()
        while get(server.url + "/status")[1]["waiting_admission"] < 1:
            threading.Event().wait(0.01)
        scorer.release.set()  # room: the waiting request is admitted and answered
        worker.join(30)
        waiter.join(30)
        assert results[0][0] == 200 and results[0][1]["reward"] == 1.0
        assert late[0][0] == 200 and late[0][1]["reward"] == 1.0
        code, body = get(server.url + "/status")
        assert body["counts"]["rejected_queue_full"] == 1 and body["counts"]["reward:correct"] == 2
        assert body["tasks"] == [task.id]
    finally:
        scorer.release.set()
        server.stop()


def test_stopping_answers_waiting_requests_503_at_once_and_finishes_admitted_ones():
    scorer, task, service, server = _one_worker_server(admission_wait_s=60.0)
    item = {"task_id": task.id, "source": SEED}
    running: list[tuple[int, dict]] = []
    waiting: list[tuple[int, dict, float]] = []

    def wait_for_room() -> None:
        code, body = post(server.url + "/reward", item)
        waiting.append((code, body, time.monotonic()))

    first = threading.Thread(target=lambda: running.append(post(server.url + "/reward", item)))
    first.start()
    assert scorer.started.acquire(timeout=30)
    second = threading.Thread(target=wait_for_room)
    second.start()
    while service.queue.waiting_admission < 1:
        threading.Event().wait(0.01)
    stopped_at = time.monotonic()
    stopper = threading.Thread(target=server.stop)
    stopper.start()
    second.join(30)
    # told at once (not after the 60 s admission wait), while the admitted one still runs
    assert waiting and waiting[0][0] == 503 and waiting[0][2] - stopped_at < 10 and not running
    scorer.release.set()
    first.join(30)
    stopper.join(60)
    assert running == [(200, running[0][1])] and running[0][1]["reward"] == 1.0


def test_no_token_means_loopback_only():
    with pytest.raises(ValueError, match="without a token"):
        build_server(host="0.0.0.0", port=0, workers=1, evaluator=object())
    service = EvaluationService(BlockingScorer(), workers=1)  # type: ignore[arg-type]
    try:
        with pytest.raises(ValueError, match="--allow-no-token"):
            EvaluationServer(service, host="0.0.0.0", port=0)
        EvaluationServer(service, host="0.0.0.0", port=0, allow_no_token=True).socket.close()
    finally:
        service.close()


@pytest.fixture(scope="module")
def live():
    server = build_server(
        port=0, workers=1, queue_size=4, token=TOKEN, max_request_bytes=64 * 1024, tasks=[str(SOFTMAX)]
    ).start()
    try:
        yield server
    finally:
        server.stop()


def test_health_needs_no_token_status_does(live):
    assert get(live.url + "/health", token=None) == (200, {"status": "ok"})
    assert get(live.url + "/status", token=None)[0] == 401
    assert get(live.url + "/status", token="wrong")[0] == 401
    code, body = get(live.url + "/status")
    assert code == 200 and body["devices"] == ["cpu"] and body["queue_capacity"] == 4
    assert post(live.url + "/evaluate", {"task_id": "x", "source": "y"}, token=None)[0] == 401


def test_oversize_bad_and_unknown_requests(live):
    big = {"task_id": "x", "source": "#" * (65 * 1024)}
    for _ in range(3):  # the 413 arrives (no reset while the body is still being sent), every time
        assert post(live.url + "/evaluate", big)[0] == 413
    assert post(live.url + "/evaluate", {"task_id": "x", "source": "#" * (4 * 1024 * 1024)})[0] == 413
    # A client that asks before sending (Expect: 100-continue) is told at once.
    connection = http.client.HTTPConnection("127.0.0.1", live.port, timeout=30)
    connection.putrequest("POST", "/evaluate")
    for key, value in (
        ("Content-Length", str(10**9)),
        ("Expect", "100-continue"),
        ("Authorization", f"Bearer {TOKEN}"),
    ):
        connection.putheader(key, value)
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413 and "over the limit" in json.loads(response.read())["error"]
    connection.close()
    assert post(live.url + "/evaluate", None, raw=b"{not json")[0] == 400
    assert post(live.url + "/evaluate", None, raw=b"[1, 2]")[0] == 400
    assert post(live.url + "/reward", {"items": "not a list"})[0] == 400
    assert post(live.url + "/get_reward", {"query": "not a list"})[0] == 400
    assert post(live.url + "/get_reward", {"query": ["a", "b"], "prompts": ["a"]})[0] == 400
    assert post(live.url + "/evaluate", {"task_id": "nope", "source": SEED})[0] == 404
    code, body = post(live.url + "/evaluate", {"task_path": str(SOFTMAX), "source": SEED})
    assert code == 400 and "task paths are not accepted" in body["error"]
    assert post(live.url + "/nowhere", {})[0] == 404


def test_openapi_and_docs_describe_routes_and_schemas(live):
    """/openapi.json and /docs need no token (they say what the routes are,
    nothing about the tasks or results); the schemas are those the service
    validates against: EvalResult's fields are the dataclass's own."""
    import dataclasses

    from kernelsmith.result import EvalResult

    code, spec = get(live.url + "/openapi.json", token=None)
    assert code == 200 and spec["info"]["title"] == "kernelsmith serve"
    paths = spec["paths"]
    assert set(paths) == {"/health", "/status", "/tasks", "/evaluate", "/reward", "/get_reward"}
    assert {route: set(ops) for route, ops in paths.items()} == {
        "/health": {"get"},
        "/status": {"get"},
        "/tasks": {"post"},
        "/evaluate": {"post"},
        "/reward": {"post"},
        "/get_reward": {"post"},
    }
    schemas = spec["components"]["schemas"]
    body = paths["/evaluate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"] == "#/components/schemas/EvaluateRequest"
    assert {"task_id", "task", "task_path", "source", "completion", "parent_source", "trials"} <= set(
        schemas["EvaluateRequest"]["properties"]
    )
    assert set(schemas["EvalResult"]["properties"]) == {f.name for f in dataclasses.fields(EvalResult)}
    assert {"rewards", "scores", "extra_logs"} == set(schemas["OpenRLHFAnswer"]["properties"])
    assert set(schemas["OpenRLHFRequest"]["required"]) == {"query"}
    # the errors the routes really answer: 400 for a body that does not fit (not FastAPI's 422)
    responses = paths["/reward"]["post"]["responses"]
    assert {"200", "400", "401", "404", "413", "503"} <= set(responses) and "422" not in responses
    assert responses["503"]["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/ErrorAnswer"
    # the token, in a header or in the URL; /health needs none
    assert {"HTTPBearer", "APIKeyQuery"} <= set(spec["components"]["securitySchemes"])
    assert "security" in paths["/status"]["get"] and "security" not in paths["/health"]["get"]
    with urllib.request.urlopen(live.url + "/docs", timeout=30) as answer:
        page = answer.read().decode()
    assert answer.status == 200 and "SwaggerUIBundle" in page and "'/openapi.json'" in page
    # its script and styles from this server, not a CDN (a cluster without internet), with no token either
    assert "cdn." not in page and "/docs-assets/swagger-ui-bundle.js" in page and "/docs-assets/swagger-ui.css" in page
    with urllib.request.urlopen(live.url + "/docs-assets/swagger-ui-bundle.js", timeout=30) as answer:
        assert answer.status == 200 and b"SwaggerUIBundle" in answer.read()


def test_bodies_that_do_not_fit_their_schema_are_400_with_the_field_named(live):
    code, body = post(live.url + "/evaluate", {"task_id": "x", "source": SEED, "trials": "many"})
    assert code == 400 and body["error"].startswith("trials: ")
    code, body = post(live.url + "/reward", {"task_id": "x", "config": {"no_such_setting": 1}})
    assert code == 400 and "config.no_such_setting" in body["error"]
    # JSON sent as text/plain (what a web page may send cross-origin without asking) is not read as JSON
    request = urllib.request.Request(
        live.url + "/evaluate",
        data=json.dumps({"task_id": "x", "source": SEED}).encode(),
        headers={"Content-Type": "text/plain", "Authorization": f"Bearer {TOKEN}"},
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=30)
    assert info.value.code == 400 and "Content-Type: application/json" in json.loads(info.value.read())["error"]


def test_burst_of_250_fresh_connections_from_one_client_all_answered(live):
    """250 requests at once, a fresh connection each (as OpenRLHF's client
    does), against a queue of 4 and one worker: the listen backlog holds the
    connections (no reset), full-queue requests wait for room instead of a
    503, and every accepted request is answered. No-code completions are
    scored by the real scorer without an evaluation, so this measures the
    server, not the sandbox."""
    task_id = Task.load(SOFTMAX).id
    item = {"task_id": task_id, "completion": "no code in this answer", "parent_source": SEED}
    n = 250
    start = threading.Barrier(n)
    answers: list[Any] = [None] * n

    def one(i: int) -> None:
        start.wait(60)
        try:
            answers[i] = post(live.url + "/reward", item)
        except Exception as exc:  # noqa: BLE001 - a reset or refused connection is what this test looks for
            answers[i] = exc

    before = get(live.url + "/status")[1]
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    after = get(live.url + "/status")[1]
    failed = [a for a in answers if not (isinstance(a, tuple) and a[0] == 200)]
    assert not failed, failed[:5]
    assert {a[1]["status"] for a in answers} == {"edit-failed"}
    # whether the queue of 4 ever filled depends on the machine's speed (these
    # completions are scored without an evaluation), so waiting is reported,
    # not required; test_job_queue_* cover the waiting itself
    assert after["admitted_after_waiting"] >= before["admitted_after_waiting"]
    counts, earlier = after["counts"], before["counts"]
    assert counts["reward:edit-failed"] - earlier.get("reward:edit-failed", 0) == n  # none lost
    for refused in ("rejected_queue_full", "http_503", "http_500", "http_400"):
        assert counts.get(refused, 0) == earlier.get(refused, 0), refused


def test_evaluate_and_rewards_over_http(live):
    task_id = Task.load(SOFTMAX).id
    code, body = post(live.url + "/evaluate", {"task_id": task_id, "source": SEED, "trials": 1})
    assert code == 200 and body["result"]["category"] == "ok" and body["result"]["correct"]
    runtime = body["result"]["runtime_ms"]
    # Edit failures are scored without an evaluation: cheap checks of the reward routes.
    label = json.dumps({"task_id": task_id, "parent_source": SEED, "parent_runtime_ms": runtime})
    code, body = post(
        live.url + "/get_reward", {"query": ["PROMPT no code here"], "prompts": ["PROMPT"], "labels": [label]}
    )
    assert code == 200 and body["rewards"] == [RewardConfig().edit_failed] and body["scores"] == body["rewards"]
    client = EvaluationClient(live.url, token=TOKEN)
    assert client.health() == {"status": "ok"}
    custom = RewardConfig(edit_failed=-3.0)
    item = {"task_id": task_id, "completion": "nothing", "parent_source": SEED}
    assert client.rewards([item, item], custom) == [-3.0, -3.0]
    # verl's compute_score through the server URL.
    backend = RewardBackend(url=live.url, token=TOKEN)
    assert compute_score("kernelsmith", "no code", label, None, backend=backend) == RewardConfig().edit_failed
    with pytest.raises(ServerError) as info:
        EvaluationClient(live.url).status()
    assert info.value.status == 401


def test_client_retries_connection_errors_until_the_server_is_up():
    import socket

    with socket.socket() as probe:  # a free port, nothing listening on it yet
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    scorer = BlockingScorer()
    scorer.release.set()
    service = EvaluationService(scorer, workers=1)  # type: ignore[arg-type]
    started: list[EvaluationServer] = []
    timer = threading.Timer(1.5, lambda: started.append(EvaluationServer(service, port=port, token=TOKEN).start()))
    timer.start()
    try:
        client = EvaluationClient(f"http://127.0.0.1:{port}", token=TOKEN, busy_wait_s=30)
        assert client.health() == {"status": "ok"}  # refused at first, then answered
        assert started
        with pytest.raises(ServerError):  # HTTP errors other than 503 are not retried
            EvaluationClient(f"http://127.0.0.1:{port}", token="wrong", busy_wait_s=30).status()
        short = EvaluationClient("http://127.0.0.1:9", busy_wait_s=0.2)  # nothing listens on the discard port
        with pytest.raises(urllib.error.URLError):
            short.health()
    finally:
        timer.cancel()
        for server in started:
            server.stop()
        if not started:
            service.close()
