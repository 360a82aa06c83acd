"""The CUDA C++ backend's :class:`~kernelsmith.backends.base.Backend`."""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Optional

from ...hardware import HardwareInfo
from ..base import Backend, StaticReport, nvidia_driver, recording
from .checks import check_cuda_program
from .diagnostics import CompilationError
from .loading import _LoadInline, _Records, install_load_inline
from .sources import BuildSpec
from .tips import cuda_prompt_tips
from .toolchain import (
    ARCH_ENV,
    LOCAL_ENV,
    PCH_ENV,
    REQUESTS_ENV,
    SHARED_ENV,
    _toolchain,
    build_pch,
    compile_extension,
    key_text,
)


class CudaBackend(Backend):
    name = "cuda"
    # only the evaluator's allocation / view / copy defaults run in forward
    default_allowed_torch_ops: frozenset = frozenset()
    supports_address_space_limit = False

    # -- parent ---------------------------------------------------------
    def static_check(self, source: str) -> StaticReport:
        return check_cuda_program(source)

    def worker_env(self, workdir: str, cpu_threads: Optional[int] = None) -> dict[str, str]:
        env = {
            LOCAL_ENV: os.path.join(workdir, ".ks_cuda"),
            "CUDA_CACHE_PATH": os.path.join(workdir, ".nv"),
            "TORCH_EXTENSIONS_DIR": os.path.join(workdir, ".torch_extensions"),
        }
        for key in (ARCH_ENV, PCH_ENV, "CUDA_HOME", "CXX", "CC"):
            if os.environ.get(key):
                env[key] = os.environ[key]
        return env

    def shared_cache_env(self, shared_dir: str, requests_dir: str) -> dict[str, str]:
        return {SHARED_ENV: shared_dir, REQUESTS_ENV: requests_dir}

    def build_shared_cache(self, key_texts: list[str], shared_dir: str) -> int:
        """Rebuild each request from its own sources (a request is only a
        hint) into ``shared_dir/cuda``; the precompiled header first."""
        tc = _toolchain()
        root = os.path.join(shared_dir, "cuda")
        with contextlib.suppress(Exception):
            build_pch(tc, root)
        written = 0
        for text in key_texts:
            head, _, body = text.partition("\n")
            if head != "kernelsmith-cuda-build":
                continue
            try:
                data = json.loads(body)
                if data.get("toolchain") != tc.identity():
                    continue  # built for another device or toolchain
                spec = BuildSpec.from_json(data["spec"])
                if key_text(spec, tc) != text:
                    continue
                compile_extension(spec, tc, root, pch_roots=[root])
                written += 1
            except Exception:  # noqa: BLE001 - a source that does not build is simply not cached
                continue
        return written

    # -- worker ---------------------------------------------------------
    def unavailable_reason(self) -> Optional[str]:
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # no CUDA context in the caller
        import torch

        if torch.version.cuda is None:
            return f"needs a CUDA build of PyTorch (this is torch {torch.__version__})"
        if not torch.cuda.is_available():
            return "needs an NVIDIA GPU, and none is visible"
        return None

    def prepare_zygote(self) -> None:
        # torch.cuda.is_available() (cpp_extension calls it when it looks for
        # CUDA_HOME) would initialise the CUDA runtime here and poison every
        # forked child ("Cannot re-initialize CUDA in forked subprocess", seen
        # on the H200); through NVML it creates no context
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        import torch  # noqa: F401
        from torch.utils import cpp_extension  # noqa: F401

        install_load_inline()

    def prepare_worker(self, ahead: bool = False) -> None:
        import torch

        install_load_inline()
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"the cuda backend needs an NVIDIA GPU and a CUDA build of PyTorch (torch "
                f"{torch.__version__}, CUDA {torch.version.cuda}, devices visible: 0)"
            )
        torch.cuda.init()
        torch.empty(1, device="cuda")
        _toolchain()  # nvcc and compiler versions, once per worker, before any candidate

    def device(self) -> str:
        return "cuda"

    def load_candidate(self, path: str, module_name: str = "candidate") -> Any:
        install_load_inline()
        try:
            with open(path, encoding="utf-8") as fh:
                _LoadInline.candidate_source = fh.read()
        except OSError:
            _LoadInline.candidate_source = None
        return super().load_candidate(path, module_name)

    def launch_guard(self) -> Any:
        return recording(_Records.records)

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def hardware_info(self) -> HardwareInfo:
        import platform

        import torch

        versions = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version()}
        if not torch.cuda.is_available():
            return HardwareInfo(backend="cuda", versions=versions)
        props = torch.cuda.get_device_properties(0)
        arch = ""
        with contextlib.suppress(Exception):
            tc = _toolchain()
            arch, versions["nvcc"] = f"sm_{tc.arch}", tc.nvcc_version
        return HardwareInfo(
            backend="cuda",
            name=props.name,
            kind="gpu",
            vendor="NVIDIA",
            compute_capability=f"{props.major}.{props.minor}",
            arch=arch,
            compute_units=props.multi_processor_count,
            memory_gb=round(props.total_memory / 2**30, 1),
            driver=nvidia_driver(),
            versions=versions,
            properties={
                "shared_memory_per_block_optin_kb": getattr(props, "shared_memory_per_block_optin", 0) // 1024 or None,
                "l2_cache_mb": round(getattr(props, "L2_cache_size", 0) / 2**20, 1) or None,
                "warp_size": getattr(props, "warp_size", 32),
                "max_threads_per_sm": getattr(props, "max_threads_per_multi_processor", None),
                "registers_per_sm": getattr(props, "regs_per_multiprocessor", None),
            },
        )

    def is_compile_error(self, exc: BaseException) -> bool:
        # nvcc or the host compiler rejected the program (the message holds
        # the build log, mapped to the candidate's lines)
        return isinstance(exc, CompilationError)

    def prompt_tips(self, hardware: HardwareInfo | dict[str, Any] | None = None) -> str:
        return cuda_prompt_tips(HardwareInfo.of(hardware))


BACKEND = CudaBackend
