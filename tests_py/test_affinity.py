"""Host-clock timings pinned to their cores (evaluator/affinity.py): every
thread of the process, the ones already running included, goes onto the
chosen cores for the block and gets its own mask back after; the evaluator
records which cores a CPU timing held."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest

from kernelsmith.config import ConfigError
from kernelsmith.evaluator import Evaluator
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
    # the two threads this test owns (others of the test process may come
    # and go meanwhile: pytest's, a library's)
    mine = (threading.get_native_id(), early.native_id)
    before = {tid: os.sched_getaffinity(tid) for tid in mine}
    try:
        with PinnedTiming(1) as pin:
            assert len(pin.cores) == 1 and pin.cores[0] in ALLOWED
            inside = {tid: os.sched_getaffinity(tid) for tid in mine}
            late = threading.Thread(target=lambda: seen.setdefault("late", os.sched_getaffinity(0)))
            late.start()
            late.join()
        after = {tid: os.sched_getaffinity(tid) for tid in mine}
    finally:
        release.set()
        early.join()
    assert all(mask == set(pin.cores) for mask in inside.values()), inside
    assert seen["late"] == set(pin.cores)  # a thread started inside inherits the pin
    assert after == before


def test_no_pin_when_turned_off_or_the_timing_has_every_core():
    before = os.sched_getaffinity(0)
    with PinnedTiming(1, enabled=False) as off:
        assert os.sched_getaffinity(0) == before
    with PinnedTiming(len(ALLOWED)) as full:
        assert os.sched_getaffinity(0) == before
    assert off.cores == [] and full.cores == []


def test_cpu_pin_must_be_a_boolean():
    assert TimingConfig().cpu_pin is True
    with pytest.raises(ConfigError, match="cpu_pin"):
        TimingConfig(cpu_pin="yes")


#: the relu seed, reporting the cores of every thread of its worker: it
#: raises once they are all on fewer cores than the worker may use, which
#: only the timing slot's pin does (the trials run unpinned)
REPORTS_PIN = """
import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        tids = os.listdir("/proc/self/task")
        masks = {tuple(sorted(os.sched_getaffinity(int(t)))) for t in tids}
        if len(masks) == 1 and len(next(iter(masks))) < ALLOWED:
            raise RuntimeError(f"all {len(tids)} threads pinned to {sorted(next(iter(masks)))}")
        return y


ALLOWED = len(os.sched_getaffinity(0))  # at import: before any timing
"""


@pytest.mark.skipif(len(ALLOWED) < 2, reason="pinning needs a host with at least two allowed cores")
def test_the_worker_is_pinned_while_it_times_and_only_then():
    """Through the real pool: a program that looks at its own worker's
    threads sees them all on one core while it is timed (it raises to say
    so), not during its trials; with ``timing.cpu_pin: false``, never."""
    triton_examples = EXAMPLES.parent / "triton"
    pinned, unpinned = Task.load(triton_examples / "relu", trials=2), Task.load(triton_examples / "relu", trials=2)
    unpinned.config.timing.cpu_pin = False
    with Evaluator(backend="triton", workers=1, timeout_s=240) as ev:
        on, off = ev.evaluate(pinned, REPORTS_PIN), ev.evaluate(unpinned, REPORTS_PIN)
    assert on.compiled and "raised while being timed" in on.error, (on.category, on.error)
    assert re.search(r"all \d+ threads pinned to \[\d+\]", on.error), on.error
    assert off.category == "ok" and off.timing["pinned_cores"] == [], (off.category, off.error)


def test_a_cpu_evaluation_records_the_core_its_timing_held():
    pytest.importorskip("kernelsmith._core")
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
