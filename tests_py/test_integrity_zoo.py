"""Evaluator integrity v2, no false positives (issue 14): honest KernelBench
level-1 style Triton programs written for this test (tests_py/fixtures/
kb_honest/<task>/candidate.py: matmuls with tl.dot, batched matmul, softmax,
LayerNorm, reductions, GELU with @triton.heuristics, max-pool, argmax,
cumsum, a two-kernel forward, a matmul with @triton.autotune) are all
accepted with full coverage; and a level-2 style task (a convolution and
cheap elementwise ops) whose program leaves the convolution to PyTorch and
fuses the rest: rejected under the strict policy naming the convolution,
accepted under the partial one with its coverage, rejected again when the
task's minimum coverage is above what it reached.

All in one Evaluator batch on the CPU (Triton interpreter)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelsmith.evaluator import Evaluator
from kernelsmith.task import Task

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU evaluator tests run the Triton interpreter (set TRITON_INTERPRET=1)",
)

ZOO = Path(__file__).parent / "fixtures" / "kb_honest"
L2 = "l2_conv_bias_relu_scale"
#: @triton.autotune benchmarks its configs with triton.testing.do_bench,
#: which asks for the active GPU driver: under TRITON_INTERPRET=1 there is
#: none ("0 active drivers"), so this one is checked on a GPU only
#: (benchmarks/gpu_verdicts.py)
GPU_ONLY = {
    "matmul_autotune": "@triton.autotune benchmarks its configs through Triton's GPU driver "
    "(triton.testing.do_bench), which the CPU interpreter does not have "
    "(RuntimeError: 0 active drivers); verified by benchmarks/gpu_verdicts.py"
}
HONEST = sorted(p.name for p in ZOO.iterdir() if (p / "candidate.py").exists() and not p.name.startswith("l2_"))


def _show(r) -> str:
    return f"{r.category}: {r.error[:600]} {r.hack_reasons} census={r.census}\n{r.log_tail[-1200:]}"


@pytest.fixture(scope="module")
def verdicts():
    items, names = [], []
    for name in HONEST:
        items.append((Task.load(ZOO / name), (ZOO / name / "candidate.py").read_text()))
        names.append(name)  # the GPU-only one too: its failure here must be the one its skip names
    # the level-2 program under three settings of the same task
    source = (ZOO / L2 / "candidate.py").read_text()
    strict = Task.load(ZOO / L2)
    partial = Task.load(ZOO / L2)
    partial.config.policy = "partial"
    demanding = Task.load(ZOO / L2)
    demanding.config.policy, demanding.config.min_coverage = "partial", 0.9999
    items += [(strict, source), (partial, source), (demanding, source)]
    names += ["l2_strict", "l2_partial", "l2_demanding"]
    with Evaluator(backend="triton", workers=2, timeout_s=150, timing=False) as ev:
        out = ev.evaluate_many(items)
    return dict(zip(names, out))


def test_the_zoo_covers_what_the_issue_names():
    # at least 10 level-1 programs, among them tl.dot, autotune, heuristics
    # and a forward with several kernels
    assert len(HONEST) >= 10, HONEST
    sources = {name: (ZOO / name / "candidate.py").read_text() for name in HONEST}
    assert sum("tl.dot(" in s for s in sources.values()) >= 3
    assert any("@triton.autotune" in s for s in sources.values())
    assert any("@triton.heuristics" in s for s in sources.values())
    assert any(s.count("@triton.jit") >= 2 for s in sources.values())
    for name in HONEST:
        assert Task.load(ZOO / name).config.backend == "triton"
        assert "class Model(" in (ZOO / name / "reference.py").read_text()


def test_static_checks_pass_the_honest_programs():
    from kernelsmith.backends.base import get_backend

    backend = get_backend("triton")
    for name in HONEST + [L2]:
        report = backend.static_check((ZOO / name / "candidate.py").read_text())
        assert not report.hacks and not report.errors, (name, report.hacks, report.errors)


@pytest.mark.parametrize("name", HONEST)
def test_honest_level1_program_accepted_with_full_coverage(verdicts, name):
    if name in GPU_ONLY:
        pytest.skip(GPU_ONLY[name])
    r = verdicts[name]
    assert r.category == "ok" and r.correct and not r.hacked, _show(r)
    assert r.census["policy"] == "strict" and r.coverage == 1.0, r.census
    assert not r.census["foreign_us"] and r.census["own_us"], r.census
    assert not r.hack_reasons and not any("degenerate" in w for w in r.warnings), (r.hack_reasons, r.warnings)


@pytest.mark.parametrize("name", sorted(GPU_ONLY))
def test_gpu_only_program_fails_here_for_the_named_reason_only(verdicts, name):
    # what makes the skip above honest: under the interpreter the program
    # gets as far as its autotuned launch, which fails for want of a driver
    r = verdicts[name]
    assert r.category == "runtime" and "0 active drivers" in r.error, _show(r)


def test_two_kernel_forward_has_both_kernels_in_its_census(verdicts):
    r = verdicts["log_softmax_two_kernels"]
    assert {"row_lse_kernel", "normalise_kernel"} <= set(r.census["own_us"]), r.census


def test_level2_program_rejected_under_strict_policy_naming_the_convolution(verdicts):
    r = verdicts["l2_strict"]
    assert r.category == "hacked" and not r.correct, _show(r)
    assert "convolution" in " ".join(r.hack_reasons), r.hack_reasons
    assert r.census["policy"] == "strict", r.census


def test_level2_program_accepted_under_partial_policy_with_its_coverage(verdicts):
    r = verdicts["l2_partial"]
    assert r.category == "ok" and r.correct, _show(r)
    assert r.census["policy"] == "partial" and 0.0 < r.coverage < 1.0, r.census
    assert any("conv" in k for k in r.census["foreign_us"]), r.census
    assert "bias_relu_scale_kernel" in r.census["own_us"], r.census
    assert "Coverage: your kernels did" in r.render_feedback()


def test_level2_program_rejected_below_the_tasks_minimum_coverage(verdicts):
    r, partial = verdicts["l2_demanding"], verdicts["l2_partial"]
    assert partial.coverage < 0.9999
    assert r.category == "hacked", _show(r)
    assert "below the task's minimum coverage" in r.hack_reasons[0], r.hack_reasons
