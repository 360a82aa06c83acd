"""Timing harness: C++ statistics through the bindings, the adaptive sampler
and paired comparator on seeded synthetic sources, the Python front end on
CPU callables, and the hidden-work and roofline logic with simulated timers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from kernelsmith import timing as T
from kernelsmith.timing import stats
from kernelsmith.timing.gpu_state import parse_nvidia_smi
from kernelsmith.timing.roofline import HardwarePeak

# -- statistics through the bindings ------------------------------------------


def test_statistics_by_hand_from_lists_and_arrays():
    x = [1.0, 2.0, 3.0, 4.0, 100.0]
    for samples in (x, np.asarray(x), np.asarray(x, dtype=np.float32)):
        assert stats.mean(samples) == 22.0
        assert stats.median(samples) == 3.0
        assert stats.mad(samples) == 1.0
        assert stats.stddev(samples) == pytest.approx(math.sqrt(1902.5))
        assert stats.trimmed_mean(samples, 0.2) == 3.0
    assert stats.quantile([1, 2, 3, 4], 0.25) == 1.75
    assert stats.cv([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(math.sqrt(32 / 7) / 5)
    t = stats.reject_outliers_tukey(x)
    assert t["rejected"] == [4]
    assert t["lower_fence"] == -1.0 and t["upper_fence"] == 7.0
    np.testing.assert_array_equal(t["kept"], [1, 2, 3, 4])


def test_linear_trend_and_ratio_drift_match_numpy_least_squares():
    """The C++ least-squares fit (Eigen) agrees with numpy's, and the paired
    comparison reports the drift of the ratio that alternation cannot cancel."""
    rng = np.random.default_rng(4)
    y = 10.0 + 0.03 * np.arange(300) + rng.normal(0.0, 0.5, 300)
    slope, intercept = np.polyfit(np.arange(300), y, 1)
    fit = stats.linear_trend(y)
    assert fit["slope"] == pytest.approx(slope, rel=1e-9) and fit["intercept"] == pytest.approx(intercept, rel=1e-9)
    assert fit["relative_change"] == pytest.approx(slope * 299 / y.mean(), rel=1e-6)
    assert stats.statistic("drift", y) == fit["relative_change"]
    ref = 100.0 * (1.0 + rng.normal(0.0, 0.01, 500))
    cand = 50.0 * np.linspace(1.0, 1.25, 500) * (1.0 + rng.normal(0.0, 0.01, 500))
    drifting = stats.compare_pairs(ref, cand)
    assert drifting["ratio_drift"] == pytest.approx(1 / 1.25 - 1, abs=0.02)
    steady = stats.compare_pairs(ref, 50.0 * (1.0 + rng.normal(0.0, 0.01, 500)))
    assert abs(steady["ratio_drift"]) < 0.02


def test_statistic_registry_and_bad_input():
    assert {"median", "mean", "trimmed_mean", "cv", "mad"} <= set(stats.statistic_names())
    assert stats.statistic("median", [3, 1, 2]) == 2.0
    with pytest.raises(ValueError, match="unknown statistic 'mode'"):
        stats.statistic("mode", [1.0])
    with pytest.raises(ValueError, match="at least one sample"):
        stats.median([])
    with pytest.raises(ValueError, match="one-dimensional"):
        stats.median(np.ones((2, 2)))


def test_order_statistic_interval_by_hand():
    ci = stats.median_ci_order_statistics(list(range(10, 0, -1)))
    assert (ci.estimate, ci.lower, ci.upper) == (5.5, 2.0, 9.0)
    assert ci.to_dict()["relative_half_width"] == pytest.approx(3.5 / 5.5)


def test_bootstrap_is_seeded_and_paired_ratio_beats_drift():
    rng = np.random.default_rng(0)
    x = rng.normal(10, 1, 64)
    a = stats.bootstrap_median_ci(x, resamples=500, seed=3)
    b = stats.bootstrap_median_ci(x, resamples=500, seed=3)
    assert (a.lower, a.upper) == (b.lower, b.upper)
    assert a.lower < np.median(x) < a.upper
    drift = np.linspace(1.0, 1.3, 200)
    num = drift * rng.normal(1.05, 0.002, 200)
    den = drift * rng.normal(1.0, 0.002, 200)
    paired = stats.bootstrap_ratio_of_medians_ci(num, den, resamples=500, paired=True)
    unpaired = stats.bootstrap_ratio_of_medians_ci(num, den, resamples=500, paired=False)
    assert paired.contains(1.05)
    assert paired.upper - paired.lower < 0.5 * (unpaired.upper - unpaired.lower)


# -- sampler and comparator on synthetic sources ------------------------------


def test_sampler_stops_at_target_on_known_noise():
    rng = np.random.default_rng(1)
    sampler = stats.AdaptiveSampler()  # default target 0.5%
    while sampler.need_more():
        sampler.add(rng.normal(10.0, 0.3, sampler.suggested_batch()))
    r = sampler.result()
    assert r["stop_reason"] == "target_reached"
    assert r["median"]["relative_half_width"] <= 0.005
    assert r["median"]["estimate"] == pytest.approx(10.0, rel=0.01)
    assert 100 <= r["n_total"] <= 700


def test_sampler_time_budget_and_cap():
    o = stats.SamplerOptions()
    o.time_budget_s = 1e-9  # spent by the time anyone asks
    s = stats.AdaptiveSampler(o)
    s.add([1.0, 5.0, 2.0])
    assert not s.need_more() and s.stop_reason == "time_budget"
    o = stats.SamplerOptions()
    o.max_samples = 50
    s = stats.AdaptiveSampler(o)
    rng = np.random.default_rng(2)
    while s.need_more():
        s.add(np.abs(rng.normal(1.0, 0.5, s.suggested_batch())))
    assert s.stop_reason == "max_samples" and s.n == 50
    bad = stats.SamplerOptions()
    bad.ci_method = "jackknife"
    with pytest.raises(ValueError, match="ci_method"):
        stats.AdaptiveSampler(bad)


def _synthetic(mean: float, sigma: float, seed: int, outlier_every: int = 0):
    rng = np.random.default_rng(seed)
    count = [0]

    def sample() -> float:
        count[0] += 1
        t = mean * (1.0 + rng.normal(0.0, sigma))
        if outlier_every and count[0] % outlier_every == 0:
            t *= 6.0  # a preempted sample
        return t

    return sample


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compare_samples_calls_two_percent(seed):
    faster = T.compare_samples(_synthetic(1.02, 0.01, seed), _synthetic(1.0, 0.01, seed + 100), time_budget_s=30)
    assert faster.verdict == "faster"
    assert faster.speedup == pytest.approx(1.02, abs=0.01)
    assert faster.speedup_low > 1.0
    slower = T.compare_samples(_synthetic(1.0, 0.01, seed), _synthetic(1.02, 0.01, seed + 100), time_budget_s=30)
    assert slower.verdict == "slower"
    assert slower.speedup == pytest.approx(1 / 1.02, abs=0.01)


def test_compare_samples_identical_sources_are_indistinguishable():
    decided = 0
    for seed in range(10):
        c = T.compare_samples(_synthetic(1.0, 0.01, seed), _synthetic(1.0, 0.01, seed + 50), time_budget_s=30)
        decided += c.decided
        assert c.speedup == pytest.approx(1.0, abs=0.01)
        assert c.rel_half_width <= 0.005
    assert decided <= 2  # a 95% interval misses about 1 in 20


def test_outliers_do_not_move_the_median_estimate():
    clean = T.bench_samples(_synthetic(5.0, 0.01, 7), min_samples=400, max_samples=400)
    dirty = T.bench_samples(_synthetic(5.0, 0.01, 7, outlier_every=10), min_samples=400, max_samples=400)
    assert dirty.n_outliers >= 35
    assert dirty.median_s == pytest.approx(clean.median_s, rel=0.003)
    assert dirty.median_s == pytest.approx(5.0, rel=0.005)


def test_bench_samples_units_and_bad_samples():
    m = T.bench_samples(lambda: 2.0, unit="ms")  # an OpenCL event says 2 ms
    assert m.median_s == pytest.approx(2e-3)
    assert m.timer == "external" and m.stop_reason == "target_reached"
    with pytest.raises(ValueError, match="unit"):
        T.bench_samples(lambda: 1.0, unit="minutes")
    with pytest.raises(ValueError, match="finite and > 0"):
        T.bench_samples(lambda: -1.0)
    with pytest.raises(TypeError, match="a number"):
        T.bench_samples(lambda: "fast")
    with pytest.raises(TypeError, match="unknown timing option"):
        T.bench_samples(lambda: 1.0, warmpu=3)


# -- the Python front end on CPU callables ------------------------------------


def _work(n: int):
    def fn(*_args):
        s = 0
        for i in range(n):
            s += i * i
        return s

    return fn


def test_bench_on_cpu_is_sane_and_round_trips():
    m = T.bench(_work(2000), device="cpu", time_budget_s=2.0)
    assert m.device == "cpu" and m.timer == "perf_counter"
    assert m.cuda_graph is None
    assert 0 < m.ci_low_s <= m.median_s <= m.ci_high_s
    assert m.min_s <= m.median_s <= m.max_s
    assert m.stop_reason in ("target_reached", "max_samples", "time_budget")
    assert m.launches_per_sample >= 1
    # a sample lasts >= target_sample_s: tiny calls are batched
    assert m.median_s * m.launches_per_sample >= 0.5 * 100e-6
    d = json.loads(json.dumps(m.to_dict()))
    assert T.Measurement.from_dict(d) == m


def test_compare_on_cpu_sees_a_twofold_slowdown():
    c = T.compare(_work(1000), _work(2000), device="cpu", time_budget_s=3.0, target_rel_half_width=0.02)
    assert c.verdict == "slower"
    assert 0.35 < c.speedup < 0.7
    assert c.device == "cpu"
    d = json.loads(json.dumps(c.to_dict()))
    assert T.Comparison.from_dict(d) == c


def test_input_sets_rotate_and_sync_is_called():
    seen = []
    syncs = [0]

    def fn(x):
        seen.append(x)

    def sync():
        syncs[0] += 1

    m = T.bench(fn, input_sets=[(0,), (1,), (2,)], device="cpu", sync=sync, time_budget_s=0.5, max_samples=50)
    assert set(seen) == {0, 1, 2}
    assert m.input_sets == 3
    assert syncs[0] >= 2 * m.n_samples  # before and after every sample


# -- hidden work with simulated timers ----------------------------------------


def test_hidden_work_verdict_by_hand():
    honest = T.hidden_work_verdict(event_s=2e-3, wall_s=2.02e-3, overhead_s=15e-6)
    assert not honest.suspected
    assert honest.unexplained_s == pytest.approx(5e-6)
    hidden = T.hidden_work_verdict(event_s=0.2e-3, wall_s=2.02e-3, overhead_s=15e-6)
    assert hidden.suspected and "stream the timer does not see" in hidden.reason
    with pytest.raises(ValueError):
        T.hidden_work_verdict(event_s=-1, wall_s=0, overhead_s=0)


class SimulatedDevice:
    """What the CUDA runner's sync_bounded_region measures, simulated: the
    timed stream's work shows in the events; work on another stream only in
    the synchronized wall clock; every region pays a fixed host overhead."""

    def __init__(self, timed_s: float, side_s: float, overhead_s: float = 20e-6, seed: int = 0):
        self.timed_s, self.side_s, self.overhead_s = timed_s, side_s, overhead_s
        self.rng = np.random.default_rng(seed)

    def region(self, samples: int):
        jitter = abs(self.rng.normal(0, 2e-6))
        event = samples * self.timed_s
        # The side stream runs concurrently, so wall is the longer of the two.
        wall = max(event, samples * self.side_s) + self.overhead_s + jitter
        return event, wall


def test_check_hidden_work_with_a_simulated_timer():
    honest = SimulatedDevice(timed_s=100e-6, side_s=0.0)
    assert not T.check_hidden_work(honest.region, 20).suspected
    # launch-bound-looking but honest tiny work: still fine
    tiny = SimulatedDevice(timed_s=3e-6, side_s=0.0)
    assert not T.check_hidden_work(tiny.region, 700).suspected
    # The candidate does 5 us on the timed stream and 95 us on a side stream.
    cheat = SimulatedDevice(timed_s=5e-6, side_s=100e-6)
    check = T.check_hidden_work(cheat.region, 20)
    assert check.suspected
    assert check.unexplained_s > 1e-3


def test_graph_consistency_verdict():
    # Launch-bound eager run (host enqueue ~ GPU time): a faster graph is legitimate.
    assert T.graph_consistency_verdict(3e-6, 10e-6, 9.5e-6) == (False, "")
    # GPU-bound eager run, graph about as fast: fine.
    assert T.graph_consistency_verdict(95e-6, 100e-6, 8e-6) == (False, "")
    # GPU-bound eager run, graph 10x faster: work is missing from the graph.
    suspected, reason = T.graph_consistency_verdict(10e-6, 100e-6, 8e-6)
    assert suspected and "missing from the graph" in reason


# -- roofline -----------------------------------------------------------------


def test_roofline_floor_and_suspicion():
    peak = HardwarePeak("toy", bandwidth_bytes_s=1e12, l2_bytes=1 << 20, flops={"fp32": 1e14})
    # 1 GB at 1 TB/s: 1 ms floor
    ok = T.roofline_check(1.2e-3, bytes_moved=1e9, flops=0, peak=peak)
    assert not ok.suspicious and ok.floor_s == pytest.approx(1e-3)
    bad = T.roofline_check(0.5e-3, bytes_moved=1e9, flops=0, peak=peak)
    assert bad.suspicious and "memory bandwidth floor" in bad.reason
    # 1e12 FLOPs at 1e14/s: 10 ms compute floor
    assert T.roofline_check(5e-3, bytes_moved=0, flops=1e12, peak=peak).suspicious
    # A working set that fits in L2 is not held to the DRAM floor.
    small = T.roofline_check(1e-7, bytes_moved=512 * 1024, flops=0, peak=peak)
    assert not small.bandwidth_floor_applied and not small.suspicious
    assert T.lookup_peak("NVIDIA H200").name == "H200"
    assert T.lookup_peak("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert T.lookup_peak("NVIDIA A100-SXM4-80GB").name == "A100 80GB SXM"
    assert T.lookup_peak("Quadro K600") is None


def test_estimate_work_of_a_matmul_reference():
    torch = pytest.importorskip("torch")
    a, b = torch.randn(32, 64), torch.randn(64, 16)
    w = T.estimate_work(lambda x, y: x @ y, (a, b))
    assert w.bytes_moved == (32 * 64 + 64 * 16 + 32 * 16) * 4
    if w.flop_counter != "none":
        assert w.flops == 2 * 32 * 64 * 16
    lin = torch.nn.Linear(64, 8)
    w2 = T.estimate_work(lin, (torch.randn(4, 64),))
    assert w2.bytes_moved == (4 * 64 + 64 * 8 + 8 + 4 * 8) * 4


def test_gpu_state_parsing_and_fallback():
    assert parse_nvidia_smi("1980, 3201, 41") == {
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 3201,
        "temperature_c": 41,
        "source": "nvidia-smi",
    }
    assert parse_nvidia_smi("[N/A], 3201, 41") == {}
    assert isinstance(T.gpu_state(), dict)  # {} on a machine without a GPU


def test_gpu_state_keeps_one_nvml_per_process_and_starts_no_process_when_told(tmp_path, monkeypatch):
    """NVML initialised once per process (a reading in the timing slot is then
    microseconds); a forked child takes its own; with start_process=False no
    nvidia-smi is started where NVML cannot say (the evaluator's slot)."""
    import importlib
    import os
    import sys
    import types

    G = importlib.import_module("kernelsmith.timing.gpu_state")  # the module (the package exports its function)

    # an nvidia-smi on PATH that records every start
    starts = tmp_path / "starts"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho started >> {starts}\necho '1410, 2619, 40'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(G, "_NVML", {})
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML: import fails
    assert G.gpu_state(0, start_process=False) == {}
    assert not starts.exists()
    assert G.gpu_state(0)["source"] == "nvidia-smi" and starts.read_text().count("started") == 1

    # NVML there (a stand-in for the vendor's module): one nvmlInit per process
    inits: list[int] = []
    fake = types.SimpleNamespace(
        NVML_CLOCK_SM=0,
        NVML_CLOCK_MEM=1,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: inits.append(os.getpid()),
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i),
        nvmlDeviceGetClockInfo=lambda h, which: 1980 if which == 0 else 2619,
        nvmlDeviceGetTemperature=lambda h, which: 37,
    )
    monkeypatch.setattr(G, "_NVML", {})
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    for _ in range(5):
        assert G.gpu_state(0, start_process=False) == {
            "sm_clock_mhz": 1980,
            "mem_clock_mhz": 2619,
            "temperature_c": 37,
            "source": "pynvml",
        }
    assert inits == [os.getpid()] and G.open_nvml(0)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own init, the parent's entry not used
        G.gpu_state(0)
        os.write(write, str(inits).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(write)
    child_inits = eval(os.read(read, 1000).decode())  # noqa: S307 - a list of pids written above
    assert child_inits[0] == os.getpid() and len(child_inits) == 2 and child_inits[1] != os.getpid()
    assert starts.read_text().count("started") == 1  # NVML answered: no nvidia-smi since


# -- CUDA (skipped without a GPU; the lead runs these on the device machine) --


def _cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    return torch


@pytest.mark.gpu
def test_cuda_bench_uses_graphs_and_finds_no_hidden_work():
    torch = _cuda()
    x = torch.randn(1 << 20, device="cuda")
    m = T.bench(lambda: torch.relu(x), time_budget_s=2.0)
    assert m.timer == "cuda_event" and m.cuda_graph is True, m.graph_fallback_reason
    assert m.launches_per_sample > 1  # a ~5 us kernel is batched to ~100 us samples
    assert m.hidden_work is not None and not m.hidden_work.suspected, m.hidden_work
    assert m.l2_flush and "before" in m.gpu_state
    c = T.compare(lambda: torch.relu(x), lambda: torch.relu(x), time_budget_s=2.0)
    assert abs(c.speedup - 1.0) < 0.02 and c.verdict != "rejected"


@pytest.mark.gpu
def test_cuda_side_stream_candidate_is_rejected():
    torch = _cuda()
    a = torch.randn(4096, 4096, device="cuda")
    side = torch.cuda.Stream()

    def cheat():
        # the real work on a stream the timer does not watch, never joined
        with torch.cuda.stream(side):
            return a @ a

    c = T.compare(lambda: a @ a, cheat, time_budget_s=2.0)
    assert c.verdict == "rejected", c.to_dict()
    assert "hidden work" in c.rejected_reason


@pytest.mark.gpu
def test_cuda_roofline_marks_impossible_times():
    torch = _cuda()
    if T.lookup_peak(torch.cuda.get_device_name()) is None:
        pytest.skip("no peak figures for this GPU")
    a = torch.randn(2048, 2048, device="cuda")
    w = T.estimate_work(lambda x: x @ x, (a,))
    # claim the matmul moved 1000x more bytes than it did: the time is then impossible
    m = T.bench(
        lambda: a @ a,
        time_budget_s=1.0,
        roofline={"bytes_moved": w.bytes_moved * 1000, "flops": w.flops, "dtype": "fp32"},
    )
    assert m.suspicious and any("floor" in r for r in m.suspicious_reasons)
