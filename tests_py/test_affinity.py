"""Host-clock timings pinned to their cores (evaluator/affinity.py): every
thread of the process, the ones already running included, goes onto the
chosen cores for the block and gets its own mask back after; the evaluator
records which cores a CPU timing held."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kernelsmith.config import ConfigError
from kernelsmith.evaluator.affinity import PinnedTiming, _current_cpu, choose_cores
from kernelsmith.task import Task, TimingConfig

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "opencl"
ALLOWED = sorted(os.sched_getaffinity(0))


def test_cores_start_where_the_thread_runs_and_wrap_round():
    assert choose_cores(1, [0, 1, 2, 3], 2) == [2]
    assert choose_cores(2, [0, 1, 2, 3], 3) == [3, 0]
    assert choose_cores(2, [4, 6, 8], None) == [4, 6]  # unknown current core: the first allowed
    assert choose_cores(2, [4, 6, 8], 5) == [4, 6]  # a core outside the mask is not taken
    assert choose_cores(4, [0, 1], 1) == [0, 1]  # as many threads as cores: nothing to pin
    assert _current_cpu() in ALLOWED


def _masks() -> dict[int, set[int]]:
    return {int(t): os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}


@pytest.mark.skipif(len(ALLOWED) < 2, reason="pinning needs a host with at least two allowed cores")
def test_every_thread_is_pinned_for_the_block_and_restored_after():
    release = threading.Event()
    started = threading.Event()
    seen: dict[str, set[int]] = {}

    def helper() -> None:
        started.set()
        release.wait(10)

    early = threading.Thread(target=helper)
    early.start()
    started.wait(10)
    before = _masks()
    try:
        with PinnedTiming(1) as pin:
            assert len(pin.cores) == 1 and pin.cores[0] in ALLOWED
            inside = _masks()
            late = threading.Thread(target=lambda: seen.setdefault("late", os.sched_getaffinity(0)))
            late.start()
            late.join()
        after = _masks()
    finally:
        release.set()
        early.join()
    assert len(inside) >= 2 and all(mask == set(pin.cores) for mask in inside.values()), inside
    assert seen["late"] == set(pin.cores)  # a thread started inside inherits the pin
    assert after == before


def test_no_pin_when_turned_off_or_the_timing_has_every_core():
    before = _masks()
    with PinnedTiming(1, enabled=False) as off:
        assert _masks() == before
    with PinnedTiming(len(ALLOWED)) as full:
        assert _masks() == before
    assert off.cores == [] and full.cores == []


def test_cpu_pin_must_be_a_boolean():
    assert TimingConfig().cpu_pin is True
    with pytest.raises(ConfigError, match="cpu_pin"):
        TimingConfig(cpu_pin="yes")


def test_a_cpu_evaluation_records_the_core_its_timing_held():
    pytest.importorskip("kernelsmith._core")
    from kernelsmith.evaluator import Evaluator

    seed = (EXAMPLES / "softmax" / "seed.py").read_text()
    pinned = Task.load(EXAMPLES / "softmax", trials=1)
    unpinned = Task.load(EXAMPLES / "softmax", trials=1)
    unpinned.config.timing.cpu_pin = False
    with Evaluator(backend="opencl", workers=1, timeout_s=240) as ev:
        on, off = ev.evaluate(pinned, seed), ev.evaluate(unpinned, seed)
    assert on.category == "ok" and off.category == "ok", (on.error, off.error)
    expected = 1 if len(ALLOWED) >= 2 else 0  # the evaluator's default: one thread on a CPU device
    assert len(on.timing["pinned_cores"]) == expected and set(on.timing["pinned_cores"]) <= set(ALLOWED)
    assert off.timing["pinned_cores"] == []
