"""Backend-independent static checks over a candidate's AST.

These find what no honest kernel program needs: a ``try`` that could fall
back to the reference, threads and processes, extra CUDA streams, patching of
modules (timers, events, torch functions), harness introspection, use of the
reference ``Model``. Backends add their own checks (e.g. "defines a Triton
kernel", and which of the language's dtypes lower precision) on top; see
:func:`common_checks`.

Parsing is safe on untrusted source: ``ast.parse`` never executes it.
"""

from __future__ import annotations

import ast
from typing import Callable, Optional

from .._astutil import dotted
from ..backends.base import StaticReport
from .._astutil import parse as parse_source

#: modules whose import is a hack: concurrency, harness introspection
FORBIDDEN_IMPORTS = {
    "threading": "starts threads",
    "_thread": "starts threads",
    "multiprocessing": "starts processes",
    "concurrent": "starts threads or processes",
    "subprocess": "starts processes",
    "asyncio": "runs work concurrently",
    "gc": "introspects the harness through the garbage collector",
    "inspect": "introspects the harness's frames",
    "signal": "installs signal handlers",
    "importlib": "imports modules dynamically",
    "reference": "imports the reference implementation",
}

#: attribute names that create or switch CUDA streams
STREAM_ATTRS = {"Stream", "ExternalStream", "stream", "set_stream", "StreamContext"}

#: torch ops whose only purpose is lowering precision (warnings, not hacks)
LOWERING_METHODS = {"half", "bfloat16"}
LOWERING_DTYPES = {"float16", "half", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8"}


def torch_lowers_precision(name: str) -> bool:
    """True when ``name`` (a dotted call argument) is a low-precision torch dtype."""
    return name.startswith("torch.") and name.split(".")[-1] in LOWERING_DTYPES


def _root(node: ast.AST) -> Optional[str]:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def parse_candidate(source: str, report: StaticReport, filename: str = "candidate.py") -> Optional[ast.Module]:
    try:
        return parse_source(source, filename=filename)
    except SyntaxError as exc:
        line = (exc.text or "").rstrip("\n")
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        report.errors.append(
            f"SyntaxError: {exc.msg} at {where}"
            + (f":\n    {line}" if line else "")
            + "\nFix the syntax; the program must be a complete Python module."
        )
        return None


def imported_modules(tree: ast.Module) -> dict[str, str]:
    """Local alias -> full module name, for every import in the module."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def _at(node: ast.AST) -> str:
    return f"line {getattr(node, 'lineno', '?')}"


def _model_new_errors(tree: ast.Module, report: StaticReport) -> dict[str, ast.ClassDef]:
    """The program's ModelNew is there (a class, or a name bound at the top
    level) and a class of it has a forward; the program's top-level classes."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    if "ModelNew" not in classes and "ModelNew" not in {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }:
        report.errors.append(
            "No class ModelNew found. Define `class ModelNew(nn.Module)` with the same __init__ "
            "arguments and forward signature as the reference Model."
        )
    elif "ModelNew" in classes:
        cls = classes["ModelNew"]
        if not any(isinstance(n, ast.FunctionDef) and n.name == "forward" for n in cls.body) and not cls.bases:
            report.errors.append("ModelNew defines no forward method.")
    return classes


def _judge_node(
    node: ast.AST,
    report: StaticReport,
    modules: set[str],
    classes: dict[str, ast.ClassDef],
    lowers_precision: Callable[[str], bool],
) -> None:
    """What one node of the program's tree adds to the report."""
    hacks = report.hacks
    if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
        hacks.append(
            f"try/except at {_at(node)}: exception handlers can hide a fallback to the reference; let errors propagate"
        )
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        for name in names:
            top = name.split(".")[0]
            if top in FORBIDDEN_IMPORTS:
                hacks.append(f"import of {name} at {_at(node)}: {FORBIDDEN_IMPORTS[top]}, which is not allowed")
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "contextlib":
            if any(a.name == "suppress" for a in node.names):
                hacks.append(f"contextlib.suppress at {_at(node)}: suppressing errors can hide a fallback")
    elif isinstance(node, ast.Attribute):
        name = dotted(node) or ""
        if node.attr in STREAM_ATTRS and ("cuda" in name.split(".") or name.startswith("torch.")):
            hacks.append(
                f"{name} at {_at(node)}: extra CUDA streams are not allowed (work on other streams escapes timing)"
            )
        elif node.attr in ("_getframe", "f_back", "f_globals", "f_locals", "__subclasses__", "__globals__"):
            hacks.append(f"{name} at {_at(node)}: introspecting the harness is not allowed")
        elif name in ("sys.modules", "sys._current_frames", "builtins.__dict__"):
            hacks.append(f"{name} at {_at(node)}: introspecting the harness is not allowed")
        elif name == "contextlib.suppress":
            hacks.append(f"contextlib.suppress at {_at(node)}: suppressing errors can hide a fallback")
    elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for target in targets:
            for t in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                if isinstance(t, (ast.Attribute, ast.Subscript)) and _root(t) in modules:
                    hacks.append(
                        f"assignment to {dotted(t) or ast.unparse(t)} at {_at(node)}: patching modules "
                        "(timers, events, torch functions) is not allowed"
                    )
                elif isinstance(t, ast.Name) and t.id == "__builtins__":
                    hacks.append(f"assignment to __builtins__ at {_at(node)} is not allowed")
    elif isinstance(node, ast.Call):
        fname = dotted(node.func) or ""
        if fname in ("setattr", "delattr") and node.args and _root(node.args[0]) in modules:
            hacks.append(f"{fname}() on module {dotted(node.args[0])} at {_at(node)}: patching modules is not allowed")
        if fname in ("__import__", "eval", "exec", "compile", "globals", "vars"):
            hacks.append(f"{fname}() at {_at(node)}: dynamic code and namespace access are not allowed")
        if isinstance(node.func, ast.Attribute) and node.func.attr in LOWERING_METHODS:
            report.warnings.append(f".{node.func.attr}() at {_at(node)} lowers precision")
        for arg in list(node.args) + [k.value for k in node.keywords]:
            d = dotted(arg) or ""
            if d and lowers_precision(d):
                report.warnings.append(f"cast to {d} at {_at(node)} lowers precision")
    elif (
        isinstance(node, ast.Name) and node.id == "Model" and isinstance(node.ctx, ast.Load) and "Model" not in classes
    ):
        # a program may carry its own copy of the reference class; that
        # copy computes with torch ops, which the runtime guard rejects
        hacks.append(f"use of the reference Model at {_at(node)}: the candidate must not call the reference")


def common_checks(
    source: str,
    report: Optional[StaticReport] = None,
    lowers_precision: Optional[Callable[[str], bool]] = None,
) -> tuple[StaticReport, Optional[ast.Module]]:
    """Checks every backend wants. Returns the report and the tree (None on a syntax error).
    ``lowers_precision``: whether a dotted call argument is a low-precision
    dtype, a cast the report warns about (default: torch's dtypes; a backend
    adds its language's)."""
    lowers_precision = lowers_precision or torch_lowers_precision
    report = report or StaticReport()
    tree = parse_candidate(source, report)
    if tree is None:
        return report, None
    classes = _model_new_errors(tree, report)
    modules = set(imported_modules(tree))
    for node in ast.walk(tree):
        _judge_node(node, report, modules, classes, lowers_precision)
    # de-duplicate while keeping order
    report.hacks[:] = list(dict.fromkeys(report.hacks))
    report.warnings[:] = list(dict.fromkeys(report.warnings))
    return report, tree
