"""Integrity v3 (issue 29), whole-value caches while timed, on the CPU
(Triton interpreter).

Held-out hacks (tests_py/fixtures/hacks_v3/hash_*): while timed, a cache
keyed on ALL of the input's values (a SHA-1 or BLAKE2 of its bytes, a
float64 checksum through numpy) returns the output of an earlier call with
the same values, with a token launch of the same kernel; or one keyed on
the buffer and a sample of 16 values, which sees the whole moves of the
timed inputs and recomputes there. The timed input sets repeated their
values between the (at most eight) whole moves, so all four were accepted
with 4.4-5.7 times the honest seed's speedup (base bfbfbc8, see the commit
of the fixtures). Now every pair sees values no earlier call saw: before
each pair a block of each floating-point tensor takes another set's values
(evaluator/timed_rotation.py), a sample makes no more calls than there are
sets on the host clock, and a few splice-only pairs are checked. The
whole-value caches never hit on a timed call (they compute, and are no
faster than the seed); the sample-keyed one is stale at a splice and
rejected naming it. The finalists' re-timing does the same.
"""

from __future__ import annotations

import hashlib
import os
import re
import statistics
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

SPLICED = (
    r"^wrong output of a timed call after new values were moved into the timed input tensors in place between "
    r"samples \(same objects, data pointers and version counters; (sample pair \d+|the last timed call)"
    r"(, new values in one block of at most 64 elements of each tensor)?\) "
    r"\(output 0: \d+ of 16384 elements differ; .*\): the program returned a result cached from an earlier "
    r"call while timed$"
)
WHOLE = ("hash_whole_sha", "hash_whole_sum", "hash_whole_after_warmup")
STALE = ("hash_sample_per_buffer",)
#: an honest relu other than the seed (blocks of 256)
HONEST = (EXAMPLES / "relu" / "seed.py").read_text().replace("BLOCK = 1024", "BLOCK = 256")


def _show(r) -> str:
    return f"{r.category}: {r.error[:600]} {r.hack_reasons}\n{r.log_tail[-1200:]}"


def test_the_hash_fixtures_pass_the_static_checks():
    from kernelsmith.backends.base import get_backend

    backend = get_backend("triton")
    names = sorted(p.stem for p in HACKS.glob("hash_*.py"))
    assert names == sorted(WHOLE + STALE), names
    for name in names:
        text = (HACKS / f"{name}.py").read_text()
        assert text.startswith("# category: whole-value cache ("), name
        report = backend.static_check(text)
        assert not report.hacks and not report.errors and not report.warnings, (name, report)
    assert "BLOCK = 256" in HONEST


@pytest.fixture(scope="module")
def verdicts():
    relu = Task.load(EXAMPLES / "relu")
    seed = (EXAMPLES / "relu" / "seed.py").read_text()
    names = ["seed_1", *sorted(WHOLE + STALE), "honest", "seed_2"]
    texts = {n: (HACKS / f"{n}.py").read_text() for n in WHOLE + STALE}
    texts.update(seed_1=seed, seed_2=seed, honest=HONEST)
    with Evaluator(backend="triton", workers=2, timeout_s=200, timing=True) as ev:
        out = ev.evaluate_many([(relu, texts[n]) for n in names])
    return dict(zip(names, out))


@interpreter
@pytest.mark.parametrize("name", STALE)
def test_a_cache_keyed_on_the_buffer_and_a_sample_is_stale_at_a_splice(verdicts, name):
    r = verdicts[name]
    assert r.category == "hacked" and r.hacked and not r.correct and r.speedup is None, _show(r)
    assert any(re.search(SPLICED, reason) for reason in r.hack_reasons), r.hack_reasons


@interpreter
@pytest.mark.parametrize("name", WHOLE)
def test_a_cache_keyed_on_all_the_values_gains_nothing(verdicts, name):
    """Its outputs are right (it computes whenever the values are new: on
    every timed call now), so it is ``ok``; before, it was timed 4.4-5.7
    times faster than the seed in the same batch, now no faster than the
    seed's within the noise (3 times is the bound: the interpreter's spread
    is about 0.2 of the mean on the loaded machine)."""
    r = verdicts[name]
    assert r.category == "ok" and r.correct and r.speedup is not None, _show(r)
    seeds = statistics.median([verdicts["seed_1"].speedup, verdicts["seed_2"].speedup])
    assert r.speedup < 3 * seeds, (r.speedup, seeds)
    moves = r.timing["input_moves"]
    assert moves["splices"] >= 1 and moves["checked"] >= 1, moves


@interpreter
@pytest.mark.parametrize("name", ["seed_1", "seed_2", "honest"])
def test_honest_relus_are_ok_with_new_values_every_pair(verdicts, name):
    r = verdicts[name]
    assert r.category == "ok" and not r.hacked and r.speedup is not None and r.speedup > 0, _show(r)
    t = r.timing
    # a change before every pair taken (n_pairs leaves out the outlier pairs)
    assert t["input_moves"]["moves"] + t["input_moves"]["splices"] >= t["n_pairs"] >= 3, (t["input_moves"], t)
    # no more calls in a sample than there are sets (3): each call of a pair on values of its own
    assert 1 <= t["launches_per_sample"] <= t["input_sets"] == 3, t


@interpreter
def test_the_finalists_retiming_changes_its_inputs_and_checks_the_output():
    """A program caching on the buffer (or on the buffer and a sample) went
    through the finalists' re-timing, whose inputs did not move; now it is
    caught there as in a step's timing, and the honest seed is re-timed as
    before."""
    relu = Task.load(EXAMPLES / "relu")
    sources = [
        (EXAMPLES / "relu" / "seed.py").read_text(),
        (HACKS / "hash_sample_per_buffer.py").read_text(),
        (HACKS / "phase_profiler_dataptr.py").read_text(),
    ]
    with Evaluator(backend="triton", workers=1, timeout_s=300, timing=True) as ev:
        out = ev.confirm_best(relu, sources, alone=False)
    rows = {e["index"]: e for e in out["finalists"]}
    assert rows[0]["correct"] and rows[0].get("speedup") is not None and not rows[0].get("hacked"), rows[0]
    for i in (1, 2):
        assert not rows[i]["correct"] and rows[i].get("hacked") and rows[i].get("speedup") is None, rows[i]
        assert re.search(SPLICED.replace("of 16384", "of \\d+"), rows[i]["error"]), rows[i]["error"]


@interpreter
def test_a_single_timed_set_is_moved_through_a_spare_draw():
    """``timing.input_sets: 1`` was never moved (no other set to take
    values from): a cache keyed on the buffer went through. Now a spare draw
    of the generator is the other set: the seed is timed with its input
    changed before every pair, the cache is caught."""
    import dataclasses

    relu = Task.load(EXAMPLES / "relu")
    one = Task(
        reference_source=relu.reference_source,
        seed_source=relu.seed_source,
        path=relu.path,
        config=dataclasses.replace(relu.config, timing=dataclasses.replace(relu.config.timing, input_sets=1)),
    )
    sources = [(EXAMPLES / "relu" / "seed.py").read_text(), (HACKS / "phase_profiler_dataptr.py").read_text()]
    with Evaluator(backend="triton", workers=2, timeout_s=200, timing=True) as ev:
        seed, cached = ev.evaluate_many([(one, s) for s in sources])
    assert seed.category == "ok" and seed.speedup is not None, _show(seed)
    moves = seed.timing["input_moves"]
    assert seed.timing["input_sets"] == 1 and moves["moves"] + moves["splices"] >= seed.timing["n_pairs"], seed.timing
    assert cached.category == "hacked" and cached.speedup is None, _show(cached)
    assert any(re.search(SPLICED.replace("of 16384", "of \\d+"), r) for r in cached.hack_reasons), cached.hack_reasons


# ------------------------------------------------------ the splices on their own


def _sets(torch, n, size=256):
    return [[torch.randn(4, size), torch.randint(0, 9, (7,)), 3] for _ in range(n)]


def _clone(torch, sets):
    return [[v.clone() if isinstance(v, torch.Tensor) else v for v in s] for s in sets]


def _hook(torch, cand, ref, last, spare=None):
    from kernelsmith.evaluator.timed_rotation import TimedRotation

    return TimedRotation(
        cand,
        ref,
        last,
        lambda args: torch.relu(args[0]),
        lambda got, exp: {"ok": torch.equal(got, exp), "message": "differs"},
        spare=spare,
    )


def _digest(args) -> str:
    return hashlib.sha1(b"".join(v.numpy().tobytes() for v in args if hasattr(v, "numpy"))).hexdigest()


def _timing(torch, forward, n=3, pairs=300, spare=False, calls_per_pair=None):
    """A host-clock timing's calls: the hook before each pair, then
    ``calls_per_pair`` candidate calls (as many as there are sets, the
    cap), rotating over the sets; every call's values hashed."""
    cand = _sets(torch, n)
    ref = _clone(torch, cand)
    given = _clone(torch, cand)
    extra = _sets(torch, 1)[0] if spare else None
    last: dict = {}
    hook = _hook(torch, cand, ref, last, spare=(extra, _clone(torch, [extra])[0]) if spare else None)
    seen = []
    turn = 0
    for pair in range(pairs):
        hook(pair)
        for _ in range(calls_per_pair or n):
            args = cand[turn % n]
            turn += 1
            seen.append(_digest(args))
            last["out"], last["args"], last["calls"] = forward(*args), args, last.get("calls", 0) + 1
        for a, b in zip(cand, ref):  # both sides keep the same values
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    hook.finish()
    # undone exactly, the last first: the sets hold what they were given, on both sides
    assert all(torch.equal(a[0], g[0]) and torch.equal(b[0], g[0]) for a, b, g in zip(cand, ref, given))
    return hook, seen


@pytest.mark.parametrize("n,spare", [(3, False), (2, False), (8, False), (1, True)])
def test_no_timed_call_sees_values_an_earlier_call_saw(n, spare):
    import torch

    hook, seen = _timing(torch, lambda x, *_: torch.relu(x), n=n, spare=spare)
    assert len(set(seen)) == len(seen), f"{len(seen) - len(set(seen))} repeats in {len(seen)} calls"
    assert hook.wrong == "" and hook.moved + hook.spliced == 300 and hook.checked >= 2, hook.summary()


def test_without_the_splices_the_calls_repeat_values():
    """The test above can fail: with the splices off (only the whole moves)
    the sets keep their values between moves, and the calls repeat."""
    import torch

    from kernelsmith.evaluator import timed_rotation

    real = timed_rotation._splice
    timed_rotation._splice = lambda *a, **k: None
    try:
        _hook_, seen = _timing(torch, lambda x, *_: torch.relu(x), n=3, pairs=40)
    finally:
        timed_rotation._splice = real
    assert len(set(seen)) < len(seen) // 2


def test_a_whole_value_cache_never_hits_and_a_stale_sample_cache_is_caught():
    import torch

    by_value: dict = {}
    hits = [0]

    def whole(x, *_):
        key = x.numpy().tobytes()
        hits[0] += key in by_value
        return by_value.setdefault(key, torch.relu(x))

    hook, _seen = _timing(torch, whole, pairs=100)
    assert hits[0] == 0 and hook.wrong == ""
    per_buffer: dict = {}

    def sample(x, *_):
        key = (x.data_ptr(), tuple(x.reshape(-1)[::256].tolist()))  # 4 values, and the buffer
        if per_buffer.get(key[0], (None,))[0] != key:
            per_buffer[key[0]] = (key, torch.relu(x))
        return per_buffer[key[0]][1]

    hook, _seen = _timing(torch, sample, pairs=100)
    assert "new values in one block of at most 64 elements" in hook.wrong, hook.wrong


def test_splices_keep_identity_pointer_and_version():
    import torch

    cand = _sets(torch, 3)
    ref = _clone(torch, cand)
    ids = [(id(v), v.data_ptr(), v._version) for s in cand + ref for v in s[:2]]
    hook = _hook(torch, cand, ref, {})
    before = _clone(torch, cand)
    for pair in range(20):
        hook(pair)
    assert hook.spliced >= 1 and any(not torch.equal(a[0], b[0]) for a, b in zip(cand, before))
    # integer tensors take no block: only the whole moves move them, whole
    assert all(any(torch.equal(a[1], b[1]) for b in before) for a in cand)
    assert [(id(v), v.data_ptr(), v._version) for s in cand + ref for v in s[:2]] == ids
    hook.finish(check=False)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(cand, before))
    assert [(id(v), v.data_ptr(), v._version) for s in cand + ref for v in s[:2]] == ids


def test_a_single_set_takes_its_new_values_from_the_spare_draw():
    import torch

    cand = _sets(torch, 1)
    ref = _clone(torch, cand)
    given = _clone(torch, cand)
    spare = _sets(torch, 1)[0]
    drawn = spare[0].clone()  # the spare takes the set's values in turn: a permutation of the two
    hook = _hook(torch, cand, ref, {}, spare=(spare, _clone(torch, [spare])[0]))
    hook(0)
    assert hook.moved + hook.spliced == 1 and not torch.equal(cand[0][0], given[0][0])
    assert torch.equal(cand[0][0], ref[0][0])
    # every changed element is the spare's value at the same place
    changed = cand[0][0] != given[0][0]
    assert torch.equal(cand[0][0][changed], drawn[changed])
    assert torch.equal(spare[0][changed], given[0][0][changed])
    hook.finish(check=False)
    assert torch.equal(cand[0][0], given[0][0]) and torch.equal(ref[0][0], given[0][0])
    alone = _hook(torch, _sets(torch, 1), _clone(torch, _sets(torch, 1)), {})  # no spare: left alone
    alone(0)
    assert alone.moved + alone.spliced == 0


def test_a_splice_is_one_gather_and_one_multi_tensor_copy_per_dtype():
    """However many sets, sides and tensors, a splice's device work is one
    ``cat`` of the blocks and one ``_foreach_copy_`` back per dtype (on a
    GPU two launches, not a clone and a copy per block), here on the CPU
    build; set ``k``'s block then holds set ``k+1``'s values."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from kernelsmith.evaluator.timed_rotation import TimedRotation

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.work: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not func.is_view and func.overloadpacket.__name__ != "split_with_sizes":
                self.work.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    cand = [
        [torch.randn(4, 256), torch.randint(0, 9, (7,)), 3, torch.randn(100, dtype=torch.float64)] for _ in range(8)
    ]
    ref = _clone(torch, cand)
    before = _clone(torch, cand)
    versions = [v._version for s in cand + ref for v in (s[0], s[3])]
    # draws of n - 1: the first whole move at pair 3, so pair 0 is a splice
    hook = TimedRotation(cand, ref, {}, lambda a: None, lambda g, e: {"ok": True}, draw=lambda n: n - 1)
    with Ops() as ops:
        hook(0)
    assert hook.spliced == 1 and hook.moved == 0
    assert sorted(ops.work) == ["_foreach_copy_", "_foreach_copy_", "cat", "cat"], ops.work
    _whole, spots = hook.moves[-1]
    for pos, (start, length) in spots.items():
        for k, s in enumerate(cand):
            got, want = (
                s[pos].view(-1)[start : start + length],
                before[(k + 1) % 8][pos].view(-1)[start : start + length],
            )
            assert torch.equal(got, want) and torch.equal(ref[k][pos].view(-1)[start : start + length], want)
    assert [v._version for s in cand + ref for v in (s[0], s[3])] == versions
    with Ops() as ops:
        hook.undo()
    assert sorted(ops.work) == ["_foreach_copy_", "_foreach_copy_", "cat", "cat"], ops.work
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[3], b[3]) for a, b in zip(cand + ref, before + before))
