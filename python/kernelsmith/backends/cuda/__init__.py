"""CUDA C++ backend: candidates in KernelBench's CUDA format. ``ModelNew``'s
forward calls functions of an extension built by
``torch.utils.cpp_extension.load_inline(cpp_sources=..., cuda_sources=...,
functions=[...])``, whose ``__global__`` kernels do the work. Runs on NVIDIA
GPUs with a CUDA build of PyTorch and the CUDA toolkit (nvcc).

What this package does besides the Backend interface (docs/cuda.md):

* **Its own build of load_inline.** In a worker, ``load_inline`` is served
  by :func:`build_extension`: the CUDA sources become one nvcc translation
  unit (``#include <torch/extension.h>`` narrowed to ``<torch/types.h>``,
  which carries ``torch::Tensor`` and the factories but not pybind11 and
  torch's Python API; the original include is kept when that fails), the
  C++ declarations and the generated pybind11 bindings a second one,
  compiled by the host compiler with a precompiled ``torch/extension.h``
  when one is cached; both compile at the same time, for the device's
  architecture only.
* **A compile cache** keyed by a hash of the sources, the flags, the torch,
  CUDA, nvcc and host-compiler versions and the device architecture: a
  worker's own cache, then the pool's shared cache (read-only to workers,
  filled by the pool's trusted builder from the requests workers leave,
  :meth:`CudaBackend.build_shared_cache`), so a duplicate never recompiles.
* **Compile errors** parsed from nvcc's and the host compiler's output
  (``file(line): error: ...`` and ``file:line:col: error: ...``) and mapped
  back to the candidate's own lines (``#line`` directives name the
  candidate's strings ``cuda_sources`` / ``cpp_sources``).
* **Launch accounting.** Every ``<<<grid, block[, smem[, stream]]>>>``
  launch in the CUDA source gets the current PyTorch stream (when it names
  none) through a helper that also counts it; the extension's functions are
  wrapped so that each call runs inside ``census_launch`` (its kernels are
  the candidate's in the kernel census) and reports how many kernels it
  launched (a call that launches none is no kernel work).

The package, by concern: ``backend`` (the :class:`CudaBackend` class),
``checks`` (static checks), ``sources`` (the program's kernels and launches,
what ``load_inline`` asks to build, the translation units), ``toolchain``
(nvcc and the host compiler, precompiled headers, the build and its cache),
``loading`` (the stand-in ``load_inline``, the extension's wrapped
functions), ``diagnostics`` (compiler messages at the candidate's lines),
``tips`` (prompt advice). What other modules and tests import is re-exported
here.
"""

from __future__ import annotations

from .backend import BACKEND, CudaBackend
from .checks import FORBIDDEN_IMPORTS, SOURCE_HACKS, check_cuda_program
from .diagnostics import (
    BINDING_FILE,
    CPP_FILE,
    CUDA_FILE,
    CompilationError,
    Diagnostic,
    format_diagnostics,
    parse_diagnostics,
)
from .loading import Extension, install_load_inline
from .loading import _import_extension as _import_extension
from .sources import (
    BuildSpec,
    binding_translation_unit,
    cuda_translation_unit,
    global_kernels,
    rewrite_launches,
    split_sources,
)
from .sources import _CU_PRELUDE as _CU_PRELUDE
from .sources import _strip_comments as _strip_comments
from .tips import cuda_prompt_tips
from .toolchain import (
    ARCH_ENV,
    BUILD_VERSION,
    LOCAL_ENV,
    PCH_ENV,
    REQUESTS_ENV,
    SHARED_ENV,
    BuildResult,
    Toolchain,
    build_extension,
    build_key,
    build_pch,
    compile_extension,
    find_pch,
    key_text,
    normalize_arch,
)
from .toolchain import _TOOLCHAIN as _TOOLCHAIN

__all__ = [
    "ARCH_ENV",
    "BACKEND",
    "BINDING_FILE",
    "BUILD_VERSION",
    "CPP_FILE",
    "CUDA_FILE",
    "FORBIDDEN_IMPORTS",
    "LOCAL_ENV",
    "PCH_ENV",
    "REQUESTS_ENV",
    "SHARED_ENV",
    "SOURCE_HACKS",
    "BuildResult",
    "BuildSpec",
    "CompilationError",
    "CudaBackend",
    "Diagnostic",
    "Extension",
    "Toolchain",
    "binding_translation_unit",
    "build_extension",
    "build_key",
    "build_pch",
    "check_cuda_program",
    "compile_extension",
    "cuda_prompt_tips",
    "cuda_translation_unit",
    "find_pch",
    "format_diagnostics",
    "global_kernels",
    "install_load_inline",
    "key_text",
    "normalize_arch",
    "parse_diagnostics",
    "rewrite_launches",
    "split_sources",
]
