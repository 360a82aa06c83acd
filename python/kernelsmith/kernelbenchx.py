"""KernelBench-X task files read as kernelsmith tasks, unchanged.

KernelBench-X (github BonnieW05/KernelBenchX, Apache-2.0) keeps one task per
file under ``data/kernelbenchx/<Category>/<name>.py``: a reference *function*
named after the file, a separator line of 146 ``#``, then a test harness that
calls the function on hand-written and random inputs and collects the results
in ``test_results``. Its performance shapes live in
``metrics/golden_metrics/<name>_perf.py`` (a ``performance_metrics`` class
whose ``get_input_tensors`` builds the inputs and ``call_op`` calls the
function), and ``data/kernelbenchx_v1.json`` holds each task's description,
difficulty and, for quantization tasks, the accuracy contract (cosine
similarity, relative L1 and RMSE thresholds).

:func:`read_task` turns one such file into a :class:`~kernelsmith.task.Task`
in KernelBench form, generated here (nothing of the task is edited):

* the reference function becomes ``Model.forward`` (every parameter
  positional, in the function's order; a trailing ``_`` in-place function
  works on copies of its tensor arguments, so no side writes its inputs);
* each call the test harness makes becomes an extra input set
  ``kbx_case_<i>`` (the harness runs with the function replaced by a
  recorder that stops at call ``i``), so correctness covers the harness's
  corner cases and random modes;
* each performance shape becomes an input function ``kbx_shape_<k>``; up to
  three of them, spread from the first to the last, are the task's timing
  shapes (``TaskConfig.timing_shapes``: each timed on its own, the speedup
  their geometric mean); ``get_inputs`` is one shape (the first by
  default), which the correctness trials draw;
* the category (its folder: one of 15) is ``TaskConfig.category``; the
  quantization contract is ``TaskConfig.comparison``, which the evaluator's
  output comparison honours instead of atol/rtol.

Tensors the harness puts on ``'cuda'`` go to the worker's device instead
(``.cuda()`` and ``device='cuda'`` are rewritten to the default device, which
the worker sets), so the same task runs on the host for tests. Floating
inputs are cast to the task's dtype as for every kernelsmith task: float16
and bfloat16 for the ``_fp16`` / ``_bf16`` files, else float32.

The number of harness calls and of performance shapes is found statically
(loops over literal ranges and tuples are unrolled; nothing of the task runs
in the process that loads it). A file whose counts depend on run-time values,
whose function is missing, or whose reference is not a tensor function (the
optimizer tasks return a ``torch.optim`` object) is not read:
:func:`read_suite` lists it with the reason.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from .task import COMPARISON_KEYS, Task, TaskConfig, TaskError
from ._astutil import parse as parse_source
from .config import from_dict, to_dict

SEPARATOR = "#" * 146
#: the suite's operator categories (its folders)
CATEGORIES = (
    "Activation",
    "Convolution",
    "Fusion",
    "Index",
    "LinearAlgebra",
    "Loss",
    "Math",
    "MatrixMultiply",
    "Normalization",
    "Optimizer",
    "Pooling",
    "Quantization",
    "Random",
    "Reduce",
    "SpatialOps",
)
TASKS_DIR = ("data", "kernelbenchx")
METADATA_FILE = ("data", "kernelbenchx_v1.json")
PERF_DIR = ("metrics", "golden_metrics")
#: names of the generated input functions
CASE_PREFIX = "kbx_case_"
SHAPE_PREFIX = "kbx_shape_"


class UnreadableTask(TaskError):
    """A KernelBench-X file that cannot be read as a task; the message says why."""


@dataclass(frozen=True)
class TaskFile:
    """One KernelBench-X task file."""

    path: Path
    category: str
    #: the suite's root (the folder holding data/kernelbenchx), if known
    root: Optional[Path] = None

    @property
    def stem(self) -> str:
        return self.path.stem

    @property
    def key(self) -> str:
        return f"{self.category}/{self.stem}" if self.category else self.stem


@dataclass
class Unreadable:
    key: str
    path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"key": self.key, "path": self.path, "reason": self.reason}


# -- layout -------------------------------------------------------------------


#: the performance shapes timed (TaskConfig.timing_shapes): at most this many
#: of a task's, spread evenly from the first to the last; each is timed on
#: its own (16 shapes would take 16 timings per evaluation), the others stay
#: input functions a task.yaml may list instead
MAX_TIMED_SHAPES = 3


def timed_shapes(shapes: list) -> list:
    """Up to :data:`MAX_TIMED_SHAPES` of ``shapes``, evenly spread, the first
    and the last always among them; one shape: none (``get_inputs`` is it)."""
    if len(shapes) <= 1:
        return []
    if len(shapes) <= MAX_TIMED_SHAPES:
        return list(shapes)
    step = (len(shapes) - 1) / (MAX_TIMED_SHAPES - 1)
    return [shapes[round(i * step)] for i in range(MAX_TIMED_SHAPES)]


def find_root(path: str | Path) -> Optional[Path]:
    """The suite root (the folder with ``data/kernelbenchx``) at or above
    ``path``, else None."""
    p = Path(path).resolve()
    for folder in [p, *p.parents]:
        if folder.joinpath(*TASKS_DIR).is_dir():
            return folder
    return None


def is_task_file(path: str | Path) -> bool:
    """A ``.py`` file with KernelBench-X's separator line (146 ``#``)."""
    p = Path(path)
    if not p.is_file() or p.suffix != ".py":
        return False
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(line.strip() == SEPARATOR for line in text.splitlines())


def is_suite(path: str | Path) -> bool:
    """A folder of KernelBench-X tasks: the repository (or a copy with its
    ``data/kernelbenchx``), that folder itself, or one category folder."""
    p = Path(path)
    if not p.is_dir():
        return False
    if p.joinpath(*TASKS_DIR).is_dir():
        return True
    if p.joinpath(TASKS_DIR[-1]).is_dir():  # the data/ folder
        p = p.joinpath(TASKS_DIR[-1])
    if p.name == TASKS_DIR[-1] and any(d.is_dir() and d.name in CATEGORIES for d in p.iterdir()):
        return True
    return p.name in CATEGORIES and any(is_task_file(f) for f in sorted(p.glob("*.py"))[:3])


def discover(path: str | Path) -> list[TaskFile]:
    """The task files under ``path`` (see :func:`is_suite`), by category and name."""
    p = Path(path).resolve()
    root = find_root(p)
    if p.joinpath(*TASKS_DIR).is_dir():
        base = p.joinpath(*TASKS_DIR)
    elif p.joinpath(TASKS_DIR[-1]).is_dir():
        base = p.joinpath(TASKS_DIR[-1])
    else:
        base = p
    folders = (
        [base]
        if base.name in CATEGORIES
        else sorted(d for d in base.iterdir() if d.is_dir() and not d.name.startswith((".", "_")))
    )
    found = []
    for folder in folders:
        for f in sorted(folder.glob("*.py")):
            if not f.name.startswith("_") and is_task_file(f):
                found.append(TaskFile(f, folder.name, root))
    return found


def _task_file(path: Path) -> TaskFile:
    path = path.resolve()
    root = find_root(path)
    return TaskFile(path, path.parent.name, root)


# -- static counting ----------------------------------------------------------


class _Uncountable(Exception):
    pass


_SAFE = {
    "range": range,
    "len": len,
    "zip": zip,
    "enumerate": enumerate,
    "list": list,
    "tuple": tuple,
    "reversed": reversed,
    "sorted": sorted,
    "min": min,
    "max": max,
    "abs": abs,
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "dict": dict,
    "set": set,
    "sum": sum,
    "True": True,
    "False": False,
    "None": None,
}
_STATIC_NODES = (
    ast.Expression,
    ast.Constant,
    ast.Tuple,
    ast.List,
    ast.Set,
    ast.Dict,
    ast.Name,
    ast.Load,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.Subscript,
    ast.Slice,
    ast.Call,
    ast.keyword,
    ast.operator,
    ast.unaryop,
    ast.boolop,
    ast.cmpop,
    ast.Attribute,
    ast.ListComp,
    ast.comprehension,
    ast.Store,
    ast.GeneratorExp,
)
_MISSING = object()


def _static(node: ast.AST, env: dict[str, Any]) -> Any:
    """The value of a pure expression over literals, static names and a few
    builtins (range, len, zip, ...), else _Uncountable."""
    for sub in ast.walk(node):
        if not isinstance(sub, _STATIC_NODES):
            raise _Uncountable(f"line {getattr(node, 'lineno', '?')}: {type(sub).__name__} is not static")
        if isinstance(sub, ast.Attribute) and sub.attr not in ("items", "keys", "values"):
            raise _Uncountable(f"line {getattr(node, 'lineno', '?')}: .{sub.attr} is not static")
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in env and sub.id not in _SAFE:
            raise _Uncountable(f"line {getattr(node, 'lineno', '?')}: '{sub.id}' is not known before running")
    try:
        return eval(
            compile(ast.Expression(node), "<kbx static>", "eval"),  # noqa: S307 - whitelisted nodes/names
            {"__builtins__": {}, **_SAFE},
            dict(env),
        )
    except Exception as exc:  # noqa: BLE001
        raise _Uncountable(f"line {getattr(node, 'lineno', '?')}: {exc}") from None


def _bind(target: ast.AST, value: Any, env: dict[str, Any]) -> None:
    """Assign ``value`` (or _MISSING: unknown) to a for/assign target."""
    if isinstance(target, ast.Name):
        if value is _MISSING:
            env.pop(target.id, None)
        else:
            env[target.id] = value
    elif isinstance(target, (ast.Tuple, ast.List)):
        values: Any = _MISSING
        if value is not _MISSING:
            try:
                values = list(value)
            except TypeError:
                values = _MISSING
            if values is not _MISSING and len(values) != len(target.elts):
                values = _MISSING
        for i, elt in enumerate(target.elts):
            _bind(elt, values[i] if values is not _MISSING else _MISSING, env)
    # attributes and subscripts bind nothing the counter reads


def _forget_changed(node: ast.AST, env: dict[str, Any]) -> None:
    """Names that ``node`` may change drop out of what is known: assigned
    ones, and those whose methods are called or items set (a list that
    grows at run time must not be unrolled at its earlier length)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            env.pop(sub.id, None)
        elif (
            isinstance(sub, ast.Attribute)
            and isinstance(sub.value, ast.Name)
            and sub.attr not in ("items", "keys", "values")
        ):
            env.pop(sub.value.id, None)
        elif (
            isinstance(sub, ast.Subscript)
            and isinstance(sub.ctx, (ast.Store, ast.Del))
            and isinstance(sub.value, ast.Name)
        ):
            env.pop(sub.value.id, None)


class _Counter:
    """Counts how often ``is_target(call)`` calls happen when a block runs,
    unrolling loops over static sequences; _Uncountable where that cannot be
    known without running it."""

    def __init__(self, is_target: Callable[[ast.Call], bool], stem: str, defs: dict[str, ast.FunctionDef]) -> None:
        self.is_target = is_target
        self.stem = stem
        self.defs = defs
        self.stack: list[str] = []

    def _has_target(self, node: ast.AST) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and (
                self.is_target(sub) or (isinstance(sub.func, ast.Name) and sub.func.id in self.defs)
            ):
                return True
        return False

    def expr(self, node: Optional[ast.AST], env: dict[str, Any]) -> int:
        if node is None:
            return 0
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            if not self._has_target(node):
                return 0
            return self._comprehension(node, env)
        if isinstance(node, ast.Lambda):
            if self._has_target(node):
                raise _Uncountable(f"line {node.lineno}: a lambda calls the function")
            return 0
        if isinstance(node, ast.Name) and node.id == self.stem and isinstance(node.ctx, ast.Load):
            raise _Uncountable(f"line {node.lineno}: '{self.stem}' is used as a value, not called")
        n = 0
        if isinstance(node, ast.Call):
            if self.is_target(node):
                n += 1
            elif isinstance(node.func, ast.Name) and node.func.id in self.defs:
                n += self.function(node.func.id, env)
            if not (isinstance(node.func, ast.Name) and node.func.id == self.stem):
                n += self.expr(node.func, env)
            for a in node.args:
                n += self.expr(a, env)
            for k in node.keywords:
                n += self.expr(k.value, env)
            return n
        for child in ast.iter_child_nodes(node):
            n += self.expr(child, env)
        return n

    def _comprehension(self, node: Any, env: dict[str, Any]) -> int:
        local = dict(env)
        combos = [local]
        for gen in node.generators:
            if gen.ifs:
                raise _Uncountable(f"line {node.lineno}: a filtered comprehension calls the function")
            nxt = []
            for e in combos:
                for value in self._sequence(gen.iter, e):
                    e2 = dict(e)
                    _bind(gen.target, value, e2)
                    nxt.append(e2)
            combos = nxt
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        return sum(self.expr(p, e) for e in combos for p in parts)

    def _sequence(self, node: ast.AST, env: dict[str, Any]) -> list[Any]:
        """The values a loop runs over (_MISSING where a value is unknown but
        the length is: a literal tuple of non-literal items)."""
        if isinstance(node, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in node.elts):
            values = []
            for elt in node.elts:
                try:
                    values.append(_static(elt, env))
                except _Uncountable:
                    values.append(_MISSING)
            return values
        value = _static(node, env)
        try:
            return list(value)
        except TypeError:
            raise _Uncountable(f"line {node.lineno}: not a sequence") from None

    def function(self, name: str, env: dict[str, Any]) -> int:
        if name in self.stack:
            raise _Uncountable(f"'{name}' calls itself")
        self.stack.append(name)
        try:
            fn = self.defs[name]
            local = {k: v for k, v in env.items()}
            for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs:
                local.pop(a.arg, None)
            return self.block(fn.body, local)
        finally:
            self.stack.pop()

    def block(self, stmts: list[ast.stmt], env: dict[str, Any]) -> int:
        n = 0
        for st in stmts:
            if isinstance(
                st,
                (
                    ast.FunctionDef,
                    ast.AsyncFunctionDef,
                    ast.ClassDef,
                    ast.Import,
                    ast.ImportFrom,
                    ast.Pass,
                    ast.Global,
                    ast.Nonlocal,
                ),
            ):
                continue
            if isinstance(st, ast.For):
                values = self._sequence(st.iter, env)
                body_has = self._has_target(ast.Module(body=st.body, type_ignores=[]))
                if body_has and any(isinstance(s, (ast.Break, ast.Continue)) for s in ast.walk(st)):
                    raise _Uncountable(f"line {st.lineno}: break/continue in a loop that calls the function")
                for value in values:
                    _bind(st.target, value, env)
                    n += self.block(st.body, env)
                n += self.block(st.orelse, env)
                continue
            if isinstance(st, ast.While):
                if self._has_target(st):
                    raise _Uncountable(f"line {st.lineno}: a while loop calls the function")
                _forget_changed(st, env)
                continue
            if isinstance(st, ast.If):
                try:
                    taken = _static(st.test, env)
                    n += self.block(st.body if taken else st.orelse, env)
                except _Uncountable:
                    a, b = self.block(st.body, dict(env)), self.block(st.orelse, dict(env))
                    if a != b:
                        raise _Uncountable(
                            f"line {st.lineno}: the calls depend on a condition known only when it runs"
                        ) from None
                    n += a
                    _forget_changed(st, env)  # either branch may have run
                continue
            if isinstance(st, (ast.With, ast.AsyncWith)):
                n += sum(self.expr(item.context_expr, env) for item in st.items)
                n += self.block(st.body, env)
                continue
            if isinstance(st, ast.Try):
                if any(self._has_target(h) for h in st.handlers):
                    raise _Uncountable(f"line {st.lineno}: an exception handler calls the function")
                n += self.block(st.body, env) + self.block(st.orelse, env) + self.block(st.finalbody, env)
                for h in st.handlers:
                    _forget_changed(h, env)
                continue
            if isinstance(st, ast.Return):
                return n + self.expr(st.value, env)
            if isinstance(st, (ast.Break, ast.Continue, ast.Raise)):
                return n
            if isinstance(st, ast.Assign):
                n += self.expr(st.value, env)
                try:
                    value = _static(st.value, env)
                except _Uncountable:
                    value = _MISSING
                _forget_changed(st, env)
                for t in st.targets:
                    _bind(t, value, env)
                continue
            if isinstance(st, (ast.AugAssign, ast.AnnAssign)):
                n += self.expr(st.value, env)
                _forget_changed(st, env)
                if isinstance(st.target, ast.Name):
                    env.pop(st.target.id, None)
                continue
            n += self.expr(st, env)
            if not self._mutated_statically(st, env):
                _forget_changed(st, env)
        return n

    @staticmethod
    def _mutated_statically(st: ast.stmt, env: dict[str, Any]) -> bool:
        """``name.append(x)`` / ``.extend`` / ``.insert`` on a static list
        with static arguments: applied to the static value."""
        call = st.value if isinstance(st, ast.Expr) else None
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id in env
            and call.func.attr in ("append", "extend", "insert")
            and not call.keywords
        ):
            return False
        target = env[call.func.value.id]
        if not isinstance(target, list):
            return False
        try:
            args = [_static(a, env) for a in call.args]
            getattr(target, call.func.attr)(*args)
        except (_Uncountable, TypeError):
            env.pop(call.func.value.id, None)
            return True
        return True


def _count(
    tree: ast.Module,
    stem: str,
    is_target: Callable[[ast.Call], bool],
    entry: Optional[list[ast.stmt]] = None,
    defs: Optional[dict[str, ast.FunctionDef]] = None,
) -> int:
    defs = defs if defs is not None else {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    counter = _Counter(is_target, stem, defs)
    return counter.block(entry if entry is not None else tree.body, {})


# -- rewriting the harness and the performance file ---------------------------

_DROP_IMPORTS = ("data_utils", "performance_utils", "kernelbenchx", "triton")


class _ToWorkerDevice(ast.NodeTransformer):
    """'cuda' -> the worker's device; .cuda() -> .to(that device); calls of
    torch.cuda.* as statements (synchronize, seeding) dropped; the suite's
    path set-up and helper imports dropped (the adapter supplies them)."""

    def visit_Constant(self, node: ast.Constant) -> Any:
        if isinstance(node.value, str) and node.value in ("cuda", "cuda:0"):
            return ast.copy_location(ast.Call(ast.Name("_kbx_device", ast.Load()), [], []), node)
        return node

    def visit_Call(self, node: ast.Call) -> Any:
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "cuda" and not node.args and not node.keywords:
            return ast.copy_location(
                ast.Call(
                    ast.Attribute(f.value, "to", ast.Load()),
                    [ast.Call(ast.Name("_kbx_device", ast.Load()), [], [])],
                    [],
                ),
                node,
            )
        return node

    def visit_Expr(self, node: ast.Expr) -> Any:
        text = ast.unparse(node.value) if isinstance(node.value, ast.Call) else ""
        if text.startswith(("sys.path.append(", "sys.path.insert(", "torch.cuda.")):
            return ast.copy_location(ast.Pass(), node)
        return self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> Any:
        if (node.module or "").split(".")[0] in _DROP_IMPORTS:
            return ast.copy_location(ast.Pass(), node)
        return node

    def visit_Import(self, node: ast.Import) -> Any:
        kept = [a for a in node.names if a.name.split(".")[0] not in _DROP_IMPORTS]
        if not kept:
            return ast.copy_location(ast.Pass(), node)
        node.names = kept
        return node


def _rewrite(tree: ast.Module) -> str:
    return ast.unparse(ast.fix_missing_locations(_ToWorkerDevice().visit(tree)))


# -- the generated reference ----------------------------------------------------

_ADAPTER = '''

# ---------------------------------------------------------------------------
# kernelsmith: the KernelBench-X task {key} in KernelBench form (generated by
# kernelsmith.kernelbenchx from the file above; the task itself is unchanged).
# Model.forward is {stem}(...); the input sets are the calls its test harness
# makes (kbx_case_<i>) and its performance shapes (kbx_shape_<k>).
# ---------------------------------------------------------------------------
import inspect as _kbx_inspect

import torch as _kbx_torch

_KBX_NAME = {stem!r}
_KBX_PARAMS = {params!r}
_KBX_HARNESS = {harness!r}
_KBX_PERF = {perf!r}


class _KbxStop(BaseException):
    """Ends a harness run once the wanted call is recorded."""


def _kbx_device():
    # the default device: the worker draws inputs under its own device
    return str(_kbx_torch.empty(0).device)


def rand_tensor(shape, *, dtype=_kbx_torch.float32, device=None, mode="standard", outlier_prob=0.001,
                outlier_scale=50.0, low=-1.0, high=1.0):
    # the suite's data_utils helper, by its documented behaviour
    if mode == "uniform":
        return (high - low) * _kbx_torch.rand(*shape, device=device, dtype=dtype) + low
    x = _kbx_torch.randn(*shape, device=device, dtype=dtype)
    if mode == "outlier":
        hit = _kbx_torch.rand(*shape, device=x.device) < outlier_prob
        x = _kbx_torch.where(hit, _kbx_torch.randn_like(x) * outlier_scale, x)
    return x


def rand_int(shape, *, low, high, device=None, dtype=_kbx_torch.int64):
    return _kbx_torch.randint(low, high, shape, device=device, dtype=dtype)


def rand_bool(shape, *, device=None):
    return _kbx_torch.randint(0, 2, shape, device=device, dtype=_kbx_torch.bool)


def _kbx_positional(args, kwargs):
    bound = _kbx_inspect.signature({stem}).bind(*args, **kwargs)
    bound.apply_defaults()
    return [bound.arguments[name] for name in _KBX_PARAMS]


def _kbx_run(code, index, prepare=None):
    """Run ``code`` with {stem} replaced by a recorder; the arguments of its
    call number ``index`` (0-based), as forward's positional list. With
    ``prepare(scope, arm)``, calls count only after ``arm()``."""
    seen, got, armed = [0], [], [prepare is None]

    def recorder(*args, **kwargs):
        if armed[0]:
            if seen[0] == index:
                got.append(_kbx_positional(args, kwargs))
                raise _KbxStop()
            seen[0] += 1
        return {stem}(*args, **kwargs)

    scope = dict(globals())
    scope[_KBX_NAME] = recorder
    scope["__name__"] = "__kbx__"
    scope.setdefault("__file__", "<kernelbenchx>")
    try:
        exec(compile(code, "<kernelbenchx " + _KBX_NAME + ">", "exec"), scope)
        if prepare is not None:
            prepare(scope, lambda: armed.__setitem__(0, True))
    except _KbxStop:
        if got:
            return got[0]
        raise
    raise RuntimeError("the KernelBench-X harness made " + str(seen[0]) + " calls of " + _KBX_NAME
                       + "; input set " + str(index) + " does not exist")


def _kbx_case(index):
    return _kbx_run(_KBX_HARNESS, index)


class Performance_Metrics:
    """Just enough of the suite's base class to build a shape's inputs."""

    _kbx_keep = 0

    def __init__(self, op_name, dtype=None, is_backward=False, **kwargs):
        self.op_name, self.dtype, self.kwargs = op_name, dtype, kwargs
        self._kbx_inputs = []

    @property
    def input_tensors(self):
        return self._kbx_inputs

    @input_tensors.setter
    def input_tensors(self, value):
        self._kbx_inputs = _KbxShapes(value, self._kbx_keep)


class _KbxShapes(list):
    """The list of shapes, keeping only the wanted one (the others are not
    built past it: the last shapes are the largest)."""

    def __init__(self, items, keep):
        super().__init__(items)
        self.keep = keep

    def append(self, item):
        super().append(item if len(self) == self.keep else None)
        if len(self) > self.keep:
            raise _KbxStop()


def _kbx_shape(index):
    def prepare(scope, arm):
        perf = scope["performance_metrics"]()
        perf._kbx_keep = index
        try:
            perf.get_input_tensors()
        except _KbxStop:
            pass
        arm()
        perf.call_op(perf.to_cuda(perf.input_tensors[index]))

    return _kbx_run(_KBX_PERF, 0, prepare)

'''

_MODEL = '''

class Model(_kbx_torch.nn.Module):
    """KernelBench-X {key}: forward({signature}) returns {stem}({signature}){note}."""

    def __init__(self):
        super().__init__()

    def forward(self, {signature}):
{body}

'''


def _params(fn: ast.FunctionDef, filename: str) -> tuple[list[str], list[str]]:
    """(positional parameter names, keyword-only names) of the reference."""
    a = fn.args
    if a.vararg is not None or a.kwarg is not None:
        raise UnreadableTask(f"{filename}: {fn.name}() takes *args or **kwargs; forward needs named parameters")
    positional = [p.arg for p in a.posonlyargs + a.args]
    return positional, [p.arg for p in a.kwonlyargs]


def _load_metadata(root: Optional[Path]) -> dict[str, dict[str, Any]]:
    if root is None or not root.joinpath(*METADATA_FILE).is_file():
        return {}
    try:
        data = json.loads(root.joinpath(*METADATA_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(item.get("file", "")): item for item in data if isinstance(item, dict)}


_CONTRACT_TEXT = re.compile(r"cosine_sim\s*>=\s*([0-9.]+).*?l1_relative\s*<=\s*([0-9.]+).*?rmse\s*<=\s*([0-9.]+)", re.S)


def _comparison(meta: dict[str, Any], reference: str) -> dict[str, float]:
    """The accuracy contract: the metadata's precision_thresholds, else the
    one the reference's docstring states."""
    found = meta.get("precision_thresholds")
    if isinstance(found, dict) and found:
        return {k: float(found[k]) for k in COMPARISON_KEYS if k in found}
    match = _CONTRACT_TEXT.search(reference)
    if match:
        return dict(zip(COMPARISON_KEYS, (float(g) for g in match.groups())))
    return {}


def _dtype_of(stem: str) -> str:
    if stem.endswith("_fp16"):
        return "float16"
    if stem.endswith("_bf16"):
        return "bfloat16"
    return "float32"


def _is_append_to_inputs(call: ast.Call) -> bool:
    f = call.func
    return (
        isinstance(f, ast.Attribute)
        and f.attr == "append"
        and isinstance(f.value, ast.Attribute)
        and f.value.attr == "input_tensors"
        and isinstance(f.value.value, ast.Name)
        and f.value.value.id == "self"
    )


def _perf_shapes(source: str, filename: str) -> int:
    """How many shapes ``performance_metrics.get_input_tensors`` builds."""
    tree = parse_source(source, filename=filename)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "performance_metrics"), None)
    if cls is None:
        raise _Uncountable("no class performance_metrics")
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    for needed in ("get_input_tensors", "call_op", "to_cuda"):
        if needed not in methods:
            raise _Uncountable(f"performance_metrics has no {needed}()")
    body = methods["get_input_tensors"].body
    # a list assigned at once: its length, when static
    for st in body:
        if isinstance(st, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "input_tensors" for t in st.targets
        ):
            v = st.value
            if isinstance(v, (ast.List, ast.Tuple)) and v.elts:
                return len(v.elts)
            if isinstance(v, ast.ListComp):
                counter = _Counter(lambda c: False, "", {})
                combos = 1
                for gen in v.generators:
                    if gen.ifs:
                        raise _Uncountable("a filtered list of shapes")
                    combos *= len(counter._sequence(gen.iter, {}))
                return combos
    return _Counter(_is_append_to_inputs, "", {}).block(body, {})


def read_task(path: str | Path, *, timing_shape: int = 0, backend: Optional[str] = None, **overrides: Any) -> Task:
    """One KernelBench-X task file as a Task (see the module docstring).
    ``timing_shape``: which performance shape ``get_inputs`` (the timed
    shape) is; ``backend`` and ``overrides`` (TaskConfig fields) as for
    :meth:`Task.load`. :class:`UnreadableTask` says why a file is not read."""
    tf = _task_file(Path(path))
    return _read(tf, timing_shape=timing_shape, backend=backend, overrides=overrides, metadata=_load_metadata(tf.root))


def _read(
    tf: TaskFile,
    *,
    timing_shape: int,
    backend: Optional[str],
    overrides: dict[str, Any],
    metadata: dict[str, dict[str, Any]],
) -> Task:
    name = str(tf.path)
    text = tf.path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    cut = next((i for i, line in enumerate(lines) if line.strip() == SEPARATOR), None)
    if cut is None:
        raise UnreadableTask(f"{name}: no separator line ({len(SEPARATOR)} '#'): not a KernelBench-X task file")
    reference, harness = "".join(lines[:cut]).rstrip() + "\n", "".join(lines[cut + 1 :])
    stem = tf.stem
    try:
        top = parse_source(reference, filename=name)
    except SyntaxError as exc:
        raise UnreadableTask(f"{name}: the reference does not parse: {exc.msg} (line {exc.lineno})") from None
    fn = next((n for n in top.body if isinstance(n, ast.FunctionDef) and n.name == stem), None)
    if fn is None:
        raise UnreadableTask(f"{name}: no function {stem}() above the separator (the suite's entry contract)")
    if "torch.optim." in reference:
        raise UnreadableTask(
            f"{name}: {stem}() returns a torch.optim optimizer whose step() the harness runs, "
            "not tensors that a forward returns"
        )
    if any(isinstance(n, ast.Name) and n.id in ("Model", "get_inputs", "get_init_inputs") for n in ast.walk(top)):
        raise UnreadableTask(f"{name}: the reference uses the names Model/get_inputs, which the adapter defines")
    positional, kwonly = _params(fn, name)
    try:
        htree = parse_source(harness, filename=name)
    except SyntaxError as exc:
        raise UnreadableTask(f"{name}: the test harness does not parse: {exc.msg} (line {exc.lineno})") from None
    # a harness that defines the function itself would test its own copy
    htree.body = [n for n in htree.body if not (isinstance(n, ast.FunctionDef) and n.name == stem)]

    def is_call(call: ast.Call) -> bool:
        return isinstance(call.func, ast.Name) and call.func.id == stem

    try:
        n_cases = _count(htree, stem, is_call)
    except _Uncountable as exc:
        raise UnreadableTask(
            f"{name}: the test harness's calls of {stem}() cannot be counted without running it ({exc})"
        ) from None
    if n_cases == 0:
        raise UnreadableTask(f"{name}: the test harness never calls {stem}()")
    harness_code = _rewrite(htree)

    perf_code, n_shapes, perf_note = "", 0, ""
    perf_path = tf.root.joinpath(*PERF_DIR, f"{stem}_perf.py") if tf.root is not None else None
    if perf_path is not None and perf_path.is_file():
        perf_source = perf_path.read_text(encoding="utf-8")
        try:
            n_shapes = _perf_shapes(perf_source, str(perf_path))
            perf_code = _rewrite(parse_source(perf_source, filename=str(perf_path)))
        except (_Uncountable, SyntaxError) as exc:
            perf_note = f"performance shapes not read ({exc}): the harness's last call is timed"
            n_shapes = 0
    else:
        perf_note = "no golden_metrics file: the harness's last call is timed"
    if n_shapes and not 0 <= timing_shape < n_shapes:
        raise UnreadableTask(f"{name}: timing shape {timing_shape} asked for, the task has {n_shapes}")

    meta = metadata.get(f"{tf.category}/{tf.path.name}", {})
    comparison = _comparison(meta, reference)
    params = positional + kwonly
    signature = ", ".join(params)
    call = ", ".join(positional + [f"{k}={k}" for k in kwonly])
    body = []
    note = ""
    fresh = f"{signature}, = _kbx_fresh({signature})" if len(params) == 1 else f"{signature} = _kbx_fresh({signature})"
    in_place = stem.endswith("_")
    if in_place:  # an in-place function: both sides work on copies
        body.append(f"        {fresh}")
        note = " on copies of its tensor arguments (it works in place)"
    elif "inplace" in params:  # inplace=True: the same, so no side writes the caller's tensors
        body.append(f"        if inplace:\n            {fresh}")
        note = " (with inplace=True on copies of its tensor arguments)"
    complex_out = re.search(r"\bfft|\beig|complex|polar", reference) is not None
    result = f"{stem}({call})"
    body.append(f"        return _kbx_real({result})" if complex_out else f"        return {result}")
    if complex_out:
        note += "; complex outputs as view_as_real"
    source = reference + _ADAPTER.format(
        key=tf.key, stem=stem, params=tuple(params), harness=harness_code, perf=perf_code
    )
    if in_place or "inplace" in params:
        source += (
            "\n\ndef _kbx_fresh(*values):\n"
            "    return tuple(v.clone() if isinstance(v, _kbx_torch.Tensor) else v for v in values)\n"
        )
    if complex_out:
        source += (
            "\n\ndef _kbx_real(out):\n"
            "    if isinstance(out, _kbx_torch.Tensor):\n"
            "        return _kbx_torch.view_as_real(out) if out.is_complex() else out\n"
            "    if isinstance(out, (tuple, list)):\n"
            "        return type(out)(_kbx_real(o) for o in out) if isinstance(out, tuple) else "
            "[_kbx_real(o) for o in out]\n"
            "    return out\n"
        )
    source += _MODEL.format(key=tf.key, stem=stem, signature=signature, body="\n".join(body), note=note)
    cases = [f"{CASE_PREFIX}{i}" for i in range(n_cases)]
    shapes = [f"{SHAPE_PREFIX}{k}" for k in range(n_shapes)]
    for i in range(n_cases):
        source += f"\ndef {CASE_PREFIX}{i}():\n    return _kbx_case({i})\n"
    for k in range(n_shapes):
        source += f"\ndef {SHAPE_PREFIX}{k}():\n    return _kbx_shape({k})\n"
    timed = shapes[timing_shape] if shapes else cases[-1]
    source += (
        f"\n\ndef get_inputs():\n    # the timed shape: {perf_note or f'performance shape {timing_shape}'}\n"
        f"    return {timed}()\n\n\ndef get_init_inputs():\n    return []\n"
    )

    description = str(meta.get("description") or "").strip()
    preface = f"KernelBench-X task {tf.key} (category {tf.category})."
    if comparison:
        preface += (
            " Accuracy contract (instead of atol/rtol): cosine similarity >= "
            f"{comparison.get('cosine_sim', 0.99)}, relative L1 <= {comparison.get('l1_relative', 0.01)}, "
            f"RMSE <= {comparison.get('rmse', 0.01)}."
        )
    config = TaskConfig(
        name=stem,
        dtype=_dtype_of(stem),
        extra_inputs=cases,
        timing_shapes=timed_shapes(shapes),
        category=tf.category,
        comparison=comparison,
        description=(preface + (" " + description if description else "")).strip(),
        difficulty=str(meta.get("difficulty") or ""),
    )
    data = to_dict(config)
    if backend is not None:
        data["backend"] = backend
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        config = from_dict(TaskConfig, data)
        return Task(reference_source=source, config=config, path=str(tf.path))
    except (TaskError, ValueError) as exc:
        raise UnreadableTask(f"{name}: {exc}") from None


def read_suite(path: str | Path, **kwargs: Any) -> tuple[list[tuple[TaskFile, Task]], list[Unreadable]]:
    """Every task under ``path`` read (``kwargs`` as for :func:`read_task`),
    and the files that could not be, each with the reason."""
    files = discover(path)
    metadata = _load_metadata(files[0].root if files else None)
    read, unreadable = [], []
    for tf in files:
        try:
            read.append(
                (
                    tf,
                    _read(
                        tf,
                        timing_shape=int(kwargs.get("timing_shape", 0)),
                        backend=kwargs.get("backend"),
                        overrides={k: v for k, v in kwargs.items() if k not in ("timing_shape", "backend")},
                        metadata=metadata,
                    ),
                )
            )
        except TaskError as exc:
            unreadable.append(Unreadable(tf.key, str(tf.path), str(exc).split(": ", 1)[-1]))
    return read, unreadable


def write_task_dir(task: Task, folder: str | Path) -> Path:
    """The task as a task directory (reference.py + task.yaml) that
    :meth:`Task.load` reads back to the same task id: what a run keeps of
    a KernelBench-X task, whose file alone needs the suite around it."""
    import yaml

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "reference.py").write_text(task.reference_source, encoding="utf-8")
    (folder / "task.yaml").write_text(yaml.safe_dump(to_dict(task.config), sort_keys=False), encoding="utf-8")
    return folder


__all__ = [
    "CATEGORIES",
    "SEPARATOR",
    "TaskFile",
    "Unreadable",
    "UnreadableTask",
    "discover",
    "find_root",
    "is_suite",
    "is_task_file",
    "read_suite",
    "read_task",
    "write_task_dir",
]
