"""The evaluator's own code, as the candidate found it.

The candidate runs in the worker that checks and times it, so it can try to
rewrite the checks: replace the timing harness, the comparison, the clock,
the op guard, a torch function the comparison relies on, at import time or
during a call, through any spelling the static checks cannot see
(``setattr(importlib.import_module("ti" + "me"), ...)``). A snapshot of
every function and class attribute of the modules the verdict rests on is
taken before the candidate is loaded and compared after each phase: any
replaced or deleted name rejects the candidate, naming it.

This closes the in-process route; it does not make the worker a trusted
place (a candidate can still corrupt memory through ctypes). What a
candidate cannot reach at all is listed in docs/evaluator.md ("Integrity").
"""

from __future__ import annotations

import sys
from typing import Any

#: modules whose functions and classes the verdict rests on
WATCHED = (
    "builtins",
    "time",
    "math",
    "statistics",
    "random",
    "zlib",
    "torch",
    "torch.cuda",
    "torch.autograd.profiler",
    "torch.profiler",
    "torch.utils._python_dispatch",
    "numpy",
    "kernelsmith.timing",
    "kernelsmith._core",
    "kernelsmith.backends.base",
    "kernelsmith.evaluator.worker",
    "kernelsmith.evaluator.timing",
    "kernelsmith.evaluator.correctness",
    "kernelsmith.evaluator.census",
    "kernelsmith.evaluator.guards",
    "kernelsmith.evaluator.integrity",
    "kernelsmith.evaluator.tracebacks",
    "kernelsmith.evaluator.probes",
    "kernelsmith.evaluator.protocol",
    "kernelsmith.evaluator.trials",
    "kernelsmith.evaluator.worker_timing",
    "kernelsmith.evaluator.checks",
)
#: packages every loaded module of which is watched too: the backends (whichever language) and the hack checks
PACKAGES = ("kernelsmith.backends.", "kernelsmith.evaluator.checks.")
#: classes whose methods are watched besides those defined in WATCHED modules
_CLASSES = ("torch.Tensor", "torch._C.TensorBase", "torch.cuda.Event", "torch.nn.Module")


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    obj = sys.modules.get(parts[0])
    for p in parts[1:]:
        obj = getattr(obj, p, None) if obj is not None else None
    return obj


def _watchable(obj: Any) -> bool:
    return callable(obj) or isinstance(obj, (staticmethod, classmethod, property))


class Snapshot:
    """Identity of every watched callable (and its code object)."""

    def __init__(self, backend: Any = None) -> None:
        # torch._dynamo is not imported here (3.6 s on the H100 machine, more
        # than torch): the evaluator's own steps never import it (the guard
        # and the census avoid torch's wrappers that would), and what its
        # import does to the watched names, a program's torch.compile may
        # do: see _dynamo_wrapped
        import torch

        self._disable_code = getattr(torch._disable_dynamo(_probe), "__code__", None)
        self.items: dict[tuple[str, str], tuple[Any, Any]] = {}
        self.modules: dict[str, Any] = {}
        # every loaded module of PACKAGES (every backend, whichever language;
        # every check), and the modules the task's backend names as its runtime's
        backends = sorted(n for n in list(sys.modules) if n.startswith(PACKAGES))
        for name in (*WATCHED, *backends, *getattr(backend, "runtime_modules", ())):
            if name in self.modules:
                continue
            mod = sys.modules.get(name)
            if mod is None:
                continue
            self.modules[name] = mod
            for attr, obj in list(vars(mod).items()):
                if _watchable(obj):
                    self._add(name, attr, obj)
                    if isinstance(obj, type) and getattr(obj, "__module__", "").startswith("kernelsmith"):
                        self._class(f"{name}.{attr}", obj)
        for dotted in _CLASSES:
            cls = _resolve(dotted)
            if isinstance(cls, type):
                self._class(dotted, cls)
        # per owner, its live namespace (a class's mappingproxy, a module's
        # __dict__) and its entries, so a check reads each namespace once:
        # re-creating it per name made a check 36 ms in the H200's pool
        # workers (cProfile), two or three checks per candidate
        self._groups: list[tuple[str, Any, list[tuple[str, Any, Any]]]] = []
        by_owner: dict[str, list[tuple[str, Any, Any]]] = {}
        for (owner, attr), (obj, code) in self.items.items():
            by_owner.setdefault(owner, []).append((attr, obj, code))
        for owner, entries in by_owner.items():
            holder = self.modules[owner]
            self._groups.append(
                (owner, vars(holder) if isinstance(holder, type) else getattr(holder, "__dict__", {}), entries)
            )

    def _add(self, owner: str, attr: str, obj: Any) -> None:
        self.items[(owner, attr)] = (obj, getattr(obj, "__code__", None))

    def _class(self, dotted: str, cls: type) -> None:
        self.modules[dotted] = cls
        for attr, obj in list(vars(cls).items()):
            if _watchable(obj):
                self._add(dotted, attr, obj)

    def changed(self) -> list[str]:
        """Names replaced, deleted or given new code since the snapshot."""
        out = []
        for name, mod in self.modules.items():
            if "." in name and name in sys.modules and sys.modules[name] is not mod and not isinstance(mod, type):
                out.append(f"sys.modules['{name}']")
        for owner, namespace, entries in self._groups:
            get = namespace.get
            for attr, obj, code in entries:
                now = get(attr, _MISSING)
                # a function keeps its identity when its __code__ is swapped
                if now is not obj or (code is not None and getattr(now, "__code__", None) is not code):
                    if not self._dynamo_wrapped(obj, now):
                        out.append(f"{owner}.{attr}")
        return out

    def _dynamo_wrapped(self, before: Any, now: Any) -> bool:
        """Whether ``now`` is what importing torch._dynamo makes of ``before``:
        ``torch._disable_dynamo(before)`` (torch/_dynamo/__init__.py wraps
        torch.manual_seed so). That exact wrapper, over the very function
        the snapshot saw, calls it unchanged; anything else is a patch."""
        if "torch._dynamo" not in sys.modules or self._disable_code is None or now is _MISSING:
            return False
        if getattr(now, "__code__", None) is not self._disable_code or getattr(now, "__wrapped__", None) is not before:
            return False
        return any(_cell(c) is before for c in (getattr(now, "__closure__", None) or ()))


def _probe() -> None:
    """A function to wrap: the code object of torch._disable_dynamo's
    wrapper, the same for every function it wraps."""


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


_MISSING = object()


def reason(names: list[str]) -> str:
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"the program replaced {shown}: code the evaluator's checks and timing rely on must not be patched "
        "(the verdict is not the program's to write)"
    )


__all__ = ["PACKAGES", "Snapshot", "WATCHED", "reason"]
