"""The evaluator's timing seam (evaluator/timing.py) on kernelsmith.timing:
paired comparison with a CI and a verdict, task timing options, rejection of
hidden work as a hack, the roofline flag, OpenCL event sampling, OpenCL build
failures as compile errors, GPU detection for the worker pool, and the
checked-in _core.pyi stub."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

import pytest

from kernelsmith import timing as kt
from kernelsmith.evaluator import timing as et
from kernelsmith.evaluator.devices import detect_gpus, parse_cuda_visible_devices, parse_nvidia_smi_list
from kernelsmith.result import EvalResult
from kernelsmith.task import Task, TaskConfig, TimingConfig
from kernelsmith.config import ConfigError

HERE = Path(__file__).parent
EXAMPLES = HERE.parent / "examples"


class HostBackend:
    """The parts of a Backend the timing seam uses, for trusted test callables."""

    name = "host"

    def __init__(self) -> None:
        self.syncs = 0

    def synchronize(self) -> None:
        self.syncs += 1

    def timing_device(self) -> str:
        return "cpu"

    def sample_source(self, fn):
        return None


class SimClock:
    """A simulated host clock for the harness's CPU runner: the test's
    callables advance it by their nominal time times seeded noise, so the
    statistics see realistic samples whatever the load on the CI machine."""

    def __init__(self, seed: int = 0, noise: float = 0.03) -> None:
        import random

        self.now_ns = 0
        self.rng = random.Random(seed)
        self.noise = noise

    def perf_counter_ns(self) -> int:
        return self.now_ns

    def perf_counter(self) -> float:
        return self.now_ns * 1e-9

    def spin(self, seconds: float) -> None:
        self.now_ns += int(seconds * 1e9 * (1.0 + self.rng.uniform(-self.noise, self.noise)))


@pytest.fixture
def clock(monkeypatch) -> SimClock:
    import kernelsmith.timing.runners as runners

    sim = SimClock()
    monkeypatch.setattr(runners, "time", sim)
    return sim


QUICK = TimingConfig(warmup=1, repeats=6, cpu_max_samples=30, cpu_time_budget_s=0.3, input_sets=2)


def test_correct_candidate_gets_a_speedup_with_ci_and_verdict(clock):
    seen_sets = []

    def ref(x):
        clock.spin(2e-3)
        return x

    def cand(x):
        seen_sets.append(x)
        clock.spin(1e-3)
        return x

    backend = HostBackend()
    out = et.measure(ref, cand, backend, [(1,), (2,)], QUICK)
    assert out.verdict == "faster", out.details
    assert out.speedup_ci_low <= out.speedup <= out.speedup_ci_high
    # the pairs alone pin the ratio down; the reported interval carries the
    # host clock's between-session floor (timing.cpu_ci_floor, +-15%)
    assert 1.9 < out.details["pairs_ci"][0] <= out.speedup <= out.details["pairs_ci"][1] < 2.1
    assert out.speedup_ci_low == pytest.approx(out.speedup * 0.85) and out.speedup_ci_high == pytest.approx(
        out.speedup * 1.15
    )
    assert out.runtime_ms == pytest.approx(1.0, rel=0.05) and out.ref_runtime_ms == pytest.approx(2.0, rel=0.05)
    d = out.details
    assert d["timer"] == "perf_counter" and d["input_sets"] == 2 and d["n_pairs"] >= 6
    assert d["candidate"]["n"] >= 6 and d["candidate"]["cv"] >= 0 and d["stop_reason"]
    # CPU caps: the budget holds the whole comparison near 0.3 s
    assert d["options"]["time_budget_s"] == 0.3 and d["options"]["max_samples"] == 30
    # rotation over both input sets, and the backend's synchronize around samples
    assert {1, 2} <= set(seen_sets) and backend.syncs > 10
    fields = out.result_fields()
    r = EvalResult(category="ok", compiled=True, correct=True, **fields)
    assert EvalResult.from_dict(r.to_dict()) == r
    text = r.render_feedback()
    assert "95% CI" in text and "faster than the reference" in text


def test_slower_candidate_is_called_slower(clock):
    out = et.measure(lambda x: clock.spin(1e-3), lambda x: clock.spin(2e-3), HostBackend(), [(0,)], QUICK)
    assert out.verdict == "slower" and out.speedup_ci_high < 1.0, out.details


def test_candidate_exception_is_reported_as_the_candidates():
    def cand(x):
        raise ZeroDivisionError("boom")

    with pytest.raises(et.CandidateTimingError) as info:
        et.measure(lambda x: x, cand, HostBackend(), [(0,)], QUICK)
    assert isinstance(info.value.original, ZeroDivisionError)


def test_external_sample_source_is_used_when_the_backend_gives_one():
    class Events(HostBackend):
        def sample_source(self, fn):
            def sample() -> float:
                fn()
                return 1e-3 if getattr(fn, "side", "") == "" else 1e-3

            return sample

    calls = {"ref": 0, "cand": 0}

    def ref(x):
        calls["ref"] += 1

    def cand(x):
        calls["cand"] += 1

    out = et.measure(
        ref, cand, Events(), [(0,), (1,), (2,)], TimingConfig(warmup=0, repeats=10, max_samples=40, time_budget_s=1.0)
    )
    assert out.details["timer"] == "external" and out.details["input_sets"] == 3
    assert out.verdict == "indistinguishable" and out.speedup == pytest.approx(1.0)
    assert calls["ref"] == calls["cand"] >= 10


def _comparison(**kw: Any) -> kt.Comparison:
    base = dict(
        speedup=3.0,
        speedup_low=2.9,
        speedup_high=3.1,
        rel_half_width=0.03,
        verdict="faster",
        stop_reason="target_reached",
        n_pairs=50,
        n_outlier_pairs=0,
        reference_median_s=3e-3,
        candidate_median_s=1e-3,
        elapsed_s=0.5,
        timer="cuda_event",
        device="cuda",
    )
    base.update(kw)
    return kt.Comparison(**base)


def test_hidden_work_rejection_maps_to_a_rejected_outcome():
    # the decision itself is tested with simulated timers in test_timing.py;
    # here: what the evaluator makes of a 'rejected' comparison
    hw = kt.hidden_work_verdict(event_s=1e-4, wall_s=5e-3, overhead_s=2e-5)
    assert hw.suspected
    c = _comparison(
        verdict="rejected",
        rejected_reason="hidden work: " + hw.reason,
        hidden_work={"candidate": hw},
        reference_cuda_graph=True,
        candidate_cuda_graph=False,
        graph_fallback_reasons={"candidate": "RuntimeError: capture failed"},
    )
    out = et.outcome_from_comparison(c, options={"confidence": 0.95})
    assert out.rejected and "stream the timer does not see" in out.rejected_reason
    assert out.details["hidden_work"]["candidate"]["suspected"] is True
    assert out.details["cuda_graph"] == {"reference": True, "candidate": False}
    assert "capture failed" in out.details["graph_fallback_reasons"]["candidate"]


def test_worker_turns_a_rejected_timing_into_a_hack(monkeypatch):
    """worker_timing.time_candidate with a comparison that found hidden work."""
    import torch

    from kernelsmith.evaluator import correctness as cmp
    from kernelsmith.evaluator.checks import Context, Verdict
    from kernelsmith.evaluator.worker_timing import time_candidate

    rejected = et.outcome_from_comparison(
        _comparison(verdict="rejected", rejected_reason="hidden work: work ran on a stream the timer does not see"),
        options={},
    )
    monkeypatch.setattr(et, "measure", lambda *a, **k: rejected)

    class Chan:
        def stage(self, s: str) -> None:
            pass

        def timing_slot(self) -> float:
            return 0.0

        def timing_done(self, report: dict) -> bool:
            return False

    class Ref:
        @staticmethod
        def get_inputs():
            return [torch.ones(4)]

    model = torch.nn.ReLU()
    task = Task.load(EXAMPLES / "triton" / "relu")
    out: dict[str, Any] = {"hardware": {}}
    ctx = Context(
        chan=Chan(),
        backend=HostBackend(),
        cfg=task.config,
        ref=Ref,
        model=model,
        model_new=model,
        make_inputs=lambda gen: list(gen()),
        clone=lambda v: [t.clone() for t in v],
        cmp=cmp,
        out=out,
        fail_from=lambda *a, **k: AssertionError("not expected"),
        atol=1e-4,
        rtol=1e-4,
        checks_on=True,
        run_checked=lambda args, where: cmp.flatten_outputs(model(*args)),
        census=None,
    )  # no census here
    with pytest.raises(Verdict) as info:
        time_candidate(ctx)
    fields = info.value.fields
    assert fields["category"] == "hacked" and fields["hacked"] and fields["speedup"] is None
    assert "timing rejected the candidate: hidden work" in fields["hack_reasons"][0]
    assert out["timing_verdict"] == "rejected" and out["timing"]["verdict"] == "rejected"


def test_roofline_marks_impossible_times_suspicious(clock):
    calls = []

    def work() -> kt.WorkEstimate:
        calls.append(1)
        return kt.WorkEstimate(bytes_moved=10**12, flops=0, dtype="fp32", flop_counter="test")

    # 1 TB in ~1 ms on an H200 (4.8 TB/s): below the floor
    out = et.measure(
        lambda x: clock.spin(1e-3),
        lambda x: clock.spin(1e-3),
        HostBackend(),
        [(0,)],
        QUICK,
        device_name="NVIDIA H200",
        work=work,
    )
    assert out.suspicious and "roofline" in out.suspicious_reasons[0] and "floor" in out.suspicious_reasons[0]
    assert out.details["roofline"]["applied"] and out.details["roofline"]["bytes_moved"] == 10**12
    # an unknown device: no check, and the reference's work is not even estimated
    out = et.measure(
        lambda x: clock.spin(1e-3),
        lambda x: clock.spin(1e-3),
        HostBackend(),
        [(0,)],
        QUICK,
        device_name="Mystery GPU",
        work=work,
    )
    assert not out.suspicious and out.details["roofline"]["applied"] is False and len(calls) == 1
    r = EvalResult(category="ok", suspicious=True, suspicious_reasons=["roofline: below the floor"], runtime_ms=1.0)
    assert "suspicious" in r.render_feedback()


def test_timing_options_come_from_the_task_config(tmp_path):
    cfg = TimingConfig(
        repeats=7,
        max_samples=100,
        time_budget_s=3.0,
        cpu_max_samples=12,
        cpu_time_budget_s=0.2,
        l2_flush=False,
        cuda_graph=False,
    )
    gpu = et.harness_options(cfg, host_clock=False)
    # a device timer takes at least gpu_min_pairs (50) pairs, a task's lower repeats notwithstanding
    assert gpu["min_samples"] == 50 and gpu["max_samples"] == 100 and gpu["time_budget_s"] == 3.0
    assert et.harness_options(TimingConfig(repeats=80, gpu_min_pairs=50), host_clock=False)["min_samples"] == 80
    assert et.harness_options(TimingConfig(repeats=3, max_samples=20), host_clock=False)["min_samples"] == 20
    assert gpu["l2_flush"] is False and gpu["cuda_graph"] is False and gpu["check_hidden_work"] is True
    cpu = et.harness_options(cfg, host_clock=True)
    assert cpu["max_samples"] == 12 and cpu["time_budget_s"] == 0.2 and cpu["min_samples"] == 7
    # on the host clock the reported CI is at least +-cpu_ci_floor wide: the
    # pairs stop once their own CI is a third of that (more cannot narrow
    # what is reported); device timers keep the task's target
    assert cpu["ci_floor"] == 0.15 and cpu["target_rel_half_width"] == pytest.approx(0.05)
    assert gpu["target_rel_half_width"] == cfg.target_rel_half_width == 0.005
    assert et.harness_options(TimingConfig(cpu_ci_floor=0.0), host_clock=True)["target_rel_half_width"] == 0.005
    assert et.harness_options(TimingConfig(cpu_ci_floor=0.01), host_clock=True)["target_rel_half_width"] == 0.005
    # every option is one kernelsmith.timing accepts
    kt.TimingOptions.from_kwargs(gpu)
    # the slot's clock readings never start an nvidia-smi (NVML or nothing)
    assert gpu["gpu_state_start_process"] is False and cpu["gpu_state_start_process"] is False
    assert kt.TimingOptions().gpu_state_start_process is True  # a notebook's own timing may
    # task.yaml: timing section, unknown keys and bad values rejected by name
    ref = (EXAMPLES / "triton" / "relu" / "reference.py").read_text()
    (tmp_path / "reference.py").write_text(ref)
    (tmp_path / "task.yaml").write_text("timing: {input_sets: 4, time_budget_s: 2.5, l2_flush: false}\n")
    t = Task.load(tmp_path)
    assert t.config.timing.input_sets == 4 and t.config.timing.time_budget_s == 2.5 and not t.config.timing.l2_flush
    (tmp_path / "task.yaml").write_text("timing: {input_set: 4}\n")
    with pytest.raises(ConfigError, match="input_set"):
        Task.load(tmp_path)
    with pytest.raises(ConfigError, match="timing.input_sets"):
        TaskConfig(timing={"input_sets": 0})
    with pytest.raises(ConfigError, match="timing.time_budget_s"):
        TimingConfig(time_budget_s=-1)


# -- OpenCL ------------------------------------------------------------------


def _opencl_or_skip() -> Any:
    # PoCL is installed by the set-up script: a missing device is a failure here.
    from kernelsmith import opencl as ocl

    ocl.context()
    return ocl


def test_opencl_build_failure_is_a_compile_error():
    from kernelsmith.backends import get_backend

    backend = get_backend("opencl")
    ocl = _opencl_or_skip()
    with pytest.raises(ocl.OpenCLError) as info:
        ocl.build("__kernel void k(__global float* y) { y[0] = not_declared; }")
    exc = info.value
    assert exc.code == -11
    assert backend.classify_exception(exc) == "compile"
    text = backend.trim_traceback(exc, "/nonexistent/candidate.py")
    assert "--- build log ---" in text and "not_declared" in text
    # other OpenCL errors stay runtime errors
    other = ocl.OpenCLError("clEnqueueNDRangeKernel failed: CL_INVALID_WORK_GROUP_SIZE (-54)")
    assert backend.classify_exception(other) == "runtime"


def test_opencl_build_failure_through_the_evaluator():
    _opencl_or_skip()
    from kernelsmith.evaluator import Evaluator

    task = Task.load(EXAMPLES / "opencl" / "softmax", trials=1)
    source = (HERE / "fixtures_opencl" / "build_error.py").read_text()
    with Evaluator(backend="opencl", timing=False, timeout_s=120) as ev:
        r = ev.evaluate(task, source)
    assert r.category == "compile" and r.compiled is False, (r.category, r.error)
    assert "CL_BUILD_PROGRAM_FAILURE" in r.error and "row_maximum" in r.error and "build log" in r.error


def test_opencl_wall_mode_and_event_sampler_feed_the_paired_comparison(monkeypatch):
    """PyTorch CPU reference vs an OpenCL candidate: host clock on CPU
    devices (PoCL), event profiling when forced ('events')."""
    import numpy as np
    import torch

    ocl = _opencl_or_skip()
    from kernelsmith.backends.opencl import OpenCLBackend

    program = ocl.build(r"""
    __kernel void relu(__global const float* x, __global float* y, int n) {
        int i = get_global_id(0);
        if (i < n) y[i] = fmax(x[i], 0.0f);
    }""")

    def cand(x):
        y = torch.empty_like(x)
        program.relu(ocl.round_up(x.numel(), 64), 64, x, y, np.int32(x.numel()), inputs=[0])
        return y

    sets = [(torch.randn(1 << 14),), (torch.randn(1 << 14),)]
    cfg = TimingConfig(
        warmup=1, repeats=5, cpu_max_samples=15, cpu_time_budget_s=0.2, max_samples=15, time_budget_s=0.3
    )
    for mode, timer in (("wall", "perf_counter"), ("events", "external")):
        monkeypatch.setenv("KERNELSMITH_OPENCL_TIMING", mode)
        backend = OpenCLBackend()
        out = et.measure(torch.relu, cand, backend, sets, cfg)
        assert out.details["timer"] == timer, mode
        assert out.runtime_ms > 0 and out.ref_runtime_ms > 0 and out.verdict in kt.VERDICTS
        assert out.speedup_ci_low <= out.speedup <= out.speedup_ci_high
        if mode == "events":
            # the sample is the kernel's profiled time, not the host's
            src = backend.sample_source(lambda: cand(*sets[0]))
            assert 0 < src() < 1.0


# -- device detection ----------------------------------------------------------

NVIDIA_SMI_L = """GPU 0: NVIDIA H200 (UUID: GPU-0d4e5f1a-0000-0000-0000-000000000000)
GPU 1: NVIDIA H200 (UUID: GPU-1d4e5f1a-0000-0000-0000-000000000000)
GPU 2: NVIDIA H200 (UUID: GPU-2d4e5f1a-0000-0000-0000-000000000000)
GPU 3: NVIDIA H200 (UUID: GPU-3d4e5f1a-0000-0000-0000-000000000000)
"""

NVIDIA_SMI_MIG = """GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-aaaa)
  MIG 3g.40gb     Device  0: (UUID: MIG-1111-2222)
  MIG 3g.40gb     Device  1: (UUID: MIG-3333-4444)
GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-bbbb)
"""


def test_device_detection_from_nvidia_smi_and_cuda_visible_devices():
    assert parse_nvidia_smi_list(NVIDIA_SMI_L) == ["0", "1", "2", "3"]
    assert parse_nvidia_smi_list(NVIDIA_SMI_MIG) == ["MIG-1111-2222", "MIG-3333-4444", "1"]
    assert parse_nvidia_smi_list("") == []
    assert parse_nvidia_smi_list("NVIDIA-SMI has failed because it couldn't communicate with the driver") == []
    assert detect_gpus(env={}, nvidia_smi_output=NVIDIA_SMI_L) == ["0", "1", "2", "3"]
    # CUDA_VISIBLE_DEVICES wins over nvidia-smi, with CUDA's parsing rules
    assert detect_gpus(env={"CUDA_VISIBLE_DEVICES": "2,3"}, nvidia_smi_output=NVIDIA_SMI_L) == ["2", "3"]
    assert detect_gpus(env={"CUDA_VISIBLE_DEVICES": ""}, nvidia_smi_output=NVIDIA_SMI_L) == []
    assert parse_cuda_visible_devices("-1") == []
    assert parse_cuda_visible_devices("1,-1,2") == ["1"]
    assert parse_cuda_visible_devices("GPU-abc, 3") == ["GPU-abc", "3"]


def test_evaluator_uses_every_detected_gpu(monkeypatch):
    from kernelsmith.evaluator import Evaluator, service

    monkeypatch.setattr(service, "detect_gpus", lambda: ["0", "1", "2", "3"])
    with Evaluator(backend="triton") as ev:  # pool: four in flight per GPU, one timing each
        assert ev.workers == 16 and ev.devices == ["0", "1", "2", "3"] and len(ev.gates) == 4
    with Evaluator(backend="triton", mode="fresh") as ev:  # one fresh process per GPU
        assert ev.workers == 4
    with Evaluator(backend="triton", workers=2) as ev:  # configurable
        assert ev.workers == 2
    with Evaluator(backend="triton", devices=[]) as ev:  # explicit: no pinning, one device slot
        assert ev.workers == 2 and ev.devices == [None] and len(ev.gates) == 1
    monkeypatch.setattr(service, "detect_gpus", lambda: [])
    with Evaluator(backend="triton") as ev:  # CPU-only host: two overlap, one times; one thread each side
        assert ev.workers == 2 and ev.devices == [None] and ev.cpu_threads == 1


def test_device_detection_runs_a_fake_nvidia_smi(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\n[ \"$1\" = -L ] || exit 3\ncat <<'EOF'\n" + NVIDIA_SMI_L + "EOF\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert detect_gpus() == ["0", "1", "2", "3"]


# -- _core.pyi -------------------------------------------------------------------


def _stub_names(body: list, prefix: str = "") -> set[str]:
    """Dotted names the stub declares: submodules are classes in _core.pyi
    (a single-file stub cannot hold modules), so 'timing.median' and
    'timing.AdaptiveSampler.add' are both nested class members."""
    names: set[str] = set()
    for node in body:
        declared: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            declared = [node.name]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            declared = [node.target.id]
        elif isinstance(node, ast.Assign):
            declared = [t.id for t in node.targets if isinstance(t, ast.Name)]
        names.update(prefix + n for n in declared)
        if isinstance(node, ast.ClassDef):
            names |= _stub_names(node.body, prefix + node.name + ".")
    return names


def _runtime_names(obj: Any, prefix: str = "") -> set[str]:
    """Dotted public names of _core: submodules, their functions and
    classes, and the classes' own members (not object's or BaseException's)."""
    import inspect

    names: set[str] = set()
    for name in dir(obj):
        # single-underscore names (_Engine, _log, ...) are the package's own
        # API and need stubs too; dunders and pybind11 internals do not
        if name.startswith(("__", "_pybind11")):
            continue
        if inspect.isclass(obj) and (
            hasattr(object, name) or (issubclass(obj, BaseException) and hasattr(BaseException, name))
        ):
            continue
        value = getattr(obj, name)
        names.add(prefix + name)
        if inspect.ismodule(value) or (inspect.isclass(value) and value.__module__.startswith("kernelsmith")):
            if value is obj:
                continue
            names |= _runtime_names(value, prefix + name + ".")
    return names


def test_core_stub_covers_every_public_name():
    import kernelsmith
    from kernelsmith import _core

    pkg = Path(kernelsmith.__file__).parent
    stub_path = pkg / "_core.pyi"
    assert stub_path.exists(), "kernelsmith/_core.pyi must be installed next to the extension"
    assert (pkg / "py.typed").exists()
    stub = _stub_names(ast.parse(stub_path.read_text()).body)
    runtime = _runtime_names(_core)
    assert len(runtime) > 50  # the introspection sees the real module
    missing = sorted(runtime - stub)
    assert not missing, "names in kernelsmith._core without an entry in _core.pyi: " + ", ".join(missing)
    stale = sorted(n for n in stub - runtime if not n.split(".")[-1].startswith("__"))
    assert not stale, "_core.pyi declares names _core does not have: " + ", ".join(stale)


# -- GPU (run by the lead on the device machine: pytest -m gpu) ----------------


def _cuda() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    return torch


def _real_triton() -> None:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("needs compiled Triton (unset TRITON_INTERPRET)")


class CudaBackend(HostBackend):
    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def timing_device(self) -> str:
        return "cuda"


@pytest.mark.gpu
def test_gpu_measure_uses_graphs_l2_flush_rotation_and_records_gpu_state():
    torch = _cuda()
    sets = [(torch.randn(1 << 22, device="cuda"),) for _ in range(3)]
    name = torch.cuda.get_device_name()
    out = et.measure(
        torch.relu,
        lambda x: torch.relu(x),
        CudaBackend(),
        sets,
        TimingConfig(time_budget_s=2.0),
        device_name=name,
        work=lambda: kt.estimate_work(torch.relu, sets[0]),
    )
    d = out.details
    assert d["timer"] == "cuda_event" and d["l2_flush"] is True and d["input_sets"] == 3
    assert d["cuda_graph"] == {"reference": True, "candidate": True}, d["graph_fallback_reasons"]
    assert d["launches_per_sample"] % 3 == 0  # whole rounds over the input sets
    assert d["hidden_work"]["candidate"]["suspected"] is False, d["hidden_work"]
    assert out.verdict != "rejected" and 0.95 < out.speedup < 1.05, d
    assert out.speedup_ci_low <= out.speedup <= out.speedup_ci_high
    assert set(d["gpu_state"]) == {"before", "after"}
    if d["gpu_state"]["before"]:
        assert "sm_clock_mhz" in d["gpu_state"]["before"] and "temperature_c" in d["gpu_state"]["after"]
    if kt.lookup_peak(name) is not None:
        assert d["roofline"]["applied"] and not out.suspicious, d["roofline"]


@pytest.mark.gpu
def test_gpu_measure_rejects_work_on_a_hidden_stream():
    torch = _cuda()
    a = torch.randn(4096, 4096, device="cuda")
    side = torch.cuda.Stream()

    def cheat(x):
        with torch.cuda.stream(side):  # never joined: the timed stream does not wait
            return x @ x

    out = et.measure(lambda x: x @ x, cheat, CudaBackend(), [(a,)], TimingConfig(time_budget_s=2.0))
    assert out.rejected and "hidden work" in out.rejected_reason, out.details


@pytest.mark.gpu
def test_gpu_evaluator_times_the_seed_with_the_paired_harness():
    torch = _cuda()
    _real_triton()
    from kernelsmith.evaluator import Evaluator

    task = Task.load(EXAMPLES / "triton" / "softmax", trials=2)
    with Evaluator(backend="triton", timeout_s=300) as ev:
        assert ev.workers == 4 * len(detect_gpus())  # the pool's default: four workers per local GPU
        r = ev.evaluate(task, task.seed_source)
    assert r.category == "ok", (r.error, r.hack_reasons)
    t = r.timing
    # the task's 3 fresh sets and device copies of them, each placed anew
    assert t["timer"] == "cuda_event" and t["input_sets"] == task.config.timing.gpu_input_sets == 8
    assert t["l2_flush"] is True
    assert t["cuda_graph"]["candidate"] is True or t["graph_fallback_reasons"].get("candidate")
    assert r.timing_verdict in ("faster", "slower", "indistinguishable")
    assert r.speedup_ci_low <= r.speedup <= r.speedup_ci_high
    assert not t["hidden_work"]["candidate"]["suspected"]
    assert set(t["gpu_state"]) == {"before", "after"}
    try:  # the worker's NVML handle, taken before the program (worker.guard_channel)
        import pynvml  # type: ignore

        pynvml.nvmlInit()
        nvml = True
    except Exception:  # noqa: BLE001 - no NVML here: the readings are empty, never an nvidia-smi
        nvml = False
    for when in ("before", "after"):
        assert t["gpu_state"][when].get("source") == ("pynvml" if nvml else None), t["gpu_state"]
    if kt.lookup_peak(torch.cuda.get_device_name()) is not None:
        assert t["roofline"]["applied"] and t["roofline"]["bytes_moved"] > 0
    print(r.render_feedback())


@pytest.mark.gpu
def test_gpu_evaluator_rejects_a_candidate_hiding_work_on_a_side_stream(tmp_path):
    _cuda()
    _real_triton()
    from kernelsmith.evaluator import Evaluator

    # large enough that the hidden kernel (~100 us on an H200) outlasts its
    # launch, so the device-synchronized wall clock sees what events miss
    (tmp_path / "reference.py").write_text(
        "import torch\nimport torch.nn as nn\n\nN = 1 << 26\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(x)\n\n\n"
        "def get_inputs():\n    return [torch.randn(N)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    (tmp_path / "task.yaml").write_text("trials: 1\ntiming: {time_budget_s: 2.0, input_sets: 2}\n")
    task = Task.load(tmp_path)
    with Evaluator(backend="triton", timeout_s=300, workers=1) as ev:
        r = ev.evaluate(task, (HERE / "fixtures" / "candidates" / "hack_hidden_stream.py").read_text())
    assert r.category == "hacked", (r.category, r.error, r.hack_reasons, r.timing.get("hidden_work"))
    # the census sees the side stream already in the correctness trials; the
    # timing's own hidden-work check (test_gpu_measure_rejects_work_on_a_hidden_stream)
    # is the second line
    assert r.speedup is None
    if any("not the timed stream" in h for h in r.hack_reasons):
        assert not r.timing  # rejected before it was timed
    else:
        assert any("timing rejected the candidate" in h for h in r.hack_reasons), r.hack_reasons
        assert r.timing["verdict"] == "rejected"
