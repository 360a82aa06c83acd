"""The OpenCL Backend: static checks, launch guard, timing, hardware and prompt tips."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernelsmith import opencl as ocl
from kernelsmith.backends import get_backend
from kernelsmith.backends.base import available_backends
from kernelsmith.backends.opencl import OpenCLBackend, opencl_prompt_tips
from kernelsmith.hardware import HardwareInfo

FIXTURES = Path(__file__).resolve().parent / "fixtures_opencl"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "opencl"

SCALE = """
__kernel void scale(__global float* y, float a, int n) {
    int i = get_global_id(0);
    if (i < n) y[i] *= a;
}
"""


def _check(name: str):
    return OpenCLBackend().static_check((FIXTURES / name).read_text())


def test_backend_is_discoverable_by_name() -> None:
    assert "opencl" in available_backends()
    assert isinstance(get_backend("opencl"), OpenCLBackend)


@pytest.mark.parametrize("example", ["softmax", "layernorm", "matmul"])
def test_example_seeds_pass_static_checks(example: str) -> None:
    report = OpenCLBackend().static_check((EXAMPLES / example / "seed.py").read_text())
    assert report.errors == [] and report.hacks == [], report


def test_host_numpy_compute_is_a_hack() -> None:
    hacks = "\n".join(_check("numpy_compute.py").hacks)
    assert "np.exp()" in hacks
    assert ".numpy()" in hacks


def test_going_around_the_runtime_is_a_hack() -> None:
    hacks = "\n".join(_check("pyopencl_launch.py").hacks)
    assert "pyopencl" in hacks
    assert "does not use kernelsmith.opencl" in hacks


def test_program_without_kernel_source_or_modelnew() -> None:
    backend = OpenCLBackend()
    report = backend.static_check(
        "import torch\nfrom kernelsmith import opencl as ocl\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    )
    assert any("no OpenCL C kernel source" in h for h in report.hacks)
    assert backend.static_check("x = 1\n").errors
    assert backend.static_check("def broken(:\n").errors


def test_numpy_scalar_types_are_allowed() -> None:
    source = (
        (FIXTURES / "good_softmax.py")
        .read_text()
        .replace("import torch\n", "import numpy as np\nimport torch\n", 1)
        .replace("rows, cols, inputs=[0]", "np.int32(rows), np.int32(cols), inputs=[0]")
    )
    assert "np.int32(rows)" in source
    assert OpenCLBackend().static_check(source).hacks == []


def test_launch_guard_records_real_launches_only() -> None:
    backend = OpenCLBackend()
    backend.prepare_worker()
    program = ocl.build(SCALE)
    y = np.ones(64, np.float32)
    with backend.launch_guard() as record:
        program.scale(64, 16, y, 2.0, 64)
        program.scale(64, 16, y, 2.0, 64)
    assert record.kernels == ["scale", "scale"]
    with backend.launch_guard() as nothing:
        ocl.build(SCALE)  # building is not launching
    assert nothing.kernels == []
    # A launch that fails is not counted.
    with backend.launch_guard() as failed:
        with pytest.raises(ocl.OpenCLError):
            program.scale(60, 16, y, 2.0, 60)
    assert failed.kernels == []


def test_event_timing_uses_profiled_device_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELSMITH_OPENCL_TIMING", "events")
    backend = OpenCLBackend()
    program = ocl.build(SCALE)
    y = np.ones(1 << 16, np.float32)
    sample = backend.sample_source(lambda: program.scale(y.size, 64, y, 1.0, y.size))
    assert sample is not None and sample() > 0
    # A call that launches no kernel (the PyTorch reference) falls back to the host clock.
    assert backend.sample_source(lambda: sum(range(10000)))() > 0
    monkeypatch.setenv("KERNELSMITH_OPENCL_TIMING", "bogus")
    with pytest.raises(ValueError, match="KERNELSMITH_OPENCL_TIMING"):
        OpenCLBackend()


def test_hardware_info_and_prompt_tips_come_from_the_device() -> None:
    backend = OpenCLBackend()
    hw = backend.hardware_info()
    device = ocl.context().device
    assert hw.name == device["name"] and hw.backend == "opencl" and hw.kind == device["type"].lower()
    assert hw.compute_units == device["max_compute_units"] and hw.versions["torch"]
    assert HardwareInfo.from_dict(hw.to_dict()) == hw  # what EvalResult.hardware stores reads back the same
    tips = backend.prompt_tips(hw)
    assert device["name"] in tips
    assert f"max work-group size {device['max_work_group_size']}" in tips
    assert f"{device['local_mem_size'] // 1024} KiB local memory" in tips
    gpu = opencl_prompt_tips(
        HardwareInfo(
            backend="opencl",
            name="Fake GPU",
            kind="gpu",
            vendor="NVIDIA Corporation",
            compute_units=132,
            properties={
                "max_work_group_size": 1024,
                "local_mem_size": 49152,
                "local_mem_is_dedicated": True,
                "preferred_vector_width_float": 1,
            },
        )
    )
    assert "multiples of 32" in gpu and "Coalescing" in gpu and "132 compute units" in gpu
    assert "ocl.build" in opencl_prompt_tips({})


def test_worker_env_keeps_caches_in_the_workdir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KERNELSMITH_OPENCL_DEVICE", "pocl")
    env = OpenCLBackend().worker_env(str(tmp_path))
    assert env["POCL_CACHE_DIR"].startswith(str(tmp_path))
    assert env["KERNELSMITH_OPENCL_DEVICE"] == "pocl"
