"""Degenerate tasks and the probe inputs that judge them.

A task is *degenerate* when a trivial output (zeros, a constant, an input
passed through) passes its tolerance on its own inputs. KernelBench draws
level-1 inputs with ``torch.rand`` (U[0, 1)), so ReLU, LeakyReLU, ELU and
HardTanh return their input unchanged: an honest kernel's output *is* the
input, and rejecting every output equal to a trivial form rejected every
honest kernel for these tasks.

Such a task is judged on *probe* input sets besides its own: the same
shapes and dtypes, values from another distribution (``normal``: every
floating-point input drawn again with ``torch.randn_like``, sign-symmetric;
integer and other inputs unchanged). A probe set is an input set like
``extra_inputs``: the parent issues its seed, the worker runs its trial and
hands it over, the trusted referee rebuilds it from the seed and re-checks.
A trivial form that the probe tells apart from the reference is judged by
the probe set (an output that is only right on the task's own inputs fails
there as ``incorrect``); a form no applicable probe tells apart stays under
the trivial-output rule (a program returning it is ``hacked``).

A probe is skipped for the task, with the reason reported, where the
reference is undefined on it (NaN or inf where the task's own inputs give
none: a log or a square root of negative values), where it raises, where the
task has no floating-point input to draw, or where it tells none of the
trivial forms apart.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

#: input-set names of the probes start with this (no task function can: ':')
PREFIX = "probe:"
#: probe name -> what its inputs are (reports, feedback)
PROBES = {
    "normal": "every floating-point input drawn from a standard normal distribution (torch.randn_like: "
    "negative values too), same shapes and dtypes; other inputs unchanged",
}


def set_names() -> list[str]:
    """Every probe's input-set name (``probe:normal``)."""
    return [PREFIX + name for name in PROBES]


def is_probe(set_name: str) -> bool:
    return set_name.startswith(PREFIX) and set_name[len(PREFIX) :] in PROBES


def _draw(values: list[Any], probe: str) -> list[Any]:
    import torch

    if probe != "normal":
        raise ValueError(f"no probe named {probe!r} (known: {', '.join(PROBES)})")
    return [torch.randn_like(v) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values]


def input_generator(ref: Any, set_name: str) -> Optional[Callable[[], list[Any]]]:
    """What builds the inputs of ``set_name`` from the reference module: a
    task function (``get_inputs``, an ``extra_inputs`` one) or a probe (the
    task's own inputs, then the probe's values drawn over them, from the
    same seeded generator: worker and referee build the same values from
    the same seed). None where there is no such set."""
    if is_probe(set_name):
        if not hasattr(ref, "get_inputs"):
            return None
        probe = set_name[len(PREFIX) :]
        return lambda: _draw(list(ref.get_inputs()), probe)
    gen = getattr(ref, set_name, None)
    return gen if callable(gen) else None


def _finite(tensors: list[Any]) -> bool:
    import torch

    return all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point() or t.is_complex())


def assess(
    model: Any,
    forms: list[str],
    own_inputs: list[Any],
    own_outputs: list[Any],
    atol: float,
    rtol: float,
    synchronize: Callable[[], None],
) -> dict[str, Any]:
    """Which probes judge a degenerate task: ``forms`` are the trivial
    outputs that pass its tolerance on its own inputs (``own_inputs``, on
    the device, and the reference's ``own_outputs`` for them), ``model`` the
    reference model. Each probe's values are drawn over ``own_inputs`` under
    seed 0 (the trials draw theirs from the parent's seeds). Returns
    ``{"sets": [probe set names that apply], "decided": [forms some applied
    probe tells apart], "kept": [forms still under the trivial-output rule],
    "skipped": {probe: why}}``."""
    import torch

    # lazy: evaluator.correctness pulls in torch, numpy, which evaluator.probes does not load on its own
    from . import correctness as cmp

    # lazy: cycle evaluator.probes -> evaluator.checks -> evaluator.checks.replay -> evaluator.probes
    from .checks.trivial_output import trivial_outputs

    out: dict[str, Any] = {"sets": [], "decided": [], "kept": sorted(forms), "skipped": {}}
    if not forms:
        return out
    own_finite = _finite(own_outputs)
    decided: set[str] = set()
    for name in PROBES:
        if not any(isinstance(v, torch.Tensor) and v.is_floating_point() for v in own_inputs):
            out["skipped"][name] = "the task has no floating-point input to draw"
            continue
        torch.manual_seed(0)
        inputs = _draw(own_inputs, name)
        try:
            with torch.no_grad():
                outputs = cmp.snapshot(
                    cmp.flatten_outputs(model(*[v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]))
                )
            synchronize()
        except Exception as exc:  # noqa: BLE001 - the reference may refuse other values in any way
            out["skipped"][name] = f"the reference raised on it ({type(exc).__name__}: {str(exc)[:200]})"
            continue
        if own_finite and not _finite(outputs):
            bad = sum(int((~torch.isfinite(t)).sum()) for t in outputs if t.is_floating_point() or t.is_complex())
            total = sum(t.numel() for t in outputs)
            out["skipped"][name] = (
                f"the reference is undefined on it: {bad} of {total} output values are NaN or "
                "inf, where the task's own inputs give none"
            )
            continue
        still = set(trivial_outputs(cmp, outputs, inputs, atol, rtol))
        told = sorted(set(forms) - still)
        if not told:
            out["skipped"][name] = (
                f"it tells none of the trivial forms apart ({', '.join(sorted(still))} pass on it too)"
            )
            continue
        out["sets"].append(PREFIX + name)
        decided.update(told)
    out["decided"] = sorted(decided)
    out["kept"] = sorted(set(forms) - decided)
    return out


def describe(forms: list[str], probes: dict[str, Any]) -> str:
    """One line for warnings and ``kernelsmith task check``: which trivial
    forms pass, which probes judge the task, which were skipped and why."""
    if not forms:
        return "not degenerate: no trivial output (zeros, a constant, an input passed through) passes its tolerance"
    text = f"degenerate task: {', '.join(sorted(forms))} pass(es) this task's tolerance on its own inputs"
    applied = [s[len(PREFIX) :] for s in probes.get("sets", [])]
    if applied:
        text += (
            f"; judged on probe inputs too ({', '.join(applied)}), on which "
            f"{', '.join(probes.get('decided', []))} fail(s) the tolerance"
        )
    kept = probes.get("kept", [])
    if kept:
        text += (
            f"; {', '.join(kept)} still cannot be told apart: a program returning it is rejected, and the "
            "task should be tightened"
        )
    for name, why in sorted((probes.get("skipped") or {}).items()):
        text += f"; probe {name} skipped: {why}"
    return text


def warning(answer: Any) -> Optional[str]:
    """The warning for a degenerate task from the referee's answer about it
    (:meth:`Evaluator.check_task`); None for a task that is not degenerate,
    or an answer that says nothing (an error)."""
    if not isinstance(answer, dict) or "error" in answer or not answer.get("degenerate"):
        return None
    return describe(list(answer["degenerate"]), answer.get("probes") or {})
