"""PyTorch's global settings, as the reference runs under them: the
program may not change them. A program that calls
``torch.set_num_threads(1)`` makes every reference op on the host run on one
core (the candidate's speedup multiplies by the thread count); one that
turns on TF32 or reduced-precision reductions, or changes the default
dtype, changes what the reference computes and how fast. None of these is
a function the integrity snapshot watches (the functions stay the same, the
state behind them changes), and the static checks do not look for them."""

from __future__ import annotations

from typing import Any

from .base import BEFORE_LOAD, CHECKPOINT, NO_SPEEDUP, Check, Context

#: (name shown, how to read it) of each setting watched; one a torch build lacks is left out
SETTINGS = (
    ("torch.get_num_threads()", lambda t: t.get_num_threads()),
    ("torch.get_num_interop_threads()", lambda t: t.get_num_interop_threads()),
    ("torch.get_default_dtype()", lambda t: str(t.get_default_dtype())),
    ("torch.get_float32_matmul_precision()", lambda t: t.get_float32_matmul_precision()),
    ("torch.are_deterministic_algorithms_enabled()", lambda t: t.are_deterministic_algorithms_enabled()),
    ("torch.backends.cuda.matmul.allow_tf32", lambda t: t.backends.cuda.matmul.allow_tf32),
    (
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
        lambda t: t.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
    ),
    (
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
        lambda t: t.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    ),
    ("torch.backends.cudnn.allow_tf32", lambda t: t.backends.cudnn.allow_tf32),
    ("torch.backends.cudnn.deterministic", lambda t: t.backends.cudnn.deterministic),
    ("torch.backends.cudnn.enabled", lambda t: t.backends.cudnn.enabled),
)


def read_settings() -> dict[str, Any]:
    """Each setting's value now (repr, so that any type compares)."""
    import torch

    values = {}
    for name, read in SETTINGS:
        try:
            values[name] = repr(read(torch))
        except Exception:  # noqa: BLE001 - not in this torch build
            continue
    return values


class TorchSettings(Check):
    name = "torch settings"
    points = (BEFORE_LOAD, CHECKPOINT)
    keeps = ("torch_settings",)
    verdict = NO_SPEEDUP

    def reasons(self, at: str, ctx: Context) -> list[str]:
        if not ctx.checks_on:
            return []
        if at == BEFORE_LOAD:
            ctx.torch_settings = read_settings()
            return []
        now = read_settings()
        changed = [
            f"{name}: {before} -> {now.get(name, 'unreadable')}"
            for name, before in ctx.torch_settings.items()
            if now.get(name) != before
        ]
        if not changed:
            return []
        return [
            f"the program changed PyTorch's global settings ({'; '.join(changed[:4])}): the reference runs under "
            "them too, so they are not the program's to change (fewer threads or lower precision for the "
            "reference is not a faster kernel)"
        ]
