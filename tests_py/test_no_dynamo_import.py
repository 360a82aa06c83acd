"""The evaluator's own steps never import torch._dynamo (3.6 s on the H100
machine's CPU, more than torch itself, on the path of every cold
evaluation), and a program that imports it (torch.compile) is not judged a
patcher for what that import does to torch.manual_seed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_zygote_warm_up_the_guard_and_the_flop_count_leave_dynamo_unimported() -> None:
    out = _run("""
        import sys, torch
        from kernelsmith.evaluator import zygote
        from kernelsmith.evaluator.guards import TorchOpGuard
        zygote.warm("triton")
        with TorchOpGuard(()) as g:
            (torch.ones(4) * 2).sum()
        print("ops", sorted(g.seen))
        from kernelsmith.timing.roofline import estimate_work
        work = estimate_work(torch.nn.Linear(16, 8), [torch.ones(4, 16)])
        print("flops", work.flops)
        print("dynamo", "torch._dynamo" in sys.modules, "inductor", "torch._inductor" in sys.modules)
    """)
    assert "dynamo False inductor False" in out, out
    # the guard still sees every aten op it is shown
    assert "'mul'" in out and "'sum'" in out, out
    assert "flops 1024" in out, out  # 2 * 4 * 16 * 8: the counter still counts


def test_dynamo_imported_after_the_snapshot_is_not_a_patch_but_a_forged_wrapper_is() -> None:
    out = _run("""
        import sys, torch
        from kernelsmith.evaluator import integrity
        before = integrity.Snapshot()
        assert "torch._dynamo" not in sys.modules
        import torch._dynamo  # what a program's torch.compile does
        assert torch.manual_seed is not torch.random.manual_seed  # dynamo wrapped it
        print("after import", before.changed())
        snap = integrity.Snapshot()
        # the same wrapper shape over another function: a patch
        torch.manual_seed = torch._disable_dynamo(lambda seed: None)
        print("forged", snap.changed())
        fresh = integrity.Snapshot()
        torch.manual_seed = lambda seed: None
        print("plain", fresh.changed())
    """)
    assert "after import []" in out, out
    assert "forged ['torch.manual_seed']" in out, out
    assert "plain ['torch.manual_seed']" in out, out
