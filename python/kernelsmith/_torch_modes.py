"""Torch dispatch modes that run without importing torch._dynamo.

``TorchDispatchMode.__init_subclass__`` wraps every mode's
``__torch_dispatch__`` in ``torch._disable_dynamo``, whose first call imports
torch._dynamo (and with it sympy and the fx symbolic shapes): 3.6 s on the
H100 machine's CPU, more than importing torch, paid by every sandboxed
worker of a cold evaluation for the op guard and the FLOP count. (A program
that calls torch.compile under the guard imports dynamo itself and is still
rejected: tests_py/fixtures/hacks_v2/jit_aot_eager.py in test_integrity.py.)
:func:`without_dynamo` hands the wrapper the plain
method as its "disabled" form (the attribute the wrapper caches it in), so
the wrapper calls it as it is and imports nothing. The class keeps its
wrapper object (the integrity snapshot sees no name replaced).
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def without_dynamo(cls: T) -> T:
    """``cls``'s ``__torch_dispatch__`` called without importing dynamo
    (a no-op where torch does not wrap it)."""
    wrapper: Any = getattr(cls, "__dict__", {}).get("__torch_dispatch__")
    raw = getattr(wrapper, "__wrapped__", None)
    if raw is not None:
        # torch/_compile.py: inner() reads fn.__dynamo_disable, importing
        # torch._dynamo only when it is missing
        setattr(raw, "__dynamo_disable", raw)  # noqa: B010 - the literal name torch reads, unmangled
    return cls


def flop_counter_without_dynamo() -> None:
    """torch.utils.flop_counter's mode, the same way (FlopCounterMode
    enters a private TorchDispatchMode subclass)."""
    try:
        from torch.utils import flop_counter
    except ImportError:
        return
    inner = getattr(flop_counter, "_FlopCounterMode", None)
    if inner is not None:
        without_dynamo(inner)


__all__ = ["flop_counter_without_dynamo", "without_dynamo"]
