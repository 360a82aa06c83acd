"""One launcher for every Triton kernel signature in a pool's workers.

Triton up to 3.6 compiles a small C extension per kernel signature the first
time a process launches a kernel of that signature (``CudaLauncher``). The
shared launcher cache (``cache``) only helps once the trusted builder
has seen a signature; a batch of new candidates mostly brings new ones, and
in a profile of 14 pool children on the H200 (triton 3.6) 8 of 17 launchers
were compiled in the child, 0.83 s each with the child's stops: the largest
part of a small candidate's 1.4 s evaluation.

``launch.c`` is one launcher driven by a code string instead of
generated C. The zygote compiles it once (through Triton's own build, with
Triton's ``cuda.h``; no CUDA context) before it forks, and :func:`install`
makes ``CudaLauncher`` use it for every signature it can express: pointers,
integers, floats, constexprs and tuples of these. Tensor descriptors and TMA
descriptors keep Triton's own per-signature launcher. The arguments are
converted as Triton's generated ``PyArg_ParseTuple`` format would, and the
launch is the same ``cuLaunchKernelEx`` call with the same attributes.

Triton 3.7 and later have a generic launcher of their own and no
``make_launcher``; there (and on the interpreter) nothing is installed.
``KERNELSMITH_TRITON_GENERIC_LAUNCHER=0`` turns it off.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Iterable, Optional

ENV = "KERNELSMITH_TRITON_GENERIC_LAUNCHER"
MODULE = "kernelsmith_triton_launch"
#: Triton 3.6's launch() arguments before the kernel's own (the ABI this launcher speaks)
BASE_ARGS_FORMAT = "iiiKKppOOOOOO"

_CODES = {
    "i1": "b",
    "i8": "b",
    "i16": "h",
    "i32": "i",
    "i64": "L",
    "u1": "B",
    "u8": "B",
    "u16": "H",
    "u32": "I",
    "u64": "K",
    "fp16": "e",
    "bf16": "E",
    "fp32": "f",
    "f32": "f",
    "fp64": "d",
    "constexpr": "C",
}
_MAX_SLOTS = 256  # launch.c's MAX_SLOTS

_module: Any = None


def launch_codes(signature: Iterable[Any]) -> Optional[bytes]:
    """The code string of a signature's argument types, or None when the
    generic launcher cannot express it (a tensor or TMA descriptor, a type
    this module does not know, too many arguments)."""
    out: list[str] = []
    slots = 0

    def walk(types: Iterable[Any], depth: int) -> bool:
        nonlocal slots
        for ty in types:
            if isinstance(ty, (tuple, list)):
                if depth >= 8:
                    return False
                out.append("(")
                if not walk(ty, depth + 1):
                    return False
                out.append(")")
            elif isinstance(ty, str) and ty.startswith("*") and not ty.startswith("*tensordesc"):
                out.append("P")
                slots += 1
            elif isinstance(ty, str) and ty in _CODES:
                out.append(_CODES[ty])
                slots += ty != "constexpr"
            else:
                return False
        return True

    if not walk(list(signature), 0) or slots > _MAX_SLOTS:
        return None
    return "".join(out).encode()


def source() -> str:
    with open(os.path.join(os.path.dirname(__file__), "launch.c"), encoding="utf-8") as fh:
        return fh.read()


def build(include_dirs: Optional[list[str]] = None) -> Any:
    """Compile (or load from Triton's cache) and import the launcher
    module: a C compile the first time, in the zygote, never in a worker."""
    global _module
    if _module is not None:
        return _module
    from triton.runtime.build import compile_module_from_src

    if include_dirs is None:
        from triton.backends.nvidia import driver

        include_dirs = list(driver.include_dirs)
    _module = compile_module_from_src(src=source(), name=MODULE, include_dirs=include_dirs)
    return _module


def _driver() -> Any:
    try:
        from triton.backends.nvidia import driver
    except Exception:  # noqa: BLE001 - no NVIDIA backend in this Triton
        return None
    if (
        not callable(getattr(driver, "make_launcher", None))
        or getattr(driver, "_BASE_ARGS_FORMAT", None) != BASE_ARGS_FORMAT
    ):
        return None  # Triton 3.7+ (its own generic launcher) or an ABI this module does not speak
    return driver


def install() -> bool:
    """Make Triton's ``CudaLauncher`` launch through the generic launcher
    wherever it can. Returns whether it is installed (False on Triton 3.7+,
    another ABI, when turned off, or when the module does not build)."""
    if os.environ.get(ENV, "1") == "0":
        return False
    driver = _driver()
    if driver is None:
        return False
    klass = driver.CudaLauncher
    if getattr(klass.__init__, "_kernelsmith_generic", False):
        return True
    module = build(list(driver.include_dirs))
    original = klass.__init__

    def __init__(self: Any, src: Any, metadata: Any) -> None:
        signature = dict(src.signature)
        tensordesc_meta = getattr(metadata, "tensordesc_meta", None)
        codes = None if tensordesc_meta else launch_codes(signature.values())
        if codes is None:
            original(self, src, metadata)
            return
        # what Triton's __init__ sets, with launch bound to the code string
        self.num_ctas = getattr(metadata, "num_ctas", 1)
        self.launch = functools.partial(module.launch, codes)
        self.global_scratch_size = metadata.global_scratch_size
        self.global_scratch_align = metadata.global_scratch_align
        self.profile_scratch_size = metadata.profile_scratch_size
        self.profile_scratch_align = metadata.profile_scratch_align
        self.launch_cooperative_grid = metadata.launch_cooperative_grid
        self.launch_pdl = metadata.launch_pdl

    __init__._kernelsmith_generic = True  # type: ignore[attr-defined]
    klass.__init__ = __init__
    return True


__all__ = ["launch_codes", "build", "install", "source", "ENV", "BASE_ARGS_FORMAT"]
