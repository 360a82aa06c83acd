"""Speed of light: the arithmetic against hand-computed cases, the peak
tables' sources, and where the figure shows (result, metrics, feedback)."""

from __future__ import annotations

import pytest

from kernelsmith.feedback import format_metrics, render_feedback, speed_of_light_line
from kernelsmith.result import EvalResult, program_metrics
from kernelsmith.timing import HOST_PEAKS, PEAKS, WorkEstimate, estimate_work, lookup_peak
from kernelsmith.timing.sol import SpeedOfLight, lookup_host_peak, peak_for, speed_of_light

H100 = lookup_peak("NVIDIA H100 80GB HBM3")


def test_peak_table_names_the_cards_and_every_entry_has_a_source():
    assert lookup_peak("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert lookup_peak("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert lookup_peak("NVIDIA H200").name == "H200"
    assert lookup_peak("NVIDIA H200").bandwidth_bytes_s == 4.8e12
    assert lookup_peak("NVIDIA H100 PCIe").bandwidth_bytes_s == 2.0e12
    for peak in list(PEAKS.values()) + list(HOST_PEAKS.values()):
        assert peak.source, f"{peak.name} has no source"
    for key in ("H100", "H100 PCIe", "H200"):
        assert "https://www.nvidia.com/" in PEAKS[key].source
    assert lookup_host_peak("AMD EPYC 7763 64-Core Processor") is HOST_PEAKS["AMD EPYC"]
    assert lookup_host_peak("Intel(R) Xeon(R) Gold 6248") is None


def test_one_gib_read_and_written_in_one_ms_on_an_h100_sxm():
    # 1 GiB in and 1 GiB out: 2^31 bytes in 1e-3 s = 2.147483648e12 B/s;
    # / 3.35e12 B/s = 0.6410398949...
    work = WorkEstimate(bytes_moved=2**31, flops=0, dtype="fp32", flop_counter="torch.utils.flop_counter")
    sol = speed_of_light(1e-3, work, H100, reference_s=2e-3)
    assert sol.counted and sol.bound == "memory"
    assert sol.achieved_bytes_per_s == pytest.approx(2.147483648e12, rel=1e-12)
    assert sol.bandwidth_fraction == pytest.approx(0.6410398949, abs=1e-10)
    assert sol.fraction == sol.bandwidth_fraction
    assert sol.arithmetic_intensity == 0.0
    assert sol.compute_fraction == 0.0
    # the reference took twice as long: half the fraction
    assert sol.reference_fraction == pytest.approx(0.32051994746, abs=1e-10)
    assert sol.peak_source == PEAKS["H100"].source


def test_a_4096_cubed_fp16_gemm_in_0_2_ms_is_compute_bound():
    # 2 * 4096^3 = 137438953472 FLOPs; three 4096^2 fp16 matrices = 100663296
    # bytes; intensity 1365.33 FLOP/B above the ridge 989.4e12 / 3.35e12 =
    # 295.34; rate 6.8719476736e14 FLOP/s / 989.4e12 = 0.69455707...
    work = WorkEstimate(
        bytes_moved=3 * 4096 * 4096 * 2, flops=2 * 4096**3, dtype="fp16", flop_counter="torch.utils.flop_counter"
    )
    sol = speed_of_light(0.2e-3, work, H100)
    assert sol.bound == "compute"
    assert sol.arithmetic_intensity == pytest.approx(1365.3333333, rel=1e-9)
    assert sol.ridge_point == pytest.approx(295.3432836, rel=1e-9)
    assert sol.achieved_flops_per_s == pytest.approx(6.8719476736e14, rel=1e-12)
    assert sol.fraction == pytest.approx(0.6945570723, abs=1e-9)
    assert sol.bandwidth_fraction == pytest.approx(100663296 / 0.2e-3 / 3.35e12, rel=1e-12)
    assert sol.reference_fraction is None


def test_intensity_just_below_the_ridge_is_memory_bound():
    # ridge of the H200 in fp32: 494.7e12 / 4.8e12 = 103.06 FLOP/B
    peak = lookup_peak("NVIDIA H200")
    below = WorkEstimate(bytes_moved=1000, flops=103_000, dtype="fp32", flop_counter="torch.utils.flop_counter")
    above = WorkEstimate(bytes_moved=1000, flops=103_100, dtype="fp32", flop_counter="torch.utils.flop_counter")
    assert speed_of_light(1e-6, below, peak).bound == "memory"
    assert speed_of_light(1e-6, above, peak).bound == "compute"


def test_unknown_work_is_never_guessed():
    sol = speed_of_light(1e-3, None, H100)
    assert not sol.counted and sol.fraction is None and "cannot be counted" in sol.reason
    work = WorkEstimate(bytes_moved=4096, flops=0, dtype="fp32", flop_counter="torch.utils.flop_counter")
    sol = speed_of_light(1e-3, work, None, device="Mystery GPU 9000")
    assert not sol.counted and "Mystery GPU 9000" in sol.reason
    # an op the FLOP counter does not know: bandwidth stated, bound not
    svd = WorkEstimate(
        bytes_moved=2**20,
        flops=0,
        dtype="fp32",
        flop_counter="torch.utils.flop_counter",
        uncounted_ops=["aten._linalg_svd"],
    )
    sol = speed_of_light(1e-3, svd, H100)
    assert sol.counted and sol.bound == "unknown" and sol.fraction is None and sol.flops is None
    assert sol.bandwidth_fraction == pytest.approx(2**20 / 1e-3 / 3.35e12)
    assert "aten._linalg_svd" in sol.reason
    line = speed_of_light_line(sol.to_dict())
    assert "aten._linalg_svd" in line and "bound is not stated" in line


def test_estimate_work_names_ops_the_flop_counter_cannot_count():
    import torch

    linear = torch.nn.Linear(64, 32, bias=False)
    w = estimate_work(linear, [torch.rand(8, 64)])
    assert w.flops == 2 * 8 * 64 * 32 and w.uncounted_ops == [] and w.flops_known
    # input 8x64, weight 32x64, output 8x32, fp32
    assert w.bytes_moved == 4 * (8 * 64 + 32 * 64 + 8 * 32)
    w = estimate_work(lambda a: torch.linalg.svd(a).S, [torch.rand(16, 16)])
    assert any("svd" in op for op in w.uncounted_ops) and not w.flops_known
    w = estimate_work(lambda a: torch.nn.functional.gelu(a), [torch.rand(16, 16)])
    assert w.flops == 0 and w.flops_known


def test_the_figure_travels_in_the_result_the_metrics_and_the_feedback():
    work = WorkEstimate(bytes_moved=2**31, flops=0, dtype="fp32", flop_counter="torch.utils.flop_counter")
    sol = speed_of_light(1e-3, work, H100, reference_s=2e-3).to_dict()
    result = EvalResult(
        compiled=True, correct=True, category="ok", runtime_ms=1.0, ref_runtime_ms=2.0, speedup=2.0, speed_of_light=sol
    )
    again = EvalResult.from_dict(result.to_dict())
    assert SpeedOfLight.from_dict(again.speed_of_light).fraction == pytest.approx(0.6410398949, abs=1e-10)
    metrics = program_metrics(again)
    assert metrics["sol_memory"] == pytest.approx(0.6410398949, abs=1e-10) and "sol_compute" not in metrics
    assert format_metrics(metrics).startswith("score=2, speedup=2x, sol_memory=64.1%")
    text = render_feedback(again)
    lines = [ln for ln in text.splitlines() if ln.startswith("Speed of light:")]
    assert len(lines) == 1
    assert "64.1% of H100 SXM's memory bandwidth" in lines[0] and "memory-bound" in lines[0]
    assert "2.15 TB/s of 3.35 TB/s" in lines[0] and "the reference reaches 32.1%" in lines[0]
    # a failed program shows no speed of light
    failed = EvalResult(compiled=True, correct=False, category="incorrect", speed_of_light=sol)
    assert "Speed of light" not in render_feedback(failed)


def test_peak_for_a_result_hardware_block(monkeypatch):
    monkeypatch.delenv("KERNELSMITH_SOL_DEVICE", raising=False)
    peak, name = peak_for({"backend": "triton", "name": "NVIDIA H100 80GB HBM3", "kind": "gpu"})
    assert peak is PEAKS["H100"] and name == "NVIDIA H100 80GB HBM3"
    monkeypatch.setenv("KERNELSMITH_SOL_DEVICE", "H200")
    assert peak_for({"name": "NVIDIA H100 80GB HBM3", "kind": "gpu"})[0] is PEAKS["H200"]


def test_the_evaluator_timing_seam_fills_the_speed_of_light(monkeypatch):
    """measure() on the host clock (simulated: the figures do not depend on
    the load here) with a GPU's name and on the host: one work estimate
    serves the roofline check and the speed of light."""
    import kernelsmith.timing.runners as runners
    from kernelsmith.evaluator import timing as et
    from kernelsmith.task import TimingConfig
    from test_evaluator_timing import HostBackend, SimClock

    clock = SimClock(noise=0.0)
    monkeypatch.setattr(runners, "time", clock)
    calls = []

    def work() -> WorkEstimate:
        calls.append(1)
        return WorkEstimate(bytes_moved=2**31, flops=0, dtype="fp32", flop_counter="torch.utils.flop_counter")

    quick = TimingConfig(warmup=1, repeats=6, cpu_max_samples=30, cpu_time_budget_s=0.3, input_sets=1)
    out = et.measure(
        lambda x: clock.spin(2e-3),
        lambda x: clock.spin(1e-3),
        HostBackend(),
        [(0,)],
        quick,
        device_name="NVIDIA H100 80GB HBM3",
        work=work,
    )
    assert len(calls) == 1 and out.details["roofline"]["applied"]
    sol = out.result_fields()["speed_of_light"]
    assert sol["counted"] and sol["device"] == "H100 SXM" and sol["bound"] == "memory"
    # the candidate's median is 1 ms on the simulated clock
    assert sol["fraction"] == pytest.approx(0.6410398949, rel=1e-6)
    assert sol["reference_fraction"] == pytest.approx(0.6410398949 / 2, rel=1e-6)
    # on the host: the host CPU's entry, or the reason there is none
    import kernelsmith.timing.sol as sl

    monkeypatch.setattr(sl, "host_cpu_name", lambda: "AMD EPYC 7B13")
    out = et.measure(lambda x: clock.spin(2e-3), lambda x: clock.spin(1e-3), HostBackend(), [(0,)], quick, work=work)
    sol = out.speed_of_light
    assert sol["counted"] and sol["device"] == HOST_PEAKS["AMD EPYC"].name
    assert sol["bandwidth_fraction"] == pytest.approx(2**31 / 1e-3 / HOST_PEAKS["AMD EPYC"].bandwidth_bytes_s, rel=1e-6)
    monkeypatch.setattr(sl, "host_cpu_name", lambda: "Some Future CPU")
    out = et.measure(lambda x: clock.spin(2e-3), lambda x: clock.spin(1e-3), HostBackend(), [(0,)], quick, work=work)
    assert not out.speed_of_light["counted"] and "Some Future CPU" in out.speed_of_light["reason"]
