"""Issue 18's rule, kept by a test: everything that depends on the kernel
language lives behind the Backend interface, so no module of the package
outside ``backends/`` branches on a backend's name or knows a language's
names. Adding a backend then touches nothing outside ``backends/``.

The scan is over the AST, so docstrings, comments and help text may still
mention backends; what fails is code that compares with a backend's name
(``backend == "triton"``, ``hw.backend in ("opencl", ...)``), tests a
language's module or exception names (``module.startswith("triton.")``,
``name == "OpenCLError"``), or hard-codes a backend name as a default
(``backends.DEFAULT_BACKEND`` is the one place for that).
"""

from __future__ import annotations

import ast
from pathlib import Path

#: the package's source in this checkout (the installed copy may be older)
PACKAGE = Path(__file__).resolve().parents[1] / "python" / "kernelsmith"
BACKEND_NAMES = ("triton", "opencl", "cuda")
#: prefixes of a language's own names (``tl.float16``, ``triton.compiler``)
LANGUAGE_PREFIXES = ("triton", "opencl", "tl.")
#: string constants that equal a backend name as data, not as a choice of backend
ALLOWED = {
    # the library-version keys of HardwareInfo records written before it existed
    ("hardware.py", "_LEGACY_VERSIONS"),
    # the modules KernelBench-X's own task files import for their harness
    # (its data, dropped when a file is read: not a choice of backend)
    ("kernelbenchx.py", "_DROP_IMPORTS"),
    # the build-error texts per backend that results recorded before schema
    # 6 were re-classified by, used only to normalise such records on loading
    ("result.py", "_LEGACY_BUILD_ERROR_MARKERS"),
}


def _strings(node: ast.AST) -> list[str]:
    """The string constants of a literal or of a tuple/list/set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def _names_language(text: str) -> bool:
    low = text.lower()
    return low in ("triton", "opencl") or any(p in low for p in ("triton", "opencl")) or low.startswith("tl.")


def _names_backend(node: ast.AST) -> bool:
    """Whether an expression is (a name for) a backend or its name: ``backend``,
    ``cfg.backend``, ``backend.name``, ``self._backend``. A call such as
    ``backend.device()`` is a device, and ``"cuda"`` is also a torch device."""
    if isinstance(node, ast.Call):
        return False
    return "backend" in ast.unparse(node).lower()


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _assigned_name(parent: ast.AST) -> str:
    targets = parent.targets if isinstance(parent, ast.Assign) else [getattr(parent, "target", None)]
    return " ".join(ast.unparse(t) for t in targets if t is not None)


def violations(source: str, filename: str = "<module>") -> list[str]:
    """Where ``source`` names a backend or a language in code."""
    tree = ast.parse(source, filename=filename)
    docs = _docstrings(tree)
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: list[str] = []

    def flag(node: ast.AST, why: str) -> None:
        found.append(f"{filename}:{getattr(node, 'lineno', '?')}: {why}: {ast.unparse(node)[:120]}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for i, operand in enumerate(operands):
                others = operands[:i] + operands[i + 1 :]
                for text in _strings(operand):
                    if _names_language(text):
                        flag(node, f"compares with {text!r}")
                    elif text.lower() == "cuda" and any(_names_backend(o) for o in others):
                        flag(node, "compares a backend with 'cuda'")
        elif isinstance(node, ast.match_case):
            for sub in ast.walk(node.pattern):
                if isinstance(sub, ast.MatchValue) and any(t.lower() in BACKEND_NAMES for t in _strings(sub.value)):
                    flag(sub.value, "matches a backend name")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
        ):
            for arg in node.args:
                for text in _strings(arg):
                    if text.lower().startswith(LANGUAGE_PREFIXES):
                        flag(node, f"tests for a language's names ({text!r})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value.lower()
            if text not in BACKEND_NAMES:
                continue
            parent = parents.get(id(node))
            owner = parent
            while owner is not None and not isinstance(owner, (ast.Assign, ast.AnnAssign, ast.stmt)):
                owner = parents.get(id(owner))
            if (
                isinstance(owner, (ast.Assign, ast.AnnAssign))
                and (Path(filename).name, _assigned_name(owner)) in ALLOWED
            ):
                continue
            if text != "cuda":
                # "triton" and "opencl" have no meaning in this package but a backend's
                flag(node, f"names the backend {node.value!r}")
            elif (
                isinstance(parent, ast.keyword)
                and parent.arg in ("backend", "default")
                and (parent.arg == "backend" or "backend" in ast.unparse(parents.get(id(parent), node)))
            ):
                flag(node, "defaults to the backend 'cuda'")
            elif isinstance(owner, (ast.Assign, ast.AnnAssign)) and "backend" in _assigned_name(owner).lower():
                flag(node, "defaults to the backend 'cuda'")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            for arg, default in pairs:
                if "backend" in arg.arg and any(t.lower() in BACKEND_NAMES for t in _strings(default)):
                    flag(default, f"argument {arg.arg} defaults to a backend name")
    return list(dict.fromkeys(found))


def package_violations() -> list[str]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "backends":
            continue
        out += violations(path.read_text(encoding="utf-8"), str(rel))
    return out


def test_no_module_outside_backends_branches_on_a_backend():
    found = package_violations()
    assert not found, (
        "code outside kernelsmith/backends/ names a backend or a kernel language; ask the Backend "
        "instead (docs/architecture.md, 'How to add a backend'):\n" + "\n".join(found)
    )


def test_the_scan_finds_what_the_rule_forbids():
    """Each shape of the old code that issue 18 moved behind the interface,
    and the ways of writing a branch on a backend, is found; device strings
    and mentions in docstrings are not."""
    bad = {
        "cmp": 'if cfg.backend == "triton":\n    pass\n',
        "cmp_in": 'ok = backend.name in ("opencl", "cuda")\n',
        "cmp_cuda": 'if backend.name == "cuda":\n    pass\n',
        "not_eq": 'if "triton" != task.backend:\n    pass\n',
        "exc_name": 'compile = type(exc).__name__ == "OpenCLError"\n',
        "module": 'compile = module.startswith("triton.compiler")\n',
        "dtype": 'low = d.startswith("tl.") or d.startswith("triton.")\n',
        "match": 'match backend:\n    case "opencl":\n        pass\n',
        "field": 'class C:\n    backend: str = "triton"\n',
        "arg": 'def f(backend="cuda"):\n    pass\n',
        "kwarg": 'def f(*, backend: str = "opencl"):\n    pass\n',
        "argparse": 'p.add_argument("--backend", default="triton")\n',
        "argparse_cuda": 'p.add_argument("--backend", default="cuda")\n',
    }
    for name, source in bad.items():
        assert violations(source, name), name
    fine = (
        '"""Triton, OpenCL and CUDA backends: triton == x in a docstring."""\n'
        'if backend.device() == "cuda":\n    pass\n'
        'on_gpu = device == "cuda" or backend.timing_device() == "cuda"\n'
        'x = torch.zeros(1, device="cuda")\n'
        'stream = "cuda" in name.split(".")\n'
        'help_text = "evaluation backend (triton, opencl, ...)"\n'
        "backend = get_backend(DEFAULT_BACKEND)\n"
    )
    assert violations(fine) == []


def test_what_moved_behind_the_interface_answers_as_before():
    """The language-specific answers now come from the backends: the generic
    defaults know no language, each backend adds its own."""
    from kernelsmith.backends import DEFAULT_BACKEND, get_backend
    from kernelsmith.backends.base import device_family
    from kernelsmith.evaluator.tracebacks import classify_exception
    from kernelsmith.hardware import HardwareInfo
    from kernelsmith.task import TaskConfig

    triton, opencl = get_backend("triton"), get_backend("opencl")
    assert TaskConfig().backend == DEFAULT_BACKEND

    interpreter = HardwareInfo(backend="triton", kind="interpreter", name="CPU (x86_64), Triton interpreter")
    assert triton.hardware_family(interpreter) == "triton_interpreter"
    assert "TRITON_INTERPRET" in triton.hardware_notes(interpreter)
    assert device_family(interpreter) == "generic" and opencl.hardware_family(interpreter) == "generic"
    h200 = HardwareInfo(name="NVIDIA H200", kind="gpu", compute_capability="9.0")
    assert triton.hardware_family(h200) == opencl.hardware_family(h200) == device_family(h200) == "hopper"

    class OpenCLError(RuntimeError):
        code = -11

    class InterpreterError(RuntimeError):
        pass

    build = OpenCLError("clBuildProgram failed: CL_BUILD_PROGRAM_FAILURE (-11)")
    assert opencl.classify_exception(build) == "compile"
    assert classify_exception(build) == triton.classify_exception(build) == "runtime"
    kernel_bug = InterpreterError("name 'undefined' is not defined")
    assert triton.classify_exception(kernel_bug) == "compile" and opencl.classify_exception(kernel_bug) == "runtime"
    assert classify_exception(SyntaxError("bad")) == opencl.classify_exception(SyntaxError("bad")) == "compile"

    cast = "x = torch.zeros(3).to(tl.float8e4nv)\n"
    assert any("tl.float8e4nv" in w for w in triton.static_check(cast).warnings)
    from kernelsmith.evaluator.static import common_checks

    assert not any("tl." in w for w in common_checks(cast)[0].warnings)
    assert any("torch.float16" in w for w in common_checks("x = y.to(torch.float16)\n")[0].warnings)
