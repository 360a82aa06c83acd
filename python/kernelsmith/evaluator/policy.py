"""The checks' policy values, out of the program's reach (integrity v3).

The torch-op guard and the kernel census decide by values: the allowed ops,
the kinds of housekeeping kernels, the name of the kernel range, the scalar
reads, the JIT markers. They were module globals that every check read
when it ran, so a program could widen them at import (a module's
``__dict__.update``, a set mutated in place, a constant rebound through an
alias): the static check follows none of these spellings, and the
integrity snapshot (integrity.py) watches only callables. Three parts:

* :func:`freeze` copies the values into a :class:`Policy` (frozensets and
  tuples) *before* the program is loaded; the guard and the census are
  built from that copy and read nothing else;
* :class:`Constants` fingerprints every constant (an UPPER_CASE module
  global, whatever its type) of the evaluator's and the backends' modules
  before the load, and :meth:`Constants.changed` names any that differs
  afterwards: rebound or mutated in place. :func:`checker_drift` compares
  the live guard and census with the frozen copy;
* :class:`ModuleFence` notes every attribute the program's own code reads
  or writes on a ``kernelsmith`` module, however it got the module
  (``import``, ``__import__`` or ``importlib`` under a computed name,
  ``sys.modules``): honest programs never touch the evaluator.
"""

from __future__ import annotations

import os
import re
import sys
import types
from dataclasses import dataclass
from typing import Any, Iterable, Optional
from .integrity import PACKAGES, WATCHED

_CONSTANT = re.compile(r"^_?[A-Z][A-Z0-9_]*$")


@dataclass(frozen=True)
class Policy:
    """What the checks judge by, frozen before the program is loaded."""

    allowed_ops: frozenset
    housekeeping_kernels: tuple
    kernel_range: str
    jit_markers: tuple
    runtime_prefixes: tuple
    scalar_read_ops: frozenset
    policy: str = "strict"
    min_coverage: float = 0.5


def freeze(extra_allowed: Iterable[str] = (), policy: str = "strict", min_coverage: float = 0.5) -> Policy:
    """The current (not yet program-touched) policy values, copied. Call it
    before the program is loaded."""
    from . import census, guards  # lazy: cycle evaluator.policy -> evaluator.census -> evaluator.policy

    return Policy(
        allowed_ops=frozenset(guards.DEFAULT_ALLOWED_OPS) | {guards.normalize_op(a) for a in extra_allowed},
        housekeeping_kernels=tuple((str(k), tuple(ops)) for k, ops in census._HOUSEKEEPING_KERNELS),
        kernel_range=str(census.KERNEL_RANGE),
        jit_markers=tuple(census.JIT_MARKERS),
        runtime_prefixes=tuple(census._RUNTIME_PREFIXES),
        scalar_read_ops=frozenset(census._SCALAR_READ_OPS),
        policy=str(policy),
        min_coverage=float(min_coverage),
    )


def _fingerprint(value: Any, depth: int = 0) -> Any:
    """A comparable copy of a data value (sets sorted, containers recursed)."""
    if depth > 6:
        return ("deep", id(value))
    if isinstance(value, (str, bytes, int, float, bool, type(None))):
        return value
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, tuple(sorted((_fingerprint(v, depth + 1) for v in value), key=repr)))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_fingerprint(v, depth + 1) for v in value))
    if isinstance(value, dict):
        return (
            "dict",
            tuple(sorted(((repr(k), _fingerprint(v, depth + 1)) for k, v in value.items()), key=lambda kv: kv[0])),
        )
    return ("object", id(value))


def _has_object(fp: Any) -> bool:
    if isinstance(fp, tuple):
        return (len(fp) == 2 and fp[0] in ("object", "deep")) or any(_has_object(x) for x in fp)
    return False


def _what(before: Any, now: Any) -> str:
    if isinstance(before, (set, frozenset)) and isinstance(now, (set, frozenset)):
        added, gone = sorted(map(str, set(now) - set(before))), sorted(map(str, set(before) - set(now)))
        parts = ([f"added {', '.join(added[:5])}"] if added else []) + (
            [f"removed {', '.join(gone[:5])}"] if gone else []
        )
        if parts:
            return " (" + "; ".join(parts) + ")"
    return ""


def _modules() -> list[str]:
    """The modules whose values the verdict rests on: the worker-side
    modules the integrity snapshot watches, every backend and check, and
    this one."""
    names = [n for n in WATCHED if n.startswith("kernelsmith")] + ["kernelsmith.evaluator.policy"]
    names += sorted(n for n in list(sys.modules) if n.startswith(PACKAGES) and n not in names)
    return names


class Constants:
    """Fingerprints of every UPPER_CASE global of the evaluator's and the
    backends' modules, taken before the program is loaded."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], tuple[Any, Any, Any]] = {}
        for name in _modules():
            mod = sys.modules.get(name)
            if mod is None:
                continue
            for attr, value in list(vars(mod).items()):
                if not _CONSTANT.match(attr) or callable(value) or isinstance(value, types.ModuleType):
                    continue
                fp = _fingerprint(value)
                if _has_object(fp):
                    continue  # a sentinel or an instance, not a policy value
                copy = set(value) if isinstance(value, (set, frozenset)) else None
                self.items[(name, attr)] = (mod, fp, copy)

    def changed(self) -> list[str]:
        out = []
        for (name, attr), (mod, fp, copy) in self.items.items():
            now = mod.__dict__.get(attr, _MISSING)
            if now is _MISSING:
                out.append(f"{name}.{attr} (deleted)")
            elif _fingerprint(now) != fp:
                out.append(f"{name}.{attr}{_what(copy, now) if copy is not None else ''}")
        return out


_MISSING = object()


def checker_drift(policy: Policy, guard: Any = None, census: Any = None) -> list[str]:
    """The live checkers' values that are not the frozen policy's."""
    out = []
    if guard is not None and getattr(guard, "allowed", None) != policy.allowed_ops:
        out.append("the torch-op guard's allowed ops" + _what(policy.allowed_ops, getattr(guard, "allowed", ())))
    if census is not None:
        if getattr(census, "allowed", None) != policy.allowed_ops:
            out.append("the census's allowed ops" + _what(policy.allowed_ops, getattr(census, "allowed", ())))
        if getattr(census, "policy", None) != policy:
            out.append("the census's policy values")
    return out


def drift_reason(names: list[str]) -> str:
    shown = "; ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"the program changed the evaluator's policy values: {shown}. What the checks allow is not the "
        "program's to change"
    )


class _Fenced(types.ModuleType):
    """A kernelsmith module while a program runs: its attributes read or
    written from the program's own code are noted (ModuleFence)."""

    def __getattribute__(self, attr: str) -> Any:
        fence = _fence[0]
        if fence is not None:
            fence.touch(self, attr, "read")
        return types.ModuleType.__getattribute__(self, attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        fence = _fence[0]
        if fence is not None:
            fence.touch(self, attr, "set")
        types.ModuleType.__setattr__(self, attr, value)

    def __delattr__(self, attr: str) -> None:
        fence = _fence[0]
        if fence is not None:
            fence.touch(self, attr, "deleted")
        types.ModuleType.__delattr__(self, attr)


#: the active fence (one per worker process)
_fence: list = [None]
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class ModuleFence:
    """Notes the program's reads and writes of ``kernelsmith`` modules.

    Every loaded ``kernelsmith`` module's class becomes :class:`_Fenced` (the
    same module objects: ``sys.modules`` and every reference to them stay
    as they are). An attribute access is the program's when, walking out
    from the accessing frame past the frames of other libraries (the
    standard library's ``importlib`` and ``pkgutil``, torch, triton), the
    first frame that is either the evaluator's own or the program's is the
    program's: code from one of ``program_files``, or code with no file
    (``<string>``: an ``exec``); frames of the evaluator (this package's
    files) are trusted. The access goes through (an exception here could be
    caught by the program); the verdict names it.

    ``api``: modules that are a backend's programming interface
    (``Backend.runtime_modules``: OpenCL programs call
    ``kernelsmith.opencl``): the program may import them and read their
    public names (not ``_private`` ones, not ``__dict__``), never write."""

    def __init__(self, program_files: Iterable[str], api: Iterable[str] = ()) -> None:
        self.files = {os.path.abspath(f) for f in program_files}
        self.api = set(api)
        self.touched: list[str] = []
        self.modules: list[types.ModuleType] = []

    def install(self) -> "ModuleFence":
        for name, mod in list(sys.modules.items()):
            if (name == "kernelsmith" or name.startswith("kernelsmith.")) and type(mod) is types.ModuleType:
                mod.__class__ = _Fenced
                self.modules.append(mod)
        _fence[0] = self
        return self

    def uninstall(self) -> None:
        if _fence[0] is self:
            _fence[0] = None
        for mod in self.modules:
            if type(mod) is _Fenced:
                mod.__class__ = types.ModuleType
        self.modules = []

    def _program_frame(self) -> Optional[Any]:
        # 0 this, 1 touch, 2 _Fenced's hook, 3 the code that touched the module
        frame = sys._getframe(3)
        while frame is not None:
            file = frame.f_code.co_filename
            if file in self.files or (file.startswith("<") and not file.startswith("<frozen")):
                return frame
            if file.startswith(_OURS):
                return None
            frame = frame.f_back
        return None

    def touch(self, mod: types.ModuleType, attr: str, how: str) -> None:
        _fence[0] = None  # this check's own attribute reads are not the program's
        try:
            # the import system's own reads (``__spec__``, ``__path__``) are
            # not uses; ``__dict__`` and every write or delete are
            name = types.ModuleType.__getattribute__(mod, "__name__")
            api = how == "read" and (f"{name}.{attr}" in self.api or (name in self.api and not attr.startswith("_")))
            frame = (
                None
                if api or (how == "read" and attr.startswith("__") and attr != "__dict__")
                else self._program_frame()
            )
            if frame is not None:
                note = f"{how} {name}.{attr} (line {frame.f_lineno})"
                if note not in self.touched and len(self.touched) < 50:
                    self.touched.append(note)
        finally:
            _fence[0] = self

    def reason(self) -> Optional[str]:
        if not self.touched:
            return None
        shown = ", ".join(self.touched[:4]) + (f" and {len(self.touched) - 4} more" if len(self.touched) > 4 else "")
        return (
            f"the program reached into the evaluator's own modules ({shown}): a program may not import or "
            "use kernelsmith's modules, whatever the spelling (import, __import__, importlib, sys.modules)"
        )


__all__ = ["Constants", "ModuleFence", "Policy", "checker_drift", "drift_reason", "freeze"]
