"""The Backend interface: everything the evaluator needs to know about one
kind of kernel (Triton, OpenCL, ...).

The evaluator never branches on the backend's name. In the parent process it
asks the backend to check a candidate statically. Inside a sandboxed worker
it asks the backend to prepare the process, to load the candidate, to record
which of its kernels really launched during ``forward``, to synchronize and
time, and to describe the hardware. The full contract is in docs/evaluator.md.
"""

from __future__ import annotations

import abc
import contextlib
import importlib
import importlib.util
import pkgutil
import sys
import threading
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from ..hardware import HardwareInfo
from . import __path__ as package_path


@dataclass
class StaticReport:
    """Findings of a static (AST) check of candidate source.

    errors: the candidate cannot be run (syntax error, no ModelNew, ...):
        reported as compile-failed, with messages an LLM can act on.
    hacks: the candidate tries to cheat (fallback to the reference, patched
        timers, extra streams, ...): reported as hacked.
    warnings: suspicious but allowed (e.g. a precision-lowering cast); they
        go into the feedback.
    """

    errors: list[str] = field(default_factory=list)
    hacks: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class LaunchRecord:
    """Which of the backend's kernels launched inside a guarded region."""

    kernels: list[str] = field(default_factory=list)


# Depth of backend-internal code on this thread. The evaluator's torch-op
# guard ignores ops while it is > 0: a backend's launcher may legitimately use
# torch (the Triton interpreter copies tensors to numpy and back; an OpenCL
# runtime may stage buffers), and those ops are not the candidate's compute.
_internal = threading.local()


@contextlib.contextmanager
def backend_internal() -> Iterator[None]:
    """Wrap a backend's own launch machinery so its torch ops are not
    attributed to the candidate."""
    _internal.depth = getattr(_internal, "depth", 0) + 1
    try:
        yield
    finally:
        _internal.depth -= 1


def in_backend_internal() -> bool:
    return getattr(_internal, "depth", 0) > 0


class _Census:
    """What the evaluator's kernel census (evaluator/census.py) needs from a
    backend's launch path, filled only while a census is on (correctness
    trials): each launch of the candidate's own kernels is wrapped in a
    profiler range ``ks::kernel::<name>`` (so the device work and the torch
    ops inside it are the kernel's, everything outside is not), and the
    memory its array arguments span is noted, with a CRC of their bytes
    after the launch when the memory is the host's (``host_memory``)."""

    active = False
    host_memory = False
    launches: list = []
    #: the candidate's device-kernel names, where its backend knows them from
    #: the source (empty: every kernel inside a ``ks::kernel::`` range is the
    #: candidate's); a kernel inside the range that is none of them is judged
    #: like one outside it
    kernel_names: set = set()
    #: drawn by the census for each call it watches: the harness's kernel
    #: ranges carry it (``_kernel_range``)
    token: str = ""


def _spans(value: Any) -> Optional[tuple[int, int, Any]]:
    """(address, bytes, a host byte view or None) of an array argument."""
    data_ptr = getattr(value, "data_ptr", None)
    if callable(data_ptr) and hasattr(value, "element_size"):  # a torch tensor
        try:
            storage = value.untyped_storage()
            start, nbytes = storage.data_ptr(), storage.nbytes()
        except Exception:  # noqa: BLE001 - meta or odd tensors carry no memory
            return None
        return start, nbytes, _host_bytes(start, nbytes) if value.device.type == "cpu" else None
    iface = getattr(value, "__array_interface__", None)
    if iface is not None and getattr(value, "nbytes", 0):
        import numpy as np

        base = value
        while isinstance(getattr(base, "base", None), np.ndarray):
            base = base.base
        start = base.__array_interface__["data"][0]
        return start, int(base.nbytes), _host_bytes(start, int(base.nbytes))
    return None


def _host_bytes(start: int, nbytes: int) -> Any:
    """The bytes at a host address, without a copy (for a CRC)."""
    import ctypes

    return memoryview((ctypes.c_uint8 * nbytes).from_address(start)) if nbytes else None


def crc_of(view: Any) -> int:
    import zlib

    return zlib.crc32(view) if view is not None else 0


@contextlib.contextmanager
def census_launch(name: str, args: Any, launch: bool = True) -> Iterator[None]:
    """Wrap one launch of a candidate kernel (a no-op unless a census is on).
    ``launch=False``: only the range, for work around a launch that belongs
    to it (Triton's autotuner benchmarking its configs), not counted as a
    launch of ``name``."""
    if not _Census.active:
        yield {}
        return
    entry: dict = {"kernel": name, "spans": [], "crcs": None}
    if not launch:
        with _kernel_range(name):
            yield entry
        return
    spans = [s for s in (_spans(a) for a in args) if s is not None]
    with _kernel_range(name):
        yield entry
    entry["spans"] = [(start, nbytes) for start, nbytes, _ in spans]
    if _Census.host_memory:
        entry["crcs"] = [crc_of(view) for _, _, view in spans]
    _Census.launches.append(entry)


@contextlib.contextmanager
def _kernel_range(name: str) -> Iterator[None]:
    """The ``ks::kernel::<token>::<name>`` profiler range; ``<token>`` is the
    one the census drew for this call (``_Census.token``), so a range the
    program opens under the prefix is not taken for a kernel. Entering and
    leaving it runs two profiler ops (``aten::_record_function_enter_new`` /
    ``_exit``) that are the harness's, not the program's: the op guard must
    not see them (a CUDA extension's call runs outside ``backend_internal``,
    since the torch ops its C++ runs are judged)."""
    from torch.profiler import record_function

    full = "ks::kernel::" + (_Census.token + "::" if _Census.token else "") + name
    ctx = record_function(full)
    with backend_internal():
        ctx.__enter__()
    stack = _open_ranges()
    stack.append([full, ctx])
    try:
        yield
    finally:
        stack.pop()
        with backend_internal():
            ctx.__exit__(None, None, None)


def _open_ranges() -> list:
    """The kernel ranges open on this thread, innermost last: [name, ctx]."""
    stack = getattr(_internal, "ranges", None)
    if stack is None:
        stack = _internal.ranges = []
    return stack


def program_code(fn: Callable) -> Callable:
    """``fn``, the program's own code that a backend's launcher calls back
    (a Triton grid callable, an autotune or pre-run hook), made to run as
    the program's: outside every open kernel range (closed before, reopened
    after) and outside ``backend_internal``, so the op guard and the census
    judge its torch ops wherever it is called from."""
    if getattr(fn, "_kernelsmith_program", False) or not callable(fn):
        return fn

    def call(*args: Any, **kwargs: Any) -> Any:
        stack = _open_ranges()
        depth = getattr(_internal, "depth", 0)
        if not stack and depth == 0:
            return fn(*args, **kwargs)
        with backend_internal():
            for entry in reversed(stack):
                entry[1].__exit__(None, None, None)
        _internal.depth = 0
        try:
            return fn(*args, **kwargs)
        finally:
            _internal.depth = depth
            from torch.profiler import record_function

            with backend_internal():
                for entry in stack:
                    entry[1] = record_function(entry[0])
                    entry[1].__enter__()

    call._kernelsmith_program = True  # type: ignore[attr-defined]
    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


@contextlib.contextmanager
def recording(records: list) -> Iterator[LaunchRecord]:
    """A LaunchRecord in ``records`` (a backend's list of active records, which
    its launch hook appends kernel names to) for the duration of the block."""
    record = LaunchRecord()
    records.append(record)
    try:
        yield record
    finally:
        records.remove(record)


def device_family(hardware: HardwareInfo | Any) -> str:
    """Which hardware-notes template fits the device, from its name, compute
    capability, architecture and kind: hopper, blackwell, ampere, ada,
    amd_cdna, cpu (an OpenCL CPU device such as PoCL) or generic. What any
    backend gets unless it knows better (:meth:`Backend.hardware_family`)."""
    hw = HardwareInfo.of(hardware)
    # An interpreter on the host is not the host as a device: its costs are
    # its own, and only the backend that runs it knows them.
    if hw.interpreter:
        return "generic"
    name = hw.name.lower()
    arch = hw.arch.lower()
    cc = hw.compute_capability
    try:
        major: Optional[int] = int(cc.split(".")[0]) if cc else None
    except ValueError:
        major = None
    kind = hw.kind
    if any(t in name for t in ("h100", "h200", "h800", "h20", "gh200")) or major == 9:
        return "hopper"
    if any(t in name for t in ("b200", "b100", "gb200", "b300")) or major == 10:
        return "blackwell"
    if any(t in name for t in ("mi300", "mi250", "mi210", "mi325", "instinct")) or arch.startswith("gfx9"):
        return "amd_cdna"
    if any(t in name for t in ("l40", "l4", "4090", "4080", "ada")) or cc == "8.9":
        return "ada"
    if any(t in name for t in ("a100", "a800", "a10", "a30", "a40", "3090", "a6000")) or major == 8:
        return "ampere"
    if kind == "cpu" or "pocl" in name or "cpu" in name:
        return "cpu"
    return "generic"


def nvidia_driver() -> str:
    """The NVIDIA driver version ("580.159.04"), or "unknown"."""
    try:
        with open("/proc/driver/nvidia/version") as fh:
            first = fh.readline()
        for token in first.split():
            if token.count(".") >= 1 and token.replace(".", "").isdigit():
                return token
    except OSError:
        pass
    try:
        import pynvml  # type: ignore

        pynvml.nvmlInit()
        return str(pynvml.nvmlSystemGetDriverVersion())
    except Exception:
        return "unknown"


class Backend(abc.ABC):
    """One kind of kernel. Subclasses live in ``kernelsmith/backends/<name>.py``
    and are exported there as ``BACKEND``."""

    #: short name used in configs and on the command line
    name: str = ""

    #: torch ops (overload packet names such as "aten.cat") that forward may
    #: run on top of the evaluator's allocation/view/copy defaults
    default_allowed_torch_ops: frozenset = frozenset()

    #: True when the kernel language tunes kernels at run time (Triton's
    #: autotune): a pool then tunes once per kernel source and key and hands
    #: the results to later processes (backends/triton/autotune.py), unless
    #: KERNELSMITH_AUTOTUNE_HANDOVER=0
    autotunes: bool = False

    #: True when the worker may run under RLIMIT_AS (address-space limit).
    #: CUDA reserves huge virtual ranges, so GPU backends say False.
    supports_address_space_limit: bool = False

    #: modules outside ``kernelsmith.backends`` whose functions the worker's
    #: integrity snapshot watches for this backend (its runtime's Python
    #: face, e.g. ``kernelsmith.opencl``); every loaded module of
    #: ``kernelsmith.backends`` is watched anyway
    runtime_modules: tuple = ()

    # -- parent process -------------------------------------------------
    @abc.abstractmethod
    def static_check(self, source: str) -> StaticReport:
        """Inspect the candidate's source without running it."""

    def worker_env(self, workdir: str, cpu_threads: Optional[int] = None) -> dict[str, str]:
        """Extra environment variables for a worker (caches inside ``workdir``;
        ``cpu_threads``: the host threads the device work may use, where the
        backend's runtime has such a knob)."""
        return {}

    def shared_cache_env(self, shared_dir: str, requests_dir: str) -> dict[str, str]:
        """Environment that lets a pool worker read compiled builds from
        ``shared_dir`` (read-only to it) and leave build requests in
        ``requests_dir``; {} when the backend has no cross-process cache."""
        return {}

    def build_shared_cache(self, key_texts: list[str], shared_dir: str) -> int:
        """Run by the pool's trusted builder (a process that runs no candidate
        code): compile each requested build from its key text and write it
        into ``shared_dir``. Returns how many entries were written."""
        return 0

    def publish_kernels(self, trusted_workdir: str, shared_dir: str, names: Sequence[str]) -> int:
        """Run by the pool's parent: copy the kernels ``names`` that a trusted
        process of the pool (the referee, whose working folder is
        ``trusted_workdir``) compiled into ``shared_dir``, where the pool's
        workers load them instead of compiling them. Returns how many were
        copied; 0 where the backend shares no compiled kernels."""
        return 0

    # -- worker process -------------------------------------------------
    def unavailable_reason(self) -> Optional[str]:
        """Why this backend cannot run candidates on this host (a missing
        device, driver or toolchain), checked before a run starts; None when
        it can. Must create no device context (the caller may fork)."""
        return None

    def prepare_zygote(self) -> None:
        """Called once in the pool's zygote, whose memory every forked worker
        inherits: imports and set-up that create no device context and
        start no threads (a CUDA context or a thread pool does not survive
        fork)."""

    def prepare_builder(self) -> None:
        """Called once in the pool's trusted compile-cache builder (no
        candidate code) before it builds anything. By default the same as a
        worker; a backend whose builds need no device context should create
        none, so the builder is never another process on the timed GPU."""
        self.prepare_worker()

    def prepare_worker(self, ahead: bool = False) -> None:
        """Called once in a fresh worker process before anything is loaded
        (imports, device selection, installing launch hooks). ``ahead``: the
        worker is a pool's spare, prepared before any candidate waits for
        it, so one-time costs (first compile, library handles) belong here."""

    @abc.abstractmethod
    def device(self) -> str:
        """The torch device string the task's inputs and modules live on."""

    def load_candidate(self, path: str, module_name: str = "candidate") -> ModuleType:
        """Import the candidate file as a module (it executes its top level)."""
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        # Registered so that decorators that look the module up (triton.jit
        # reads source via inspect/linecache) work.
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        return module

    @contextlib.contextmanager
    def launch_guard(self) -> Iterator[LaunchRecord]:
        """Record this backend's kernel launches inside the ``with`` block.
        A candidate whose forward launches none is hacked."""
        record = LaunchRecord()
        yield record

    def launch_counter(self) -> Any:
        """Like :meth:`launch_guard`, as cheap as the backend can make it: it
        wraps every timed call (each timed call must launch the same
        kernels, and at least one)."""
        return self.launch_guard()

    def synchronize(self) -> None:
        """Wait for all work this backend queued."""

    def timing_device(self) -> str:
        """Where the evaluator's timing harness (kernelsmith.timing.compare)
        measures this backend's calls when :meth:`sample_source` gives no
        external timer: ``"cuda"`` (CUDA events on the current stream, CUDA
        graphs, L2 flush, hidden-work checks) or ``"cpu"`` (host clock around
        the calls, :meth:`synchronize` before and after every sample)."""
        return "cuda" if self.device().startswith("cuda") else "cpu"

    def sample_source(self, fn: Callable[[], Any]) -> Optional[Callable[[], float]]:
        """An external timer for ``fn`` (one forward call with its inputs
        bound), or None. When given, it is a zero-argument function that runs
        ``fn`` once and returns its duration in seconds (e.g. OpenCL event
        profiling); the evaluator feeds it to
        kernelsmith.timing.compare_samples instead of timing ``fn`` itself."""
        return None

    def hardware_info(self) -> HardwareInfo:
        """The device: name, kind, driver and library versions, in the shared
        names of :class:`~kernelsmith.hardware.HardwareInfo` (stored with
        results as ``to_dict()``, read by the prompt builder and reports)."""
        return HardwareInfo(backend=self.name)

    def prompt_tips(self, hardware: HardwareInfo | None = None) -> str:
        """Optimization advice for the system prompt, specific to the device."""
        return ""

    def hardware_family(self, hardware: HardwareInfo | None = None) -> str:
        """Which ``prompts/templates/hardware_<family>.md`` describes the
        device this backend's kernels run on (:func:`device_family` unless
        the backend knows better, e.g. that an interpreter runs them)."""
        return device_family(hardware)

    def hardware_notes(
        self, hardware: HardwareInfo | None = None, templates: Optional[Mapping[str, str]] = None
    ) -> str:
        """The hardware section of the system prompt: the text of the
        template :meth:`hardware_family` chooses, from ``templates`` (the
        prompt's templates by file name, a ``template_dir``'s overrides
        included) when it has it, else the package's."""
        name = f"hardware_{self.hardware_family(hardware)}.md"
        if templates is not None and name in templates:
            return templates[name]
        # lazy: cycle backends.base -> prompts -> prompts.builder -> backends.base
        from ..prompts.builder import load_template

        return load_template(name)

    # -- errors (in the worker, on what the candidate raised) -----------
    def is_compile_error(self, exc: BaseException) -> bool:
        """True when ``exc`` is this backend's compiler rejecting the
        candidate's kernel (its message then holds the compiler's words);
        a Python SyntaxError is one for every backend."""
        return False

    def classify_exception(self, exc: BaseException) -> str:
        """Error category of an exception raised by candidate code: "oom",
        "crash", "compile" or "runtime"."""
        # lazy: cycle backends.base -> evaluator -> evaluator.service -> backends.base
        from ..evaluator.tracebacks import classify_exception

        return classify_exception(exc, is_compile_error=self.is_compile_error)

    def candidate_frames(self, frames: list, candidate_file: str) -> list:
        """The traceback frames (``traceback.FrameSummary``) that are the
        candidate's own code, the only ones an LLM can act on: those in its
        file, where the kernels' frames are too when the language runs them
        as Python."""
        # lazy: cycle backends.base -> evaluator -> evaluator.service -> backends.base
        from ..evaluator.tracebacks import in_candidate_file

        return in_candidate_file(frames, candidate_file)

    def trim_traceback(self, exc: BaseException, candidate_file: str, tail_frames: int = 1) -> str:
        """``exc`` as feedback: its chain of causes, each with the
        candidate's frames (:meth:`candidate_frames`) and its message."""
        # lazy: cycle backends.base -> evaluator -> evaluator.service -> backends.base
        from ..evaluator.tracebacks import trim_exception

        return trim_exception(exc, candidate_file, tail_frames, candidate_frames=self.candidate_frames)


def available_backends() -> list[str]:
    """The backends: those shipped in this package (a public module or
    package directly in ``kernelsmith.backends``: ``opencl``, and ``cuda`` and
    ``triton``, whose helper modules live inside their packages; ``base`` and
    private modules such as ``_choose`` are not backends) and those installed
    through the ``kernelsmith.backends`` entry point group."""
    from importlib.metadata import entry_points

    names = {
        info.name
        for info in pkgutil.iter_modules(package_path)
        if info.name != "base" and not info.name.startswith("_")
    }
    try:
        names |= {ep.name for ep in entry_points(group="kernelsmith.backends")}
    except TypeError:  # Python 3.9
        names |= {ep.name for ep in entry_points().get("kernelsmith.backends", [])}
    return sorted(names)


def get_backend(name: str, **options: Any) -> Backend:
    """Instantiate the backend called ``name`` (``kernelsmith.backends.<name>``
    or an installed ``kernelsmith.backends`` entry point)."""
    if not name or name == "base" or name.startswith("_") or "." in name:
        raise ValueError(f"unknown backend '{name}'; available: {', '.join(available_backends())}")
    try:
        module = importlib.import_module(f"kernelsmith.backends.{name}")
        cls = module.BACKEND
    except ModuleNotFoundError as exc:
        if exc.name != f"kernelsmith.backends.{name}":
            raise
        from importlib.metadata import entry_points

        try:
            eps = entry_points(group="kernelsmith.backends")
        except TypeError:  # Python 3.9
            eps = entry_points().get("kernelsmith.backends", [])
        matches = [ep for ep in eps if ep.name == name]
        if not matches:
            raise ValueError(f"unknown backend '{name}'; available: {', '.join(available_backends())}") from None
        cls = matches[0].load()
    return cls(**options)
