"""A second timing shape for a KernelBench-style reference, where the module
allows one (issue 30: "is it fast on the shapes that matter, or on one?").

A KernelBench file times ``get_inputs`` alone, so a kernel tuned to that one
shape is rewarded as if it were fast everywhere. ``kernelsmith bench`` gives
each such task a second timing shape (``TaskConfig.timing_shapes``, docs/
evaluator.md "Timing shapes"): ``get_inputs_half``, the module's own
``get_inputs`` with its leading sizes halved. Which sizes: the module-level
integer constants that ``get_inputs`` passes as the *first* size of a
tensor it makes (``torch.randn(batch_size, dim)``, ``torch.rand(M, K)``) and
that nothing else in the file reads (not ``get_init_inputs``, not the
model's class, no other function): a batch or row count that the model
was not built for. A module with none (every size also shapes the model,
or the sizes are literals) keeps ``get_inputs`` alone. Nothing here runs the
module: the file is read as text (its AST).
"""

from __future__ import annotations

import ast
from typing import Optional

from ._astutil import parse

HALF = "get_inputs_half"


def _constants(tree: ast.Module) -> dict[str, int]:
    """Module-level ``name = 8`` and ``a, b = 8, 16``."""
    out: dict[str, int] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        pairs = [(target, value)]
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            pairs = list(zip(target.elts, value.elts))
        for name, const in pairs:
            if isinstance(name, ast.Name) and isinstance(const, ast.Constant) and type(const.value) is int:
                out[name.id] = const.value
    return out


def _is_constant_assignment(node: ast.stmt) -> bool:
    value = getattr(node, "value", None)
    return isinstance(node, ast.Assign) and (
        isinstance(value, ast.Constant)
        or (isinstance(value, ast.Tuple) and all(isinstance(e, ast.Constant) for e in value.elts))
    )


def _leading_sizes(fn: ast.FunctionDef) -> set[str]:
    """Names passed as the first size of a call in ``fn``: ``f(name, ...)``
    or ``f((name, ...))`` / ``f([name, ...])``."""
    found: set[str] = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        first = node.args[0]
        if isinstance(first, (ast.Tuple, ast.List)) and first.elts:
            first = first.elts[0]
        if isinstance(first, ast.Name):
            found.add(first.id)
    return found


def halvable_sizes(source: str) -> list[str]:
    """The module constants :data:`HALF` halves (see the module's doc), in
    the file's order; empty where the module allows no second shape."""
    try:
        tree = parse(source)
    except SyntaxError:
        return []
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    get_inputs = functions.get("get_inputs")
    if get_inputs is None or HALF in functions:
        return []
    constants = _constants(tree)
    candidates = {n for n in _leading_sizes(get_inputs) if constants.get(n, 0) >= 2}
    read_elsewhere: set[str] = set()
    for node in tree.body:
        if node is get_inputs or _is_constant_assignment(node):
            continue
        read_elsewhere |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return [n for n in constants if n in candidates and n not in read_elsewhere]


def with_half_shape(source: str) -> Optional[str]:
    """``source`` with :data:`HALF` appended, or None where the module
    allows no second shape."""
    names = halvable_sizes(source)
    if not names:
        return None
    return (
        source.rstrip("\n") + "\n\n\n"
        f"def {HALF}():\n"
        f'    """kernelsmith bench: get_inputs with {", ".join(names)} halved, a second timing shape"""\n'
        "    _ks_g = globals()\n"
        f"    _ks_saved = {{_ks_k: _ks_g[_ks_k] for _ks_k in {tuple(names)!r}}}\n"
        "    _ks_g.update({_ks_k: max(1, _ks_v // 2) for _ks_k, _ks_v in _ks_saved.items()})\n"
        "    try:\n"
        "        return get_inputs()\n"
        "    finally:\n"
        "        _ks_g.update(_ks_saved)\n"
    )
