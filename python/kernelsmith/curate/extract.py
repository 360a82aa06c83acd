"""Extract ``nn.Module`` classes from a Python file as self-contained programs.

For each module class the file's top-level statements it needs are found
recursively (helper functions, constants and other module-level assignments,
other classes, base classes), emitted in their original order after the
imports whose names are used, and the class is renamed ``Model``. A class that
uses a name the file does not define (a relative or same-repository import, a
star import, a name bound at run time) cannot be made self-contained: it is
counted with the reason and dropped.
"""
from __future__ import annotations

import ast
import builtins
import copy
import hashlib
import importlib.util
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

BUILTIN_NAMES = set(dir(builtins)) | {"__file__", "__name__", "__class__", "__doc__", "__spec__", "__builtins__"}
# torch.nn classes without a forward of their own: a subclass must define it
# (every other torch.nn layer class has one that a subclass may inherit).
NO_FORWARD = {"Module", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"}


@dataclass
class Extracted:
    repo: str
    path: str
    class_name: str
    line: int
    source: str = ""  # self-contained program with class Model (empty when dropped)
    status: str = "ok"  # "ok" or a drop reason (see REASONS in pipeline)
    detail: str = ""
    inlined: list[str] = field(default_factory=list)  # top-level names pulled in besides the class

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _dotted(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    if isinstance(node, ast.Subscript):  # Generic[...] style bases
        return _dotted(node.value)
    if isinstance(node, ast.Call):
        return None
    return None


def _stmt_binds(stmt: ast.stmt) -> set[str]:
    """Names a top-level statement binds in the module namespace."""
    out: set[str] = set()
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        for a in stmt.names:
            if a.name != "*":
                out.add(a.asname or a.name.split(".")[0])
        return out
    targets: list[ast.AST] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    elif isinstance(stmt, (ast.Try, ast.If, ast.With, ast.For, ast.While)) or type(stmt).__name__ == "TryStar":
        for body in ("body", "orelse", "finalbody"):
            for s in getattr(stmt, body, []) or []:
                out |= _stmt_binds(s)
        for h in getattr(stmt, "handlers", []) or []:
            for s in h.body:
                out |= _stmt_binds(s)
        if isinstance(stmt, ast.For):
            targets = [stmt.target]
    for t in targets:
        for n in ast.walk(t):
            if isinstance(n, ast.Name):
                out.add(n.id)
    return out


def _loads_and_locals(node: ast.AST) -> tuple[set[str], set[str]]:
    """(names loaded anywhere inside, names bound anywhere inside)."""
    loads: set[str] = set()
    bound: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            (loads if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            for a in n.names:
                bound.add(a.asname or a.name.split(".")[0])
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            bound.update(n.names)
        elif isinstance(n, ast.MatchAs) and n.name:
            bound.add(n.name)
    return loads, bound


def _is_main_guard(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.If) and "__name__" in ast.unparse(stmt.test) and "__main__" in ast.unparse(stmt.test)


@lru_cache(maxsize=4096)
def _installed(top: str) -> bool:
    if top in sys.builtin_module_names or top in getattr(sys, "stdlib_module_names", ()):
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def strip_docstrings(tree: ast.AST) -> ast.AST:
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = n.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                n.body = body[1:] or [ast.Pass()]
    return tree


def normalized_ast_hash(source: str) -> str:
    """Hash of the AST without docstrings, comments and formatting."""
    tree = strip_docstrings(ast.parse(source))
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()[:16]


def normalized_text(source: str) -> str:
    """Source re-printed from its AST without docstrings (input to MinHash)."""
    return ast.unparse(strip_docstrings(ast.parse(source)))


# submodules that files import in either form ("from torch import nn" /
# "import torch.nn as nn"); one spelling keeps exact duplicates exact
_CANONICAL_SUBMODULES = {"torch.nn", "torch.nn.functional", "torch.nn.init", "torch.fft", "torch.linalg",
                         "torch.distributions", "torch.utils.checkpoint", "torch.nn.utils"}


def _canonical_import(stmt: ast.stmt, alias: ast.alias) -> str:
    """One import line per bound name, in a canonical spelling."""
    if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and f"{stmt.module}.{alias.name}" in _CANONICAL_SUBMODULES:
        return f"import {stmt.module}.{alias.name} as {alias.asname or alias.name}"
    if isinstance(stmt, ast.Import):
        return ast.unparse(ast.Import(names=[copy.copy(alias)]))
    return ast.unparse(ast.ImportFrom(module=stmt.module, names=[copy.copy(alias)], level=stmt.level))


class _Renamer(ast.NodeTransformer):
    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.mapping.get(node.id, node.id)
        return node

    def _def(self, node):  # type: ignore[no-untyped-def]
        node.name = self.mapping.get(node.name, node.name)
        self.generic_visit(node)
        return node

    visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _def


class FileAnalysis:
    """Top-level symbol table of one parsed file."""

    def __init__(self, tree: ast.Module, repo_modules: frozenset[str] = frozenset()) -> None:
        self.tree = tree
        self.repo_modules = repo_modules
        self.stmts: list[ast.stmt] = [s for s in tree.body if not _is_main_guard(s)]
        self.defs: dict[str, list[int]] = {}
        self.imports: dict[str, tuple[int, ast.alias]] = {}  # bound name -> (statement index, alias)
        self.star_import = False
        for i, s in enumerate(self.stmts):
            if isinstance(s, (ast.Import, ast.ImportFrom)):
                for a in s.names:
                    if a.name == "*":
                        self.star_import = True
                    else:
                        self.imports[a.asname or a.name.split(".")[0]] = (i, a)
                continue
            if isinstance(s, ast.Expr):
                continue  # docstrings and calls for their side effects are not dependencies
            for name in _stmt_binds(s):
                self.defs.setdefault(name, []).append(i)
        self.module_classes = self._find_module_classes()

    # -- nn.Module detection -------------------------------------------------
    def _torch_nn_aliases(self) -> tuple[set[str], set[str]]:
        """(names bound to torch.nn, names bound to torch.nn classes)."""
        nn_names = {"torch.nn"}
        nn_classes: set[str] = set()
        for s in self.stmts:
            if isinstance(s, ast.Import):
                for a in s.names:
                    if a.name == "torch.nn" and a.asname:
                        nn_names.add(a.asname)
            elif isinstance(s, ast.ImportFrom) and s.level == 0 and s.module:
                for a in s.names:
                    if s.module == "torch" and a.name == "nn":
                        nn_names.add(a.asname or "nn")
                    elif s.module.startswith("torch.nn") and a.name[:1].isupper():
                        nn_classes.add(a.asname or a.name)
        return nn_names, nn_classes

    def _is_torch_module_base(self, dotted: str) -> bool:
        nn_names, nn_classes = self._torch_nn_aliases_cached
        if dotted in nn_classes:
            return True
        head, _, last = dotted.rpartition(".")
        return bool(head) and last[:1].isupper() and (head in nn_names or head.startswith("torch.nn."))

    def _find_module_classes(self) -> dict[str, ast.ClassDef]:
        self._torch_nn_aliases_cached = self._torch_nn_aliases()
        classes = {s.name: s for s in self.stmts if isinstance(s, ast.ClassDef)}
        found: dict[str, ast.ClassDef] = {}
        changed = True
        while changed:  # fixed point: subclasses of in-file module classes
            changed = False
            for name, c in classes.items():
                if name in found:
                    continue
                for b in c.bases:
                    d = _dotted(b)
                    if d and (self._is_torch_module_base(d) or d in found):
                        found[name] = c
                        changed = True
                        break
        return found

    def has_forward(self, cls: ast.ClassDef, seen: Optional[set[str]] = None) -> bool:
        seen = seen or set()
        if cls.name in seen:
            return False
        seen.add(cls.name)
        if any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == "forward" for s in cls.body):
            return True
        for b in cls.bases:
            d = _dotted(b) or ""
            if d in self.module_classes and self.has_forward(self.module_classes[d], seen):
                return True
            if self._is_torch_module_base(d) and d.rpartition(".")[2] not in NO_FORWARD:
                return True  # a torch layer subclass inherits its forward
        return False

    # -- dependency closure ----------------------------------------------------
    def _import_is_cross_file(self, stmt: ast.stmt, alias: ast.alias) -> bool:
        if isinstance(stmt, ast.ImportFrom):
            if stmt.level > 0:
                return True
            top = (stmt.module or "").split(".")[0]
        else:
            top = alias.name.split(".")[0]
        return top in self.repo_modules and not _installed(top)

    def extract(self, repo: str, path: str, cls: ast.ClassDef) -> Extracted:
        ex = Extracted(repo=repo, path=path, class_name=cls.name, line=cls.lineno)
        if not self.has_forward(cls):
            ex.status, ex.detail = "no_forward", "the class defines no forward (nor inherits one in this file)"
            return ex
        target_idx = self.stmts.index(cls)
        needed_stmts: set[int] = set()
        needed_imports: dict[int, list[ast.alias]] = {}
        unresolved: set[str] = set()
        cross: set[str] = set()
        queue = [target_idx]
        while queue:
            i = queue.pop()
            if i in needed_stmts:
                continue
            needed_stmts.add(i)
            loads, bound = _loads_and_locals(self.stmts[i])
            for name in sorted(loads):
                if name in self.imports:
                    si, alias = self.imports[name]
                    if self._import_is_cross_file(self.stmts[si], alias):
                        cross.add(name)
                    lst = needed_imports.setdefault(si, [])
                    if alias not in lst:
                        lst.append(alias)
                    # a name both imported and defined: the definition may win; keep both
                if name in self.defs:
                    queue.extend(j for j in self.defs[name] if j not in needed_stmts)
                elif name not in self.imports and name not in BUILTIN_NAMES and name not in bound:
                    unresolved.add(name)
        if cross:
            ex.status, ex.detail = "cross_file_import", "uses names imported from the repository: " + ", ".join(sorted(cross))
            return ex
        if unresolved:
            ex.status = "star_import" if self.star_import else "unresolved_name"
            ex.detail = "names not defined in the file: " + ", ".join(sorted(unresolved))
            return ex
        ex.inlined = sorted({n for i in needed_stmts if i != target_idx for n in _stmt_binds(self.stmts[i])})
        ex.source = self._emit(cls.name, needed_stmts, needed_imports)
        return ex

    def _emit(self, target: str, stmts: set[int], imports: dict[int, list[ast.alias]]) -> str:
        mapping = {target: "Model"}
        other_names = {n for i in stmts for n in _stmt_binds(self.stmts[i])} - {target}
        other_names |= {a.asname or a.name.split(".")[0] for al in imports.values() for a in al}
        if "Model" in other_names:
            mapping["Model"] = "Model_"
            k = 1
            while mapping["Model"] in other_names:
                k += 1
                mapping["Model"] = f"Model_{k}"
        header = ["import torch"]
        if "nn" not in other_names:
            header.append("import torch.nn as nn")
        lines: list[str] = []
        for i in sorted(imports):
            s = self.stmts[i]
            for a in s.names:
                if a not in imports[i]:
                    continue
                line = _canonical_import(s, a)
                if line not in header and line not in lines:
                    lines.append(line)
        body: list[str] = []
        renamer = _Renamer(mapping)
        for i in sorted(stmts):
            node = renamer.visit(copy.deepcopy(self.stmts[i]))
            body.append(ast.unparse(node))
        return "\n".join(header + lines) + "\n\n\n" + "\n\n\n".join(body) + "\n"


def extract_file(text: str, repo: str, path: str, repo_modules: frozenset[str] = frozenset()
                 ) -> tuple[list[Extracted], Optional[str]]:
    """All module classes of one file; (results, parse error or None)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return [], f"{type(exc).__name__}: {exc}"
    fa = FileAnalysis(tree, repo_modules)
    out = []
    for cls in fa.module_classes.values():
        try:
            out.append(fa.extract(repo, path, cls))
        except RecursionError as exc:  # pathological nesting
            out.append(Extracted(repo=repo, path=path, class_name=cls.name, line=cls.lineno,
                                 status="parse_error", detail=str(exc)))
    return out, None
