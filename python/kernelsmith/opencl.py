"""OpenCL from Python: devices, cached program builds, kernel launches on NumPy
arrays and CPU torch tensors, and event-profiled timing.

The runtime is C++ (``kernelsmith._core.opencl``); this module converts
arguments. A typical candidate::

    import numpy as np, torch
    from kernelsmith import opencl as ocl

    SOURCE = '''
    __kernel void scale(__global const float* x, __global float* y, float a, int n) {
        int i = get_global_id(0);
        if (i < n) y[i] = a * x[i];
    }'''

    def forward(x):
        y = torch.empty_like(x)
        program = ocl.build(SOURCE)              # built once, then cached
        program.scale(ocl.round_up(x.numel(), 64), 64, x, y, np.float32(2.0), x.numel())
        return y

Arguments of a launch:

* ``numpy.ndarray`` / CPU ``torch.Tensor`` (C-contiguous): passed as a
  ``__global`` pointer. On devices that share host memory (CPUs) the kernel
  works on the array's own memory (``CL_MEM_USE_HOST_PTR``, no copies); on
  GPUs it is copied in, and copied back after the kernel unless listed as
  read-only with ``inputs=`` (indices of arguments the kernel only reads).
* :class:`Buffer` (device memory from :meth:`Context.to_device` /
  :meth:`Context.empty`): passed as is, nothing copied.
* :class:`LocalMemory(nbytes)`: a ``__local`` pointer of that size.
* NumPy scalars (``np.int32``, ``np.uint32``, ``np.int64``, ``np.float32``,
  ``np.float64``, ...): passed by value with their exact C type. Python
  ``int`` becomes ``int`` (int32, range-checked) and Python ``float``
  becomes ``float`` (float32).

Every OpenCL failure raises :class:`kernelsmith.OpenCLError` whose message
names the CL status and the failing call (``.code`` holds the number); a
build failure's message carries the compiler's full log.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from ._core import OpenCLError
from ._core import opencl as _cl


try:
    # Marks the launcher's own tensor handling (detach/numpy views) so the
    # evaluator's torch-op guard does not count it as the candidate's compute.
    from .backends.base import backend_internal as _backend_internal
    from .backends.base import census_launch as _census_launch
except ImportError:  # an older Backend interface without it
    _backend_internal = contextlib.nullcontext

    def _census_launch(name: str, args: Any) -> Any:  # type: ignore[misc]
        return contextlib.nullcontext()


__all__ = [
    "OpenCLError",
    "DEVICE_ENV_VAR",
    "Buffer",
    "Context",
    "Event",
    "Kernel",
    "LocalMemory",
    "CLProgram",
    "Recording",
    "build",
    "context",
    "devices",
    "error_name",
    "launch_count",
    "launched_since",
    "profile",
    "recording",
    "round_up",
    "sampler",
    "select_device",
]

#: environment variable that selects the device when no selector is given
DEVICE_ENV_VAR: str = _cl.DEVICE_ENV_VAR
Buffer = _cl.Buffer
Event = _cl.Event
error_name = _cl.error_name
launch_count = _cl.launch_count
launched_since = _cl.launched_since

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def devices() -> list[dict[str, Any]]:
    """Every OpenCL device on the machine, with its reported properties."""
    return list(_cl.list_devices())


def select_device(selector: str = "") -> dict[str, Any]:
    """The device that ``selector`` picks: ``""`` (then ``$KERNELSMITH_OPENCL_DEVICE``,
    then the first GPU, then the first device), ``"P:D"``, ``"N"`` or a
    case-insensitive substring of platform/device/vendor/type. Raises
    ``ValueError`` listing every device when nothing matches."""
    return dict(_cl.select_device(selector))


def round_up(n: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` >= ``n`` (global sizes must be a
    multiple of the work-group size in OpenCL 1.2)."""
    if multiple <= 0:
        raise ValueError(f"round_up: multiple must be > 0, got {multiple}")
    return -(-int(n) // int(multiple)) * int(multiple)


@dataclass(frozen=True)
class LocalMemory:
    """A ``__local`` kernel argument of ``nbytes`` bytes."""

    nbytes: int

    def __post_init__(self) -> None:
        if int(self.nbytes) <= 0:
            raise ValueError(f"LocalMemory needs nbytes > 0, got {self.nbytes}")


def _as_array(value: Any) -> np.ndarray | None:
    """The NumPy view of an array-like argument (no copy), or None."""
    if isinstance(value, np.ndarray):
        return value
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is optional for the runtime
        return None
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise ValueError(
                f"OpenCL arguments must be CPU tensors, got a tensor on {value.device}; "
                "move it with .cpu() or copy it into an OpenCL Buffer"
            )
        if not value.is_contiguous():
            raise ValueError(
                "OpenCL tensor arguments must be contiguous (a copy would hide the kernel's "
                "writes); call .contiguous() first and pass that tensor"
            )
        if value.dtype == torch.bfloat16:
            raise ValueError("bfloat16 tensors have no NumPy view; convert to float16/float32")
        return value.detach().numpy()
    return None


def _shape(size: int | Sequence[int] | None, what: str) -> list[int]:
    if size is None:
        return []
    dims = [int(size)] if isinstance(size, (int, np.integer)) else [int(s) for s in size]
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"{what} must have 1-3 dimensions, got {len(dims)}")
    return dims


class Kernel:
    """One kernel of a built program; call it to launch."""

    def __init__(self, context: "Context", kernel: Any) -> None:
        self._context = context
        self._kernel = kernel

    @property
    def name(self) -> str:
        return self._kernel.name

    @property
    def num_args(self) -> int:
        return self._kernel.num_args

    @property
    def max_work_group_size(self) -> int:
        """Largest work-group this kernel can run with on the device."""
        return self._kernel.max_work_group_size

    @property
    def preferred_work_group_multiple(self) -> int:
        return self._kernel.preferred_work_group_multiple

    def __call__(
        self,
        global_size: int | Sequence[int],
        local_size: int | Sequence[int] | None,
        *args: Any,
        offset: int | Sequence[int] | None = None,
        inputs: Iterable[int] = (),
        wait: bool = False,
    ) -> Any:
        """Launch over ``global_size`` work-items in groups of ``local_size``
        (``None`` lets the runtime choose). Host arrays are synchronized before
        this returns; a launch on device buffers only is asynchronous unless
        ``wait``. Returns the profiled :class:`Event`."""
        return self._context.launch(self, global_size, local_size, *args, offset=offset, inputs=inputs, wait=wait)

    def __repr__(self) -> str:
        return f"<opencl.Kernel {self.name} ({self.num_args} args)>"


class CLProgram:
    """A built program; its kernels are attributes (``program.my_kernel``)."""

    def __init__(self, context: "Context", program: Any) -> None:
        self._context = context
        self._program = program
        self._kernels: dict[str, Kernel] = {}

    @property
    def build_log(self) -> str:
        """Compiler output of the successful build (warnings), possibly empty."""
        return self._program.build_log

    @property
    def kernel_names(self) -> list[str]:
        return list(self._program.kernel_names())

    def kernel(self, name: str) -> Kernel:
        found = self._kernels.get(name)
        if found is None:
            found = self._kernels[name] = Kernel(self._context, self._program.kernel(name))
        return found

    def __getattr__(self, name: str) -> Kernel:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.kernel(name)


class Context:
    """A device with its queue and program cache. Most code uses the
    process-wide one from :func:`context`."""

    def __init__(self, selector: str = "") -> None:
        self._ctx = _cl.Context(selector)
        self.device: dict[str, Any] = dict(self._ctx.device)
        self._programs: dict[tuple[str, str], CLProgram] = {}
        self._lock = threading.Lock()

    @property
    def host_zero_copy(self) -> bool:
        """Kernels work directly on host arrays (CPU devices): no copies."""
        return self._ctx.host_zero_copy

    def build(self, source: str, options: str = "", defines: dict[str, Any] | None = None) -> CLProgram:
        """Build ``source`` (OpenCL C) or return the cached build. ``defines``
        become ``-DNAME=VALUE`` options. Raises OpenCLError with the build log."""
        if defines:
            options = " ".join([options] + [f"-D{k}={v}" for k, v in defines.items()]).strip()
        key = (source, options)
        with self._lock:
            program = self._programs.get(key)
        if program is None:
            program = CLProgram(self, self._ctx.build(source, options))
            with self._lock:
                self._programs[key] = program
        else:
            # Counted in the C++ cache statistics too, so hits are visible there.
            self._ctx.build(source, options)
        return program

    def cache_stats(self) -> dict[str, int]:
        return dict(self._ctx.cache_stats())

    def to_device(self, array: Any) -> Any:
        """A device :class:`Buffer` holding a copy of ``array``."""
        with _backend_internal():
            host = _as_array(array)
        if host is None:
            raise TypeError(f"to_device needs a numpy array or CPU tensor, got {type(array).__name__}")
        buffer = self._ctx.allocate(max(host.nbytes, 1))
        if host.nbytes:
            buffer.write(np.ascontiguousarray(host))
        return buffer

    def empty(self, nbytes: int) -> Any:
        """An uninitialised device :class:`Buffer` of ``nbytes`` bytes."""
        return self._ctx.allocate(int(nbytes))

    def to_host(self, buffer: Any, out: Any) -> Any:
        """Copy ``buffer`` into ``out`` (a numpy array or CPU tensor); returns ``out``."""
        with _backend_internal():
            host = _as_array(out)
        if host is None:
            raise TypeError(f"to_host needs a numpy array or CPU tensor, got {type(out).__name__}")
        buffer.read(host)
        return out

    def finish(self) -> None:
        """Wait for every command queued on this context."""
        self._ctx.finish()

    def _scalar(self, index: int, value: Any) -> Any:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError(f"argument {index}: pass booleans as np.int32(0/1) (OpenCL has no bool argument)")
        if isinstance(value, np.generic):
            return _cl.KernelArg.scalar(value.tobytes())
        if isinstance(value, int):
            if not _INT32_MIN <= value <= _INT32_MAX:
                raise ValueError(
                    f"argument {index}: Python int {value} does not fit an OpenCL int; pass np.int64(...) "
                    "for a long parameter"
                )
            return _cl.KernelArg.scalar(np.int32(value).tobytes())
        if isinstance(value, float):
            return _cl.KernelArg.scalar(np.float32(value).tobytes())
        raise TypeError(
            f"argument {index}: unsupported type {type(value).__name__}; use a numpy array, CPU tensor, "
            "opencl.Buffer, opencl.LocalMemory or a numpy scalar (np.int32, np.float32, ...)"
        )

    def launch(
        self,
        kernel: Kernel,
        global_size: int | Sequence[int],
        local_size: int | Sequence[int] | None,
        *args: Any,
        offset: int | Sequence[int] | None = None,
        inputs: Iterable[int] = (),
        wait: bool = False,
    ) -> Any:
        """See :meth:`Kernel.__call__`."""
        with _backend_internal(), _census_launch(kernel.name, args):
            return self._launch(kernel, global_size, local_size, args, offset, set(inputs), wait)

    def _launch(
        self,
        kernel: Kernel,
        global_size: int | Sequence[int],
        local_size: int | Sequence[int] | None,
        args: Sequence[Any],
        offset: int | Sequence[int] | None,
        read_only: set[int],
        wait: bool,
    ) -> Any:
        cl_args = []
        # (array, buffer, copy back?) for every host array argument
        host_buffers: list[tuple[np.ndarray, Any, bool]] = []
        for index, value in enumerate(args):
            if isinstance(value, _cl.Buffer):
                cl_args.append(_cl.KernelArg.buffer(value))
                continue
            if isinstance(value, LocalMemory):
                cl_args.append(_cl.KernelArg.local(int(value.nbytes)))
                continue
            array = _as_array(value)
            if array is None:
                cl_args.append(self._scalar(index, value))
                continue
            if not array.flags.c_contiguous:
                raise ValueError(f"argument {index}: arrays must be C-contiguous")
            if array.nbytes == 0:
                raise ValueError(f"argument {index}: empty arrays cannot be kernel arguments")
            writable = array.flags.writeable
            if self.host_zero_copy and writable:
                buffer = self._ctx.wrap_host(array)
            else:
                buffer = self._ctx.allocate(array.nbytes)
                buffer.write(array)
            host_buffers.append((array, buffer, writable and index not in read_only))
            cl_args.append(_cl.KernelArg.buffer(buffer))
        event = self._ctx.launch(
            kernel._kernel,
            cl_args,
            _shape(global_size, "global_size"),
            _shape(local_size, "local_size"),
            _shape(offset, "offset"),
        )
        for array, buffer, copy_back in host_buffers:
            if buffer.wraps_host:
                buffer.sync_host()
            elif copy_back:
                buffer.read(array)
        if wait or host_buffers:
            event.wait()
        return event

    def begin_recording(self) -> int:
        return self._ctx.begin_recording()

    def end_recording(self, mark: int) -> list[Any]:
        return list(self._ctx.end_recording(mark))


_default: Context | None = None
_default_lock = threading.Lock()


def context() -> Context:
    """The process-wide context, created on first use on the device that
    ``$KERNELSMITH_OPENCL_DEVICE`` selects (else the first GPU, else the first
    device)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Context("")
        return _default


def build(source: str, options: str = "", defines: dict[str, Any] | None = None) -> CLProgram:
    """Build OpenCL C ``source`` on the process-wide context (cached by source,
    device and options)."""
    return context().build(source, options, defines)


@dataclass
class Recording:
    """Profiled commands enqueued inside a :func:`recording` block."""

    events: list[Any] = field(default_factory=list)

    @property
    def kernels(self) -> list[str]:
        return [e.name for e in self.events if e.kind == "kernel"]

    def kernel_seconds(self) -> float:
        """Summed device time of the kernels (profiling END - START)."""
        return sum(e.seconds() for e in self.events if e.kind == "kernel")

    def total_seconds(self) -> float:
        """Kernels plus host<->device transfers."""
        return sum(e.seconds() for e in self.events)


@contextlib.contextmanager
def recording(ctx: Context | None = None) -> Iterator[Recording]:
    """Keep every kernel and transfer event enqueued inside the block; they are
    waited for and available on the yielded :class:`Recording` afterwards."""
    ctx = ctx or context()
    record = Recording()
    mark = ctx.begin_recording()
    try:
        yield record
    finally:
        record.events = ctx.end_recording(mark)


def profile(
    fn: Callable[[], Any],
    warmup: int = 1,
    repetitions: int = 10,
    include_transfers: bool = False,
    ctx: Context | None = None,
) -> list[float]:
    """Seconds of device time per call of ``fn``: the profiled durations of the
    kernels it enqueues (plus transfers if ``include_transfers``), one sample
    per call after ``warmup`` unmeasured calls. Feed the samples to the timing
    harness as externally measured times. Raises if a call launches nothing."""
    if repetitions < 1:
        raise ValueError(f"profile: repetitions must be >= 1, got {repetitions}")
    ctx = ctx or context()
    for _ in range(max(warmup, 0)):
        fn()
    ctx.finish()
    samples: list[float] = []
    for _ in range(repetitions):
        with recording(ctx) as record:
            fn()
        if not record.kernels:
            raise RuntimeError("profile: the function launched no OpenCL kernel, nothing to time")
        samples.append(record.total_seconds() if include_transfers else record.kernel_seconds())
    return samples


def sampler(
    fn: Callable[[], Any],
    include_transfers: bool = False,
    ctx: Context | None = None,
) -> Callable[[], float]:
    """A zero-argument sample source for the timing harness: each call runs
    ``fn`` once and returns the profiled device seconds of the kernels it
    enqueued (plus transfers if ``include_transfers``)::

        m = kernelsmith.timing.bench_samples(ocl.sampler(lambda: model(x)), unit="s")
    """

    def sample() -> float:
        return profile(fn, warmup=0, repetitions=1, include_transfers=include_transfers, ctx=ctx)[0]

    return sample
