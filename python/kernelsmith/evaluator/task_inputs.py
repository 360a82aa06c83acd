"""A task's inputs, drawn the same way in the two processes that need them:
the worker (its trials and timing) and the trusted referee (which rebuilds
a trial's inputs and model from the parent's seeds). Neither process's own
module holds them, so the referee's process imports nothing of the
worker's. torch is imported in the functions: the worker loads this module
before it loads torch (zygote.py)."""

from __future__ import annotations

from typing import Any, Callable


def _on_device(values: Any, device: str, dtype: Any) -> list[Any]:
    """Inputs on the worker's device; floating tensors in the task's dtype."""
    import torch

    return [
        (v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device=device))
        if isinstance(v, torch.Tensor)
        else v
        for v in values
    ]


def draw_inputs(gen: Callable[[], Any], device: str, dtype: Any) -> list[Any]:
    """One input set from a task's generator, on the device. On a GPU the
    generator runs with CUDA as the default device, so ``torch.rand`` and
    the like draw there: KernelBench's level-1 inputs (4096 x 393216 fp32,
    6 GiB a tensor) took seconds per set on the host, plus the copy, in the
    referee's priming and in every trial of every worker. The worker and
    the referee both draw through this function after the same seed, so
    they get the same values; a generator that cannot run with CUDA as its
    default device (host-only code) runs on the host instead, the same way
    on both sides."""
    import torch

    if device == "cuda":
        state = torch.random.get_rng_state(), torch.cuda.get_rng_state_all()
        try:
            with torch.device("cuda"):
                return _on_device(gen(), device, dtype)
        except Exception:  # noqa: BLE001 - host-only generator code: drawn on the host, as before
            torch.random.set_rng_state(state[0])
            torch.cuda.set_rng_state_all(state[1])
    return _on_device(gen(), device, dtype)


def init_inputs(ref: Any) -> list[Any]:
    """The constructor arguments, under a fixed seed: the trusted referee
    rebuilds the same Model from them."""
    import torch

    torch.manual_seed(0)
    return list(ref.get_init_inputs()) if hasattr(ref, "get_init_inputs") else []
