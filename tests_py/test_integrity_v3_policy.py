"""Integrity v3 (issue 29), two classes, on the CPU (Triton interpreter):

* **policy**: checks that read state the program can change. The allowed
  ops, the census's range name and its other values are frozen before the
  program loads (evaluator/policy.py) and the guard and census judge by that
  copy; the evaluator's constants are compared after; the program's own
  reads of kernelsmith modules are noted, however it got them.
* **range**: work hidden where the census trusts it. Grid callables, pre-run
  hooks and autotune hooks run as the program's code, outside the kernel
  range; the range carries a per-call token; torch ops inside a kernel range
  are judged like those outside it.

The held-out programs are tests_py/fixtures/hacks_v3/{policy,range}_*.py;
each was accepted by the evaluator before these checks (commit a5acc8d).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from kernelsmith.evaluator import Evaluator
from kernelsmith.task import Task

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU evaluator tests run the Triton interpreter (set TRITON_INTERPRET=1)",
)

HERE = Path(__file__).parent
V3 = HERE / "fixtures" / "hacks_v3"
RELU = HERE.parent / "examples" / "triton" / "relu"
MINE = sorted(p for p in V3.glob("*.py") if p.stem.split("_")[0] in ("policy", "range"))
#: needs Triton's GPU driver to benchmark two configs; its path (the
#: autotuner calling a program's hook before the launch) is covered on the
#: CPU by range_autotune_config_pre_hook: one config, whose pre_hook
#: Autotuner.run calls just before the launch, through the same wrapper
GPU_ONLY = {"range_autotune_pre_hook"}

DRIFT = r"the program changed the evaluator's policy values: "
REACHED = r"the program reached into the evaluator's own modules \("
GUARD = r"forward ran PyTorch compute ops aten\.relu"
CENSUS = r"forward's work was done outside the program's own kernels: aten::relu"
#: fixture -> every pattern one of its hack reasons must match
EXPECTED = {
    "policy_dict_update": [
        DRIFT + r"kernelsmith\.evaluator\.guards\.DEFAULT_ALLOWED_OPS \(added relu\)",
        REACHED + r".*read kernelsmith\.evaluator\.guards\.__dict__",
    ],
    # the census's attribute is rebound, but it judges by its frozen policy
    "policy_inplace_set": [
        DRIFT + r"the torch-op guard's allowed ops \(added relu\); the census's allowed ops "
        r"\(added relu\)",
        CENSUS,
    ],
    "policy_alias_import": [
        DRIFT + r"kernelsmith\.evaluator\.guards\.DEFAULT_ALLOWED_OPS \(added relu\)",
        REACHED + r".*set kernelsmith\.evaluator\.guards\.DEFAULT_ALLOWED_OPS",
    ],
    "policy_sys_modules": [
        DRIFT + r"kernelsmith\.evaluator\.guards\.DEFAULT_ALLOWED_OPS \(added relu\)",
        REACHED + r"read kernelsmith\.evaluator\.guards\.__dict__",
    ],
    # widened after the load's check and out of the fence's sight: the guard
    # judging by its frozen copy is what names the relu
    "policy_widen_in_init": [GUARD, DRIFT + r"kernelsmith\.evaluator\.guards\.DEFAULT_ALLOWED_OPS \(added relu\)"],
    "range_grid_callable": [GUARD],
    "range_pre_run_hook": [GUARD],
    "range_autotune_config_pre_hook": [GUARD],
    "range_grid_modes_off": [CENSUS],
    "range_interpreted_body": [CENSUS],
    "range_own_record_function": [REACHED + r".*read kernelsmith\.backends\.base\.backend_internal"],
    "range_own_record_function_modes_off": [
        r"forward opened profiler range\(s\) named like the evaluator's kernel range \(ks::kernel::copy_kernel\) "
        r"that the harness did not open",
        CENSUS,
    ],
}


def _show(r) -> str:
    return f"{r.category}: {r.error[:600]} {r.hack_reasons}\n{r.log_tail[-800:]}"


@pytest.fixture(scope="module")
def verdicts():
    relu = Task.load(RELU)
    with Evaluator(backend="triton", workers=2, timeout_s=150, timing=False) as ev:
        out = ev.evaluate_many([(relu, p.read_text()) for p in MINE])
    return {p.stem: r for p, r in zip(MINE, out)}


def test_the_set_has_three_variants_per_class_and_every_one_has_expectations():
    per: dict[str, list[str]] = {}
    for p in MINE:
        per.setdefault(p.stem.split("_")[0], []).append(p.stem)
    assert len(per["policy"]) >= 3 and len(per["range"]) >= 3, per
    assert set(EXPECTED) | GPU_ONLY == {p.stem for p in MINE}
    for p in MINE:
        first = p.read_text().splitlines()[0]
        assert first.startswith("# category: " + p.stem.split("_")[0]), (p.name, first)


def test_the_static_checks_let_them_through():
    from kernelsmith.backends.base import get_backend

    backend = get_backend("triton")
    for p in MINE:
        report = backend.static_check(p.read_text())
        assert not report.hacks and not report.errors and not report.warnings, (p.name, report)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_rejected_naming_what_happened(verdicts, name):
    r = verdicts[name]
    assert r.category == "hacked" and r.hacked and not r.correct, _show(r)
    for pattern in EXPECTED[name]:
        assert any(re.search(pattern, h) for h in r.hack_reasons), (pattern, r.hack_reasons)


def test_the_gpu_only_autotune_hook_fails_on_the_cpu_only_for_want_of_a_driver(verdicts):
    r = verdicts["range_autotune_pre_hook"]
    assert r.category == "runtime" and "0 active drivers" in r.error, _show(r)


# -- the parts, in this process -------------------------------------------


def test_the_checks_judge_by_the_frozen_copy_not_the_module():
    import torch

    from kernelsmith.evaluator import census as census_mod
    from kernelsmith.evaluator import guards
    from kernelsmith.evaluator.census import Census
    from kernelsmith.evaluator.policy import Constants, checker_drift, freeze

    frozen = freeze(["tanh"])
    constants = Constants()
    original = guards.DEFAULT_ALLOWED_OPS
    old_range = census_mod.KERNEL_RANGE
    guards.__dict__.update(
        DEFAULT_ALLOWED_OPS=original | {"relu"},
    )
    census_mod.KERNEL_RANGE = "ks::"
    try:
        changed = constants.changed()
        assert "kernelsmith.evaluator.guards.DEFAULT_ALLOWED_OPS (added relu)" in changed, changed
        assert "kernelsmith.evaluator.census.KERNEL_RANGE" in changed, changed
        guard = guards.TorchOpGuard(frozen=frozen.allowed_ops)
        census = Census((), cuda=False, host_memory=True, policy=frozen)
        x = torch.randn(8)
        with census.watch() as seen:
            with guard:
                torch.relu(x)
                torch.tanh(x)
        assert guard.forbidden == ["aten.relu"], guard.forbidden
        assert "aten::relu" in seen.foreign and "aten::tanh" not in seen.foreign, seen.foreign
        assert checker_drift(frozen, guard, census) == []
        guard.allowed = guard.allowed | {"relu"}  # a checker's copy rebound is named too
        assert checker_drift(frozen, guard, census) == ["the torch-op guard's allowed ops (added relu)"]
    finally:
        guards.DEFAULT_ALLOWED_OPS = original
        census_mod.KERNEL_RANGE = old_range
    assert Constants().changed() == [] and constants.changed() == []


def test_a_constant_mutated_in_place_is_named(monkeypatch):
    from kernelsmith.evaluator import census as census_mod
    from kernelsmith.evaluator.policy import Constants

    monkeypatch.setattr(census_mod, "_TEST_ONLY_OPS", {"fill_"}, raising=False)
    monkeypatch.setattr(census_mod, "_TEST_ONLY_TABLE", {"a": ["b"]}, raising=False)
    constants = Constants()
    census_mod._TEST_ONLY_OPS.add("mm")  # the same object, widened
    census_mod._TEST_ONLY_TABLE["a"].append("mm")
    assert constants.changed() == [
        "kernelsmith.evaluator.census._TEST_ONLY_OPS (added mm)",
        "kernelsmith.evaluator.census._TEST_ONLY_TABLE",
    ]


def test_the_fence_sees_every_spelling_of_an_import_and_not_the_evaluator(tmp_path):
    import kernelsmith.backends.base  # noqa: F401 - loaded, as in a worker
    import kernelsmith.evaluator.census  # noqa: F401
    import kernelsmith.evaluator.guards  # noqa: F401
    from kernelsmith.evaluator.policy import ModuleFence

    program = tmp_path / "candidate.py"
    spellings = {
        "import_module": "import importlib\nimportlib.import_module('kernelsmith.evaluator.' + 'guards').TorchOpGuard\n",
        "__import__": "__import__('kernelsmith.evaluator.guards', fromlist=['x']).normalize_op\n",
        "sys.modules": "import sys\nsys.modules['kernelsmith.evaluator.' + 'guards'].DEFAULT_ALLOWED_OPS\n",
        "vars": "import sys\nvars(sys.modules['kernelsmith.backends.base'])\n",
        "pkgutil": "import pkgutil\npkgutil.resolve_name('kernelsmith.evaluator.guards:DEFAULT_ALLOWED_OPS')\n",
        "setattr": "import sys\nsetattr(sys.modules['kernelsmith.evaluator.census'], 'X_TEST', 1)\n",
    }
    fence = ModuleFence([str(program)]).install()
    try:
        for how, text in spellings.items():
            fence.touched.clear()
            exec(compile(text, str(program), "exec"), {})  # noqa: S102 - the test's own program text
            assert fence.touched, how
        fence.touched.clear()
        from kernelsmith.evaluator.guards import normalize_op  # the evaluator's own use
        from kernelsmith.evaluator import census

        assert normalize_op("aten.add.Tensor") == "add" and census.KERNEL_RANGE
        assert fence.touched == [] and fence.reason() is None
    finally:
        fence.uninstall()
    # a backend's programming interface (OpenCL programs call kernelsmith.opencl)
    import kernelsmith.opencl  # noqa: F401

    fence = ModuleFence([str(program)], api=("kernelsmith.opencl",)).install()
    try:
        use = "from kernelsmith import opencl as ocl\nocl.build, ocl.round_up\n"
        exec(compile(use, str(program), "exec"), {})  # noqa: S102
        assert fence.touched == []
        exec(compile("import kernelsmith.opencl as o\no.__dict__\n", str(program), "exec"), {})  # noqa: S102
        assert fence.touched == ["read kernelsmith.opencl.__dict__ (line 2)"], fence.touched
    finally:
        fence.uninstall()
        sys.modules["kernelsmith.evaluator.census"].__dict__.pop("X_TEST", None)
    assert type(sys.modules["kernelsmith.evaluator.guards"]).__name__ == "module"


def test_only_the_harness_range_of_this_call_is_a_kernel():
    import torch
    from torch.profiler import record_function

    from kernelsmith.backends.base import backend_internal, census_launch, in_backend_internal, program_code
    from kernelsmith.evaluator.census import Census

    census = Census((), cuda=False, host_memory=True)
    x = torch.randn(64)
    seen_inside = []

    def callback():  # what a grid callable or hook of the program does
        seen_inside.append(in_backend_internal())
        return torch.relu(x)

    with census.watch() as record:
        with backend_internal(), census_launch("k", [x]):
            program_code(callback)()
            torch.sigmoid(x)  # inside the harness's range, not allowed: foreign all the same
        with record_function("ks::kernel::fake"):
            torch.tanh(x)
    assert seen_inside == [False]
    assert list(record.own) == ["k"], record.own
    assert {"aten::relu", "aten::sigmoid", "aten::tanh"} <= set(record.foreign), record.foreign
    assert record.forged_ranges == ["ks::kernel::fake"]
