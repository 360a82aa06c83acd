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
import re
import importlib.util
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional

from .._astutil import dotted
from .resolve import PackageIndex
from .._astutil import parse as parse_source
from .inputs import ConfigSpec, GuessError, guess_inputs

BUILTIN_NAMES = set(dir(builtins)) | {"__file__", "__name__", "__class__", "__doc__", "__spec__", "__builtins__"}


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
    imported: list[str] = field(default_factory=list)  # imports of the mined package, from the installed one
    config_class: Optional[str] = None  # the constructor's config class (local name in source)
    config_fields: dict[str, Any] = field(default_factory=dict)  # its fields and literal defaults
    # a composite config's sub-configs: key -> {"model_type", "auto", "init_kwargs", "fields"}
    config_subs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # constructor / forward inherited from a class of another file (signatures only)
    ext_init: Any = field(default=None, repr=False)
    ext_forward: Any = field(default=None, repr=False)
    normalized: str = field(default="", repr=False)  # the program without docstrings
    variants: list[Any] = field(default_factory=list, repr=False)  # InputVariant list
    inputs_error: str = ""  # why no inputs could be guessed

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _plain_value(v: Any) -> bool:
    """A config default a task can write literally: None, a number, a string,
    a bool, or a list / tuple of ints (``eos_token_id=[1, 2]``)."""
    if v is None or isinstance(v, (int, float, str, bool)):
        return True
    return isinstance(v, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


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
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(getattr(body[0], "value", None), ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                n.body = body[1:] or [ast.Pass()]
    return tree


def normalized_ast_hash(source: str) -> str:
    """Hash of the AST without docstrings, comments and formatting."""
    tree = strip_docstrings(parse_source(source))
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()[:16]


_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def canonical_hash(normalized: str, renamable: set[str], extra: str = "") -> str:
    """Hash of the docstring-free program with the names it defines or imports
    from the mined package replaced by placeholders in order of appearance:
    the "Copied from transformers.models.llama... with Llama->Mistral" copies
    of one module hash alike, before anything runs. ``extra`` adds what names
    cannot show (the config defaults the program reads)."""
    mapping: dict[str, str] = {}

    def canon(m: "re.Match[str]") -> str:
        name = m.group(0)
        if name not in renamable:
            return name
        if name not in mapping:
            mapping[name] = f"_n{len(mapping)}"
        return mapping[name]

    return hashlib.sha256((_IDENT.sub(canon, normalized) + extra).encode()).hexdigest()[:16]


def _canonical_hash_ast(source: str, renamable: set[str], extra: str = "") -> str:
    """Hash of the program with the names it defines or imports from the mined
    package replaced by placeholders in order of appearance: the "Copied from
    transformers.models.llama... with Llama->Mistral" copies of one module hash
    alike, before anything runs. ``extra`` adds what names cannot show (the
    config defaults the program reads)."""
    tree = strip_docstrings(parse_source(source))
    mapping: dict[str, str] = {}

    def canon(name: str) -> str:
        if name not in renamable:
            return name
        if name not in mapping:
            mapping[name] = f"_n{len(mapping)}"
        return mapping[name]

    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            n.id = canon(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            n.name = canon(n.name)
        elif isinstance(n, ast.alias):
            n.name = ".".join(canon(p) for p in n.name.split("."))
            n.asname = canon(n.asname) if n.asname else None
        elif isinstance(n, ast.ImportFrom):
            n.module = "_pkg" if n.module and n.module.split(".")[0] not in ("torch", "math", "typing") else n.module
    return hashlib.sha256((ast.dump(tree, include_attributes=False) + extra).encode()).hexdigest()[:16]


def normalized_text(source: str) -> str:
    """Source re-printed from its AST without docstrings (input to MinHash)."""
    return ast.unparse(strip_docstrings(parse_source(source)))


# submodules that files import in either form ("from torch import nn" /
# "import torch.nn as nn"); one spelling keeps exact duplicates exact
_CANONICAL_SUBMODULES = {
    "torch.nn",
    "torch.nn.functional",
    "torch.nn.init",
    "torch.fft",
    "torch.linalg",
    "torch.distributions",
    "torch.utils.checkpoint",
    "torch.nn.utils",
}


def _canonical_import(stmt: ast.stmt, alias: ast.alias) -> str:
    """One import line per bound name, in a canonical spelling."""
    if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and f"{stmt.module}.{alias.name}" in _CANONICAL_SUBMODULES:
        return f"import {stmt.module}.{alias.name} as {alias.asname or alias.name}"
    if isinstance(stmt, ast.Import):
        return ast.unparse(ast.Import(names=[copy.copy(alias)]))
    return ast.unparse(ast.ImportFrom(module=stmt.module, names=[copy.copy(alias)], level=stmt.level))


def _rewrite(node: ast.AST, mapping: dict[str, str], available: set[str]) -> None:
    """In place: rename classes per ``mapping`` and drop argument / return
    annotations naming something not in ``available`` (they would fail when
    the ``def`` runs). One pass of ``ast.walk``: far cheaper than a NodeTransformer."""

    def ok(ann: Optional[ast.AST]) -> bool:
        return ann is None or all(
            n.id in available or n.id in mapping for n in ast.walk(ann) if isinstance(n, ast.Name)
        )

    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            if n.id in mapping:
                n.id = mapping[n.id]
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if n.name in mapping:
                n.name = mapping[n.name]
            if not isinstance(n, ast.ClassDef):
                a = n.args
                for x in a.posonlyargs + a.args + a.kwonlyargs + [v for v in (a.vararg, a.kwarg) if v is not None]:
                    if not ok(x.annotation):
                        x.annotation = None
                if not ok(n.returns):
                    n.returns = None


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


def _annotation_nodes(node: ast.AST) -> set[int]:
    """ids of every node inside a function's argument or return annotations:
    names used only there (``config: LlamaConfig``) are not dependencies."""
    ids: set[int] = set()
    for n in ast.walk(node):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = n.args
            anns = [x.annotation for x in a.posonlyargs + a.args + a.kwonlyargs if x.annotation is not None]
            anns += [x.annotation for x in (a.vararg, a.kwarg) if x is not None and x.annotation is not None]
            if n.returns is not None:
                anns.append(n.returns)
            for ann in anns:
                ids.update(id(m) for m in ast.walk(ann))
    return ids


class _StripAnnotations(ast.NodeTransformer):
    """Drops argument and return annotations that name something the program
    does not bind (they would fail when the ``def`` runs)."""

    def __init__(self, available: set[str]) -> None:
        self.available = available

    def _ok(self, ann: Optional[ast.AST]) -> bool:
        return ann is None or all(n.id in self.available for n in ast.walk(ann) if isinstance(n, ast.Name))

    def _fn(self, node):  # type: ignore[no-untyped-def]
        a = node.args
        for x in a.posonlyargs + a.args + a.kwonlyargs + [v for v in (a.vararg, a.kwarg) if v is not None]:
            if not self._ok(x.annotation):
                x.annotation = None
        if not self._ok(node.returns):
            node.returns = None
        self.generic_visit(node)
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = _fn


CONFIG_ARG = ("config", "cfg", "configuration")


class FileAnalysis:
    """Top-level symbol table of one parsed file, resolved against the package
    it belongs to (``modname``) through a :class:`PackageIndex`."""

    def __init__(
        self,
        tree: ast.Module,
        repo_modules: frozenset[str] = frozenset(),
        *,
        modname: str = "",
        is_pkg: bool = False,
        index: Optional[PackageIndex] = None,
        allowed: frozenset[str] = frozenset({"torch"}),
        mined: frozenset[str] = frozenset(),
    ) -> None:
        self.tree = tree
        self.repo_modules = repo_modules
        self.modname = modname or "__curate_file__"
        self.index = index if index is not None else PackageIndex()
        self.info = self.index.register(self.modname, is_pkg, tree)
        self.allowed = allowed
        self.mined = mined
        self.stmts: list[ast.stmt] = [s for s in tree.body if not _is_main_guard(s)]
        self._names_cache: dict[int, tuple[set[str], set[str], set[str], set[str]]] = {}
        self._text_cache: dict[int, str] = {}
        self._rewrite_cache: dict[tuple[Any, ...], tuple[str, str]] = {}
        self._plain_cache: dict[int, str] = {}
        self.last_normalized = ""
        self.max_variants = 6
        self.future: list[str] = [
            ast.unparse(s) for s in self.stmts if isinstance(s, ast.ImportFrom) and s.module == "__future__"
        ]
        self.defs: dict[str, list[int]] = {}
        self.imports: dict[str, tuple[int, ast.alias]] = {}  # bound name -> (statement index, alias)
        self.star_import = False
        for i, s in enumerate(self.stmts):
            if isinstance(s, (ast.Import, ast.ImportFrom)):
                if isinstance(s, ast.ImportFrom) and s.module == "__future__":
                    continue
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
        self.module_classes = {
            s.name: s
            for s in self.stmts
            if isinstance(s, ast.ClassDef) and self.index.is_module_class(self.modname, s.name)
        }

    def has_forward(self, cls: ast.ClassDef) -> bool:
        return self.index.has_forward(self.modname, cls.name)

    # -- imports ---------------------------------------------------------------
    def _import_action(self, name: str) -> str:
        """ "keep" (an installed dependency), "absolute" (from the mined package,
        allowed: imported from the installed package) or "cross" (needs code of
        another file of the repository)."""
        si, alias = self.imports[name]
        stmt = self.stmts[si]
        absmod = self.info.imports.get(name, (None, None))[0]
        if isinstance(stmt, ast.ImportFrom) and stmt.level > 0 and absmod is None:
            return "cross"
        top = (absmod or alias.name).split(".")[0]
        relative = isinstance(stmt, ast.ImportFrom) and stmt.level > 0
        if relative or top in self.mined:
            return "absolute" if top in self.allowed and _installed(top) else "cross"
        if top in self.repo_modules and not _installed(top):
            return "cross"
        return "keep"

    def _import_line(self, name: str) -> str:
        si, alias = self.imports[name]
        stmt = self.stmts[si]
        if isinstance(stmt, ast.ImportFrom) and stmt.level > 0:
            absmod = self.info.imports[name][0]
            stmt = ast.ImportFrom(module=absmod, names=[alias], level=0)
        return _canonical_import(stmt, alias)

    def config_class_for(self, cls: ast.ClassDef) -> tuple[Optional[str], Optional[ast.FunctionDef]]:
        """(local name of the config class the constructor takes, the constructor)."""
        init = None
        seen: set[str] = set()
        todo = [cls]
        while todo and init is None:  # the constructor: the class's own or an in-file base's
            c = todo.pop(0)
            if c.name in seen:
                continue
            seen.add(c.name)
            init = next((s for s in c.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
            todo += [
                self.module_classes[d]
                for d in (dotted(b, through_subscripts=True) for b in c.bases)
                if d in self.module_classes
            ]
        if init is None:
            init = self.inherited_method(cls, "__init__")
        if init is None:
            return None, None
        a = init.args
        params = (a.posonlyargs + a.args)[1:]
        required = params[: len(params) - len(a.defaults)]
        for p in required:
            ann = ast.unparse(p.annotation) if p.annotation is not None else ""
            ann_name = ann.split("|")[0].strip().strip("\"'").rpartition(".")[2]
            if not (p.arg.lower() in CONFIG_ARG or p.arg.lower().endswith("_config") or ann_name.endswith("Config")):
                continue
            candidates = [n for n in list(self.imports) + list(self.defs) if n.endswith("Config") and n[:1].isupper()]
            if candidates:
                # the config whose fields cover the attributes the class reads
                # (AltRobertaPooler reads hidden_size: AltCLIPTextConfig, not
                # AltCLIPConfig); the annotated class when it covers as many
                # (CLIPEncoder is annotated CLIPConfig but reads
                # num_hidden_layers, a field of CLIPTextConfig and
                # CLIPVisionConfig, not of the composite); then the longest
                # shared name prefix (LlamaAttention -> LlamaConfig)
                used = {
                    n.attr
                    for c in self._in_file_chain(cls)
                    for n in ast.walk(c)
                    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == p.arg
                }
                if not used and ann_name in candidates:
                    return ann_name, init

                def score(n: str) -> tuple[int, int, int, int]:
                    k = 0
                    while k < min(len(n), len(cls.name)) and n[k] == cls.name[k]:
                        k += 1
                    return len(used & set(self.config_fields(n))), int(n == ann_name), k, -len(n)

                return max(candidates, key=score), init
            return None, init
        return None, init

    def inherited_method(self, cls: ast.ClassDef, name: str) -> Optional[ast.FunctionDef]:
        """``name`` as defined by the nearest base from another module (its signature)."""
        todo = list(self.index.base_refs(self.modname, cls))
        seen: set[tuple[str, str]] = set()
        while todo:
            ref = todo.pop(0)
            if ref in seen or len(seen) > 32:
                continue
            seen.add(ref)
            got = self.index.resolve(*ref)
            if got is None:
                continue
            defmod, c = got
            if defmod.startswith("torch."):
                continue  # torch's own layers: their signatures are known (KNOWN_BASE_INIT)
            for s in c.body:
                if isinstance(s, ast.FunctionDef) and s.name == name:
                    return s
            todo += self.index.base_refs(defmod, c)
        return None

    def config_ref(self, local: str) -> Optional[tuple[str, str]]:
        """(absolute module, name) of the config class bound to ``local``."""
        if local in self.imports:
            ref = self.info.imports.get(local)
            if ref is None or ref[1] is None:
                return None
            return ref[0], ref[1]
        return self.modname, local

    def config_fields(self, local: str) -> dict[str, Any]:
        ref = self.config_ref(local)
        return self.index.config_fields(*ref) if ref is not None else {}

    # -- dependency closure ----------------------------------------------------
    def extract(self, repo: str, path: str, cls: ast.ClassDef) -> Extracted:
        ex = Extracted(repo=repo, path=path, class_name=cls.name, line=cls.lineno)
        if not self.has_forward(cls):
            ex.status, ex.detail = "no_forward", "the class defines no forward and inherits none"
            return ex
        target_idx = self.stmts.index(cls)
        config_name, _ = self.config_class_for(cls)
        needed_stmts: set[int] = set()
        needed_imports: dict[int, list[ast.alias]] = {}
        import_names: set[str] = set()
        unresolved: set[str] = set()
        cross: set[str] = set()
        queue: list[int] = [target_idx]
        extra_loads = {config_name} if config_name else set()
        while queue or extra_loads:
            if queue:
                i = queue.pop()
                if i in needed_stmts:
                    continue
                needed_stmts.add(i)
                loads, bound = self._stmt_names(i)
            else:
                loads, bound = set(extra_loads), set()
                extra_loads = set()
            for name in sorted(loads):
                if name in self.imports:
                    action = self._import_action(name)
                    if action == "cross":
                        cross.add(name)
                    import_names.add(name)
                    si, alias = self.imports[name]
                    lst = needed_imports.setdefault(si, [])
                    if alias not in lst:
                        lst.append(alias)
                    # a name both imported and defined: the definition may win; keep both
                if name in self.defs:
                    queue.extend(j for j in self.defs[name] if j not in needed_stmts)
                elif name not in self.imports and name not in BUILTIN_NAMES and name not in bound:
                    unresolved.add(name)
        if cross:
            ex.status = "cross_file_import"
            allowed_hint = sorted({(self.info.imports.get(n, (n, None))[0] or n).split(".")[0] for n in cross} - {""})
            ex.detail = (
                "uses names imported from the repository: "
                + ", ".join(sorted(cross))
                + (
                    f" (allow importing them from the installed package: --allow-import {','.join(allowed_hint)})"
                    if any(_installed(t) for t in allowed_hint)
                    else ""
                )
            )
            return ex
        if unresolved:
            ex.status = "star_import" if self.star_import else "unresolved_name"
            ex.detail = "names not defined in the file: " + ", ".join(sorted(unresolved))
            return ex
        ex.inlined = sorted({n for i in needed_stmts if i != target_idx for n in _stmt_binds(self.stmts[i])})
        ex.imported = sorted(self._import_line(n) for n in import_names if self._import_action(n) == "absolute")
        if config_name:
            ex.config_class = config_name
            ex.config_fields = {k: v for k, v in self.config_fields(config_name).items() if _plain_value(v)}
            ref = self.config_ref(config_name)
            if ref is not None:
                ex.config_subs = {
                    k: {
                        **v,
                        "fields": {f: d for f, d in v["fields"].items() if _plain_value(d)},
                        "init_kwargs": {f: d for f, d in v["init_kwargs"].items() if _plain_value(d)},
                    }
                    for k, v in self.index.sub_configs(*ref).items()
                }
        ex.source = self._emit(cls.name, needed_stmts, needed_imports)
        ex.normalized = self.last_normalized
        if not any(
            isinstance(s, ast.FunctionDef) and s.name == "__init__" for c in self._in_file_chain(cls) for s in c.body
        ):
            ex.ext_init = self.inherited_method(cls, "__init__")
        if not any(
            isinstance(s, ast.FunctionDef) and s.name == "forward" for c in self._in_file_chain(cls) for s in c.body
        ):
            ex.ext_forward = self.inherited_method(cls, "forward")
        # inputs are guessed here, while the file's syntax tree is at hand
        # (parsing every extracted program again costs more than extracting it)
        classes = {c.name: c for c in self.module_classes.values()}
        classes["Model"] = cls
        try:
            spec = ConfigSpec(ex.config_class, ex.config_fields, ex.config_subs) if ex.config_class else None
            ex.variants = guess_inputs(
                "", self.max_variants, config=spec, ext_init=ex.ext_init, ext_forward=ex.ext_forward, classes=classes
            )
        except (GuessError, RecursionError) as exc:
            ex.inputs_error = str(exc) or type(exc).__name__
        ex.ext_init = ex.ext_forward = None  # signatures of other files: not needed any more
        return ex

    def _in_file_chain(self, cls: ast.ClassDef) -> list[ast.ClassDef]:
        out, todo = [], [cls]
        while todo:
            c = todo.pop(0)
            if c in out:
                continue
            out.append(c)
            todo += [
                self.module_classes[d]
                for d in (dotted(b, through_subscripts=True) for b in c.bases)
                if d in self.module_classes
            ]
        return out

    def _stmt_names(self, i: int) -> tuple[set[str], set[str]]:
        """(names a top-level statement loads outside annotations, names bound
        inside it); computed once per statement, shared by every class of the file."""
        got = self._names_cache.get(i)
        if got is None:
            stmt = self.stmts[i]
            skip = _annotation_nodes(stmt)
            # one walk over the statement (was four: a fifth of extraction's time)
            loads: set[str] = set()
            ann: set[str] = set()
            names: set[str] = set()
            for n in ast.walk(stmt):
                if isinstance(n, ast.Name):
                    names.add(n.id)
                    if id(n) in skip:
                        ann.add(n.id)
                    elif isinstance(n.ctx, ast.Load):
                        loads.add(n.id)
                elif isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(n.name)
            _, bound = _loads_and_locals(stmt)
            names |= _stmt_binds(stmt)
            got = (loads, bound, ann, names)
            self._names_cache[i] = got
        return got[0], got[1]

    def _text(self, i: int) -> str:
        t = self._text_cache.get(i)
        if t is None:
            t = self._text_cache[i] = ast.unparse(self.stmts[i])
        return t

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
        header = list(self.future) + ["import torch"]
        if "nn" not in other_names:
            header.append("import torch.nn as nn")
        lines: list[str] = []
        for i in sorted(imports):
            s = self.stmts[i]
            for a in s.names:
                if a not in imports[i]:
                    continue
                line = self._import_line(a.asname or a.name.split(".")[0])
                if line not in header and line not in lines:
                    lines.append(line)
        available = (other_names | {"Model", "torch", "nn"} | BUILTIN_NAMES) - {target}
        body: list[str] = []
        plain: list[str] = []  # the same statements without docstrings (hashes, MinHash)
        for i in sorted(stmts):
            self._stmt_names(i)
            _, _, ann, names = self._names_cache[i]
            if names & set(mapping) or not ann <= available:
                # only statements that mention the renamed class or annotate with
                # a missing name are rewritten (re-parsed: cheaper than a deep
                # copy), once per distinct rewrite
                key = (i, tuple(sorted((k, v) for k, v in mapping.items() if k in names)), frozenset(ann - available))
                got = self._rewrite_cache.get(key)
                if got is None:
                    node = parse_source(self._text(i)).body[0]
                    _rewrite(node, mapping, available)
                    got = self._rewrite_cache[key] = (ast.unparse(node), ast.unparse(strip_docstrings(node)))
                body.append(got[0])
                plain.append(got[1])
            else:
                body.append(self._text(i))
                plain.append(self._plain(i))
        head = "\n".join(header + lines) + "\n\n\n"
        self.last_normalized = head + "\n\n\n".join(plain) + "\n"
        return head + "\n\n\n".join(body) + "\n"

    def _plain(self, i: int) -> str:
        t = self._plain_cache.get(i)
        if t is None:
            t = self._plain_cache[i] = ast.unparse(strip_docstrings(parse_source(self._text(i))))
        return t


def extract_file(
    text: str,
    repo: str,
    path: str,
    repo_modules: frozenset[str] = frozenset(),
    *,
    modname: str = "",
    is_pkg: bool = False,
    index: Optional[PackageIndex] = None,
    allowed: frozenset[str] = frozenset({"torch"}),
    mined: frozenset[str] = frozenset(),
    tree: Optional[ast.Module] = None,
) -> tuple[list[Extracted], Optional[str]]:
    """All module classes of one file; (results, parse error or None).

    ``modname`` is the file's dotted module name (relative imports resolve
    against it); ``mined`` the top-level packages of the tree being mined;
    names imported from those are imported from the installed package when
    the package is in ``allowed``, otherwise the class is dropped as
    ``cross_file_import``."""
    if tree is None:
        try:
            tree = parse_source(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            return [], f"{type(exc).__name__}: {exc}"
    try:
        fa = FileAnalysis(tree, repo_modules, modname=modname, is_pkg=is_pkg, index=index, allowed=allowed, mined=mined)
    except RecursionError as exc:
        return [], f"RecursionError: {exc}"
    out = []
    for cls in fa.module_classes.values():
        try:
            out.append(fa.extract(repo, path, cls))
        except RecursionError as exc:  # pathological nesting
            out.append(
                Extracted(
                    repo=repo, path=path, class_name=cls.name, line=cls.lineno, status="parse_error", detail=str(exc)
                )
            )
    return out, None
