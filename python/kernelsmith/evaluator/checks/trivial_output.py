"""Trivial outputs: zeros, a constant, an input passed through, where the
task's tolerance cannot tell them from the reference's output (a degenerate
task: probes.py decides which forms its probe inputs tell apart)."""

from __future__ import annotations

from typing import Any, Optional

from .base import TRIAL_OUTPUT, Check, Context


def trivial_outputs(cmp: Any, expected: list[Any], inputs: list[Any], atol: float, rtol: float) -> list[str]:
    """Names of trivial outputs that pass the tolerance against ``expected``
    (zeros; a constant; an input passed through)."""
    passing = []
    for name, got in trivial_candidates(expected, inputs).items():
        if got is not None and cmp.within(got, expected, atol, rtol):
            passing.append(name)
    return passing


def trivial_candidates(expected: list[Any], inputs: list[Any]) -> dict[str, Optional[list[Any]]]:
    import torch

    floats = [e for e in expected if e.is_floating_point()]
    if not floats or len(floats) != len(expected):
        return {}
    out: dict[str, Optional[list[Any]]] = {"zeros": [torch.zeros_like(e) for e in expected]}
    # a one-element output is its own constant: "a constant" would be the
    # reference's output itself and reject every program of a task whose
    # outputs are scalars (a loss with reduction 'mean', a full sum)
    if any(e.numel() > 1 for e in expected):
        out["a constant"] = [torch.full_like(e, float(e.float().mean())) if e.numel() else e.clone() for e in expected]
    tensors = [v for v in inputs if isinstance(v, torch.Tensor)]
    for i, v in enumerate(tensors):
        if len(expected) == 1 and v.shape == expected[0].shape:
            out[f"input #{i} unchanged"] = [v.to(expected[0].dtype)]
    return out


def is_trivial(cmp: Any, got: list[Any], expected: list[Any], inputs: list[Any], forms: Any) -> Optional[str]:
    """Which trivial output (of those that pass this task's tolerance) the
    candidate returned, if any. Decided on the outputs themselves, without
    building the trivial outputs (a zeros and a constant tensor the size of
    each output, twice per trial: 12 GiB more on the device for a KernelBench
    level-1 task)."""
    if not forms:
        return None
    import torch

    if not expected or not all(e.is_floating_point() for e in expected) or len(got) != len(expected):
        return None
    tensors = all(isinstance(g, torch.Tensor) for g in got)
    # zeros before "a constant"; the same test as cmp.identical against
    # zeros_like(expected): shape, dtype, every element == 0 (NaN is not)
    if (
        "zeros" in forms
        and tensors
        and all(g.shape == e.shape and g.dtype == e.dtype and not bool(g.any()) for g, e in zip(got, expected))
    ):
        return "zeros"
    if "a constant" in forms and tensors and all(g.numel() and torch.all(g == g.reshape(-1)[0]) for g in got):
        return "a constant"
    if len(expected) == 1:
        for i, v in enumerate(v for v in inputs if isinstance(v, torch.Tensor)):
            name = f"input #{i} unchanged"
            if name in forms and v.shape == expected[0].shape and cmp.identical(got, [v.to(expected[0].dtype)]):
                return name
    return None


class TrivialOutput(Check):
    name = "trivial output"
    points = (TRIAL_OUTPUT,)

    def reasons(self, at: str, ctx: Context) -> list[str]:
        form = is_trivial(ctx.cmp, ctx.got, ctx.expected, ctx.pristine, ctx.kept_forms)
        if not form:
            return []
        return [
            f"forward returned {form} ({ctx.label}), which this task's tolerance cannot tell from the "
            "reference's output: a trivial output is never accepted"
        ]
