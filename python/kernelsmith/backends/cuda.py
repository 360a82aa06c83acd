"""CUDA C++ backend: candidates in KernelBench's CUDA format. ``ModelNew``'s
forward calls functions of an extension built by
``torch.utils.cpp_extension.load_inline(cpp_sources=..., cuda_sources=...,
functions=[...])``, whose ``__global__`` kernels do the work. Runs on NVIDIA
GPUs with a CUDA build of PyTorch and the CUDA toolkit (nvcc).

What this module does besides the Backend interface (docs/cuda.md):

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
"""
from __future__ import annotations

import ast
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
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from .._astutil import dotted
from ..hardware import HardwareInfo
from .base import Backend, LaunchRecord, StaticReport, _Census, _spans, census_launch, nvidia_driver, recording
from .._astutil import parse as parse_source

#: bump when the build recipe changes: old cache entries are then never used
BUILD_VERSION = "ks-cuda-1"

CUDA_FILE = "cuda_sources"  # the name nvcc reports for the candidate's CUDA string
CPP_FILE = "cpp_sources"  # ... and for its C++ declarations
BINDING_FILE = "ks_binding"  # the generated pybind11 module

#: environment: the device architecture to build for ("90", "9.0", "sm_90"),
#: the pool's shared cache (read-only) and its request folder, the
#: worker-local build folder, a machine-wide folder of precompiled headers
ARCH_ENV = "KERNELSMITH_CUDA_ARCH"
SHARED_ENV = "KERNELSMITH_CUDA_CACHE"
REQUESTS_ENV = "KERNELSMITH_CUDA_CACHE_REQUESTS"
LOCAL_ENV = "KERNELSMITH_CUDA_BUILD_DIR"
PCH_ENV = "KERNELSMITH_CUDA_PCH_DIR"

#: imports a CUDA program has no use for: they launch or compute outside
#: the extension, or reach the harness
FORBIDDEN_IMPORTS = {
    "ctypes": "loads native code outside the extension",
    "cffi": "loads native code outside the extension",
    "numba": "compiles kernels outside the extension",
    "cupy": "launches kernels outside the extension",
    "pycuda": "launches kernels outside the extension",
    "triton": "this is the CUDA C++ backend: kernels must come from load_inline's cuda_sources",
    "numpy": "computes on the host",
    "kernelsmith": "reaches the evaluator",
}

#: what the CUDA or C++ source must not use (vendor libraries do the work,
#: extra streams escape the timed stream, driver launches skip the count)
SOURCE_HACKS = [
    (re.compile(r"#\s*include\s*[<\"](cublas|cublasLt|cudnn|cufft|cusparse|cusolver|curand_kernel_host)"),
     "includes a vendor library header ({0}): the work must be done by the program's own __global__ kernels"),
    (re.compile(r"\b(cublas\w*|cudnn\w*|cufft\w*)\s*\("),
     "calls a vendor library ({0}): the work must be done by the program's own __global__ kernels"),
    (re.compile(r"\b(cudaStreamCreate\w*|getStreamFromPool|getStreamFromExternal|cudaStreamPerThread|"
                r"cudaStreamLegacy|CUDAStreamGuard|cudaStreamBeginCapture)\b"),
     "uses {0}: extra CUDA streams are not allowed (work on another stream escapes timing); launch on "
     "the current stream (the default of <<<grid, block>>>)"),
    (re.compile(r"\b(cudaLaunchKernel\w*|cuLaunchKernel\w*|cudaLaunchCooperativeKernel\w*|cudaGraphLaunch)\b"),
     "launches through {0}: launch kernels with <<<grid, block>>> (those launches are the ones counted)"),
    (re.compile(r"(cudaMemcpy\w*\([^;]*cudaMemcpyDeviceToHost|\.cpu\(\)|\b(?:torch|at|c10)::kCPU\b|"
                r"torch::Device\(\s*\"cpu)"),
     "moves data to the host ({0}): the work must be done on the device by the program's kernels"),
    (re.compile(r"\b(ks_internal_\w+)"),
     "uses {0}, the evaluator's launch accounting: launch with <<<grid, block>>> and let it count"),
    (re.compile(r"(std::thread|std::jthread|std::async|\bpthread_create\b|\bfork\s*\(|\bpopen\s*\(|\bsystem\s*\(|"
                r"\bexec[lv]p?e?\s*\()"),
     "uses {0}: threads and processes are not allowed"),
]

#: torch ops a CUDA program's C++ may run besides the evaluator's defaults
#: (allocation, views, copies): none
_ALLOWED_FLAG = re.compile(
    r"^(-O[0-3s]?|--?use_fast_math|-std=c\+\+(14|17|20)|-[DU][A-Za-z_]\w*(=[\w.+-]*)?|--expt-relaxed-constexpr|"
    r"--expt-extended-lambda|--extended-lambda|-lineinfo|-maxrregcount=\d+|--maxrregcount=\d+|-Xptxas=?[\w,=.-]+|"
    r"-ftz=(true|false)|-prec-div=(true|false)|-prec-sqrt=(true|false)|-fmad=(true|false)|-ffast-math|"
    r"-march=native|-funroll-loops|-w|-Wall|-Wno-[\w-]+|--ptxas-options=[\w,=.-]+|-restrict|--restrict|"
    r"-Xcompiler|-fopenmp)$"
)

#: architecture flags a program may pass; dropped (the build targets the device)
_ARCH_FLAG = re.compile(r"^(-arch=\S+|--gpu-architecture=\S+|-gencode=\S+|--generate-code=\S+|-code=\S+)$")

#: nvcc messages that may come from narrowing torch/extension.h to
#: torch/types.h (a name torch/all.h or pybind11 would have declared)
_MISSING_HEADER_HINT = re.compile(r"torch|\bat::|c10|pybind|\bpy::|namespace|TORCH_|AT_|"
                                  r"incomplete type|has no member")

_lock = threading.Lock()


class CompilationError(RuntimeError):
    """nvcc or the host compiler rejected the program's sources. The message
    lists the errors at the candidate's own lines, then the build log. (The
    evaluator classifies an exception of this name as a compile failure.)"""

    def __init__(self, message: str, diagnostics: Optional[list["Diagnostic"]] = None) -> None:
        super().__init__(message)
        self.diagnostics = diagnostics or []


# ---------------------------------------------------------------------------
# source analysis
# ---------------------------------------------------------------------------

_GLOBAL_RE = re.compile(r"__global__\b(?P<head>[^;{}()]*?)\b(?P<name>[A-Za-z_]\w*)\s*\(")
_LAUNCH_BOUNDS_RE = re.compile(r"__launch_bounds__\s*\([^()]*\)")
_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def _strip_comments(src: str) -> str:
    # keeps line numbers: a block comment becomes as many newlines
    return _COMMENT_RE.sub(lambda m: "\n" * m.group(0).count("\n"), src)


def global_kernels(cuda_source: str) -> list[str]:
    """Names of the ``__global__`` functions defined or declared in a CUDA
    source, in order of appearance (templates and ``__launch_bounds__``
    included)."""
    text = _LAUNCH_BOUNDS_RE.sub(" ", _strip_comments(cuda_source))
    names = [m.group("name") for m in _GLOBAL_RE.finditer(text)]
    return list(dict.fromkeys(n for n in names if n not in ("void", "__launch_bounds__")))


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def rewrite_launches(cuda_source: str) -> tuple[str, int]:
    """Every ``<<<grid, block[, smem[, stream]]>>>`` launch configuration
    routed through the counting helper: with no stream it gets PyTorch's
    current stream (so launches are captured in CUDA graphs and run on the
    timed stream, as an ATen kernel's do), with one it keeps it. Line
    structure is unchanged. Returns the new source and the launches
    rewritten."""
    out, pos, count = [], 0, 0
    while True:
        start = cuda_source.find("<<<", pos)
        if start < 0:
            out.append(cuda_source[pos:])
            break
        end = cuda_source.find(">>>", start + 3)
        if end < 0:
            out.append(cuda_source[pos:])
            break
        args = _split_top_level(cuda_source[start + 3:end])
        if len(args) == 2:
            args += [" 0", " ks_internal_stream()"]
        elif len(args) == 3:
            args.append(" ks_internal_stream()")
        elif len(args) == 4:
            args[3] = f" ks_internal_stream({args[3].strip()})"
        out.append(cuda_source[pos:start + 3] + ",".join(args))
        pos = end
        count += 1
    return "".join(out), count


def _join(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return "\n".join(str(v) for v in value)


def _function_list(functions: Any) -> list[tuple[str, str]]:
    if functions is None:
        return []
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(functions, dict):
        return [(str(k), str(v)) for k, v in functions.items()]
    return [(str(f), str(f)) for f in functions]


def _check_flags(flags: Sequence[str], what: str) -> list[str]:
    kept = []
    for flag in flags or []:
        for part in str(flag).split():
            if not part or _ARCH_FLAG.match(part):
                continue  # the build targets the device's own architecture
            if not _ALLOWED_FLAG.match(part):
                raise CompilationError(
                    f"load_inline: {what} flag {part!r} is not allowed here (allowed: optimisation levels, "
                    "-D/-U macros, --use_fast_math, -std=c++17/20, -lineinfo, -maxrregcount=N, -Xptxas options)")
            kept.append(part)
    return kept


# ---------------------------------------------------------------------------
# compiler diagnostics
# ---------------------------------------------------------------------------

@dataclass
class Diagnostic:
    file: str
    line: int
    column: Optional[int]
    kind: str  # "error", "warning", ...
    message: str
    context: list[str] = field(default_factory=list)  # the lines the compiler printed after it


_EDG_RE = re.compile(r"^(?P<file>[^\s:()][^():]*?)\((?P<line>\d+)\): (?P<kind>catastrophic error|error|warning|remark)"
                     r"(?: #\w+(?:-D)?)?: (?P<msg>.*)$")
_GCC_RE = re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<kind>fatal error|error|warning|note)"
                     r": (?P<msg>.*)$")
_OTHER_ERR_RE = re.compile(r"^(ptxas|nvlink|ld|collect2|nvcc)\b.*(error|fatal)|undefined reference to|"
                           r"^/usr/bin/ld:.*|^nvcc fatal", re.I)


def parse_diagnostics(log: str) -> list[Diagnostic]:
    """Errors and warnings in an nvcc / gcc log, in order, each with the
    source and caret lines printed under it."""
    diags: list[Diagnostic] = []
    for raw in log.splitlines():
        line = raw.rstrip()
        m = _EDG_RE.match(line) or _GCC_RE.match(line)
        if m:
            col = m.groupdict().get("col")
            diags.append(Diagnostic(m["file"].strip(), int(m["line"]), int(col) if col else None,
                                    m["kind"], m["msg"].strip()))
        elif diags and line.strip() and (raw.startswith(" ") or raw.startswith("\t")) and len(diags[-1].context) < 4:
            diags[-1].context.append(line)
        elif _OTHER_ERR_RE.search(line):
            diags.append(Diagnostic("", 0, None, "error", line.strip()))
    return diags


def _source_offsets(candidate_source: Optional[str]) -> dict[str, int]:
    """String constant -> the candidate line its first line is on."""
    if not candidate_source:
        return {}
    try:
        tree = parse_source(candidate_source)
    except SyntaxError:
        return {}
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) > 8:
            found.setdefault(node.value, node.lineno)
    return found


def _candidate_line(text: str, line: int, offsets: dict[str, int]) -> Optional[int]:
    """The candidate's line for line ``line`` of ``text`` (a source string
    the program assembled from its string constants), or None."""
    for const, lineno in offsets.items():
        idx = text.find(const)
        if idx < 0:
            continue
        first = text.count("\n", 0, idx) + 1
        if first <= line <= first + const.count("\n"):
            return lineno + line - first
    return None


def format_diagnostics(diags: list[Diagnostic], sources: dict[str, str], candidate_source: Optional[str],
                       limit: int = 12) -> str:
    """The errors (warnings when there are none) at the candidate's lines:
    ``candidate.py:LINE (cuda_sources line N): error: ...`` with the line."""
    offsets = _source_offsets(candidate_source)
    chosen = [d for d in diags if "error" in d.kind] or [d for d in diags if d.kind == "warning"]
    mine = [d for d in chosen if d.file in sources] or chosen
    mine = list({(d.file, d.line, d.message): d for d in mine}.values())  # a TU built twice reports twice
    lines = []
    for d in mine[:limit]:
        text = sources.get(d.file)
        if text is not None:
            where = f"{d.file} line {d.line}"
            at = _candidate_line(text, d.line, offsets)
            if at is not None:
                where = f"candidate.py:{at} ({where})"
            col = f", column {d.column}" if d.column else ""
            lines.append(f"{where}{col}: {d.kind}: {d.message}")
            src_lines = text.splitlines()
            if 1 <= d.line <= len(src_lines):
                lines.append(f"    {src_lines[d.line - 1].strip()}")
        else:
            lines.append(f"{d.file + ': ' if d.file else ''}{d.kind}: {d.message}")
        lines += [c for c in d.context if "detected during" in c or "instantiation" in c][:2]
    if len(mine) > limit:
        lines.append(f"... and {len(mine) - limit} more")
    return "\n".join(lines)


def _trim_log(log: str, keep: int = 60) -> str:
    rows = [r for r in log.splitlines() if r.strip()]
    interesting = [r for r in rows if CUDA_FILE in r or CPP_FILE in r or "error" in r.lower()]
    rows = interesting or rows
    return "\n".join(rows[:keep]) + (f"\n... ({len(rows) - keep} more lines)" if len(rows) > keep else "")


# ---------------------------------------------------------------------------
# the build
# ---------------------------------------------------------------------------

@dataclass
class BuildSpec:
    """What one load_inline call asks to build."""

    cpp_sources: str
    cuda_sources: str
    functions: list[tuple[str, str]]
    extra_cflags: list[str] = field(default_factory=list)
    extra_cuda_cflags: list[str] = field(default_factory=list)

    @classmethod
    def from_load_inline(cls, cpp_sources: Any = None, cuda_sources: Any = None, functions: Any = None,
                         extra_cflags: Any = None, extra_cuda_cflags: Any = None, extra_ldflags: Any = None,
                         extra_include_paths: Any = None, **_ignored: Any) -> "BuildSpec":
        cuda = _join(cuda_sources)
        if not cuda.strip():
            raise CompilationError("load_inline was called without cuda_sources: the CUDA backend builds "
                                   "__global__ kernels from cuda_sources")
        if any(str(f).strip() for f in (extra_ldflags or [])):
            raise CompilationError(f"load_inline: extra_ldflags {list(extra_ldflags)} are not allowed (no extra "
                                   "libraries: the work must be done by the program's own kernels)")
        if any(str(p).strip() for p in (extra_include_paths or [])):
            raise CompilationError("load_inline: extra_include_paths are not allowed (the program is self-contained)")
        return cls(_join(cpp_sources), cuda, _function_list(functions),
                   _check_flags(extra_cflags or [], "extra_cflags"),
                   _check_flags(extra_cuda_cflags or [], "extra_cuda_cflags"))

    def to_json(self) -> dict[str, Any]:
        return {"cpp_sources": self.cpp_sources, "cuda_sources": self.cuda_sources,
                "functions": [list(f) for f in self.functions], "extra_cflags": self.extra_cflags,
                "extra_cuda_cflags": self.extra_cuda_cflags}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "BuildSpec":
        return cls(str(data["cpp_sources"]), str(data["cuda_sources"]),
                   [(str(a), str(b)) for a, b in data["functions"]],
                   _check_flags(data.get("extra_cflags", []), "extra_cflags"),
                   _check_flags(data.get("extra_cuda_cflags", []), "extra_cuda_cflags"))


def normalize_arch(arch: str) -> str:
    """"9.0" / "90" / "sm_90" / "sm_90a" -> "90" (or "90a")."""
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
                raise RuntimeError(f"no CUDA device visible and ${ARCH_ENV} unset: cannot tell which architecture to build for")
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
        libs = [torch_lib] + [p for p in (os.path.join(cuda_home, "lib64"), os.path.join(cuda_home, "lib"))
                              if os.path.isdir(p)]
        includes = list(ce.include_paths()) + [os.path.join(cuda_home, "include")]
        tc = cls(nvcc=nvcc, cxx=cxx, arch=normalize_arch(arch), torch_version=torch.__version__,
                 cuda_version=str(torch.version.cuda), include_paths=includes,
                 python_include=sysconfig.get_paths()["include"], library_paths=libs, abi_flags=abi)
        tc.nvcc_version = _version_line([nvcc, "--version"])
        tc.cxx_version = _version_line([cxx, "--version"], first=True)
        return tc

    def identity(self) -> dict[str, Any]:
        recipe = hashlib.sha256("\0".join((_CU_PRELUDE, _PCH_HEADER, _FULL_HEADER, _HOST_LAUNCH_HELPER,
                                            _LOAD_INLINE_CUDA_HEAD, *self.cxx_flags(), *self.nvcc_flags()))
                                .encode()).hexdigest()[:12]
        return {"build": BUILD_VERSION, "recipe": recipe, "torch": self.torch_version, "cuda": self.cuda_version, "arch": self.arch,
                "nvcc": self.nvcc_version, "cxx": self.cxx_version, "abi": self.abi_flags,
                "python": sys.version.split()[0]}

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
        return ["-std=c++17", "-Xcompiler", "-fPIC", gencode, "-ccbin", self.cxx,
                "-DTORCH_API_INCLUDE_EXTENSION_H", *list(getattr(ce, "COMMON_NVCC_FLAGS", [])),
                *[f for f in self.abi_flags if f.startswith("-D")], *inc]

    def link_flags(self) -> list[str]:
        flags = []
        for p in self.library_paths:
            flags += [f"-L{p}", f"-Wl,-rpath,{p}"]
        for lib in ("c10", "c10_cuda", "torch_cpu", "torch_cuda", "torch", "torch_python", "cudart"):
            if any(os.path.exists(os.path.join(p, f"lib{lib}.so")) or
                   any(n.startswith(f"lib{lib}.so") for n in _listdir(p)) for p in self.library_paths):
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
    return "kernelsmith-cuda-build\n" + json.dumps({"toolchain": toolchain.identity(), "spec": spec.to_json()},
                                                   sort_keys=True)


def build_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


#: the binding unit's torch headers, precompiled: torch::Tensor and the
#: factories, the pybind11 casters and the current stream; not torch/all.h
#: (nn, optim, data), which torch/extension.h adds and a wrapper rarely needs
_PCH_HEADER = "#include <torch/types.h>\n#include <torch/python.h>\n#include <c10/cuda/CUDAStream.h>\n"
#: the binding unit's headers in the "full" build: what load_inline uses
_FULL_HEADER = "#include <torch/extension.h>\n#include <c10/cuda/CUDAStream.h>\n"


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
        proc = subprocess.run([toolchain.cxx, *toolchain.cxx_flags(), "-x", "c++-header", "ks_torch.h",
                               "-o", "ks_torch.h.gch"], cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError("precompiling torch/extension.h failed:\n" + proc.stderr[-3000:])
        shutil.rmtree(d, ignore_errors=True)
        os.rename(tmp, d)
    return header, time.monotonic() - started


_CU_PRELUDE = """#include <cuda.h>
#include <cuda_runtime.h>
extern unsigned long long ks_internal_launches;
cudaStream_t ks_internal_current_stream();
static inline cudaStream_t ks_internal_stream() { ++ks_internal_launches; return ks_internal_current_stream(); }
static inline cudaStream_t ks_internal_stream(cudaStream_t s) { ++ks_internal_launches; return s; }
"""
#: what load_inline puts before cuda_sources (so a source need not include it)
_LOAD_INLINE_CUDA_HEAD = "#include <torch/types.h>\n"

_TORCH_EXT_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]torch/extension\.h[>\"]", re.M)
_TORCH_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"](torch|ATen|c10|pybind11)/", re.M)
_TORCH_USE = re.compile(r"\b(torch|at|c10|pybind11|py)::|\bTensor\b|\bTORCH_\w+|\bAT_\w+|\bC10_\w+")


def cuda_translation_unit(cuda_sources: str, light: bool = True) -> tuple[str, bool]:
    """The .cu file nvcc compiles in the unsplit build: the counting prelude,
    torch's types (as load_inline gives), then the candidate's source
    (launches rewritten, ``torch/extension.h`` narrowed to ``torch/types.h``
    when ``light``), reported by nvcc as ``cuda_sources`` with the
    candidate's line numbers. Returns (text, narrowed)."""
    body, _ = rewrite_launches(cuda_sources)
    narrowed = False
    if light and _TORCH_EXT_INCLUDE.search(body):
        body = _TORCH_EXT_INCLUDE.sub("#include <torch/types.h>", body)
        narrowed = True
    return f'{_CU_PRELUDE}{_LOAD_INLINE_CUDA_HEAD}#line 1 "{CUDA_FILE}"\n{body}\n', narrowed


# -- the split build: device code without torch, host wrappers with the PCH --

@dataclass
class _Chunk:
    start: int
    end: int
    kind: str  # "pre", "func", "decl"

    def text(self, src: str) -> str:
        return src[self.start:self.end]


def _chunks(src: str) -> Optional[list[_Chunk]]:
    """Top-level items of a C++ source: preprocessor lines, function
    definitions, other declarations. None when it cannot tell (unbalanced)."""
    chunks: list[_Chunk] = []
    i, n, depth, start = 0, len(src), 0, None
    at_line_start = True
    while i < n:
        c = src[i]
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if c in " \t\r":
            i += 1
            continue
        if src.startswith("//", i):
            i = src.find("\n", i)
            i = n if i < 0 else i
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            if j < 0:
                return None
            i = j + 2
            continue
        if c == "#" and at_line_start and depth == 0 and start is None:
            j = i
            while True:
                k = src.find("\n", j)
                k = n if k < 0 else k
                if src[j:k].rstrip().endswith("\\"):
                    j = k + 1
                    continue
                break
            chunks.append(_Chunk(i, k, "pre"))
            i = k
            continue
        at_line_start = False
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            i = j + 1
            continue
        if start is None:
            start = i
        if c in "({[":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                return None
            if c == "}" and depth == 0:
                head = src[start:i]
                brace = head.find("{")
                before = head[:brace]
                if re.match(r"\s*(namespace|extern)\b", before):
                    return None  # items inside a block: not split
                is_func = "(" in before and not re.match(r"\s*(struct|class|union|enum|namespace|extern)\b", before) \
                    and "=" not in before.split("(")[0]
                if is_func:
                    chunks.append(_Chunk(start, i + 1, "func"))
                    start = None
        elif c == ";" and depth == 0:
            chunks.append(_Chunk(start, i + 1, "decl"))
            start = None
        i += 1
    if depth != 0 or start is not None:
        return None
    return chunks


def _blank(text: str) -> str:
    return "\n" * text.count("\n")


def _to_launch_calls(body: str) -> Optional[str]:
    """``k<<<a, b, c, d>>>(args)`` -> ``ks_launch(k, a, b, c, d, args)`` (after
    :func:`rewrite_launches`, so every configuration has 4 parts). None for a
    launch it cannot convert (a template kernel)."""
    out, pos = [], 0
    while True:
        start = body.find("<<<", pos)
        if start < 0:
            out.append(body[pos:])
            return "".join(out)
        m = re.search(r"([A-Za-z_][\w:]*)\s*$", body[pos:start])
        if not m or body[pos:start].rstrip().endswith(">"):
            return None
        name_start = pos + m.start(1)
        end = body.find(">>>", start)
        k = end + 3
        while k < len(body) and body[k] in " \t\n":
            k += 1
        if k >= len(body) or body[k] != "(":
            return None
        depth, j = 0, k
        while j < len(body):
            if body[j] == "(":
                depth += 1
            elif body[j] == ")":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if depth != 0:
            return None
        cfg, args = body[start + 3:end], body[k + 1:j]
        out.append(body[pos:name_start] + f"ks_launch({m.group(1)}, {cfg}" + (f", {args})" if args.strip() else ")"))
        pos = j + 1


def split_sources(cuda_sources: str) -> Optional[tuple[str, str]]:
    """(device part, host part) of a CUDA source whose torch-using code is
    all in host functions, each with the candidate's line numbers; None when
    the source does not split that way (it is then built as one nvcc unit).

    The device part keeps everything but the torch includes and the host
    functions that use torch; it compiles without torch's headers. The host
    part keeps the preprocessor lines, the plain declarations and the torch
    host functions (their launches turned into ``cudaLaunchKernel`` calls
    through the kernels' host stubs), with kernels and other functions as
    declarations; it compiles with the precompiled torch header."""
    src, _ = rewrite_launches(cuda_sources)
    chunks = _chunks(src)
    if not chunks:
        return None
    device, host, pos = [], [], 0
    torch_funcs = 0
    for ch in chunks:
        gap = src[pos:ch.start]
        device.append(gap)
        host.append(gap)
        pos = ch.end
        text = ch.text(src)
        if ch.kind == "pre":
            if _TORCH_INCLUDE.match(text):
                device.append(_blank(text))
                # torch/extension.h would add torch/all.h to the precompiled
                # headers (types + python); the full build keeps it
                host.append(_blank(text) if _TORCH_EXT_INCLUDE.match(text) else text)
            else:
                device.append(text)
                host.append(text)
            continue
        brace = text.find("{")
        head = text[:brace] if ch.kind == "func" else text
        is_device = bool(re.search(r"__global__|__device__|__constant__|__shared__|__managed__", head))
        if ch.kind == "func" and not is_device and _TORCH_USE.search(text):
            converted = _to_launch_calls(text)
            if converted is None or _TORCH_USE.search(head.split("(")[0]) and "template" in head:
                return None
            torch_funcs += 1
            device.append(_blank(text))
            host.append(converted)
            continue
        if _TORCH_USE.search(text):
            return None  # torch in device code or in a declaration: one unit
        device.append(text)
        if ch.kind == "func":
            if "__global__" in head and "template" in head or "__device__" in head and "__host__" not in head:
                host.append(_blank(text))  # device code only
            elif "__global__" not in head and (re.search(r"\b(static|inline|template)\b", head) or "__host__" in head):
                host.append(text)  # a helper each unit gets its own copy of
            else:
                decl = _LAUNCH_BOUNDS_RE.sub("", head)
                decl = re.sub(r"__global__|__host__|__forceinline__", "", decl).rstrip() + ";"
                host.append(decl + _blank(text[len(head):]))
        elif is_device:
            if re.search(r"__global__", text) and "template" not in text:
                host.append(re.sub(r"__global__", "", _LAUNCH_BOUNDS_RE.sub("", text)))
            else:
                host.append(_blank(text))
        else:
            host.append(text)
    device.append(src[pos:])
    host.append(src[pos:])
    if torch_funcs == 0:
        return None
    return "".join(device), "".join(host)


_HOST_LAUNCH_HELPER = """#include <cuda_runtime.h>
#include <tuple>
#include <utility>
#include <type_traits>
template <typename... P, typename... A, std::size_t... I>
static inline void ks_launch_impl(void (*k)(P...), dim3 g, dim3 b, std::size_t s, cudaStream_t st,
                                  std::index_sequence<I...>, A&&... a) {
  std::tuple<typename std::decay<P>::type...> values(std::forward<A>(a)...);
  void* args[sizeof...(P) + 1] = {(void*)&std::get<I>(values)..., nullptr};
  cudaLaunchKernel((const void*)k, g, b, args, s, st);
}
template <typename... P, typename... A>
static inline void ks_launch(void (*k)(P...), dim3 g, dim3 b, std::size_t s, cudaStream_t st, A&&... a) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  ks_launch_impl(k, g, b, s, st, std::index_sequence_for<P...>{}, std::forward<A>(a)...);
}
"""


def binding_translation_unit(spec: BuildSpec, module_name: str, pch: Optional[str],
                             host_part: Optional[str] = None, full: bool = False) -> str:
    """The host C++ file: torch's headers (precompiled when ``pch``; all of
    torch/extension.h when ``full``), the launch counter, the host part of a
    split CUDA source, the candidate's declarations and the bindings."""
    head = _FULL_HEADER if full else "" if pch else _PCH_HEADER
    defs = "\n".join(f'  m.def("{name}", torch::wrap_pybind_function({name}), {json.dumps(doc)});'
                     for name, doc in spec.functions)
    module = ""
    if spec.functions:
        module = (f'#line 1 "{BINDING_FILE}"\nPYBIND11_MODULE({module_name}, m) {{\n{defs}\n'
                  '  m.def("_ks_launch_count", []() { return ks_internal_launches; });\n}\n')
    split = ""
    if host_part is not None:
        split = (_HOST_LAUNCH_HELPER + "static inline cudaStream_t ks_internal_stream() { ++ks_internal_launches; "
                 "return ks_internal_current_stream(); }\nstatic inline cudaStream_t ks_internal_stream(cudaStream_t s) "
                 "{ ++ks_internal_launches; return s; }\n" + f'#line 1 "{CUDA_FILE}"\n{host_part}\n')
    cpp = spec.cpp_sources if full else _TORCH_EXT_INCLUDE.sub("", spec.cpp_sources)
    return (f"{head}unsigned long long ks_internal_launches = 0;\n"
            "cudaStream_t ks_internal_current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }\n"
            f'{split}#line 1 "{CPP_FILE}"\n{cpp}\n{module}')


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
    jobs = {name: subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for name, cmd in commands.items()}
    logs: dict[str, str] = {}
    readers = {name: threading.Thread(target=lambda n=name, p=p: logs.__setitem__(n, p.communicate()[0]), daemon=True)
               for name, p in jobs.items()}
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


def compile_extension(spec: BuildSpec, toolchain: Toolchain, out_dir: str, *,
                      pch_roots: Sequence[Optional[str]] = (), candidate_source: Optional[str] = None,
                      modes: Sequence[str] = ("split", "narrowed", "full")) -> BuildResult:
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
        failed = _run_pair(work, {
            "nvcc": [toolchain.nvcc, *toolchain.nvcc_flags(), *spec.extra_cuda_cflags, "-c", "cuda.cu", "-o", "cuda.o"],
            "c++": [toolchain.cxx, *toolchain.cxx_flags(), *extra_c, *(["-include", use_pch] if use_pch else []),
                    "-c", "main.cpp", "-o", "main.o"]}, stop_on_failure=mode == "split")
        if not failed:
            link = subprocess.run([toolchain.cxx, "-shared", "main.o", "cuda.o", "-o", module_name + ".so",
                                   *toolchain.link_flags()], cwd=work, capture_output=True, text=True)
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
            return BuildResult(so_path, module_name, key, seconds=time.monotonic() - started, mode=mode,
                               pch=use_pch is not None)
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
    which = " and ".join({"nvcc": "nvcc (cuda_sources)", "c++": "the host compiler (cpp_sources, host code, bindings)",
                          "link": "the linker"}[n] for n in failed)
    raise CompilationError(f"building the CUDA extension failed in {which} (build {'/'.join(tried)}):\n{summary}\n"
                           f"--- build log ---\n{_trim_log(log)}", diags)


def _default_pch_root() -> str:
    return os.environ.get(PCH_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "kernelsmith", "cuda-pch")


def build_extension(spec: BuildSpec, toolchain: Optional[Toolchain] = None, *,
                    candidate_source: Optional[str] = None) -> BuildResult:
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


# ---------------------------------------------------------------------------
# loading, launch accounting
# ---------------------------------------------------------------------------

class _Records:
    records: list[LaunchRecord] = []


class Extension:
    """What the candidate's ``load_inline`` returns: the extension's
    functions, each call run inside ``census_launch`` and counted."""

    def __init__(self, module: Any, kernels: list[str], names: list[str]) -> None:
        counter = getattr(module, "_ks_launch_count", None)
        self.__ks_kernels__ = list(kernels)
        # the census tells the program's own kernels from a library's by name
        _Census.kernel_names.update(kernels)
        for name in names:
            fn = getattr(module, name, None)
            if callable(fn):
                setattr(self, name, _wrap_function(name, fn, counter))

    def __repr__(self) -> str:
        return f"<CUDA extension: {', '.join(k for k in vars(self) if not k.startswith('__'))}>"


def _wrap_function(name: str, fn: Callable, counter: Optional[Callable[[], int]]) -> Callable:
    def call(*args: Any, **kwargs: Any) -> Any:
        before = counter() if counter is not None else 0
        with census_launch(name, [*args, *kwargs.values()]) as entry:
            result = fn(*args, **kwargs)
            launched = (counter() - before) if counter is not None else 1
            # the census links the kernels of this call to the program by
            # their declared names, up to this many (CUPTI does not link a
            # <<<>>> launch from an extension to the range around it)
            entry["device_kernels"] = launched
        if launched > 0:
            for record in list(_Records.records):
                record.kernels.append(f"cuda.{name}")
        if _Census.active and launched > 0:
            # outputs the C++ allocated are the kernels' memory too
            outs = result if isinstance(result, (tuple, list)) else [result]
            spans = [s for s in (_spans(o) for o in outs) if s is not None]
            if spans:
                _Census.launches.append({"kernel": name, "spans": [(a, n) for a, n, _ in spans], "crcs": None})
        return result

    call.__name__ = name
    call.__qualname__ = name
    return call


def _import_extension(result: BuildResult) -> Any:
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader(result.module_name, result.path)
    spec = importlib.util.spec_from_file_location(result.module_name, result.path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class _LoadInline:
    """State of the stand-in for ``torch.utils.cpp_extension.load_inline``."""

    candidate_source: Optional[str] = None
    builds: list[BuildResult] = []


def _load_inline(name: str = "", cpp_sources: Any = None, cuda_sources: Any = None, functions: Any = None,
                 **kwargs: Any) -> Extension:
    if kwargs.pop("is_python_module", True) is False:
        raise CompilationError("load_inline(is_python_module=False) is not supported: return the module")
    spec = BuildSpec.from_load_inline(cpp_sources=cpp_sources, cuda_sources=cuda_sources,
                                      functions=functions, **kwargs)
    result = build_extension(spec, candidate_source=_LoadInline.candidate_source)
    _LoadInline.builds.append(result)
    module = _import_extension(result)
    names = [n for n, _ in spec.functions] or [n for n in dir(module) if not n.startswith("_")]
    return Extension(module, global_kernels(spec.cuda_sources), names)


def install_load_inline() -> None:
    """Route ``torch.utils.cpp_extension.load_inline`` to this backend's
    build (once per process, before the integrity snapshot)."""
    from torch.utils import cpp_extension

    if getattr(cpp_extension.load_inline, "_kernelsmith_cuda", False):
        return

    def load_inline(*args: Any, **kwargs: Any) -> Extension:
        return _load_inline(*args, **kwargs)

    load_inline._kernelsmith_cuda = True  # type: ignore[attr-defined]
    cpp_extension.load_inline = load_inline


# ---------------------------------------------------------------------------
# static checks
# ---------------------------------------------------------------------------

def _string_values(node: ast.AST, names: dict[str, ast.AST], depth: int = 0) -> list[ast.Constant]:
    """String constants an argument expression is built from (names of
    module-level strings followed)."""
    if depth > 4:
        return []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node]
    if isinstance(node, ast.Name) and node.id in names:
        return _string_values(names[node.id], names, depth + 1)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [c for e in node.elts for c in _string_values(e, names, depth + 1)]
    if isinstance(node, ast.BinOp):
        return _string_values(node.left, names, depth + 1) + _string_values(node.right, names, depth + 1)
    if isinstance(node, ast.JoinedStr):
        return [v for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return []


def check_cuda_program(source: str) -> StaticReport:
    """The CUDA backend's static checks (the shared ones included)."""
    from ..evaluator.static import common_checks

    report, tree = common_checks(source)
    if tree is None:
        return report

    def at(node: ast.AST) -> str:
        return f"line {getattr(node, 'lineno', '?')}"

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for mod in mods:
                top = mod.split(".")[0]
                if top in FORBIDDEN_IMPORTS:
                    report.hacks.append(f"import of {mod} at {at(node)}: {FORBIDDEN_IMPORTS[top]}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("cpp_extension"):
                for a in node.names:
                    if a.name in ("load", "CUDAExtension", "CppExtension", "BuildExtension"):
                        report.errors.append(f"{a.name} at {at(node)}: build the kernels with load_inline(...) "
                                             "from strings in the program")
    names: dict[str, ast.AST] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            names.setdefault(node.targets[0].id, node.value)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and (dotted(n.func) or "").split(".")[-1] == "load_inline"]
    cuda_strings: list[ast.Constant] = []
    cpp_strings: list[ast.Constant] = []
    for call in calls:
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        positional = dict(zip(("name", "cpp_sources", "cuda_sources", "functions"), call.args))
        cuda = kw.get("cuda_sources", positional.get("cuda_sources"))
        cpp = kw.get("cpp_sources", positional.get("cpp_sources"))
        if cuda is None or (isinstance(cuda, ast.Constant) and cuda.value in (None, "", [])):
            report.hacks.append(f"load_inline at {at(call)} has no cuda_sources: the kernels must be CUDA "
                                "__global__ functions passed in cuda_sources")
        else:
            cuda_strings += _string_values(cuda, names)
        if cpp is not None:
            cpp_strings += _string_values(cpp, names)
        for flag_kw in ("extra_ldflags", "extra_include_paths"):
            value = kw.get(flag_kw)
            if value is not None:
                texts = [c.value for c in _string_values(value, names)]
                if any(t.strip() for t in texts):
                    report.hacks.append(f"{flag_kw}={texts} at {at(call)}: no extra libraries or headers; the "
                                        "work must be done by the program's own kernels")
    if not calls:
        report.hacks.append("the program does not build CUDA kernels: compile them with "
                            "torch.utils.cpp_extension.load_inline(cpp_sources=..., cuda_sources=..., functions=[...]) "
                            "and call them from ModelNew.forward")
    elif calls and not any(global_kernels(c.value) for c in cuda_strings):
        report.hacks.append("no __global__ kernel is defined in cuda_sources: forward must compute with the "
                            "program's own CUDA kernels")
    for const in cuda_strings + cpp_strings:
        text = _strip_comments(const.value)
        for pattern, why in SOURCE_HACKS:
            m = pattern.search(text)
            if m:
                line = const.lineno + text.count("\n", 0, m.start())
                report.hacks.append(f"the C++/CUDA source at line {line} " + why.format(m.group(1) if m.groups() else m.group(0)))
    report.hacks[:] = list(dict.fromkeys(report.hacks))
    return report


# ---------------------------------------------------------------------------
# the backend
# ---------------------------------------------------------------------------

class CudaBackend(Backend):
    name = "cuda"
    # only the evaluator's allocation / view / copy defaults run in forward
    default_allowed_torch_ops: frozenset = frozenset()
    supports_address_space_limit = False

    # -- parent ---------------------------------------------------------
    def static_check(self, source: str) -> StaticReport:
        return check_cuda_program(source)

    def worker_env(self, workdir: str, cpu_threads: Optional[int] = None) -> dict[str, str]:
        env = {LOCAL_ENV: os.path.join(workdir, ".ks_cuda"), "CUDA_CACHE_PATH": os.path.join(workdir, ".nv"),
               "TORCH_EXTENSIONS_DIR": os.path.join(workdir, ".torch_extensions")}
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
            raise RuntimeError(f"the cuda backend needs an NVIDIA GPU and a CUDA build of PyTorch (torch "
                               f"{torch.__version__}, CUDA {torch.version.cuda}, devices visible: 0)")
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
            backend="cuda", name=props.name, kind="gpu", vendor="NVIDIA",
            compute_capability=f"{props.major}.{props.minor}", arch=arch,
            compute_units=props.multi_processor_count, memory_gb=round(props.total_memory / 2**30, 1),
            driver=nvidia_driver(), versions=versions,
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


def cuda_prompt_tips(hw: HardwareInfo) -> str:
    """Advice for the system prompt; the device part from
    :meth:`CudaBackend.hardware_info` (no device name gives the generic part)."""
    tips = [
        "Write CUDA C++ in KernelBench's format: a string `cuda_sources` with your __global__ kernels and host "
        "wrappers taking and returning torch::Tensor, a string `cpp_sources` declaring those wrappers, and "
        "`ext = load_inline(name=..., cpp_sources=..., cuda_sources=..., functions=[...])` at module level; "
        "ModelNew.forward calls ext.<function>(...). Every output must be computed by your kernels.",
        "Launch with kernel<<<grid, block>>>(...) (or <<<grid, block, shared_bytes>>>): launches run on PyTorch's "
        "current stream. Do not create streams, call cuBLAS/cuDNN, or launch through the driver API.",
        "Allocate outputs in the wrapper (torch::empty(sizes, x.options())), check x.is_contiguous() or call "
        ".contiguous(), read sizes at run time (x.size(0), x.numel()): the program is checked on other shapes.",
        "Guard the tail (if (i < n)), use grid-stride loops for large tensors, accumulate reductions in float, "
        "and keep one thread block's shared memory within the device's limit.",
        "Compile errors come back with nvcc's messages at your program's lines; fix exactly those lines. "
        "Tunable launch parameters: `#define BLOCK 256  // tune: [128, 256, 512]` in the CUDA string, or "
        "`THREADS = 256  # tune: [128, 256, 512]` in Python, passed to the wrapper.",
        "No try/except, threads, NumPy or torch compute ops in forward or in the C++ wrappers; torch::empty, "
        "views and .contiguous() are fine.",
    ]
    if hw.name:
        cc = hw.compute_capability or "?"
        sm = hw.compute_units
        smem = hw.properties.get("shared_memory_per_block_optin_kb")
        l2 = hw.properties.get("l2_cache_mb")
        tips.append(
            f"Target: {hw.name} (compute capability {cc}"
            + (f", {sm} SMs" if sm else "")
            + (f", up to {smem} KiB shared memory per block with cudaFuncSetAttribute" if smem else "")
            + (f", {l2} MiB L2" if l2 else "")
            + f", built for {hw.arch or 'its architecture'}). Use 128-256 threads per block and at least "
            + (f"{2 * sm}" if sm else "two blocks per SM")
            + " blocks; vectorised loads (float4) on 16-byte aligned data; for matmuls tile through shared "
            "memory and use tensor cores (mma / wmma with half or bf16 inputs, float accumulation) when the "
            "task's tolerance allows."
        )
    return "\n".join(f"- {t}" for t in tips)


BACKEND = CudaBackend
