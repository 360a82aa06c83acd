"""ast.parse is not thread-safe in CPython 3.11 (python/cpython#106905:
"SystemError: AST constructor recursion depth mismatch", seen in a burst to
serve and in the evaluator's parent, which checks sources in threads). The
package parses only through ``_astutil.parse``, which holds a lock. (The
race is rare, 2 bursts of 55 to serve: a stress test here passed with the
bare ast.parse too, so the guard is that no other call exists.)"""

from __future__ import annotations

import ast
from pathlib import Path

import kernelsmith

PACKAGE = Path(kernelsmith.__file__).resolve().parent


def test_the_package_parses_only_through_the_lock():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_astutil.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "parse"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "ast"
            ):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == [], f"ast.parse outside _astutil.parse: {offenders}"
