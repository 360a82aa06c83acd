"""Static view of the packages being mined (and the installed ones they import).

Extraction needs to know, without importing anything, what an imported name
is: a ``torch.nn`` layer, a class of another file of the package that derives
from ``nn.Module`` (``PreTrainedModel``, ``GradientCheckpointingLayer``,
torch's own ``Module`` through ``from .module import Module``), or a config
class whose fields and defaults build the constructor's ``config`` argument.
:class:`PackageIndex` parses module files on demand, from the mined tree or
from an installed package's folder (found with ``importlib.util.find_spec``
on the top-level name, which imports nothing), and follows re-exports.
"""

from __future__ import annotations

import ast
import re
import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from .._astutil import dotted
from .._astutil import parse as parse_source

# torch.nn classes without a forward of their own: a subclass must define it
NO_FORWARD = {"Module", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"}
MAX_DEPTH = 8


def absolute_module(modname: str, is_package: bool, level: int, module: Optional[str]) -> Optional[str]:
    """The absolute module of ``from <.*level><module> import ...`` written in ``modname``."""
    if level == 0:
        return module
    parts = modname.split(".") if modname else []
    if not is_package:
        parts = parts[:-1]
    if level - 1 > len(parts) or not parts:
        return None
    base = parts[: len(parts) - (level - 1)]
    if not base:
        return None
    return ".".join(base + ([module] if module else []))


def module_name_of(path: Path) -> tuple[str, bool]:
    """(dotted module name from the enclosing packages, whether it is a package's
    ``__init__``): ``.../transformers/models/llama/modeling_llama.py`` ->
    ``transformers.models.llama.modeling_llama``."""
    path = Path(path)
    is_pkg = path.name == "__init__.py"
    parts = [] if is_pkg else [path.stem]
    d = path.parent
    while (d / "__init__.py").exists() and d.parent != d:
        parts.insert(0, d.name)
        d = d.parent
    return ".".join(parts), is_pkg


@lru_cache(maxsize=1024)
def _top_location(top: str) -> Optional[Path]:
    """Folder that holds the top-level package or module ``top`` (its parent)."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        locs = list(spec.submodule_search_locations)
        return Path(locs[0]).parent if locs else None
    if spec.origin and spec.origin.endswith(".py"):
        return Path(spec.origin).parent
    return None


# class attributes of a config class that sub-config resolution reads
CONFIG_CLASS_ATTRS = ("model_type", "sub_configs", "sub_configs_defaults")


def _slim(cls: ast.ClassDef) -> ast.ClassDef:
    """What resolution needs of a class, so that thousands of parsed files stay
    small: its bases, annotated fields, and its methods' signatures."""
    body: list[ast.stmt] = []
    for s in cls.body:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body.append(
                ast.FunctionDef(
                    name=s.name,
                    args=s.args,
                    body=[ast.Pass()],
                    decorator_list=[],
                    returns=None,
                    type_comment=None,
                    lineno=s.lineno,
                    col_offset=0,
                )
            )
        elif isinstance(s, ast.AnnAssign):
            body.append(s)
        elif isinstance(s, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in CONFIG_CLASS_ATTRS for t in s.targets
        ):
            body.append(s)  # a config's model_type and its sub-config classes
    return ast.ClassDef(
        name=cls.name,
        bases=cls.bases,
        keywords=cls.keywords,
        body=body,
        decorator_list=[],
        lineno=cls.lineno,
        col_offset=0,
    )


class ModuleInfo:
    """Top-level classes and imports of one module file."""

    def __init__(self, modname: str, is_pkg: bool, tree: ast.Module) -> None:
        self.modname = modname
        self.classes: dict[str, ast.ClassDef] = {}
        # bound name -> (absolute module, imported name or None for a module binding)
        self.imports: dict[str, tuple[str, Optional[str]]] = {}
        self.star_from: list[str] = []

        def visit(stmts: list[ast.stmt]) -> None:
            for s in stmts:
                if isinstance(s, ast.ClassDef):
                    self.classes[s.name] = _slim(s)
                elif isinstance(s, ast.ImportFrom):
                    absmod = absolute_module(modname, is_pkg, s.level, s.module)
                    if absmod is None:
                        continue
                    for a in s.names:
                        if a.name == "*":
                            self.star_from.append(absmod)
                        else:
                            self.imports[a.asname or a.name] = (absmod, a.name)
                elif isinstance(s, ast.Import):
                    for a in s.names:
                        if a.asname:
                            self.imports[a.asname] = (a.name, None)
                        else:
                            top = a.name.split(".")[0]
                            self.imports[top] = (top, None)
                elif isinstance(s, ast.If) or isinstance(s, ast.Try):
                    # `if is_torch_available(): from .x import Y`, try/except ImportError
                    visit(s.body)
                    for h in getattr(s, "handlers", []):
                        visit(h.body)
                    visit(getattr(s, "orelse", []))

        visit(tree.body)


class PackageIndex:
    """Parses modules by absolute name, on demand, with caching."""

    def __init__(self, roots: Optional[dict[str, Path]] = None) -> None:
        # top-level package -> folder containing it (the mined tree's own roots first)
        self.roots: dict[str, Path] = dict(roots or {})
        self._infos: dict[str, Optional[ModuleInfo]] = {}
        self._is_module: dict[tuple[str, str], bool] = {}
        self._fields: dict[tuple[str, str], dict[str, Any]] = {}
        self.tree_modules: set[str] = set()  # modules of the mined tree (registered, not looked up)
        self._subs: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self._model_types: dict[str, dict[str, tuple[str, str]]] = {}  # top package -> model_type -> class

    def add_root(self, top: str, parent: Path) -> None:
        self.roots.setdefault(top, parent)

    def _file(self, modname: str) -> Optional[tuple[Path, bool]]:
        top = modname.split(".")[0]
        base = self.roots.get(top) or _top_location(top)
        if base is None:
            return None
        rel = Path(*modname.split("."))
        if (base / rel / "__init__.py").is_file():
            return base / rel / "__init__.py", True
        if (base / rel).with_suffix(".py").is_file():
            return (base / rel).with_suffix(".py"), False
        return None

    def info(self, modname: str) -> Optional[ModuleInfo]:
        if modname in self._infos:
            return self._infos[modname]
        found = self._file(modname)
        mi = None
        if found is not None:
            try:
                mi = ModuleInfo(modname, found[1], parse_source(found[0].read_text(encoding="utf-8")))
            except (OSError, SyntaxError, ValueError, UnicodeDecodeError, RecursionError):
                mi = None
        self._infos[modname] = mi
        return mi

    def register(self, modname: str, is_pkg: bool, tree: ast.Module) -> ModuleInfo:
        mi = ModuleInfo(modname, is_pkg, tree)
        self._infos[modname] = mi
        self.tree_modules.add(modname)
        return mi

    def resolve(self, modname: str, name: str, depth: int = 0) -> Optional[tuple[str, ast.ClassDef]]:
        """The class ``name`` as seen from module ``modname`` (re-exports followed)."""
        if depth > MAX_DEPTH:
            return None
        mi = self.info(modname)
        if mi is None:
            # `from pkg import submodule`-style names are modules, not classes
            return None
        if name in mi.classes:
            return modname, mi.classes[name]
        if name in mi.imports:
            mod, orig = mi.imports[name]
            if orig is None:
                return None
            got = self.resolve(mod, orig, depth + 1)
            if got is None and self.info(f"{mod}.{orig}") is not None:
                return None
            return got
        for star in mi.star_from:
            got = self.resolve(star, name, depth + 1)
            if got is not None:
                return got
        return None

    def base_refs(self, modname: str, cls: ast.ClassDef) -> list[tuple[str, str]]:
        """(absolute module, name) of each base of a class defined in ``modname``."""
        mi = self.info(modname)
        out = []
        for b in cls.bases:
            ref = dotted_ref(b, modname, mi.imports if mi else {}, set(mi.classes) if mi else set())
            if ref is not None:
                out.append(ref)
        return out

    def is_module_class(self, modname: str, name: str, depth: int = 0) -> bool:
        key = (modname, name)
        if key in self._is_module:
            return self._is_module[key]
        self._is_module[key] = False  # cycles resolve to False
        result = False
        if name == "Module" and modname in ("torch.nn", "torch.nn.modules", "torch.nn.modules.module"):
            result = True
        elif is_torch_nn_name(modname, name) and not self._defined_in_tree(modname, name):
            result = True
        elif depth <= MAX_DEPTH:
            got = self.resolve(modname, name)
            if got is not None:
                defmod, cls = got
                if is_torch_nn_name(defmod, cls.name) and not self._defined_in_tree(defmod, cls.name):
                    result = True
                else:
                    result = any(self.is_module_class(m, n, depth + 1) for m, n in self.base_refs(defmod, cls))
        self._is_module[key] = result
        return result

    def has_forward(self, modname: str, name: str, depth: int = 0) -> bool:
        if is_torch_nn_name(modname, name) and not self._defined_in_tree(modname, name):
            return name not in NO_FORWARD
        got = self.resolve(modname, name)
        if got is None or depth > MAX_DEPTH:
            return False
        defmod, cls = got
        if any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == "forward" for s in cls.body):
            return True
        if is_torch_nn_name(defmod, cls.name) and cls.name in NO_FORWARD:
            return False
        return any(self.has_forward(m, n, depth + 1) for m, n in self.base_refs(defmod, cls))

    def _defined_in_tree(self, modname: str, name: str) -> bool:
        mi = self._infos.get(modname) if modname in self.tree_modules else None
        return bool(mi and name in mi.classes)

    def config_fields(self, modname: str, name: str, depth: int = 0) -> dict[str, Any]:
        """Fields of a config class and their literal defaults (None when not a
        literal): class-level annotated fields (dataclass-style configs) and
        ``__init__`` keyword defaults (older configs), bases first."""
        key = (modname, name)
        if key in self._fields:
            return self._fields[key]
        self._fields[key] = {}
        got = self.resolve(modname, name) if depth <= MAX_DEPTH else None
        fields: dict[str, Any] = {}
        if got is not None:
            defmod, cls = got
            for m, n in reversed(self.base_refs(defmod, cls)):
                fields.update(self.config_fields(m, n, depth + 1))
            for s in cls.body:
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
                    fields[s.target.id] = _literal(s.value)
                elif isinstance(s, ast.FunctionDef) and s.name == "__init__":
                    a = s.args
                    params = (a.posonlyargs + a.args)[1:]
                    for p, d in zip(params[len(params) - len(a.defaults) :], a.defaults):
                        fields[p.arg] = _literal(d)
                    for p, d in zip(a.kwonlyargs, a.kw_defaults):
                        if d is not None:
                            fields[p.arg] = _literal(d)
        self._fields[key] = fields
        return fields

    def _class_attr(self, modname: str, name: str, attr: str, depth: int = 0) -> Optional[tuple[str, ast.AST]]:
        """(defining module, value node) of a plain class attribute, bases followed."""
        got = self.resolve(modname, name) if depth <= MAX_DEPTH else None
        if got is None:
            return None
        defmod, cls = got
        for s in cls.body:
            if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in s.targets):
                return defmod, s.value
        for m, n in self.base_refs(defmod, cls):
            found = self._class_attr(m, n, attr, depth + 1)
            if found is not None:
                return found
        return None

    def model_type_class(self, top: str, model_type: str) -> Optional[tuple[str, str]]:
        """The config class whose ``model_type`` is ``model_type`` in package
        ``top`` (transformers' ``AutoConfig`` by name): configuration files
        of ``top/models/*/`` scanned once, as text."""
        table = self._model_types.get(top)
        if table is None:
            table = self._model_types[top] = {}
            base = self.roots.get(top) or _top_location(top)
            models = base / top / "models" if base is not None else None
            if models is not None and models.is_dir():
                pat = re.compile(r"^class (\w+)\(|^    model_type(?:\s*:\s*[^=]+)?\s*=\s*[\"']([^\"']+)[\"']", re.M)
                for f in sorted(models.glob("*/configuration_*.py")):
                    try:
                        text = f.read_text(encoding="utf-8")
                    except (OSError, UnicodeDecodeError):
                        continue
                    current = None
                    for m in pat.finditer(text):
                        if m.group(1):
                            current = m.group(1)
                        elif current is not None:
                            table.setdefault(m.group(2), (f"{top}.models.{f.parent.name}.{f.stem}", current))
        return table.get(model_type)

    def sub_configs(self, modname: str, name: str) -> dict[str, dict[str, Any]]:
        """A composite config's sub-configs (transformers' ``sub_configs_defaults``
        of ``SubConfigSpec(config_class, model_type, init_kwargs)``, or the older
        ``sub_configs = {key: class}``): key -> {"model_type", "auto" (resolved
        by model type: the dict given must name it), "init_kwargs", "fields"
        (the sub-config class's fields and defaults, {} when not found)}."""
        key = (modname, name)
        if key in self._subs:
            return self._subs[key]
        self._subs[key] = {}
        out: dict[str, dict[str, Any]] = {}
        for attr in ("sub_configs", "sub_configs_defaults"):  # the newer one wins
            found = self._class_attr(modname, name, attr)
            if found is None or not isinstance(found[1], ast.Dict):
                continue
            defmod, node = found
            for k, v in zip(node.keys, node.values):
                if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                    continue
                cc: Optional[ast.AST] = v
                mt, init_kwargs = None, {}
                if isinstance(v, ast.Call):
                    cc = v.args[0] if v.args else None
                    for kw in v.keywords:
                        if kw.arg == "config_class":
                            cc = kw.value
                        elif kw.arg == "model_type":
                            mt = _literal(kw.value)
                        elif kw.arg == "init_kwargs":
                            init_kwargs = _literal(kw.value) if isinstance(_literal(kw.value), dict) else {}
                ccname = ast.unparse(cc).rpartition(".")[2] if cc is not None else ""
                auto = ccname in ("AutoConfig", "") or not ccname.endswith("Config")
                ref: Optional[tuple[str, str]] = None
                if not auto:
                    got = self.resolve(defmod, ccname)
                    if got is not None:
                        ref = (got[0], ccname)
                        if mt is None:
                            mtn = self._class_attr(got[0], ccname, "model_type")
                            mt = _literal(mtn[1]) if mtn is not None else None
                elif isinstance(mt, str):
                    ref = self.model_type_class(modname.split(".")[0], mt)
                out[k.value] = {
                    "model_type": mt if isinstance(mt, str) else None,
                    "auto": auto,
                    "init_kwargs": init_kwargs,
                    "fields": dict(self.config_fields(*ref)) if ref is not None else {},
                }
        self._subs[key] = out
        return out


def _literal(node: Optional[ast.AST]) -> Any:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        # `interval(min=0.0, max=1.0)(default=0.02)`: the default keyword is the value
        if isinstance(node, ast.Call):
            for k in node.keywords:
                if k.arg == "default":
                    return _literal(k.value)
        return None


def is_torch_nn_name(modname: str, name: str) -> bool:
    """A torch.nn layer class (or torch's ``Module``), by where it is imported from."""
    return (
        (modname == "torch.nn" or modname.startswith("torch.nn."))
        and name[:1].isupper()
        and not modname.startswith(("torch.nn.functional", "torch.nn.init", "torch.nn.parameter"))
    )


def dotted_ref(
    node: ast.AST, modname: str, imports: dict[str, tuple[str, Optional[str]]], local_classes: set[str]
) -> Optional[tuple[str, str]]:
    """(absolute module, class name) of a base expression such as ``nn.Module``,
    ``Module``, ``torch.nn.Linear`` or a class of the same module."""
    if isinstance(node, ast.Subscript):
        node = node.value
    name = dotted(node)
    if name is None:
        return None
    head, *parts = name.split(".")
    if not parts:
        if head in local_classes:
            return modname, head
        if head in imports:
            mod, orig = imports[head]
            if orig is not None:
                return mod, orig
        return None
    if head in imports:
        mod, orig = imports[head]
        base = mod if orig is None else f"{mod}.{orig}"
    elif head == "torch":
        base = "torch"
    else:
        return None
    full = ".".join([base] + parts)
    mod, _, name = full.rpartition(".")
    return mod, name
