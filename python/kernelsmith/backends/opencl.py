"""OpenCL backend: candidates define ``ModelNew`` whose forward builds and
launches OpenCL C kernels through :mod:`kernelsmith.opencl`. Runs on any
vendor's OpenCL device: NVIDIA, AMD and Intel GPUs, and the CPU through PoCL
(so every CI run exercises a real compile-run-time path). The reference stays
PyTorch on the CPU; the candidate's tensors are CPU tensors that the runtime
shares with the device (CPUs) or copies to it (GPUs).

Device selection: ``$KERNELSMITH_OPENCL_DEVICE`` (``"pocl"``, ``"NVIDIA"``,
``"0:1"``, ``"2"``; default: the first GPU, else the first device).
Timing: ``$KERNELSMITH_OPENCL_TIMING`` = ``events`` (device time of every
kernel and transfer the call enqueued, from OpenCL profiling events), ``wall``
(host clock around the call) or ``auto`` (default: events on GPUs, wall on
CPU devices, where the reference's host time is the fair comparison).
"""

from __future__ import annotations

import ast
import contextlib
import os
import platform
import time
from typing import Any, Callable, Iterator, Optional

from .._astutil import dotted
from ..hardware import HardwareInfo
from .base import Backend, LaunchRecord, StaticReport
from .._astutil import parse as parse_source

TIMING_ENV_VAR = "KERNELSMITH_OPENCL_TIMING"
TIMING_MODES = ("auto", "events", "wall")
DEVICE_ENV_VAR = "KERNELSMITH_OPENCL_DEVICE"

#: imports that would launch or compute outside kernelsmith.opencl, where the
#: launch guard cannot see them
FORBIDDEN_IMPORTS = {
    "pyopencl": "launches OpenCL outside kernelsmith.opencl (use kernelsmith.opencl: its launches are the ones counted)",
    "ctypes": "loads native code",
    "cffi": "loads native code",
    "numba": "compiles host code outside OpenCL",
    "scipy": "computes on the host",
}

#: NumPy functions a forward may call: scalar types for kernel arguments and
#: allocation. Anything else (np.exp, np.matmul, ...) computes on the host.
NUMPY_ALLOWED = {
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
    "intc",
    "uintc",
    "single",
    "double",
    "dtype",
    "empty",
    "empty_like",
    "zeros",
    "zeros_like",
    "ascontiguousarray",
}

#: tensor methods that move data to the host for Python-side computation
HOST_ESCAPES = {"numpy", "tolist"}

#: OpenCL statuses of a failed program build: CL_BUILD_PROGRAM_FAILURE (-11),
#: CL_COMPILE_PROGRAM_FAILURE (-15), CL_LINK_PROGRAM_FAILURE (-17),
#: CL_INVALID_BUILD_OPTIONS (-43)
OPENCL_BUILD_ERROR_CODES = (-11, -15, -17, -43)


def _common_checks(source: str) -> tuple[StaticReport, Optional[ast.Module]]:
    """The evaluator's shared AST checks when available (ModelNew, try/except,
    threads, patching, ...); a minimal parse and ModelNew check otherwise."""
    try:
        # lazy: evaluator pulls in yaml, which backends.opencl does not load on its own
        from ..evaluator.static import common_checks
    except ImportError:
        report = StaticReport()
        try:
            tree = parse_source(source)
        except SyntaxError as exc:
            report.errors.append(f"SyntaxError: {exc.msg} at line {exc.lineno}")
            return report, None
        if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
            report.errors.append("No class ModelNew found. Define `class ModelNew(nn.Module)`.")
        return report, tree
    return common_checks(source)


def _timing_mode() -> str:
    mode = os.environ.get(TIMING_ENV_VAR, "auto").strip().lower() or "auto"
    if mode not in TIMING_MODES:
        raise ValueError(f"{TIMING_ENV_VAR}='{mode}' is not one of {', '.join(TIMING_MODES)}")
    return mode


class OpenCLBackend(Backend):
    name = "opencl"
    # Only allocation/view/copy ops (the evaluator's defaults) run in forward.
    default_allowed_torch_ops: frozenset = frozenset()
    # NVIDIA's OpenCL driver maps huge virtual ranges like CUDA does.
    supports_address_space_limit = False
    runtime_modules = ("kernelsmith.opencl",)

    def __init__(self) -> None:
        self._timing = _timing_mode()
        self._ocl: Any = None

    # -- parent process -------------------------------------------------
    def static_check(self, source: str) -> StaticReport:
        report, tree = _common_checks(source)
        if tree is None:
            return report

        def at(node: ast.AST) -> str:
            return f"line {getattr(node, 'lineno', '?')}"

        uses_runtime = False
        numpy_aliases: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    if alias.name.startswith("kernelsmith.opencl"):
                        uses_runtime = True
                    if top == "numpy":
                        numpy_aliases.add(alias.asname or "numpy")
                    if top in FORBIDDEN_IMPORTS:
                        report.hacks.append(f"import of {alias.name} at {at(node)}: {FORBIDDEN_IMPORTS[top]}")
            elif isinstance(node, ast.ImportFrom) and node.module:
                top = node.module.split(".")[0]
                if node.module.startswith("kernelsmith.opencl") or (
                    node.module == "kernelsmith" and any(a.name == "opencl" for a in node.names)
                ):
                    uses_runtime = True
                if top == "numpy":
                    for alias in node.names:
                        if alias.name not in NUMPY_ALLOWED:
                            report.hacks.append(
                                f"from {node.module} import {alias.name} at {at(node)}: NumPy may only provide "
                                "scalar types (np.int32, np.float32, ...) for kernel arguments"
                            )
                if top in FORBIDDEN_IMPORTS:
                    report.hacks.append(f"import from {node.module} at {at(node)}: {FORBIDDEN_IMPORTS[top]}")

        kernel_sources = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and ("__kernel" in node.value or "kernel void" in node.value)
        ]
        if not uses_runtime:
            report.hacks.append(
                "the program does not use kernelsmith.opencl: build and launch OpenCL C kernels with "
                "`from kernelsmith import opencl as ocl`"
            )
        if not kernel_sources:
            report.hacks.append(
                "no OpenCL C kernel source (a string with `__kernel void ...`) is defined: forward must "
                "compute with OpenCL kernels"
            )

        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = dotted(node.func) or ""
            parts = name.split(".")
            if len(parts) >= 2 and parts[0] in numpy_aliases and parts[-1] not in NUMPY_ALLOWED:
                report.hacks.append(
                    f"{name}() at {at(node)}: NumPy computes on the host, outside the kernels; use NumPy only "
                    "for scalar argument types (np.int32, np.float32, ...) and compute in OpenCL"
                )
            if isinstance(node.func, ast.Attribute) and node.func.attr in HOST_ESCAPES and not node.args:
                report.hacks.append(
                    f".{node.func.attr}() at {at(node)}: moving tensors to host Python objects is not allowed; "
                    "pass tensors directly to kernels (kernelsmith.opencl accepts them)"
                )
        report.hacks[:] = list(dict.fromkeys(report.hacks))
        return report

    def worker_env(self, workdir: str, cpu_threads: Optional[int] = None) -> dict[str, str]:
        env = {
            # Compiled-kernel caches inside the worker's writable directory
            # (the sandbox's filesystem is read-only elsewhere).
            "POCL_CACHE_DIR": os.path.join(workdir, ".pocl"),
            "CUDA_CACHE_PATH": os.path.join(workdir, ".nv"),
        }
        if cpu_threads:
            # PoCL's CPU device: as many threads as the reference gets
            env.update(POCL_MAX_PTHREAD_COUNT=str(cpu_threads), POCL_CPU_MAX_CU_NUM=str(cpu_threads))
        for key in (DEVICE_ENV_VAR, TIMING_ENV_VAR, "OCL_ICD_VENDORS", "OCL_ICD_FILENAMES"):
            if os.environ.get(key):
                env[key] = os.environ[key]
        return env

    def shared_cache_env(self, shared_dir: str, requests_dir: str) -> dict[str, str]:
        # read by the C++ runtime's Context::build (see opencl.hpp)
        return {"KERNELSMITH_OCL_CACHE": shared_dir, "KERNELSMITH_OCL_CACHE_REQUESTS": requests_dir}

    def build_shared_cache(self, key_texts: list[str], shared_dir: str) -> int:
        ctx = self._runtime().context()._ctx
        written = 0
        for text in key_texts:
            head = text.split("\n", 3)
            if len(head) < 4 or not head[2].startswith("options="):
                continue
            options, source = head[2][len("options=") :], head[3]
            # only builds for this very device and driver (the key says which)
            if ctx.cache_key_text(source, options) != text:
                continue
            try:
                ctx.store_binary(source, options, shared_dir)
                written += 1
            except Exception:  # noqa: BLE001 - a source that does not build is simply not cached
                continue
        return written

    # -- worker process -------------------------------------------------
    def _runtime(self) -> Any:
        if self._ocl is None:
            from .. import opencl  # lazy: opencl pulls in numpy, which backends.opencl does not load on its own

            self._ocl = opencl
        return self._ocl

    def prepare_zygote(self) -> None:
        # the module and its C++ runtime; the context (device threads) is
        # per worker, after the fork
        self._runtime()

    def prepare_worker(self, ahead: bool = False) -> None:
        # Creating the context here makes a missing or mis-selected device a
        # clear error before any candidate code runs.
        self._runtime().context()

    def device(self) -> str:
        return "cpu"

    @contextlib.contextmanager
    def launch_guard(self) -> Iterator[LaunchRecord]:
        # The count lives in C++ and only rises when clEnqueueNDRangeKernel
        # succeeds, so the candidate cannot fake a launch from Python.
        ocl = self._runtime()
        record = LaunchRecord()
        mark = ocl.launch_count()
        try:
            yield record
        finally:
            record.kernels.extend(ocl.launched_since(mark))

    def synchronize(self) -> None:
        if self._ocl is not None:
            self._ocl.context().finish()

    def _use_events(self) -> bool:
        if self._timing == "auto":
            return self._runtime().context().device["type"] != "cpu"
        return self._timing == "events"

    def sample_source(self, fn: Callable[[], Any]) -> Optional[Callable[[], float]]:
        """With event timing (GPUs by default): one sample = the profiled
        device seconds of every kernel and transfer one call enqueued; a call
        that enqueues nothing (the PyTorch reference) is timed on the host
        clock. With wall timing (CPU devices) None: the harness times the
        calls on the host clock itself, with clFinish around every sample."""
        if not self._use_events():
            return None
        ocl = self._runtime()
        ctx = ocl.context()

        def sample() -> float:
            ctx.finish()
            start = time.perf_counter()
            with ocl.recording(ctx) as record:
                fn()
            wall = time.perf_counter() - start
            if not record.kernels:
                return max(wall, 1e-9)
            # profiling counters can read 0 for a tiny kernel on a coarse
            # device clock; the harness needs a time > 0
            return max(record.total_seconds(), 1e-9)

        return sample

    def hardware_info(self) -> HardwareInfo:
        import torch

        ocl = self._runtime()
        d = ocl.context().device
        # OpenCL's own facts that the shared fields do not cover (prompt tips read them).
        keys = (
            "type",
            "platform_name",
            "platform_version",
            "version",
            "opencl_c_version",
            "max_clock_mhz",
            "max_work_group_size",
            "max_work_item_sizes",
            "local_mem_size",
            "local_mem_is_dedicated",
            "global_mem_size",
            "preferred_vector_width_float",
            "preferred_vector_width_half",
            "has_fp64",
            "has_fp16",
        )
        kind = str(d["type"]).lower()
        return HardwareInfo(
            backend="opencl",
            name=str(d["name"]),
            kind=kind if kind in ("gpu", "cpu", "accelerator") else "accelerator",
            vendor=str(d["vendor"]),
            compute_units=int(d["max_compute_units"]),
            memory_gb=round(int(d["global_mem_size"]) / 2**30, 1),
            driver=str(d["driver_version"]),
            versions={"torch": torch.__version__, "python": platform.python_version()},
            properties={**{k: d[k] for k in keys}, "timing": "events" if self._use_events() else "wall"},
        )

    def is_compile_error(self, exc: BaseException) -> bool:
        # a program build (kernelsmith.OpenCLError, or any runtime's error
        # carrying the CL status): the message holds the compiler's build log
        return type(exc).__name__ == "OpenCLError" and (
            getattr(exc, "code", None) in OPENCL_BUILD_ERROR_CODES or "CL_BUILD_PROGRAM_FAILURE" in str(exc)
        )

    def prompt_tips(self, hardware: HardwareInfo | dict[str, Any] | None = None) -> str:
        return opencl_prompt_tips(HardwareInfo.of(hardware))


def opencl_prompt_tips(hardware: HardwareInfo | dict[str, Any] | None) -> str:
    """Advice for the system prompt from a device's reported properties
    (:meth:`OpenCLBackend.hardware_info`; an empty HardwareInfo gives the generic part)."""
    hw = HardwareInfo.of(hardware)
    props = hw.properties
    tips = [
        "Write OpenCL C kernels as Python strings and build and launch them from ModelNew.forward with "
        "`from kernelsmith import opencl as ocl`: `program = ocl.build(SOURCE, defines={'TILE': 16})` "
        "(compiled once, then cached) and `program.my_kernel(global_size, local_size, *args, inputs=[...])`. "
        "Every output value must be computed by your kernels.",
        "Arguments: CPU tensors become __global pointers (list read-only ones in inputs=[...] to skip copying "
        "them back); Python int -> int, Python float -> float, np.int64/np.uint32/np.float64 for other C types; "
        "ocl.LocalMemory(nbytes) for a __local pointer. Allocate outputs with torch.empty.",
        "Each global size must be a multiple of its local (work-group) size: use ocl.round_up(n, local) and "
        "guard the tail with `if (i >= n) return;`. Sizes arrive as kernel arguments: the program is also "
        "checked on other shapes.",
        "Build failures come back with the compiler log; fix exactly the reported lines.",
        "No try/except, threads, NumPy or torch compute in forward; allocation and views (torch.empty, view, "
        "reshape, contiguous) are fine.",
    ]
    units = hw.compute_units if hw.compute_units is not None else "?"
    local_kib = int(props.get("local_mem_size", 0)) // 1024
    if hw.name:
        dedicated = props.get("local_mem_is_dedicated")
        tips.append(
            f"Target device: {hw.name} ({hw.kind or '?'}, {props.get('platform_name', '?')}, "
            f"{props.get('version', '')}): {units} compute units, max work-group size "
            f"{props.get('max_work_group_size', '?')}, {local_kib} KiB local memory"
            + (" (on-chip)" if dedicated else " (emulated in global memory)" if dedicated is not None else "")
            + f", preferred float vector width {props.get('preferred_vector_width_float', '?')}"
            + ("; fp64 supported" if props.get("has_fp64") else "; no fp64")
            + ("; fp16 (cl_khr_fp16) supported." if props.get("has_fp16") else ".")
        )
    kind = hw.kind
    vendor = f"{hw.vendor} {props.get('platform_name', '')}".lower()
    if kind == "gpu":
        warp = 32 if ("nvidia" in vendor or "cuda" in vendor) else 64 if ("amd" in vendor) else 32
        tips += [
            f"Work-groups: use sizes that are multiples of {warp} (the hardware's SIMD width), typically "
            f"128-256 work-items, and launch enough work-groups to fill all {units} compute units several times over.",
            "Coalescing: consecutive work-items (get_local_id(0)) must read consecutive addresses; map the "
            "fastest-varying index of a row-major tensor to dimension 0.",
            "Reductions (softmax, norms): one work-group per row, each work-item accumulates a strided slice, "
            "then a tree reduction in __local memory with barrier(CLK_LOCAL_MEM_FENCE); accumulate in float.",
            f"Matmul: tile A and B in __local memory ({local_kib} KiB per work-group), compute several "
            "outputs per work-item in registers, and use float4 loads (vload4) when rows are 16-byte aligned.",
            "Host<->device copies are timed too: pass read-only tensors in inputs=[...] so they are not copied back.",
        ]
    elif kind == "cpu":
        width = props.get("preferred_vector_width_float", 8)
        tips += [
            "This OpenCL device is a CPU (e.g. PoCL): each work-group runs on one core and the compiler "
            f"vectorizes across work-items in dimension 0 ({width} floats per SIMD register). Launch at least "
            f"{units} work-groups so every core is busy, with 8-64 work-items per group.",
            "Local memory is ordinary cached memory here; barriers are costly. Prefer each work-item "
            f"processing a contiguous chunk with float{width if width in (2, 4, 8, 16) else 4} vector loads (vload) "
            "and few barriers.",
            "Memory is shared with the host: tensors are passed without copies, so time goes into the kernels; "
            "keep loops simple so they vectorize (no divergent branches inside the inner loop).",
        ]
    return "\n".join(f"- {t}" for t in tips)


BACKEND = OpenCLBackend
