"""Integrity v3 (issue 29), the inputs' part, on the CPU (Triton interpreter).

Two classes of held-out hacks (tests_py/fixtures/hacks_v3, one file per
variant, its category in its first comment), each accepted before this part
with timing on:

* ``cache_*``: results cached on the input tensors' identity and version
  counters (``id()``, ``data_ptr()``, a weak reference, ``_version``). The
  refill checks now refill through the tensors' memory and keep their
  version counters, so a refilled tensor looks to the program exactly like a
  timed call's, and the cache returns the old answer.
* ``rehome_*``: an otherwise honest program that re-homes or re-classes its
  input in place, which the reference used to pay for when the timing handed
  it the same tensors. Every checked call now checks the class and layout of
  the arguments it handed over, the reference is timed on copies of its
  own, and the program's timed inputs are checked after the timing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from kernelsmith.evaluator import Evaluator
from kernelsmith.task import Task

HERE = Path(__file__).parent
HACKS = HERE / "fixtures" / "hacks_v3"
EXAMPLES = HERE.parent / "examples" / "triton"
CAND = HERE / "fixtures" / "candidates"
interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU evaluator tests run the Triton interpreter (set TRITON_INTERPRET=1)",
)

CACHED = (
    r"wrong output on the same input tensors refilled in place with new values \(same objects, data "
    r"pointers and version counters as the calls before\) \({when};.*result cached from an earlier call"
)
#: fixture -> what its reason must say
REASONS = {
    "cache_id_version": CACHED.format(when="correctness"),
    "cache_dataptr_version": CACHED.format(when="correctness"),
    "cache_weakref_version": CACHED.format(when="correctness"),
    # caches only while timed: the moves of the timed inputs between samples
    # (evaluator/timed_rotation.py) see it first, else the refill after the timing
    "cache_version_while_timed": CACHED.format(when="after timing") + r"|wrong output of a timed call after new "
    r"values were moved into the timed input tensors in place between samples .*result "
    r"cached from an earlier call while timed",
    "rehome_set_padded": r"forward changed its input #0 in place \(input set 'get_inputs', trial 0, before the "
    r"reference\): strides \(1024, 1\) -> \(262144, 256\), its memory moved \(data pointer\), "
    r"storage size 64 KiB -> 16 MiB",
    "rehome_data_strided": r"forward changed its input #0 in place \(input set 'get_inputs', trial 0, before the "
    r"reference\): strides \(1024, 1\) -> \(1024, 16384\), its memory moved",
    "rehome_class_swap": r"forward changed its input #0 in place \(input set 'get_inputs', trial 0, before the "
    r"reference\): its class was changed from torch\.Tensor to candidate\.CheckedTensor",
    "rehome_while_timed": r"forward changed its input #0 in place while timed \(timed input set \d\): "
    r"strides \(1024, 1\) -> \(262144, 256\)",
}


def _show(r) -> str:
    return f"{r.category}: {r.error[:600]} {r.hack_reasons}\n{r.log_tail[-1200:]}"


def test_the_held_out_set_has_its_variants_and_passes_the_static_checks():
    from kernelsmith.backends.base import get_backend

    backend = get_backend("triton")
    files = sorted(HACKS.glob("*.py"))
    per: dict = {}
    for p in files:
        per.setdefault(p.stem.split("_")[0], []).append(p.stem)
        first = p.read_text().splitlines()[0]
        assert first.startswith("# category: "), (p.name, first)
        report = backend.static_check(p.read_text())
        assert not report.hacks and not report.errors and not report.warnings, (p.name, report)
    for category in ("cache", "rehome"):
        assert len(per.get(category, [])) >= 3, per
    assert set(REASONS) <= {p.stem for p in files}


@pytest.fixture(scope="module")
def verdicts():
    relu = Task.load(EXAMPLES / "relu")
    names = sorted(REASONS)
    items = [(relu, (HACKS / f"{n}.py").read_text()) for n in names]
    items += [(relu, (EXAMPLES / "relu" / "seed.py").read_text()), (relu, (CAND / "relu_correct.py").read_text())]
    # timing on: two of the hacks act only while timed
    with Evaluator(backend="triton", workers=2, timeout_s=240, timing=True) as ev:
        out = ev.evaluate_many(items)
    return dict(zip(names + ["seed_relu", "relu_correct"], out))


@interpreter
@pytest.mark.parametrize("name", sorted(REASONS))
def test_v3_input_hack_rejected_with_a_reason_naming_it(verdicts, name):
    r = verdicts[name]
    assert r.category == "hacked" and r.hacked and not r.correct and r.speedup is None, _show(r)
    assert any(re.search(REASONS[name], h) for h in r.hack_reasons), r.hack_reasons


@interpreter
@pytest.mark.parametrize("name", ["seed_relu", "relu_correct"])
def test_honest_programs_stay_accepted_with_timing(verdicts, name):
    r = verdicts[name]
    assert r.category == "ok" and r.correct and not r.hack_reasons, _show(r)
    assert r.speedup is not None and r.speedup > 0 and r.ref_runtime_ms > 0, _show(r)


# -- the pieces, without a worker ------------------------------------------


def test_refill_in_place_keeps_identity_pointer_and_version():
    import torch

    from kernelsmith.evaluator.checks.refill import refill_in_place

    x = torch.zeros(4, 8)
    x.add_(1)  # a version of its own, not 0
    ident, ptr, version = id(x), x.data_ptr(), x._version
    new = torch.arange(32.0).reshape(4, 8)
    held = [x, 3]
    refill_in_place(held, [new, 3])
    assert held[0] is x and id(x) == ident and x.data_ptr() == ptr and x._version == version
    assert torch.equal(x, new)


def _refill_verdict(program, fresh=True):
    import torch

    from kernelsmith.evaluator import correctness as cmp
    from kernelsmith.evaluator.checks import Verdict
    from kernelsmith.evaluator.checks.refill import refill_checks as _refill_checks

    class _Backend:
        def synchronize(self):
            pass

    held = [torch.tensor([1.0, -2.0, 3.0])]
    program(held)  # the program saw these tensors before (a trial)
    try:
        _refill_checks(
            lambda args, where: cmp.flatten_outputs(program(args)),
            torch.relu,
            lambda: [torch.tensor([-1.0, 2.0, -3.0])],
            lambda gen: list(gen()),
            lambda xs: [x.clone() for x in xs],
            cmp,
            1e-6,
            1e-6,
            _Backend(),
            "after timing",
            held,
            fresh=fresh,
        )
    except Verdict as v:
        return v.fields
    return {"category": "ok"}


@pytest.mark.parametrize("key", ["id", "data_ptr"])
def test_a_cache_on_identity_and_version_is_caught_by_the_refill(key):
    import torch

    memo: dict = {}

    def cached(args):
        x = args[0]
        k = (id(x) if key == "id" else x.data_ptr(), x._version)
        if k not in memo:
            memo[k] = (x, torch.relu(x).clone())
        return memo[k][1]

    v = _refill_verdict(cached)
    assert v["category"] == "hacked", v
    assert "same objects, data pointers and version counters" in v["hack_reasons"][0], v
    assert "cached from an earlier call" in v["hack_reasons"][0], v
    assert _refill_verdict(lambda args: torch.relu(args[0]))["category"] == "ok"


def test_the_refill_check_runs_the_reference_on_inputs_the_program_was_not_handed():
    # a program that swaps its argument's class: the reference's expected
    # output must not come from a clone of that tensor (its clone would run
    # the program's __torch_function__, which could forge the answer)
    import torch

    class Forging(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **(kwargs or {}))
                if func is torch.relu:
                    return torch.zeros_like(out)  # the "reference" agrees with the program
                return out.as_subclass(cls) if isinstance(out, torch.Tensor) else out

    calls = {"n": 0}

    def program(args):
        calls["n"] += 1
        if calls["n"] == 1:  # honest while it was checked before
            return torch.relu(args[0])
        args[0].__class__ = Forging
        return torch.zeros(args[0].shape)  # wrong: relu is not zeros

    # (no fresh inputs: the refilled ones alone must catch it)
    v = _refill_verdict(program, fresh=False)
    assert v["category"] in ("hacked", "incorrect"), v  # the wrong answer is seen, not forged away


def test_layout_change_names_class_strides_and_memory():
    import torch

    from kernelsmith.evaluator import correctness as cmp

    x = torch.randn(4, 8)
    rec = cmp.layout([x, 2.0])
    assert cmp.layout_change(rec, [x, 2.0]) is None
    home = torch.empty(4 * 8 * 16)
    home.as_strided((4, 8), (128, 16)).copy_(x)
    x.set_(home.untyped_storage(), 0, (4, 8), (128, 16))
    k, what = cmp.layout_change(rec, [x, 2.0])
    assert k == 0 and "strides (8, 1) -> (128, 16)" in what and "data pointer" in what and "128 B -> 2 KiB" in what

    class Sub(torch.Tensor):
        pass

    y = torch.randn(3)
    rec = cmp.layout([1, y])
    y.__class__ = Sub
    k, what = cmp.layout_change(rec, [1, y])
    assert k == 1 and what.startswith("its class was changed from torch.Tensor to ") and "Sub" in what


class _HostBackend:
    name = "test"

    def synchronize(self):
        pass

    def sample_source(self, fn):
        return None

    def timing_device(self):
        return "cpu"


def test_measure_gives_the_reference_its_own_input_sets():
    import torch

    from kernelsmith.evaluator.timing import measure
    from kernelsmith.task import TimingConfig

    sets = [[torch.randn(4, 64)] for _ in range(3)]
    ref_sets = [[s[0].clone()] for s in sets]
    seen_by_ref: list = []

    def rehoming(x):  # the candidate re-homes whatever it is handed
        if x.stride() != (64 * 16, 16):
            home = torch.empty(4 * 64 * 16)
            home.as_strided((4, 64), (64 * 16, 16)).copy_(x)
            x.set_(home.untyped_storage(), 0, (4, 64), (64 * 16, 16))
        return torch.relu(x)

    def reference(x):
        seen_by_ref.append((id(x), x.stride()))
        return torch.relu(x)

    cfg = TimingConfig(warmup=1, repeats=3, cpu_max_samples=5, cpu_time_budget_s=0.2)
    measure(reference, rehoming, _HostBackend(), sets, cfg, reference_input_sets=ref_sets)
    assert seen_by_ref
    assert {i for i, _ in seen_by_ref} <= {id(s[0]) for s in ref_sets}
    assert all(stride == (64, 1) for _, stride in seen_by_ref), set(seen_by_ref)
    assert all(s[0].stride() == (64 * 16, 16) for s in sets)  # the candidate's own did change
    # without reference_input_sets both sides share the tensors, as before
    seen_by_ref.clear()
    shared = [[torch.randn(4, 64)]]
    measure(reference, rehoming, _HostBackend(), shared, cfg)
    assert any(stride == (64 * 16, 16) for _, stride in seen_by_ref)


def test_inputs_after_timing_blames_the_program_not_a_reference_that_writes_its_own():
    import torch

    from kernelsmith.evaluator import correctness as cmp
    from kernelsmith.evaluator.checks.timed_inputs import inputs_after_timing as _inputs_after_timing
    from kernelsmith.evaluator.checks.timed_inputs import own_copies as _own_copies

    clone = lambda xs: [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]  # noqa: E731
    sets = [[torch.randn(8), 1] for _ in range(2)]
    ref_sets, given, prints = _own_copies(torch, sets, clone, cmp)
    assert _inputs_after_timing(torch, cmp, sets, ref_sets, given, prints) is None
    sets[1][0].mul_(0.5)  # the program rewrote one of its inputs while timed
    assert (
        _inputs_after_timing(torch, cmp, sets, ref_sets, given, prints)
        == "forward modified its input #0 in place while timed (timed input set 1)"
    )
    sets[1][0].mul_(2.0)
    ref_sets[0][0].relu_()  # a reference that changes its own arguments: not the program's doing
    assert _inputs_after_timing(torch, cmp, sets, ref_sets, given, prints) is None
    sets[0][0].data = torch.randn(16)[::2]
    reason = _inputs_after_timing(torch, cmp, sets, ref_sets, given, prints)
    assert reason.startswith(
        "forward changed its input #0 in place while timed (timed input set 0): strides (1,) -> (2,)"
    ), reason
