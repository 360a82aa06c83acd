"""Imports of the package's own modules sit at the module's top (issue 28:
layering hidden in function bodies). An import inside a function or method
stays only with a ``# lazy: <why>`` comment on its line or the line before
(an import cycle at load, a light module kept free of torch, ``kernelsmith
--help`` kept fast, ...): the reason is written where the import is."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "kernelsmith"
MARK = "# lazy:"


def _is_own(node: ast.Import | ast.ImportFrom) -> bool:
    """An import of a kernelsmith module: relative, or absolute under kernelsmith."""
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "kernelsmith"
    return any(alias.name.split(".")[0] == "kernelsmith" for alias in node.names)


def _in_function_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Imports of kernelsmith modules anywhere inside a function's body
    (methods, nested functions and lambdas included)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)) and _is_own(child):
                found.append(child)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return found


def _reason(lines: list[str], node: ast.Import | ast.ImportFrom) -> str | None:
    """The ``# lazy:`` reason on the import's lines or the line before, or None."""
    for number in range(node.lineno - 1, (node.end_lineno or node.lineno) + 1):
        if 1 <= number <= len(lines) and MARK in lines[number - 1]:
            return lines[number - 1].split(MARK, 1)[1].strip()
    return None


def unmarked(source: str, filename: str = "<source>") -> list[str]:
    """``filename:line`` of each in-function import of a kernelsmith module
    with no (or an empty) ``# lazy:`` reason."""
    lines = source.splitlines()
    return [
        f"{filename}:{node.lineno}"
        for node in _in_function_imports(ast.parse(source, filename))
        if not _reason(lines, node)
    ]


def test_the_walker_finds_an_unmarked_import_in_a_function() -> None:
    source = (
        "import os\n"
        "from .task import Task\n"  # top: fine
        "def f():\n"
        "    import json\n"  # not ours: fine
        "    from .evaluator import Evaluator\n"  # line 5: unmarked
        "    from ..task import Task  # lazy: cycle a <-> b\n"
        "    # lazy: keeps the CLI light\n"
        "    import kernelsmith.evolve\n"
        "class C:\n"
        "    def m(self):\n"
        "        import kernelsmith.report as r\n"  # line 11: unmarked, in a method
        "        g = lambda: __import__('x')\n"
        "        def inner():\n"
        "            from . import (\n"  # line 14: unmarked, nested, several lines
        "                cli)\n"
        "        from . import config  # lazy:\n"  # line 16: a mark with no reason
    )
    assert unmarked(source, "m.py") == ["m.py:5", "m.py:11", "m.py:14", "m.py:16"]


def test_the_walker_accepts_marked_and_top_level_imports() -> None:
    source = (
        "from . import a\n"
        "try:\n"
        "    from . import b\n"
        "except ImportError:\n"
        "    b = None\n"
        "def f():\n"
        "    from . import (c,  # lazy: cycle c <-> this\n"
        "                   d)\n"
    )
    assert unmarked(source) == []


def test_every_in_function_import_of_the_package_says_why() -> None:
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        missing += unmarked(path.read_text(), str(path.relative_to(PACKAGE)))
    assert not missing, (
        "imports of kernelsmith modules inside a function with no '# lazy: <why>' comment "
        "(move them to the module's top, or say why they cannot be): " + ", ".join(missing)
    )
