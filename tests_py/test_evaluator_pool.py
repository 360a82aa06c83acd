"""The warm pool (evaluator/pool.py, zygote.py, contention.py) against real
workers: isolation between candidates served by the same zygote, one timing
per device at a time, the trusted shared OpenCL binary cache, finalists."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kernelsmith.evaluator import Evaluator
from kernelsmith.task import Task

HERE = Path(__file__).parent
EXAMPLES = HERE.parent / "examples"
CAND = HERE / "fixtures" / "candidates"
MARKER = "ks-pool-test-daemon"

# Runs inside a pool child, past the static checks (handed to the pool
# directly): everything a candidate could do to poison the next one.
POISONER = f'''
import os, sys, subprocess, torch, torch.nn as nn
import triton, triton.language as tl

# monkey-patches of torch that would make any later comparison pass or any
# later kernel look fast
torch.allclose = lambda *a, **k: True
torch.Tensor.clone = lambda self, *a, **k: self
torch.empty_like = lambda x, *a, **k: torch.zeros(1)
# leaked host memory, files, environment, a process that outlives us
LEAK = bytearray(200 * 2**20)
open(os.path.join(os.environ["HOME"], "planted.txt"), "w").write("x")
os.environ["KS_POISON"] = "1"
subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: pass", "{MARKER}"],
                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
# the folders of other candidates' jobs (the spare's, here): not writable
jobs = os.path.dirname(os.getcwd())
for name in os.listdir(jobs):
    if os.path.join(jobs, name) != os.getcwd():
        try:
            open(os.path.join(jobs, name, "candidate.py"), "w").write("tampered")
            print("SIBLING WRITTEN", name, file=sys.stderr)
        except OSError as exc:
            print("SIBLING REFUSED", type(exc).__name__, file=sys.stderr)


@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        raise RuntimeError("poisoned on purpose")
'''


def _daemons() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if MARKER.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def test_a_poisoning_candidate_cannot_touch_the_next_one():
    task = Task.load(EXAMPLES / "triton" / "relu", trials=2)
    seed = (EXAMPLES / "triton" / "relu" / "seed.py").read_text()
    # one worker, one spare: the next candidate is the next fork of the same zygote
    with Evaluator(backend="triton", workers=1, spares=1, timing=False) as ev:
        pool = ev._device_pool(ev.backend_for(task), ev.devices[0])  # None on a host without a GPU
        from kernelsmith.evaluator.sandbox import Limits

        bad = pool.run(task, POISONER, None, False, Limits(timeout_s=120))
        # its patches of torch are found by the integrity snapshot right
        # after its import (before forward runs); the point here is the next one
        assert bad.category == "hacked" and "the program replaced torch.allclose" in bad.hack_reasons[0], (
            bad.error,
            bad.hack_reasons,
        )
        time.sleep(0.5)
        assert _daemons() == [], "a process the candidate left behind is still running"
        if ev._uids is not None:  # as root: other children's folders belong to other uids
            assert "SIBLING REFUSED PermissionError" in bad.log_tail and "SIBLING WRITTEN" not in bad.log_tail, (
                bad.log_tail
            )
        good = ev.evaluate(task, seed)
    assert good.category == "ok" and good.correct, good.error
    # the patched torch.allclose/clone/empty_like, the file, the variable and
    # the leaked memory died with the poisoner's process: the seed is judged
    # on the real torch (its outputs compared element-wise again)
    assert good.correctness["trials"] == 2 + len(task.config.extra_inputs)
    assert "planted.txt" not in good.log_tail


def test_one_timing_per_device_at_a_time_and_phases_recorded():
    task = Task.load(EXAMPLES / "opencl" / "softmax", trials=1)
    seed = task.seed_source
    with Evaluator(backend="opencl", workers=2, spares=1) as ev:
        ev.warm_up([task])
        # warming waits for the referee too: the first candidates do not
        # pay its start (on the H200 that was 3-5 s of their wall time)
        assert all(lane.ready for p in ev._device_pools.values() for lane in p.referee.lanes)
        results = ev.evaluate_many([(task, seed), (task, seed), (task, seed)])
    assert all(r.category == "ok" for r in results), [r.error for r in results]
    windows = sorted(tuple(w) for r in results for w in r.load["slots"])
    assert len(windows) >= 3
    for (_a0, a1), (b0, _b1) in zip(windows, windows[1:]):
        assert a1 <= b0, f"two timings overlapped on one device: {windows}"
    for r in results:
        for phase in (
            "queue",
            "startup",
            "load",
            "compile",
            "correctness",
            "timing_wait",
            "timing",
            "stopped",
            "referee",
        ):
            assert phase in r.phases, (phase, r.phases)
        if ev.devices == [None]:  # a CPU host: the reference's fixed thread count, recorded
            assert r.load["attempts"][0]["threads"] == 1


def test_opencl_builds_come_from_the_trusted_shared_cache():
    task = Task.load(EXAMPLES / "opencl" / "softmax", trials=1)
    seed = task.seed_source
    with Evaluator(backend="opencl", workers=1, spares=0, timing=False) as ev:
        first = ev.evaluate(task, seed)
        pool = next(iter(ev._device_pools.values()))
        # the builder (no candidate code) compiles the request the worker left
        deadline = time.monotonic() + 120
        while not any(n.endswith(".bin") for n in os.listdir(pool.cache_dir)) and time.monotonic() < deadline:
            time.sleep(0.5)
        entries = sorted(os.listdir(pool.cache_dir))
        assert any(n.endswith(".bin") for n in entries), (entries, Path(pool.root, "builder.log").read_text())
        st = os.stat(pool.cache_dir)
        assert st.st_uid == os.geteuid() and not st.st_mode & 0o022  # only we write it
        second = ev.evaluate(task, seed)
    assert first.category == "ok" and second.category == "ok"
    # the first build compiled from source; the second loaded the shared binary
    assert second.phases["compile"] < first.phases["compile"], (first.phases, second.phases)


def test_finalists_are_retimed_side_by_side():
    task = Task.load(EXAMPLES / "opencl" / "softmax", trials=1)
    seed = task.seed_source
    slow = seed.replace("WORK_GROUP = 64", "WORK_GROUP = 16")
    broken = seed.replace("ModelNew", "ModelNot")  # fails the static check: left out with its reason
    with Evaluator(backend="opencl", workers=1) as ev:
        out = ev.confirm_best(task, [seed, slow, broken])
    rows = out["finalists"]
    assert [r["index"] for r in rows] == [0, 1, 2]
    assert rows[0]["correct"] and rows[1]["correct"] and not rows[2]["correct"]
    assert "ModelNew" in rows[2]["error"]
    for r in rows[:2]:
        assert r["speedup_ci_low"] <= r["speedup"] <= r["speedup_ci_high"]
    assert set((out["head_to_head"]["first"], out["head_to_head"]["second"])) == {0, 1}


@pytest.mark.parametrize("mode", ["pool", "fresh"])
def test_modes_give_the_same_verdicts(mode):
    task = Task.load(EXAMPLES / "triton" / "relu", trials=1)
    names = ["relu_correct", "identity", "crash_segfault", "hack_no_kernel", "compile_error"]
    sources = {n: (CAND / f"{n}.py").read_text() for n in names if n != "identity"}
    # wrong on every input (relu_wrong is wrong only where the last element is positive)
    sources["identity"] = sources["relu_correct"].replace("tl.maximum(x, 0.0)", "x")
    assert sources["identity"] != sources["relu_correct"]
    with Evaluator(backend="triton", mode=mode, workers=2, timing=False, timeout_s=120) as ev:
        results = ev.evaluate_many([(task, sources[n]) for n in names])
    got = {n: r.category for n, r in zip(names, results)}
    assert got == {
        "relu_correct": "ok",
        "identity": "incorrect",
        "crash_segfault": "crash",
        "hack_no_kernel": "hacked",
        "compile_error": "compile",
    }, got


def test_warm_up_primes_the_referee_with_each_tasks_reference():
    """warm_up(tasks) loads each task's reference in the trusted referee and
    runs it once, so a task's first candidate does not pay that on its clock."""
    task = Task.load(EXAMPLES / "opencl" / "softmax", trials=1)
    with Evaluator(backend="opencl", workers=1, spares=0, timing=False) as ev:
        ev.warm_up([task])
        pool = next(iter(ev._device_pools.values()))
        from kernelsmith.evaluator.referee import prime_key

        answer = dict(pool.referee._primed[prime_key(task)])
        footprint = answer.pop("footprint")
        assert answer == {"primed": ["get_inputs", *task.config.extra_inputs], "degenerate": []}, answer
        assert footprint["inputs_bytes"] > 0 and footprint["peak_bytes"] >= footprint["outputs_bytes"] > 0
        result = ev.evaluate(task, task.seed_source)
    assert result.category == "ok", result.error
    assert "referee" in result.phases
    # the parent's records of its checks: each check's time, and the
    # referee's requests of this job (one re-check per input set the worker
    # handed over; timing off: no audit rounds)
    phases = result.phases
    assert {"check_referee", "check_audit_rounds"} <= set(phases), phases
    assert phases["referee_requests"] == 1 + len(task.config.extra_inputs), phases
    assert phases["referee_check_s"] > 0 and "referee_audit_s" not in phases, phases
    assert phases["referee_waited_s"] >= 0 and phases["referee_stopped_s"] >= 0, phases


ZEROS_PROGRAM = """
import torch, torch.nn as nn, triton, triton.language as tl

@triton.jit
def fill(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)

class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        fill[(triton.cdiv(x.numel(), 1024),)](y, x.numel(), BLOCK=1024)
        return y
"""


def test_degenerate_forms_come_from_the_referee_in_the_pool(tmp_path):
    """The pool's referee decides once per task which trivial outputs its
    tolerance cannot tell apart (not every candidate's worker); a candidate
    returning one is still rejected, and the task is flagged."""
    from kernelsmith.evaluator.referee import prime_key

    task_dir = tmp_path / "nearly_zero"
    task_dir.mkdir()
    (task_dir / "reference.py").write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x * 1e-9\n\n"
        "def get_inputs():\n    return [torch.randn(4096)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    task = Task.load(task_dir, trials=1)
    with Evaluator(backend="triton", workers=1, spares=0, timing=False) as ev:
        result = ev.evaluate(task, ZEROS_PROGRAM)
        pool = next(iter(ev._device_pools.values()))
        assert "zeros" in pool.referee._primed[prime_key(task)]["degenerate"]
    assert result.category == "hacked", (result.category, result.error)
    assert "zeros" in result.hack_reasons[0], result.hack_reasons
    assert any("degenerate task" in w for w in result.warnings), result.warnings


def test_a_referee_that_does_not_answer_in_time_is_restarted(tmp_path):
    """A request the referee cannot answer within its limit (a task whose
    reference takes too long) must not leave its late answer in the pipe for
    the next request: the referee is restarted, the worker decides the
    degenerate forms itself, and the next task is primed normally."""
    from kernelsmith.evaluator.referee import prime_key

    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "reference.py").write_text(
        "import time\nimport torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n"
        "        time.sleep(60)\n"
        "        return torch.relu(x)\n\n"
        "def get_inputs():\n    return [torch.randn(64)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    fast = Task.load(EXAMPLES / "triton" / "relu", trials=1)
    with Evaluator(backend="triton", workers=1, spares=0, timing=False) as ev:
        ev.warm_up([fast])
        pool = next(iter(ev._device_pools.values()))
        referee = pool.referee
        assert referee.degenerate(Task.load(slow, trials=1), timeout_s=3) is None
        assert referee.restarts == 1
        del referee._primed[prime_key(fast)]
        answer = dict(referee.prime(fast))
        assert answer.pop("footprint")["inputs_bytes"] == 16 * 1024 * 4
        assert answer == {"primed": ["get_inputs", *fast.config.extra_inputs], "degenerate": []}
        result = ev.evaluate(fast, fast.seed_source)
    assert result.category == "ok", result.error
    assert result.census.get("referee") == "agreed", result.census


def test_the_next_job_takes_the_worker_while_the_parent_checks_the_last(monkeypatch):
    """With one worker, the second candidate's job starts while the parent
    still runs the first one's checks (pool.run releases the child and the
    worker slot first): the first job's checks wait
    here until the pool has handed the second job a child, which without
    the release could only happen after them."""
    import threading

    from kernelsmith.evaluator import pool as pool_module

    task = Task.load(EXAMPLES / "triton" / "relu", trials=1)
    seed = (EXAMPLES / "triton" / "relu" / "seed.py").read_text()
    taken, order = threading.Event(), []
    real_take, real_checks = pool_module.DevicePool.take, pool_module.trusted_checks

    def take(self):
        got = real_take(self)
        order.append("take")
        if order.count("take") == 2:
            taken.set()
        return got

    def checks(result, *args, **kwargs):
        order.append("checks")
        if order.count("checks") == 1:
            order.append("second job started" if taken.wait(120) else "second job waited")
        return real_checks(result, *args, **kwargs)

    monkeypatch.setattr(pool_module.DevicePool, "take", take)
    monkeypatch.setattr(pool_module, "trusted_checks", checks)
    with Evaluator(backend="triton", workers=1, spares=1, timing=False) as ev:
        started = time.monotonic()
        first, second = ev.evaluate_many([(task, seed), (task, seed)])
        elapsed = time.monotonic() - started
    assert first.category == second.category == "ok", (first.error, second.error)
    assert order[:4] == ["take", "checks", "take", "second job started"], order
    # the second job's thread waited for the one worker slot while the first
    # job ran: that wait is its queue, not its wall time (with the wait in
    # both, the two add up to more than the whole batch took)
    assert second.phases["queue"] > 0.5, second.phases
    assert second.wall_s + second.phases["queue"] <= elapsed + 0.2, (second.wall_s, second.phases["queue"], elapsed)
    # the checks still ran whole for both (the referee agreed with each)
    assert order.count("checks") == 2 and first.phases.get("referee", 0) > 0, (order, first.phases)
