"""kernelsmith.opencl on the machine's OpenCL device (PoCL's CPU device in CI)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import kernelsmith
from kernelsmith import opencl as ocl

SCALE = """
__kernel void scale(__global const float* x, __global float* y, float a, int n) {
    int i = get_global_id(0);
    if (i < n) y[i] = a * x[i];
}
"""

TYPED = """
__kernel void typed(__global long* out, long big, uint u, double d, int i) {
    out[0] = big; out[1] = (long)u; out[2] = (long)(d * 2.0); out[3] = i;
}
"""

ROW_SUM = """
__kernel void row_sum(__global const float* x, __global float* out, __local float* scratch, int cols) {
    int row = get_group_id(0), lid = get_local_id(0), size = get_local_size(0);
    float acc = 0.0f;
    for (int c = lid; c < cols; c += size) acc += x[row * cols + c];
    scratch[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = size / 2; s > 0; s >>= 1) {
        if (lid < s) scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) out[row] = scratch[0];
}
"""


def test_devices_report_properties_used_for_prompts() -> None:
    found = ocl.devices()
    assert found, "no OpenCL device"
    d = found[0]
    for key in (
        "name",
        "type",
        "max_work_group_size",
        "local_mem_size",
        "max_compute_units",
        "preferred_vector_width_float",
    ):
        assert key in d
    assert d["max_work_group_size"] > 0 and d["local_mem_size"] > 0


def test_selection_error_lists_devices() -> None:
    with pytest.raises(ValueError) as info:
        ocl.select_device("definitely-not-a-device")
    assert ocl.devices()[0]["name"] in str(info.value)


def test_env_var_selects_device_for_new_contexts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ocl.DEVICE_ENV_VAR, "no-such-vendor")
    with pytest.raises(ValueError, match="KERNELSMITH_OPENCL_DEVICE"):
        ocl.Context()
    monkeypatch.setenv(ocl.DEVICE_ENV_VAR, "0:0")
    assert ocl.Context().device["name"] == ocl.devices()[0]["name"]


def test_launch_on_numpy_and_torch_writes_outputs_in_place() -> None:
    program = ocl.build(SCALE)
    x = torch.randn(1000)
    y = torch.full_like(x, float("nan"))
    program.scale(ocl.round_up(1000, 64), 64, x, y, np.float32(3.0), 1000)
    torch.testing.assert_close(y, 3.0 * x)

    xn = np.arange(10, dtype=np.float32)
    yn = np.zeros_like(xn)
    program.scale(10, None, xn, yn, 0.5, 10)
    np.testing.assert_allclose(yn, 0.5 * xn)


def test_device_buffers_round_trip() -> None:
    ctx = ocl.context()
    program = ocl.build(SCALE)
    x = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    dx = ctx.to_device(x)
    dy = ctx.empty(x.nbytes)
    program.scale(256, 64, dx, dy, np.float32(-1.0), 256, wait=True)
    out = ctx.to_host(dy, np.empty_like(x))
    np.testing.assert_allclose(out, -x)


def test_scalar_types_are_passed_with_their_c_type() -> None:
    out = np.zeros(4, dtype=np.int64)
    ocl.build(TYPED).typed(1, 1, out, np.int64(2**40 + 5), np.uint32(2**32 - 1), np.float64(1.25), 7)
    assert out.tolist() == [2**40 + 5, 2**32 - 1, 2, 7]
    with pytest.raises(ValueError, match="does not fit"):
        ocl.build(TYPED).typed(1, 1, out, 2**40, np.uint32(1), np.float64(1.0), 1)
    # A Python int where the kernel takes a long: CL reports the size mismatch by name.
    with pytest.raises(kernelsmith.OpenCLError, match="CL_INVALID_ARG_SIZE") as info:
        ocl.build(TYPED).typed(1, 1, out, 5, np.uint32(1), np.float64(1.0), 1)
    assert info.value.code == -51


def test_local_memory_argument() -> None:
    x = torch.randn(8, 100)
    out = torch.empty(8)
    ocl.build(ROW_SUM).row_sum(8 * 32, 32, x, out, ocl.LocalMemory(32 * 4), 100)
    torch.testing.assert_close(out, x.sum(dim=1), rtol=1e-5, atol=1e-5)


def test_build_failure_raises_with_log_and_code() -> None:
    with pytest.raises(kernelsmith.OpenCLError) as info:
        ocl.build("__kernel void f(__global float* x) { x[0] = missing_symbol; }")
    assert info.value.code == -11
    message = str(info.value)
    assert "CL_BUILD_PROGRAM_FAILURE" in message and "missing_symbol" in message
    assert "build log" in message


def test_launch_error_names_status_and_call() -> None:
    program = ocl.build(SCALE)
    x = np.zeros(100, np.float32)
    with pytest.raises(kernelsmith.OpenCLError, match="clEnqueueNDRangeKernel.*CL_INVALID_WORK_GROUP_SIZE"):
        program.scale(100, 64, x, x, 1.0, 100)  # 100 is not a multiple of 64
    with pytest.raises(ValueError, match="takes 4 arguments"):
        program.scale(64, 64, x, x)
    with pytest.raises(ValueError, match="no kernel named 'nope'.*scale"):
        program.nope
    with pytest.raises(ValueError, match="contiguous"):
        program.scale(64, 64, torch.randn(10, 10).t(), x, 1.0, 64)


def test_cache_hit_for_same_source_and_options() -> None:
    ctx = ocl.Context()
    first = ctx.build(SCALE, defines={"UNUSED": 1})
    before = ctx.cache_stats()
    again = ctx.build(SCALE, defines={"UNUSED": 1})
    assert again is first
    after = ctx.cache_stats()
    assert after["hits"] == before["hits"] + 1 and after["misses"] == before["misses"]
    ctx.build(SCALE, "-DUNUSED=2")
    assert ctx.cache_stats()["entries"] == 2


def test_launch_counter_and_profiled_times() -> None:
    program = ocl.build(SCALE)
    x = np.ones(1 << 14, np.float32)
    y = np.empty_like(x)
    mark = ocl.launch_count()
    samples = ocl.profile(lambda: program.scale(x.size, 64, x, y, 2.0, x.size), warmup=1, repetitions=4)
    assert len(samples) == 4 and all(s > 0 for s in samples)
    assert ocl.launch_count() == mark + 5
    assert ocl.launched_since(mark) == ["scale"] * 5
    with pytest.raises(RuntimeError, match="no OpenCL kernel"):
        ocl.profile(lambda: None, warmup=0, repetitions=1)


def test_builds_release_the_gil() -> None:
    # While one thread compiles (hundreds of ms on PoCL), another keeps running Python.
    ticks = 0
    done = threading.Event()

    def spin() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1

    source = SCALE + f"\n// unique {np.random.default_rng().integers(1 << 60)}\n"
    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        before = ticks
        ocl.Context().build(source)
        during = ticks - before
    finally:
        done.set()
        spinner.join()
    assert during > 1000


def test_event_samples_feed_the_timing_harness() -> None:
    from kernelsmith import timing

    program = ocl.build(SCALE)
    x = np.ones(1 << 14, np.float32)
    y = np.empty_like(x)
    source = ocl.sampler(lambda: program.scale(x.size, 64, x, y, 1.0, x.size))
    measurement = timing.bench_samples(source, unit="s", min_samples=5, max_samples=20, time_budget_s=2.0)
    assert measurement.timer == "external"
    assert 0 < measurement.median_s < 1.0
