"""Triton backend: candidates define ``ModelNew`` whose forward launches
``@triton.jit`` kernels. Runs on NVIDIA GPUs, or on the CPU through Triton's
interpreter when ``TRITON_INTERPRET=1`` (slow, but every check is real).

The package: ``backend`` (the :class:`TritonBackend` class, its static
checks, launch hooks and the zygote's warm-up) and the helpers it loads when
needed, none of them a backend of its own: ``cache`` (the shared launcher
cache and the trusted kernel layer, Triton's ``TRITON_CACHE_MANAGER``),
``launch`` and ``launch.c`` (one launcher for every kernel signature),
``autotune`` (autotuning done once per kernel and key, handed over between
processes), ``warm`` (a spare worker's first compile).
"""

from __future__ import annotations

from .backend import (
    BACKEND,
    HOST_CACHE_ENV,
    TRITON_LOWERING_DTYPES,
    TritonBackend,
    host_module_folder,
    install_generic_launcher,
    lowers_precision,
    warm_compiler,
)

__all__ = [
    "BACKEND",
    "HOST_CACHE_ENV",
    "TRITON_LOWERING_DTYPES",
    "TritonBackend",
    "host_module_folder",
    "install_generic_launcher",
    "lowers_precision",
    "warm_compiler",
]
