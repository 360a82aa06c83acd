"""The CUDA backend's static checks: the shared ones, then what a CUDA
program may import, how it calls ``load_inline`` and what its C++/CUDA
strings may use."""

from __future__ import annotations

import ast
import re

from ..._astutil import dotted
from ..base import StaticReport
from .sources import _strip_comments, global_kernels

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
    (
        re.compile(r"#\s*include\s*[<\"](cublas|cublasLt|cudnn|cufft|cusparse|cusolver|curand_kernel_host)"),
        "includes a vendor library header ({0}): the work must be done by the program's own __global__ kernels",
    ),
    (
        re.compile(r"\b(cublas\w*|cudnn\w*|cufft\w*)\s*\("),
        "calls a vendor library ({0}): the work must be done by the program's own __global__ kernels",
    ),
    (
        re.compile(
            r"\b(cudaStreamCreate\w*|getStreamFromPool|getStreamFromExternal|cudaStreamPerThread|"
            r"cudaStreamLegacy|CUDAStreamGuard|cudaStreamBeginCapture)\b"
        ),
        "uses {0}: extra CUDA streams are not allowed (work on another stream escapes timing); launch on "
        "the current stream (the default of <<<grid, block>>>)",
    ),
    (
        re.compile(r"\b(cudaLaunchKernel\w*|cuLaunchKernel\w*|cudaLaunchCooperativeKernel\w*|cudaGraphLaunch)\b"),
        "launches through {0}: launch kernels with <<<grid, block>>> (those launches are the ones counted)",
    ),
    (
        re.compile(
            r"(cudaMemcpy\w*\([^;]*cudaMemcpyDeviceToHost|\.cpu\(\)|\b(?:torch|at|c10)::kCPU\b|"
            r"torch::Device\(\s*\"cpu)"
        ),
        "moves data to the host ({0}): the work must be done on the device by the program's kernels",
    ),
    (
        re.compile(r"\b(ks_internal_\w+)"),
        "uses {0}, the evaluator's launch accounting: launch with <<<grid, block>>> and let it count",
    ),
    (
        re.compile(
            r"(std::thread|std::jthread|std::async|\bpthread_create\b|\bfork\s*\(|\bpopen\s*\(|\bsystem\s*\(|"
            r"\bexec[lv]p?e?\s*\()"
        ),
        "uses {0}: threads and processes are not allowed",
    ),
]


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
    # lazy: evaluator pulls in yaml, which backends.cuda.checks does not load on its own
    from ...evaluator.static import common_checks

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
                        report.errors.append(
                            f"{a.name} at {at(node)}: build the kernels with load_inline(...) "
                            "from strings in the program"
                        )
    names: dict[str, ast.AST] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            names.setdefault(node.targets[0].id, node.value)
    calls = [
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and (dotted(n.func) or "").split(".")[-1] == "load_inline"
    ]
    cuda_strings: list[ast.Constant] = []
    cpp_strings: list[ast.Constant] = []
    for call in calls:
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        positional = dict(zip(("name", "cpp_sources", "cuda_sources", "functions"), call.args))
        cuda = kw.get("cuda_sources", positional.get("cuda_sources"))
        cpp = kw.get("cpp_sources", positional.get("cpp_sources"))
        if cuda is None or (isinstance(cuda, ast.Constant) and cuda.value in (None, "", [])):
            report.hacks.append(
                f"load_inline at {at(call)} has no cuda_sources: the kernels must be CUDA "
                "__global__ functions passed in cuda_sources"
            )
        else:
            cuda_strings += _string_values(cuda, names)
        if cpp is not None:
            cpp_strings += _string_values(cpp, names)
        for flag_kw in ("extra_ldflags", "extra_include_paths"):
            value = kw.get(flag_kw)
            if value is not None:
                texts = [c.value for c in _string_values(value, names)]
                if any(t.strip() for t in texts):
                    report.hacks.append(
                        f"{flag_kw}={texts} at {at(call)}: no extra libraries or headers; the "
                        "work must be done by the program's own kernels"
                    )
    if not calls:
        report.hacks.append(
            "the program does not build CUDA kernels: compile them with "
            "torch.utils.cpp_extension.load_inline(cpp_sources=..., cuda_sources=..., functions=[...]) "
            "and call them from ModelNew.forward"
        )
    elif calls and not any(global_kernels(c.value) for c in cuda_strings):
        report.hacks.append(
            "no __global__ kernel is defined in cuda_sources: forward must compute with the program's own CUDA kernels"
        )
    for const in cuda_strings + cpp_strings:
        text = _strip_comments(const.value)
        for pattern, why in SOURCE_HACKS:
            m = pattern.search(text)
            if m:
                line = const.lineno + text.count("\n", 0, m.start())
                report.hacks.append(
                    f"the C++/CUDA source at line {line} " + why.format(m.group(1) if m.groups() else m.group(0))
                )
    report.hacks[:] = list(dict.fromkeys(report.hacks))
    return report
