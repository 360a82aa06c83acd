"""Integrity v3 (issue 29), phase detection, on the CPU (Triton interpreter).

Held-out hacks (tests_py/fixtures/hacks_v3/phase_*, and pygpubench's
``warmup``): honest while checked (told apart by the census's profiler or
the op guard's dispatch mode), and while timed the output of an earlier
call, from a cache keyed on the input buffer (``data_ptr``, ``id`` plus
``_version``) or on a sample of its values, with a token launch of the same
kernel so every timed call launches the same kernels. Each was accepted
with timing on (speedups 3-5 times the honest seed's on the interpreter).
Now new values are moved into the timed input tensors in place between
samples (evaluator/timed_rotation.py) and the output of the call after each
move is checked; honest programs are untouched.
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
interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU evaluator tests run the Triton interpreter (set TRITON_INTERPRET=1)",
)

MOVED = (
    r"^wrong output of a timed call after new values were moved into the timed input tensors in place between "
    r"samples \(same objects, data pointers and version counters; (sample pair \d+|the last timed call)"
    r"(, new values in one block of at most 64 elements of each tensor)?\) "
    r"\(.*\): the program returned a result cached from an earlier call while timed$"
)
FIXTURES = {
    name: HACKS / f"{name}.py"
    for name in ("phase_profiler_dataptr", "phase_profiler_value_sample", "phase_dispatch_mode_id")
}
FIXTURES["warmup"] = HERE / "fixtures" / "pygpubench" / "warmup.py"


def _show(r) -> str:
    return f"{r.category}: {r.error[:600]} {r.hack_reasons}\n{r.log_tail[-1200:]}"


def test_the_phase_fixtures_pass_the_static_checks():
    from kernelsmith.backends.base import get_backend

    backend = get_backend("triton")
    names = sorted(p.stem for p in HACKS.glob("phase_*.py"))
    assert len(names) >= 3 and set(names) <= set(FIXTURES), names
    for name in names:
        text = FIXTURES[name].read_text()
        assert text.startswith("# category: phase ("), name
        report = backend.static_check(text)
        assert not report.hacks and not report.errors and not report.warnings, (name, report)


@pytest.fixture(scope="module")
def verdicts():
    relu = Task.load(EXAMPLES / "relu")
    names = sorted(FIXTURES)
    items = [(relu, FIXTURES[n].read_text()) for n in names]
    items += [(relu, (EXAMPLES / "relu" / "seed.py").read_text())] * 2
    with Evaluator(backend="triton", workers=2, timeout_s=150, timing=True) as ev:
        out = ev.evaluate_many(items)
    return dict(zip(names + ["seed_1", "seed_2"], out))


@interpreter
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_a_program_that_caches_while_timed_is_rejected_naming_it(verdicts, name):
    r = verdicts[name]
    assert r.category == "hacked" and r.hacked and not r.correct and r.speedup is None, _show(r)
    assert any(re.search(MOVED, reason) for reason in r.hack_reasons), r.hack_reasons


@interpreter
@pytest.mark.parametrize("name", ["seed_1", "seed_2"])
def test_the_honest_seed_is_timed_with_its_inputs_moved(verdicts, name):
    r = verdicts[name]
    assert r.category == "ok" and not r.hacked and r.speedup is not None, _show(r)
    moves = r.timing["details"]["input_moves"] if "details" in (r.timing or {}) else None
    assert moves is None or moves["moves"] >= 1, r.timing


# ------------------------------------------------------ the moves on their own


def _sets(torch, n, size=256):
    return [[torch.randn(4, size), torch.randint(0, 9, (7,)), 3] for _ in range(n)]


def _hook(torch, cand, ref, last, draws):
    from kernelsmith.evaluator.timed_rotation import TimedRotation

    it = iter(draws if not callable(draws) else ())
    return TimedRotation(
        cand,
        ref,
        last,
        lambda args: torch.relu(args[0]),
        lambda got, exp: {"ok": torch.equal(got, exp), "message": "differs"},
        draw=draws if callable(draws) else (lambda n: next(it) % n),
    )


def test_moves_keep_identity_pointer_and_version_and_are_undone():
    import torch

    cand = _sets(torch, 3)
    ref = [[v.clone() if isinstance(v, torch.Tensor) else v for v in s] for s in cand]
    given = [[v.clone() if isinstance(v, torch.Tensor) else v for v in s] for s in cand]
    ids = [(id(s[0]), s[0].data_ptr(), s[0]._version) for s in cand]
    last: dict = {}
    hook = _hook(torch, cand, ref, last, [0, 5, 0, 9, 0, 17])  # first move at pair 0, then every pair
    for pair in range(3):
        hook(pair)
        for a, b in zip(cand, ref):  # both sides keep the same values
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        assert [(id(s[0]), s[0].data_ptr(), s[0]._version) for s in cand] == ids
    assert hook.moved == 3 and not torch.equal(cand[0][0], given[0][0])
    # every set is a draw but for a splice of another: a vector none had before
    assert all(not torch.equal(c[0], g[0]) for c in cand for g in given)
    hook.finish(check=False)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(cand, given))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(ref, given))


def _drive(torch, forward, pairs=12):
    """A timing's pairs: the hook before each, then one candidate call on the set its turn names."""
    cand = _sets(torch, 3)
    ref = [[v.clone() if isinstance(v, torch.Tensor) else v for v in s] for s in cand]
    last: dict = {}
    from kernelsmith.evaluator.timed_rotation import EVERY

    # the first move at pair 1, then one at every pair; the splices at
    # elements 2-65, 3-66, ... (random in a timing; here the moves must not
    # come back to the same values in step with the calls' turns)
    counter = iter(range(1, 10_000))
    hook = _hook(torch, cand, ref, last, lambda n: 0 if n == EVERY else next(counter) % n)
    for pair in range(pairs):
        hook(pair)
        args = cand[pair % 3]
        last["out"], last["args"], last["calls"] = forward(*args), args, last.get("calls", 0) + 1
    hook.finish()
    return hook


def test_an_honest_forward_passes_and_caches_on_the_buffer_or_a_value_sample_do_not():
    import torch

    assert _drive(torch, lambda x, *_: torch.relu(x)).wrong == ""
    by_ptr: dict = {}

    def ptr_cache(x, *_):
        return by_ptr.setdefault(x.data_ptr(), torch.relu(x))

    assert "cached from an earlier call" in _drive(torch, ptr_cache).wrong
    by_sample: dict = {}

    def sample_cache(x, *_):
        # four values (elements 0, 256, 512, 768): the splice (elements 1-64) misses them
        return by_sample.setdefault(tuple(x.reshape(-1)[::256].tolist()), torch.relu(x))

    assert "cached from an earlier call" in _drive(torch, sample_cache).wrong


def test_one_input_set_is_left_alone():
    import torch

    cand = _sets(torch, 1)
    hook = _hook(torch, cand, [[v.clone() if isinstance(v, torch.Tensor) else v for v in cand[0]]], {}, [0] * 10)
    hook(0)
    assert hook.moved == 0


def test_a_reference_that_fails_between_samples_blames_no_one_and_stops_the_moves():
    import torch

    from kernelsmith.evaluator.timed_rotation import TimedRotation

    cand = _sets(torch, 3)
    given = [[v.clone() if isinstance(v, torch.Tensor) else v for v in s] for s in cand]
    ref = [[v.clone() if isinstance(v, torch.Tensor) else v for v in s] for s in cand]
    last = {"out": torch.relu(cand[0][0]), "args": cand[0]}

    def expected(args):
        raise RuntimeError("out of memory")

    hook = TimedRotation(cand, ref, last, expected, lambda got, exp: {"ok": True}, draw=lambda n: 0)
    for pair in range(4):
        hook(pair)
    hook.finish()
    assert hook.wrong == "" and hook.moved == 1 and not hook.enabled
    assert all(torch.equal(a[0], b[0]) for a, b in zip(cand, given))
