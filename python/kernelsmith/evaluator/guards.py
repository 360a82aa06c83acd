"""Runtime guards around ``ModelNew.forward`` (imported only in workers).

:class:`TorchOpGuard` records every aten op that runs while it is active
(a ``TorchDispatchMode``, so it sees ops reached through ``torch.nn.functional``,
tensor methods and operators alike). Ops that only allocate, view, reshape or
copy memory are allowed; any other op is the candidate computing with PyTorch
instead of its own kernels. Ops issued by the backend's launch machinery
(see ``backends.base.backend_internal``) are ignored.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from torch.utils._python_dispatch import TorchDispatchMode

from .._torch_modes import without_dynamo
from ..backends.base import in_backend_internal

#: allocation, view/reshape and copy ops: no arithmetic on the data
DEFAULT_ALLOWED_OPS = frozenset(
    """
    empty empty_like empty_strided empty_permuted new_empty new_empty_strided
    zeros zeros_like ones ones_like full full_like new_zeros new_ones new_full
    fill zero fill_ zero_ scalar_tensor lift_fresh lift_fresh_copy
    view view_as _unsafe_view reshape _reshape_alias as_strided expand expand_as
    permute transpose t squeeze unsqueeze flatten unflatten movedim
    select slice narrow split split_with_sizes chunk unbind
    detach alias clone contiguous copy_ _to_copy to _copy_from _copy_from_and_resize
    resize_ set_ is_same_size _local_scalar_dense item
    resolve_conj resolve_neg conj _conj _neg_view detach_ _has_compatible_shallow_copy_type
    """.split()
)


def normalize_op(name: str) -> str:
    """'aten.add.Tensor' / 'add' / 'torch.add' -> 'add' (overload packet name)."""
    name = name.strip()
    for prefix in ("aten.", "torch.ops.aten.", "torch."):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    return name.split(".")[0]


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _storage_ptr(t: Any) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except Exception:  # noqa: BLE001 - meta tensors, odd subclasses
        return -1


class TorchOpGuard(TorchDispatchMode):
    """``tracker(inputs, outputs)``, when given, is told what every allowed
    op (a copy, a view) made from what: the kernel census follows the
    candidate's results through them (census.Census.note_derived)."""

    def __init__(
        self,
        allowed: Iterable[str] = (),
        tracker: Optional[Callable[[list, list], None]] = None,
        frozen: Optional[frozenset] = None,
    ) -> None:
        super().__init__()
        #: ``frozen``: the whole allowed set, frozen before the program was
        #: loaded (evaluator/policy.py); then DEFAULT_ALLOWED_OPS, a module
        #: global the program can rebind, is not read
        self.allowed = (
            frozenset(frozen) if frozen is not None else DEFAULT_ALLOWED_OPS | {normalize_op(a) for a in allowed}
        )
        self.seen: list[str] = []
        self.forbidden: list[str] = []
        self.tracker = tracker

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if in_backend_internal():
            return func(*args, **kwargs)
        packet = getattr(func, "_overloadpacket", func)
        name = normalize_op(getattr(packet, "__name__", str(packet)))
        if name not in self.seen:
            self.seen.append(name)
        if name not in self.allowed and f"aten.{name}" not in self.forbidden:
            self.forbidden.append(f"aten.{name}")
        result = func(*args, **kwargs)
        if self.tracker is not None and name in self.allowed:
            outputs = _tensors(result)
            # an in-place op's target (and a view's base) is what it made,
            # not what it read: a copy into a kernel's buffer from elsewhere
            # does not make the copied bytes the kernel's
            made = {_storage_ptr(t) for t in outputs}
            self.tracker([t for t in _tensors([args, kwargs]) if _storage_ptr(t) not in made], outputs)
        return result


# its first call would otherwise import torch._dynamo (3.6 s): _torch_modes
without_dynamo(TorchOpGuard)
