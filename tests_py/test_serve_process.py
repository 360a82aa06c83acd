"""``kernelsmith serve`` as the real process a trainer talks to: started with
``python -m kernelsmith serve`` on 127.0.0.1 and a free port, hit by real HTTP
clients (threads, http.client, a fresh connection per request).

test_server.py drives the same server in-process; this checks what only the
process shows: the listen backlog and the admission queue of the command's
own defaults under a burst, and the 413/400 answers on its sockets.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX = ROOT / "examples" / "opencl" / "softmax"
SEED = (SOFTMAX / "seed.py").read_text()
TOKEN = "serve-process-token-42"
BURST = 240


class ServeProcess:
    def __init__(self, proc: subprocess.Popen, port: int, lines: list[str]) -> None:
        self.proc, self.port, self.lines = proc, port, lines

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        token: str | None = TOKEN,
        headers: dict[str, str] | None = None,
        timeout: float = 300,
    ) -> tuple[int, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            sent = {"Content-Type": "application/json", **(headers or {})}
            if token:
                sent["Authorization"] = f"Bearer {token}"
            connection.request(method, path, body=body, headers=sent)
            response = connection.getresponse()
            data = response.read()
            return response.status, json.loads(data) if data else None
        finally:
            connection.close()

    def post(self, path: str, payload: Any) -> tuple[int, Any]:
        return self.request("POST", path, json.dumps(payload).encode())


def _env() -> dict[str, str]:
    import kernelsmith

    package_root = str(Path(kernelsmith.__file__).resolve().parent.parent)
    return dict(
        os.environ,
        KERNELSMITH_SERVER_TOKEN=TOKEN,
        PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]),
    )


@pytest.fixture
def serve() -> Iterator[ServeProcess]:
    # --max-request-mb 0.0625: 64 KiB, so a too-large body is quick to send;
    # --queue-size 4 and one worker: a burst of BURST must wait for room.
    cmd = [
        sys.executable,
        "-m",
        "kernelsmith",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--workers",
        "1",
        "--queue-size",
        "4",
        "--max-request-mb",
        "0.0625",
        "--task",
        str(SOFTMAX),
    ]
    proc = subprocess.Popen(cmd, env=_env(), stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines: list[str] = []
    port = None
    deadline = time.monotonic() + 180
    for line in proc.stderr:
        lines.append(line)
        match = re.search(r"serve on http://127\.0\.0\.1:(\d+)", line)
        if match:
            port = int(match.group(1))
            break
        if time.monotonic() > deadline:
            break
    if port is None:
        proc.kill()
        pytest.fail("kernelsmith serve did not start:\n" + "".join(lines)[-3000:])
    # keep draining stderr: a full pipe would block the server's logging
    drain = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    drain.start()
    server = ServeProcess(proc, port, lines)
    try:
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_real_serve_process_holds_a_burst_and_answers_413_and_400(serve):
    from kernelsmith.task import Task

    code, health = serve.request("GET", "/health", token=None)
    assert (code, health) == (200, {"status": "ok"})
    before = serve.request("GET", "/status")[1]
    assert before["queue_capacity"] == 4 and before["workers"] == 1

    # Completions without a program are scored by the real scorer with no
    # sandboxed evaluation (edit-failed): the burst measures the server's
    # sockets, admission and queue, not the evaluator.
    item = {"task_id": Task.load(SOFTMAX).id, "completion": "no code in this answer", "parent_source": SEED}
    start = threading.Barrier(BURST)
    answers: list[Any] = [None] * BURST

    def one(i: int) -> None:
        start.wait(120)
        try:
            answers[i] = serve.post("/reward", item)
        except Exception as exc:  # noqa: BLE001 -- a reset or refused connection is what this test looks for
            answers[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(BURST)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    errors = [a for a in answers if isinstance(a, BaseException)]
    assert not errors, f"{len(errors)} connections failed, e.g. {errors[:3]!r}"
    assert [a for a in answers if a[0] != 200] == []
    assert {a[1]["status"] for a in answers} == {"edit-failed"}

    # Too large: 413 with a reason, also while the body is still being sent.
    big = json.dumps({"task_id": "x", "source": "#" * (200 * 1024)}).encode()
    code, body = serve.request("POST", "/evaluate", big)
    assert code == 413 and "over the limit" in body["error"]
    # Malformed: 400 with a reason, and no evaluation.
    for raw in (b"{not json", b"[1, 2]"):
        code, body = serve.request("POST", "/evaluate", raw)
        assert code == 400 and body["error"], raw
    assert serve.post("/reward", {"items": "not a list"})[0] == 400

    after = serve.request("GET", "/status")[1]
    counts, earlier = after["counts"], before["counts"]
    assert counts["reward:edit-failed"] - earlier.get("reward:edit-failed", 0) == BURST  # none lost
    for refused in ("rejected_queue_full", "http_503", "http_500"):
        assert counts.get(refused, 0) == earlier.get(refused, 0), refused
    assert serve.proc.poll() is None  # still serving
    assert "Traceback" not in "".join(serve.lines)
