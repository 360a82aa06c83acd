"""The HTTP evaluation service: bound to 127.0.0.1 on a free port, stopped
by each test. Queue behaviour is tested with a scorer that blocks until told
(no timing); one real sandboxed evaluation checks /evaluate end to end."""
from __future__ import annotations

import json
import threading
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


def test_job_queue_bounds_waiting_jobs():
    gate = threading.Event()
    queue = JobQueue(lambda payload: gate.wait(30) and payload, workers=1, capacity=2)
    try:
        with pytest.raises(QueueFull):  # a batch is admitted whole or not at all
            queue.submit_many(["x", "y", "z", "w"])
        assert queue.length() == 0
        first = queue.submit_many(["a"])
        waiting = queue.submit_many(["b", "c"])  # one running + two waiting: full
        with pytest.raises(QueueFull):
            queue.submit_many(["d"])
        gate.set()
        assert [f.result(10) for f in first + waiting] == ["a", "b", "c"]
        assert queue.submit_many(["g"])[0].result(10) == "g"
    finally:
        gate.set()
        queue.close()


def test_queue_full_is_503_and_status_counts():
    scorer = BlockingScorer()
    task = Task.load(SOFTMAX)
    scorer.tasks.register(task)
    service = EvaluationService(scorer, workers=1, queue_size=0)  # type: ignore[arg-type]
    server = EvaluationServer(service, port=0, token=TOKEN).start()
    try:
        assert server.url.startswith("http://127.0.0.1:")
        item = {"task_id": task.id, "source": SEED}
        results: list[tuple[int, dict]] = []
        worker = threading.Thread(target=lambda: results.append(post(server.url + "/reward", item)))
        worker.start()
        assert scorer.started.acquire(timeout=30)  # the one worker is busy now
        code, body = get(server.url + "/status")
        assert code == 200 and body["running"] == 1 and body["queue_length"] == 0 and body["workers"] == 1
        code, body = post(server.url + "/reward", item)
        assert code == 503 and "queue full" in body["error"]
        scorer.release.set()
        worker.join(30)
        assert results == [(200, results[0][1])] and results[0][1]["reward"] == 1.0
        code, body = get(server.url + "/status")
        assert body["counts"]["rejected_queue_full"] == 1 and body["counts"]["reward:correct"] == 1
        assert body["tasks"] == [task.id]
    finally:
        scorer.release.set()
        server.stop()


@pytest.fixture(scope="module")
def live():
    server = build_server(port=0, workers=1, queue_size=4, token=TOKEN, max_request_bytes=64 * 1024,
                          tasks=[str(SOFTMAX)]).start()
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
    assert post(live.url + "/evaluate", big)[0] == 413
    assert post(live.url + "/evaluate", None, raw=b"{not json")[0] == 400
    assert post(live.url + "/evaluate", {"task_id": "nope", "source": SEED})[0] == 404
    code, body = post(live.url + "/evaluate", {"task_path": str(SOFTMAX), "source": SEED})
    assert code == 400 and "task paths are not accepted" in body["error"]
    assert post(live.url + "/nowhere", {})[0] == 404


def test_evaluate_and_rewards_over_http(live):
    task_id = Task.load(SOFTMAX).id
    code, body = post(live.url + "/evaluate", {"task_id": task_id, "source": SEED, "trials": 1})
    assert code == 200 and body["result"]["category"] == "ok" and body["result"]["correct"]
    runtime = body["result"]["runtime_ms"]
    # Edit failures are scored without an evaluation: cheap checks of the reward routes.
    label = json.dumps({"task_id": task_id, "parent_source": SEED, "parent_runtime_ms": runtime})
    code, body = post(live.url + "/get_reward", {"query": ["PROMPT no code here"], "prompts": ["PROMPT"],
                                                 "labels": [label]})
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
