"""The CUDA backend's build: the toolchain (nvcc, the host compiler, their
flags and versions), the precompiled torch header, the compile of the two
translation units at the same time, and the compile cache keyed by the
sources, the flags, the versions and the device architecture (a worker's own
cache, then the pool's shared one, filled by the pool's trusted builder)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from .diagnostics import CPP_FILE, CUDA_FILE, CompilationError, _trim_log, format_diagnostics, parse_diagnostics
from .sources import (
    _CU_PRELUDE,
    _FULL_HEADER,
    _HOST_LAUNCH_HELPER,
    _LOAD_INLINE_CUDA_HEAD,
    _PCH_HEADER,
    BuildSpec,
    binding_translation_unit,
    cuda_translation_unit,
    split_sources,
)

#: bump when the build recipe changes: old cache entries are then never used
BUILD_VERSION = "ks-cuda-1"

#: environment: the device architecture to build for ("90", "9.0", "sm_90"),
#: the pool's shared cache (read-only) and its request folder, the
#: worker-local build folder, a machine-wide folder of precompiled headers
ARCH_ENV = "KERNELSMITH_CUDA_ARCH"
SHARED_ENV = "KERNELSMITH_CUDA_CACHE"
REQUESTS_ENV = "KERNELSMITH_CUDA_CACHE_REQUESTS"
LOCAL_ENV = "KERNELSMITH_CUDA_BUILD_DIR"
PCH_ENV = "KERNELSMITH_CUDA_PCH_DIR"

#: nvcc messages that may come from narrowing torch/extension.h to
#: torch/types.h (a name torch/all.h or pybind11 would have declared)
_MISSING_HEADER_HINT = re.compile(
    r"torch|\bat::|c10|pybind|\bpy::|namespace|TORCH_|AT_|"
    r"incomplete type|has no member"
)

_lock = threading.Lock()


def normalize_arch(arch: str) -> str:
    """ "9.0" / "90" / "sm_90" / "sm_90a" -> "90" (or "90a")."""
    a = str(arch).strip().lower().replace("sm_", "").replace("compute_", "")
    if "." in a:
        major, minor = a.split(".", 1)
        a = major + minor
    if not re.fullmatch(r"\d{2,3}a?", a):
        raise ValueError(f"not a CUDA architecture: {arch!r} (expected e.g. 90, 9.0 or sm_90)")
    return a


@dataclass
class Toolchain:
    """The compilers and flags one build uses; its ``identity`` goes into
    every cache key."""

    nvcc: str
    cxx: str
    arch: str
    torch_version: str
    cuda_version: str
    include_paths: list[str]
    python_include: str
    library_paths: list[str]
    abi_flags: list[str]
    nvcc_version: str = ""
    cxx_version: str = ""

    @classmethod
    def detect(cls, arch: Optional[str] = None) -> "Toolchain":
        import sysconfig

        import torch
        from torch.utils import cpp_extension as ce

        cuda_home = ce.CUDA_HOME or os.environ.get("CUDA_HOME") or "/usr/local/cuda"
        nvcc = os.path.join(cuda_home, "bin", "nvcc")
        if not os.path.exists(nvcc):
            nvcc = shutil.which("nvcc") or nvcc
        if not os.path.exists(nvcc):
            raise RuntimeError(f"nvcc not found (CUDA_HOME={cuda_home}): the CUDA backend needs the CUDA toolkit")
        cxx = os.environ.get("CXX") or shutil.which("c++") or "g++"
        if arch is None:
            arch = os.environ.get(ARCH_ENV) or None
        if arch is None:
            if not torch.cuda.is_available():
                raise RuntimeError(
                    f"no CUDA device visible and ${ARCH_ENV} unset: cannot tell which architecture to build for"
                )
            major, minor = torch.cuda.get_device_capability()
            arch = f"{major}{minor}"
            if major >= 9 and minor == 0:
                arch = "90a" if major == 9 else arch  # wgmma/TMA available to the candidate
        abi = []
        for getter in ("_get_pybind11_abi_build_flags", "_get_glibcxx_abi_build_flags"):
            fn = getattr(ce, getter, None)
            if fn is not None:
                import warnings

                with warnings.catch_warnings():  # deprecated in torch 2.9, still what load_inline passes
                    warnings.simplefilter("ignore")
                    abi += list(fn())
        if not any("GLIBCXX_USE_CXX11_ABI" in f for f in abi):
            abi.append(f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
        torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
        libs = [torch_lib] + [
            p for p in (os.path.join(cuda_home, "lib64"), os.path.join(cuda_home, "lib")) if os.path.isdir(p)
        ]
        includes = list(ce.include_paths()) + [os.path.join(cuda_home, "include")]
        tc = cls(
            nvcc=nvcc,
            cxx=cxx,
            arch=normalize_arch(arch),
            torch_version=torch.__version__,
            cuda_version=str(torch.version.cuda),
            include_paths=includes,
            python_include=sysconfig.get_paths()["include"],
            library_paths=libs,
            abi_flags=abi,
        )
        tc.nvcc_version = _version_line([nvcc, "--version"])
        tc.cxx_version = _version_line([cxx, "--version"], first=True)
        return tc

    def identity(self) -> dict[str, Any]:
        recipe = hashlib.sha256(
            "\0".join(
                (
                    _CU_PRELUDE,
                    _PCH_HEADER,
                    _FULL_HEADER,
                    _HOST_LAUNCH_HELPER,
                    _LOAD_INLINE_CUDA_HEAD,
                    *self.cxx_flags(),
                    *self.nvcc_flags(),
                )
            ).encode()
        ).hexdigest()[:12]
        return {
            "build": BUILD_VERSION,
            "recipe": recipe,
            "torch": self.torch_version,
            "cuda": self.cuda_version,
            "arch": self.arch,
            "nvcc": self.nvcc_version,
            "cxx": self.cxx_version,
            "abi": self.abi_flags,
            "python": sys.version.split()[0],
        }

    def cxx_flags(self) -> list[str]:
        inc = [f for p in self.include_paths for f in ("-isystem", p)] + ["-isystem", self.python_include]
        # no -O: what load_inline gives host code (the kernels are nvcc's,
        # at -O3); -O2 here doubled the code generation that torch's headers
        # force on every unit (measured on a 2-core box: 7 s of an empty unit's 13 s)
        return ["-std=c++17", "-fPIC", "-DTORCH_API_INCLUDE_EXTENSION_H", *self.abi_flags, *inc]

    def nvcc_flags(self) -> list[str]:
        from torch.utils import cpp_extension as ce

        inc = [f for p in self.include_paths for f in ("-isystem", p)]
        arch = self.arch
        gencode = f"-gencode=arch=compute_{arch},code=sm_{arch}"
        # device code is optimised by default (cicc and ptxas at -O3); -O
        # here would only optimise the host side of the unit
        return [
            "-std=c++17",
            "-Xcompiler",
            "-fPIC",
            gencode,
            "-ccbin",
            self.cxx,
            "-DTORCH_API_INCLUDE_EXTENSION_H",
            *list(getattr(ce, "COMMON_NVCC_FLAGS", [])),
            *[f for f in self.abi_flags if f.startswith("-D")],
            *inc,
        ]

    def link_flags(self) -> list[str]:
        flags = []
        for p in self.library_paths:
            flags += [f"-L{p}", f"-Wl,-rpath,{p}"]
        for lib in ("c10", "c10_cuda", "torch_cpu", "torch_cuda", "torch", "torch_python", "cudart"):
            if any(
                os.path.exists(os.path.join(p, f"lib{lib}.so"))
                or any(n.startswith(f"lib{lib}.so") for n in _listdir(p))
                for p in self.library_paths
            ):
                flags.append(f"-l{lib}")
        return flags


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _version_line(cmd: list[str], first: bool = False) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if not out:
        return "unknown"
    return out[0] if first else out[-1]


def key_text(spec: BuildSpec, toolchain: Toolchain) -> str:
    """The text a build's cache key hashes; also the request a worker leaves
    for the pool's builder (everything needed to rebuild it)."""
    return "kernelsmith-cuda-build\n" + json.dumps(
        {"toolchain": toolchain.identity(), "spec": spec.to_json()}, sort_keys=True
    )


def build_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _pch_dir(root: str, toolchain: Toolchain) -> str:
    ident = json.dumps({"tc": toolchain.identity(), "flags": toolchain.cxx_flags(), "h": _PCH_HEADER}, sort_keys=True)
    return os.path.join(root, "pch-" + hashlib.sha256(ident.encode()).hexdigest()[:16])


def find_pch(toolchain: Toolchain, roots: Sequence[Optional[str]]) -> Optional[str]:
    """The precompiled ``torch/extension.h`` header for this toolchain (its
    .h path, the .gch beside it), from the first root that has it."""
    for root in roots:
        if not root:
            continue
        d = _pch_dir(root, toolchain)
        if os.path.exists(os.path.join(d, "ks_torch.h.gch")):
            return os.path.join(d, "ks_torch.h")
    return None


def build_pch(toolchain: Toolchain, root: str) -> tuple[str, float]:
    """Precompile torch's extension header into ``root`` (once per
    toolchain; a lock file keeps concurrent builders from racing). Returns
    (header path, seconds spent; 0 when it was there)."""
    import fcntl

    d = _pch_dir(root, toolchain)
    header = os.path.join(d, "ks_torch.h")
    if os.path.exists(header + ".gch"):
        return header, 0.0
    os.makedirs(root, exist_ok=True)
    started = time.monotonic()
    with open(os.path.join(root, ".pch.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(header + ".gch"):
            return header, 0.0
        tmp = d + f".tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        with open(os.path.join(tmp, "ks_torch.h"), "w") as fh:
            fh.write(_PCH_HEADER)
        proc = subprocess.run(
            [toolchain.cxx, *toolchain.cxx_flags(), "-x", "c++-header", "ks_torch.h", "-o", "ks_torch.h.gch"],
            cwd=tmp,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError("precompiling torch/extension.h failed:\n" + proc.stderr[-3000:])
        shutil.rmtree(d, ignore_errors=True)
        os.rename(tmp, d)
    return header, time.monotonic() - started


@dataclass
class BuildResult:
    path: str  # the extension's .so
    module_name: str
    key: str
    seconds: float = 0.0
    cached: str = ""  # "", "local" or "shared"
    mode: str = ""  # "split", "narrowed" or "full"
    pch: bool = False
    log: str = ""


def _run_pair(work: str, commands: dict[str, list[str]], stop_on_failure: bool = False) -> dict[str, str]:
    """Run the compiles at the same time; the logs of those that failed.
    ``stop_on_failure``: the first failure stops the others (their result
    no longer matters)."""
    jobs = {
        name: subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for name, cmd in commands.items()
    }
    logs: dict[str, str] = {}
    readers = {
        name: threading.Thread(target=lambda n=name, p=p: logs.__setitem__(n, p.communicate()[0]), daemon=True)
        for name, p in jobs.items()
    }
    for t in readers.values():
        t.start()
    stopped: set[str] = set()
    while any(t.is_alive() for t in readers.values()):
        time.sleep(0.02)
        if stop_on_failure and any(p.poll() not in (None, 0) for p in jobs.values()):
            for name, p in jobs.items():
                if p.poll() is None:
                    p.kill()
                    stopped.add(name)
    for t in readers.values():
        t.join()
    return {name: logs.get(name, "") for name, p in jobs.items() if p.returncode != 0 and name not in stopped}


def compile_extension(
    spec: BuildSpec,
    toolchain: Toolchain,
    out_dir: str,
    *,
    pch_roots: Sequence[Optional[str]] = (),
    candidate_source: Optional[str] = None,
    modes: Sequence[str] = ("split", "narrowed", "full"),
) -> BuildResult:
    """Compile and link ``spec`` into ``out_dir/<key>/`` (atomically: a
    reader sees the entry whole or not at all). The two translation units
    compile at the same time. ``modes``, fastest first: ``split`` (device
    code without torch's headers, when the source splits), ``narrowed``
    (one nvcc unit, torch/types.h for torch/extension.h), both with the
    lighter precompiled binding headers; ``full`` (the source and the
    bindings with torch/extension.h, as load_inline builds them). A failure
    that the lighter build may have caused moves on to the next mode;
    errors in device code that compiled without torch, or in a CUDA unit
    compiled as written, are the program's and are reported at once."""
    text = key_text(spec, toolchain)
    key = build_key(text)
    final = os.path.join(out_dir, key)
    module_name = f"ks_cuda_{key[:16]}"
    so_path = os.path.join(final, module_name + ".so")
    if os.path.exists(so_path):
        return BuildResult(so_path, module_name, key, cached="local")
    started = time.monotonic()
    os.makedirs(out_dir, exist_ok=True)
    pch = find_pch(toolchain, pch_roots)
    # an optimisation level would make gcc refuse the precompiled header
    # (built without one); the host wrappers only call into libtorch
    extra_c = [f for f in spec.extra_cflags if not re.fullmatch(r"-O[0-3s]?", f)]
    if not spec.functions:  # the program writes its own PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
        extra_c.append(f"-DTORCH_EXTENSION_NAME={module_name}")
    failed: dict[str, str] = {}
    tried = []
    for mode in modes:
        if mode == "split":
            parts = split_sources(spec.cuda_sources)
            if parts is None:
                continue
            cu_text = f'{_CU_PRELUDE}#line 1 "{CUDA_FILE}"\n{parts[0]}\n'
            main_text = binding_translation_unit(spec, module_name, pch, host_part=parts[1])
        else:
            cu_text, narrowed = cuda_translation_unit(spec.cuda_sources, light=mode == "narrowed")
            main_text = binding_translation_unit(spec, module_name, pch, full=mode == "full")
        tried.append(mode)
        use_pch = pch if mode != "full" else None
        work = final + f".tmp{os.getpid()}-{threading.get_ident()}"
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        with open(os.path.join(work, "cuda.cu"), "w") as fh:
            fh.write(cu_text)
        with open(os.path.join(work, "main.cpp"), "w") as fh:
            fh.write(main_text)
        failed = _run_pair(
            work,
            {
                "nvcc": [
                    toolchain.nvcc,
                    *toolchain.nvcc_flags(),
                    *spec.extra_cuda_cflags,
                    "-c",
                    "cuda.cu",
                    "-o",
                    "cuda.o",
                ],
                "c++": [
                    toolchain.cxx,
                    *toolchain.cxx_flags(),
                    *extra_c,
                    *(["-include", use_pch] if use_pch else []),
                    "-c",
                    "main.cpp",
                    "-o",
                    "main.o",
                ],
            },
            stop_on_failure=mode == "split",
        )
        if not failed:
            link = subprocess.run(
                [toolchain.cxx, "-shared", "main.o", "cuda.o", "-o", module_name + ".so", *toolchain.link_flags()],
                cwd=work,
                capture_output=True,
                text=True,
            )
            if link.returncode != 0:
                failed["link"] = link.stdout + link.stderr
        if not failed:
            for name in ("cuda.o", "main.o"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(work, name))
            with open(os.path.join(work, "key.txt"), "w") as fh:
                fh.write(text)
            try:
                os.rename(work, final)
            except OSError:  # another process won the race: its entry is the same build
                shutil.rmtree(work, ignore_errors=True)
            return BuildResult(
                so_path, module_name, key, seconds=time.monotonic() - started, mode=mode, pch=use_pch is not None
            )
        shutil.rmtree(work, ignore_errors=True)
        if mode == "split" and "nvcc" in failed:
            break  # the device code compiled without torch: its errors are the program's
        if "link" in failed and len(failed) == 1 and mode != "split":
            break
        if mode == "narrowed" and set(failed) == {"nvcc"}:
            if not narrowed:
                break  # the CUDA unit was compiled as written: the full build would fail the same way
            said = " ".join(d.message for d in parse_diagnostics(failed["nvcc"]))
            if not _MISSING_HEADER_HINT.search(said):
                break  # errors of the program's own code, not of what torch/types.h leaves out
    log = "\n".join(f"[{name}]\n{text}" for name, text in failed.items())
    diags = parse_diagnostics(log)
    sources = {CUDA_FILE: spec.cuda_sources, CPP_FILE: spec.cpp_sources}
    summary = format_diagnostics(diags, sources, candidate_source)
    which = " and ".join(
        {
            "nvcc": "nvcc (cuda_sources)",
            "c++": "the host compiler (cpp_sources, host code, bindings)",
            "link": "the linker",
        }[n]
        for n in failed
    )
    raise CompilationError(
        f"building the CUDA extension failed in {which} (build {'/'.join(tried)}):\n{summary}\n"
        f"--- build log ---\n{_trim_log(log)}",
        diags,
    )


def _default_pch_root() -> str:
    return os.environ.get(PCH_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "kernelsmith", "cuda-pch")


def build_extension(
    spec: BuildSpec, toolchain: Optional[Toolchain] = None, *, candidate_source: Optional[str] = None
) -> BuildResult:
    """The worker's path: the shared cache (read-only), then the local one,
    else a build into the local one plus a request for the pool's builder."""
    tc = toolchain or _toolchain()
    text = key_text(spec, tc)
    key = build_key(text)
    module_name = f"ks_cuda_{key[:16]}"
    shared = os.environ.get(SHARED_ENV)
    if shared:
        so = os.path.join(shared, "cuda", key, module_name + ".so")
        if os.path.exists(so):
            return BuildResult(so, module_name, key, cached="shared")
    local = os.environ.get(LOCAL_ENV) or os.path.join(os.environ.get("TMPDIR", "/tmp"), "ks-cuda-build")
    roots = [os.path.join(shared, "cuda") if shared else None, _default_pch_root(), local]
    result = compile_extension(spec, tc, local, pch_roots=roots, candidate_source=candidate_source)
    requests = os.environ.get(REQUESTS_ENV)
    if requests and shared and not result.cached:
        with contextlib.suppress(OSError):
            os.makedirs(requests, exist_ok=True)
            with open(os.path.join(requests, key + ".key"), "w") as fh:
                fh.write(text)
    return result


_TOOLCHAIN: dict[str, Toolchain] = {}


def _toolchain() -> Toolchain:
    with _lock:
        if "tc" not in _TOOLCHAIN:
            _TOOLCHAIN["tc"] = Toolchain.detect()
        return _TOOLCHAIN["tc"]
