"""Small helpers over Python ASTs, shared by the static checks (evaluator,
backends) and corpus curation."""
from __future__ import annotations

import ast
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
