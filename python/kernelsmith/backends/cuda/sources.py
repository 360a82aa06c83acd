"""The CUDA backend's reading of a program's sources: its ``__global__``
kernels, its launches routed through the counting helper, what a
``load_inline`` call asks to build (:class:`BuildSpec`), and the translation
units the build compiles (one nvcc unit, or device code without torch plus
host wrappers with the precompiled header)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from .diagnostics import BINDING_FILE, CPP_FILE, CUDA_FILE, CompilationError

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
        args = _split_top_level(cuda_source[start + 3 : end])
        if len(args) == 2:
            args += [" 0", " ks_internal_stream()"]
        elif len(args) == 3:
            args.append(" ks_internal_stream()")
        elif len(args) == 4:
            args[3] = f" ks_internal_stream({args[3].strip()})"
        out.append(cuda_source[pos : start + 3] + ",".join(args))
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
                    "-D/-U macros, --use_fast_math, -std=c++17/20, -lineinfo, -maxrregcount=N, -Xptxas options)"
                )
            kept.append(part)
    return kept


@dataclass
class BuildSpec:
    """What one load_inline call asks to build."""

    cpp_sources: str
    cuda_sources: str
    functions: list[tuple[str, str]]
    extra_cflags: list[str] = field(default_factory=list)
    extra_cuda_cflags: list[str] = field(default_factory=list)

    @classmethod
    def from_load_inline(
        cls,
        cpp_sources: Any = None,
        cuda_sources: Any = None,
        functions: Any = None,
        extra_cflags: Any = None,
        extra_cuda_cflags: Any = None,
        extra_ldflags: Any = None,
        extra_include_paths: Any = None,
        **_ignored: Any,
    ) -> "BuildSpec":
        cuda = _join(cuda_sources)
        if not cuda.strip():
            raise CompilationError(
                "load_inline was called without cuda_sources: the CUDA backend builds "
                "__global__ kernels from cuda_sources"
            )
        if any(str(f).strip() for f in (extra_ldflags or [])):
            raise CompilationError(
                f"load_inline: extra_ldflags {list(extra_ldflags)} are not allowed (no extra "
                "libraries: the work must be done by the program's own kernels)"
            )
        if any(str(p).strip() for p in (extra_include_paths or [])):
            raise CompilationError("load_inline: extra_include_paths are not allowed (the program is self-contained)")
        return cls(
            _join(cpp_sources),
            cuda,
            _function_list(functions),
            _check_flags(extra_cflags or [], "extra_cflags"),
            _check_flags(extra_cuda_cflags or [], "extra_cuda_cflags"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "cpp_sources": self.cpp_sources,
            "cuda_sources": self.cuda_sources,
            "functions": [list(f) for f in self.functions],
            "extra_cflags": self.extra_cflags,
            "extra_cuda_cflags": self.extra_cuda_cflags,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "BuildSpec":
        return cls(
            str(data["cpp_sources"]),
            str(data["cuda_sources"]),
            [(str(a), str(b)) for a, b in data["functions"]],
            _check_flags(data.get("extra_cflags", []), "extra_cflags"),
            _check_flags(data.get("extra_cuda_cflags", []), "extra_cuda_cflags"),
        )


# ---------------------------------------------------------------------------
# translation units
# ---------------------------------------------------------------------------

#: the binding unit's torch headers, precompiled: torch::Tensor and the
#: factories, the pybind11 casters and the current stream; not torch/all.h
#: (nn, optim, data), which torch/extension.h adds and a wrapper rarely needs
_PCH_HEADER = "#include <torch/types.h>\n#include <torch/python.h>\n#include <c10/cuda/CUDAStream.h>\n"
#: the binding unit's headers in the "full" build: what load_inline uses
_FULL_HEADER = "#include <torch/extension.h>\n#include <c10/cuda/CUDAStream.h>\n"


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
        return src[self.start : self.end]


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
                is_func = (
                    "(" in before
                    and not re.match(r"\s*(struct|class|union|enum|namespace|extern)\b", before)
                    and "=" not in before.split("(")[0]
                )
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
        cfg, args = body[start + 3 : end], body[k + 1 : j]
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
        gap = src[pos : ch.start]
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
                host.append(decl + _blank(text[len(head) :]))
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


def binding_translation_unit(
    spec: BuildSpec, module_name: str, pch: Optional[str], host_part: Optional[str] = None, full: bool = False
) -> str:
    """The host C++ file: torch's headers (precompiled when ``pch``; all of
    torch/extension.h when ``full``), the launch counter, the host part of a
    split CUDA source, the candidate's declarations and the bindings."""
    head = _FULL_HEADER if full else "" if pch else _PCH_HEADER
    defs = "\n".join(
        f'  m.def("{name}", torch::wrap_pybind_function({name}), {json.dumps(doc)});' for name, doc in spec.functions
    )
    module = ""
    if spec.functions:
        module = (
            f'#line 1 "{BINDING_FILE}"\nPYBIND11_MODULE({module_name}, m) {{\n{defs}\n'
            '  m.def("_ks_launch_count", []() { return ks_internal_launches; });\n}\n'
        )
    split = ""
    if host_part is not None:
        split = (
            _HOST_LAUNCH_HELPER + "static inline cudaStream_t ks_internal_stream() { ++ks_internal_launches; "
            "return ks_internal_current_stream(); }\nstatic inline cudaStream_t ks_internal_stream(cudaStream_t s) "
            "{ ++ks_internal_launches; return s; }\n" + f'#line 1 "{CUDA_FILE}"\n{host_part}\n'
        )
    cpp = spec.cpp_sources if full else _TORCH_EXT_INCLUDE.sub("", spec.cpp_sources)
    return (
        f"{head}unsigned long long ks_internal_launches = 0;\n"
        "cudaStream_t ks_internal_current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }\n"
        f'{split}#line 1 "{CPP_FILE}"\n{cpp}\n{module}'
    )
