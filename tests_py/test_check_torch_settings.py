"""The torch-settings check (evaluator/checks/torch_settings.py): a program
may not change PyTorch's global settings, which the reference runs under
too (fewer threads for it on the host, lower matmul precision)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

RELU = Path(__file__).resolve().parent.parent / "examples" / "triton" / "relu"


def test_a_changed_setting_is_named_and_a_restored_one_is_not():
    import torch

    from kernelsmith.evaluator.checks.base import BEFORE_LOAD, CHECKPOINT, Context
    from kernelsmith.evaluator.checks.torch_settings import TorchSettings, read_settings

    check = TorchSettings()
    ctx = Context(checks_on=True)
    assert check.reasons(BEFORE_LOAD, ctx) == [] and "torch.get_num_threads()" in ctx.torch_settings
    assert check.reasons(CHECKPOINT, ctx) == []
    threads, precision = torch.get_num_threads(), torch.get_float32_matmul_precision()
    try:
        torch.set_num_threads(threads + 1)
        torch.set_float32_matmul_precision("medium" if precision != "medium" else "high")
        (reason,) = check.reasons(CHECKPOINT, ctx)
        assert f"torch.get_num_threads(): {threads} -> {threads + 1}" in reason
        assert "torch.get_float32_matmul_precision()" in reason
        assert reason.startswith("the program changed PyTorch's global settings")
    finally:
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision(precision)
    assert check.reasons(CHECKPOINT, ctx) == [] and read_settings() == ctx.torch_settings
    assert TorchSettings().reasons(CHECKPOINT, Context(checks_on=False)) == []  # the throughput benchmark's switch


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU evaluator tests run the Triton interpreter (set TRITON_INTERPRET=1)",
)
def test_a_program_that_lowers_the_references_precision_is_rejected():
    from kernelsmith.backends.base import get_backend
    from kernelsmith.evaluator import Evaluator
    from kernelsmith.task import Task

    task = Task.load(RELU)
    seed = (RELU / "seed.py").read_text()
    hack = seed.replace("class ModelNew", 'torch.set_float32_matmul_precision("medium")\n\n\nclass ModelNew', 1)
    assert hack != seed
    assert not get_backend("triton").static_check(hack).hacks  # the static checks let it through
    with Evaluator(backend="triton", workers=1, timeout_s=150, timing=False) as ev:
        honest, hacked = ev.evaluate_many([(task, seed), (task, hack)])
    assert honest.category == "ok", (honest.category, honest.error, honest.hack_reasons)
    assert hacked.category == "hacked" and not hacked.correct, (hacked.category, hacked.error)
    assert any("torch.get_float32_matmul_precision(): 'highest' -> 'medium'" in r for r in hacked.hack_reasons), (
        hacked.hack_reasons
    )
