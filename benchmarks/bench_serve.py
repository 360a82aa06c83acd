"""Load test of `kernelsmith serve` on loopback: a burst of concurrent
requests from one machine, the way an RL trainer's rollout workers send them.

`kernelsmith serve` is started as its own process (127.0.0.1, a free port, a
token), then `--requests` POST /get_reward requests (OpenRLHF's shape, the
token in the URL as OpenRLHF must send it) are sent from `--concurrency`
client threads, each request on a fresh connection (as OpenRLHF's client
does). Every `--correct-every`-th completion is a real kernel that is
evaluated in the sandbox; the others carry no program, so they measure the
server (HTTP, admission, queue) rather than the evaluator. The queue is
small (`--queue-size`), so most requests wait for room.

Prints requests, concurrency, errors by kind (connection resets, HTTP
statuses), latency p50/p90/p99/max, throughput and the server process's own
CPU time per answered request (on a shared machine a steadier figure than
the wall time). Bounded in count and time (`--time-limit`).

    python benchmarks/bench_serve.py                       # 1000 requests, 250 at once
    python benchmarks/bench_serve.py --requests 2000 --concurrency 400 --correct-every 100
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX = ROOT / "examples" / "opencl" / "softmax"
TOKEN = "bench-token"


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen, int]:
    env = dict(os.environ, KERNELSMITH_SERVER_TOKEN=TOKEN)
    cmd = [
        sys.executable,
        "-m",
        "kernelsmith",
        "serve",
        "--port",
        "0",
        "--workers",
        str(args.workers),
        "--queue-size",
        str(args.queue_size),
        "--task",
        str(SOFTMAX),
        "--admission-wait",
        str(args.time_limit),
    ]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 120
    for line in proc.stderr:
        match = re.search(r"serve on http://127\.0\.0\.1:(\d+)", line)
        if match:
            # Keep draining stderr so the server never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # type: ignore[union-attr]
            return proc, int(match.group(1))
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("kernelsmith serve did not start")


def server_cpu_s(pid: int) -> float:
    """User + system CPU seconds of the server process itself (Linux /proc), NaN elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def label() -> str:
    from kernelsmith.task import Task

    task = Task.load(SOFTMAX)
    spec = task.to_dict()
    return json.dumps(
        {
            "task": {
                "reference_source": task.reference_source,
                "config_json": json.dumps(spec["config"]),
                "path": task.path,
            },
            "parent_source": (SOFTMAX / "seed.py").read_text(),
            "parent_runtime_ms": 0.0,
        }
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=250)
    parser.add_argument("--queue-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--correct-every",
        type=int,
        default=200,
        help="every N-th completion is a real kernel, evaluated (default 200; 0 = none)",
    )
    parser.add_argument("--time-limit", type=float, default=300.0, help="seconds for the whole burst (default 300)")
    args = parser.parse_args()

    seed = (SOFTMAX / "seed.py").read_text()
    correct = "```python\n" + seed.replace("WORK_GROUP = 64", "WORK_GROUP = 32") + "```\n"
    truth = label()
    proc, port = start_server(args)
    latencies: list[float] = []
    errors: collections.Counter[str] = collections.Counter()
    statuses: collections.Counter[int] = collections.Counter()
    said: dict[int, object] = {}  # the first answer of each status other than 200: why it was not answered
    lock = threading.Lock()
    next_index = iter(range(args.requests))
    deadline = time.monotonic() + args.time_limit

    def one(i: int) -> None:
        completion = correct if args.correct_every and i % args.correct_every == 0 else "no program here"
        body = json.dumps({"query": ["PROMPT" + completion], "prompts": ["PROMPT"], "labels": [truth]}).encode()
        start = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=max(1.0, deadline - time.monotonic()))
            conn.request("POST", f"/get_reward?token={TOKEN}", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            data = json.loads(response.read())
            conn.close()
            with lock:
                statuses[response.status] += 1
                if response.status != 200:
                    said.setdefault(response.status, data.get("error") if isinstance(data, dict) else data)
                if response.status == 200 and len(data["rewards"]) == 1:
                    latencies.append(time.perf_counter() - start)
        except (OSError, http.client.HTTPException) as exc:
            with lock:
                errors[type(exc).__name__] += 1

    def client() -> None:
        while time.monotonic() < deadline:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            one(i)

    cpu_before = server_cpu_s(proc.pid)
    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/status", headers={"Authorization": f"Bearer {TOKEN}"})
    status = json.loads(conn.getresponse().read())
    cpu_s = server_cpu_s(proc.pid) - cpu_before
    proc.terminate()
    proc.wait(30)

    sent = sum(statuses.values()) + sum(errors.values())
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000 if ordered else float("nan")

    print(
        f"kernelsmith serve load test: {sent} of {args.requests} requests sent, concurrency {args.concurrency}, "
        f"queue {args.queue_size}, {args.workers} worker(s), every {args.correct_every or 'no'}-th evaluated"
    )
    print(
        f"  answered 200: {statuses.get(200, 0)}; other statuses: "
        f"{dict((k, v) for k, v in statuses.items() if k != 200) or 'none'}; "
        f"connection errors: {dict(errors) or 'none'}"
    )
    for code, error in sorted(said.items()):
        print(f"  first {code} answer: {error}")
    print(
        f"  latency ms: p50 {pct(0.50):.1f}  p90 {pct(0.90):.1f}  p99 {pct(0.99):.1f}  max {pct(1.0):.1f}  "
        f"(mean {statistics.fmean(ordered) * 1000 if ordered else float('nan'):.1f})"
    )
    print(
        f"  wall {wall:.1f} s, {len(ordered) / wall:.0f} answered requests/s; "
        f"admitted after waiting for room: {status['admitted_after_waiting']}"
    )
    if cpu_s == cpu_s:  # not NaN: /proc was readable
        print(
            f"  server process CPU: {cpu_s:.2f} s during the burst, "
            f"{cpu_s / max(1, len(ordered)) * 1000:.2f} ms per answered request (its own threads, not the "
            f"sandboxed workers'; less sensitive than wall time to what else the machine runs)"
        )
    print(f"  server counts: {status['counts']}")
    return 0 if len(ordered) == args.requests else 1


if __name__ == "__main__":
    sys.exit(main())
