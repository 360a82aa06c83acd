"""Small helpers over Python ASTs, shared by the static checks (evaluator,
backends) and corpus curation."""

from __future__ import annotations

import ast
import threading
from typing import Optional


def dotted(node: ast.AST, through_subscripts: bool = False) -> Optional[str]:
    """'a.b.c' for a Name/Attribute chain, else None. With
    ``through_subscripts`` a subscript in the chain is looked through
    (``Generic[T]`` -> 'Generic', ``a[0].b`` -> 'a.b'), as base classes are
    read when curating."""
    parts = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif through_subscripts and isinstance(node, ast.Subscript):
            node = node.value
        else:
            break
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


#: CPython 3.11 does not make ast.parse safe to run in several threads at
#: once: now and then one fails with "SystemError: AST constructor recursion
#: depth mismatch" (python/cpython#106905). The evaluator's parent checks
#: sources in threads (one per evaluation in flight), serve builds tasks in
#: request threads: seen in a burst to serve and in the test suite. Every
#: parse of the package goes through this lock (microseconds to milliseconds
#: each; the parse itself was never parallel under the GIL).
_PARSE_LOCK = threading.Lock()


def parse(source: "str | bytes", filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """``ast.parse``, one thread at a time (above)."""
    with _PARSE_LOCK:
        return ast.parse(source, filename=filename, mode=mode)
