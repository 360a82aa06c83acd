"""The gate's GPU-clock check (evaluator/contention.py): a timing during
which the SM clock sat low is timed again, and marked unreliable when every
attempt was throttled. NVML needs an NVIDIA GPU; here the decision is driven
with recorded clock samples, the way ClockWatch hands them to the gate."""
import os
import time

import pytest

from kernelsmith.evaluator.contention import ClockWatch, DeviceGate, TimingPolicy, clock_verdict


def test_clock_verdict_by_hand():
    steady = [1980] * 50
    assert clock_verdict(steady, 1980, 0.05, 0.2) is None
    # a dip in 10% of the samples is tolerated, in 40% it is throttling
    assert clock_verdict([1980] * 45 + [1500] * 5, 1980, 0.05, 0.2) is None
    reason = clock_verdict([1980] * 30 + [1545] * 20, 1980, 0.05, 0.2)
    assert reason is not None and "1545" in reason and "40%" in reason
    assert clock_verdict([], 1980, 0.05, 0.2) is None  # NVML could not say
    assert clock_verdict(steady, 0, 0.05, 0.2) is None


class _Recorded:
    def __init__(self, samples):
        self.samples = samples

    def stop(self):
        return list(self.samples)


def _attempt(gate, ticket, samples):
    ticket._clock = _Recorded(samples)
    return gate._report(ticket, {"speedup": 2.0, "ref_ms": 1.0, "cand_ms": 0.5, "cpu_s": 0.1, "wall_s": 0.1})


def test_gate_retimes_a_throttled_attempt_and_keeps_a_steady_one():
    gate = DeviceGate("0", TimingPolicy(max_retimes=2, retime_backoff_s=0.0))
    ticket = gate.join(lambda sig: None, key="t", timed_on_cpu=False)
    ticket.acquire()
    assert _attempt(gate, ticket, [1980] * 20) is False  # steady: accepted, slot released
    assert ticket.reliable and ticket.attempts[-1]["sm_clock_mhz"]["min"] == 1980
    gate.leave(ticket)

    ticket = gate.join(lambda sig: None, key="t", timed_on_cpu=False)
    ticket.acquire()
    assert _attempt(gate, ticket, [1980] * 5 + [1600] * 15) is True  # throttled: time again
    assert not ticket.reliable and "throttled" in ticket.reasons[0]
    assert _attempt(gate, ticket, [1975] * 20) is False  # the re-timing ran at full clock
    assert ticket.reliable and len(ticket.attempts) == 2
    gate.leave(ticket)


def test_every_attempt_throttled_is_unreliable():
    gate = DeviceGate("0", TimingPolicy(max_retimes=1, retime_backoff_s=0.0))
    gate.max_sm_clock = 1980  # seen earlier on this device
    ticket = gate.join(lambda sig: None, key="t", timed_on_cpu=False)
    ticket.acquire()
    assert _attempt(gate, ticket, [1500] * 20) is True
    assert _attempt(gate, ticket, [1500] * 20) is False  # out of re-timings
    assert not ticket.reliable and ticket.reasons and "1500" in ticket.reasons[0]
    gate.leave(ticket)


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="an NVIDIA driver is present: NVML answers")
def test_clock_watch_without_a_gpu_samples_nothing():
    watch = ClockWatch("0", period_s=0.001)
    time.sleep(0.02)
    assert watch.stop() == [] and watch._thread is None
