"""The referee's lanes (evaluator/referee.py): several referee processes per
device, so that the parent's checks of several jobs do not queue on one
process. Real processes, real jobs (CPU, Triton interpreter): a light
task's checks spread over the lanes, a heavy task's stay on the first; the
timed measures of a reference are scheduled over all lanes; the lanes'
measures are taken one at a time (referee_process.measuring)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelsmith.evaluator import Evaluator
from kernelsmith.evaluator import referee as referee_module
from kernelsmith.task import Task

HERE = Path(__file__).parent
RELU = HERE.parent / "examples" / "triton" / "relu"


def _relu_batch(
    lanes: str, monkeypatch: pytest.MonkeyPatch, n: int = 4, hold_first: bool = False, warmed=lambda referee: None
) -> tuple:
    """``n`` relu seeds through a pool with ``lanes`` referee lanes; with
    ``hold_first`` the first lane is taken (as another job's long check
    would hold it) for the second half of them; ``warmed()`` is called once
    the pool is warm (its lanes started and primed), with the referee."""
    monkeypatch.setenv("KERNELSMITH_REFEREE_LANES", lanes)
    task = Task.load(RELU, trials=1)
    with Evaluator(backend="triton", workers=2, spares=1, timing=True) as ev:
        ev.warm_up([task])
        referee = next(iter(ev._device_pools.values())).referee
        assert all(lane.ready for lane in referee.lanes)
        warmed(referee)
        primed = [lane.answered for lane in referee.lanes]
        results = ev.evaluate_many([(task, task.seed_source)] * (n // 2))
        if hold_first:
            held = referee._take(referee.lanes[:1])
            assert held is referee.lanes[0]
        try:
            results += ev.evaluate_many([(task, task.seed_source)] * (n - n // 2))
        finally:
            if hold_first:
                referee._give(held)
        served = [lane.answered - before for lane, before in zip(referee.lanes, primed)]
        timed = dict(referee.timed.seen)
    return results, (primed, served, timed, task)


def test_a_light_tasks_checks_go_to_a_free_lane(monkeypatch):
    """Two lanes, relu (a light task): both lanes were primed with it; while
    the first lane is busy (held here, as another job's check would hold
    it) the jobs' checks go to the second, and every result is still
    checked by the referee and its audit rounds; the timed-reference
    schedule counted every audit once over both lanes (not once per
    lane)."""
    results, (primed, served, timed, task) = _relu_batch("2", monkeypatch, n=6, hold_first=True)
    assert all(r.category == "ok" for r in results), [r.error for r in results]
    assert all(r.census.get("referee") == "agreed" for r in results), [r.census for r in results]
    assert all("audit" in r.census for r in results), [r.census for r in results]
    assert primed[0] >= 1 and primed[1] >= 1, primed  # the second lane warmed the reference too
    # the last three jobs' requests all went to the second lane
    later = sum(int(r.phases.get("referee_requests", 0)) for r in results[3:])
    assert later >= 6 and served[1] == later, (served, later)
    assert sum(served) == sum(int(r.phases.get("referee_requests", 0)) for r in results), served
    asked, _measures = timed[(task.id, "get_inputs")]
    assert asked == [6], timed


def test_a_heavy_tasks_checks_wait_for_the_first_lane(monkeypatch):
    """A task over LIGHT_TASK_BYTES (here: any) is checked on the first lane
    alone, one check at a time, as with one referee process: the second
    lane is neither primed with it nor asked: every request asks for the
    first lane alone."""
    monkeypatch.setattr(referee_module, "LIGHT_TASK_BYTES", -1)
    real_take = referee_module.Referee._take
    seen: list[list[int]] = []
    recording: list[bool] = []

    def take(self, lanes):
        if recording:  # the batch's requests, not the pool's start (each lane waited for in turn)
            seen.append([lane.index for lane in lanes])
        return real_take(self, lanes)

    monkeypatch.setattr(referee_module.Referee, "_take", take)
    results, (primed, served, _timed, _task) = _relu_batch(
        "2", monkeypatch, warmed=lambda referee: recording.append(True)
    )
    assert all(r.category == "ok" for r in results), [r.error for r in results]
    assert all(r.census.get("referee") == "agreed" for r in results), [r.census for r in results]
    assert primed[1] == 0 and served[1] == 0 and served[0] >= 8, (primed, served)
    # every request of a job's checks asked for the first lane alone
    assert seen and all(lanes == [0] for lanes in seen), seen


def test_a_second_lane_killed_is_started_again_for_the_next_check(monkeypatch):
    """kill -9 of the second lane's process (an out-of-memory kill, say)
    once the pool is warm: the next check that lane is given (the first
    lane held) finds it dead, starts it again and is answered; every result
    is still checked by the referee, none left unchecked."""
    import signal

    lanes: list = []

    def kill_second(referee):
        lane = referee.lanes[1]
        lanes.append(lane)
        os.killpg(lane.proc.pid, signal.SIGKILL)
        lane.proc.wait()

    results, (_primed, served, _timed, _task) = _relu_batch("2", monkeypatch, n=4, hold_first=True, warmed=kill_second)
    assert all(r.category == "ok" for r in results), [r.error for r in results]
    assert all(r.census.get("referee") == "agreed" for r in results), [r.census for r in results]
    assert all(r.timing_reliable for r in results), [r.unreliable_reasons for r in results]
    assert lanes[0].restarts == 1 and served[1] >= 3, (lanes[0].restarts, served)


def test_one_lane_on_the_host_by_default(monkeypatch):
    monkeypatch.delenv("KERNELSMITH_REFEREE_LANES", raising=False)
    assert referee_module.default_lanes(None) == 1
    assert referee_module.default_lanes("0") == 2
    monkeypatch.setenv("KERNELSMITH_REFEREE_LANES", "3")
    assert referee_module.default_lanes(None) == 3
    monkeypatch.setenv("KERNELSMITH_REFEREE_LANES", "0")
    with pytest.raises(ValueError, match="1..16"):
        referee_module.default_lanes(None)


HOLDER = """
import os, sys, time
from kernelsmith.evaluator.referee_process import measuring
with measuring():
    open(sys.argv[1], "w").write("held")
    time.sleep(float(sys.argv[2]))
"""


def test_the_lanes_measure_one_at_a_time(tmp_path):
    """referee_process.measuring across processes: while one process holds
    the lock file the parent names, another's measure waits for it; with no
    lock named (one lane) it does not wait."""
    from kernelsmith.evaluator.referee_process import measuring

    lock, flag = tmp_path / "measure.lock", tmp_path / "held"
    env = {**os.environ, "KERNELSMITH_REFEREE_MEASURE_LOCK": str(lock)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(flag), "1.5"], env=env)
    try:
        deadline = time.monotonic() + 60
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert flag.exists(), "the holder never took the lock"
        os.environ["KERNELSMITH_REFEREE_MEASURE_LOCK"] = str(lock)
        try:
            started = time.monotonic()
            with measuring():
                waited = time.monotonic() - started
        finally:
            del os.environ["KERNELSMITH_REFEREE_MEASURE_LOCK"]
        started = time.monotonic()
        with measuring():  # no lock named: no wait
            alone = time.monotonic() - started
    finally:
        holder.wait(30)
    assert waited > 0.5, waited
    assert alone < 0.1, alone
