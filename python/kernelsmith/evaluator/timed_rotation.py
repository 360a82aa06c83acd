"""New values in the timed input tensors between samples, and the output of
the timed call after them checked (integrity v3, issue 29: phase
detection).

A program can tell the census's checked calls from the timed ones (the
profiler runs around every checked call: ``torch.autograd._profiler_enabled()``;
the op guard's dispatch mode; call counts) and, while timed, return the
output it computed earlier for the same input buffer, with one token launch
of the same kernel so that every timed call launches the same kernels
(pygpubench's ``warmup``; fixtures/hacks_v3/phase_*). The timed input sets
used to keep their values for the whole timing, so the last timed output was
right and nothing saw the difference.

Before EVERY pair, outside every timed window, the timed input sets change
in place, through their memory, version counters kept (the same objects,
data pointers and versions as the calls before, as refill.refill_in_place
does):

* at a few pairs drawn at random (the first among the first four pairs,
  then one pair in eight, at most :data:`MAX_ROTATIONS`) the contents move
  one set on: set ``k``'s tensors take set ``k+1``'s values, and in each
  floating-point tensor a block of at most :data:`BLOCK` elements at a
  random place takes set ``k+2``'s values at the same positions (a *whole
  move*);
* at every other pair only such a block moves (a *splice*): in each
  floating-point tensor, at one random place, set ``k``'s block takes set
  ``k+1``'s values at the same positions (fixtures/hacks_v3/hash_*: a cache
  keyed on a hash of ALL the values hit while the sets kept their values
  between the whole moves).

Every set is then a draw of the task's generator but for blocks from the
other draws at the same positions: each position's values are permuted
among the sets, set ``k`` holding, at position ``p``, set
``k + m + c_p``'s value (``m`` whole moves, ``c_p`` blocks over ``p``, mod
the number of sets). Each pair changes ``c`` over a block by one, so no
call sees the values of the call one pair before it, and a state comes back
only where every block since covered each of its positions a multiple of
the number of sets times (or once all positions the same number of times):
a hash of all the values does not hit on a timed call. The reference's own
copies change the same way, so both sides keep timing the same values. A
task with a single timed input set gets one more draw of its generator, not
timed, as the other set of the permutation (``spare``).

After each whole move, and after a few splices drawn at random (the first
among the first four pairs, then one in :data:`SPLICE_CHECK_EVERY`, at
most :data:`MAX_SPLICE_CHECKS`), the candidate's last output (of a call on
the changed values) is compared before the next pair with the reference's
output for those values; the first mismatch is kept for the timed-output
check (checks/timed_output.py). A cache keyed on the buffer (``data_ptr``,
``id``, a weak reference, the version) returns the old set's output; one
keyed on a sample of the values misses a block unless its sample falls on
it (with the buffer in the key, it sees every whole move and recomputes
there: the checked splices catch it); either one's output is wrong at the
block. After the timing every change is undone in reverse order, so the
checks after it (timed inputs against the reference's copies) see the sets
as they were given.

Cost: per whole move, a copy of every timed input tensor on each side and
one more of each tensor (held one at a time), its blocks moved as a
splice's; per splice, every side's, tensor's and set's block gathered into
one buffer per dtype and copied back by one multi-tensor copy (two device
operations per dtype, and as many again to undo it; docs/evaluator.md
"Whole-value caches" has the counts); per check, one reference call and one
comparison, none of them inside a timed window. On a GPU the
comparison synchronises the device between two samples (the L2 flush before
the next sample keeps the idle device out of its events).
"""

from __future__ import annotations

import secrets
from typing import Any, Callable, Optional

#: the most whole moves in one timing (each costs copies and one reference call)
MAX_ROTATIONS = 8
#: a block's largest length, in elements (whole moves' and splices')
BLOCK = 64
#: after the first move (among the first FIRST_WITHIN pairs), one pair in EVERY moves
FIRST_WITHIN = 4
EVERY = 8
#: checks after a splice-only pair: the first among the first FIRST_WITHIN
#: pairs, then one in SPLICE_CHECK_EVERY, at most MAX_SPLICE_CHECKS
SPLICE_CHECK_EVERY = 4
MAX_SPLICE_CHECKS = 8


class TimedRotation:
    """The ``between_pairs`` hook of one timing (timing.measure): changes
    both sides' timed input sets before every pair (a splice, or at a few
    random pairs a whole move) and checks the candidate's output of the call
    after each whole move and a few splices.
    ``last`` is the worker's record of the candidate's last timed call
    (``out``, ``args``, ``calls``); ``expected(args)`` the reference's
    outputs for ``args`` (on clones); ``compare(got, expected)`` the task's
    comparison, a dict with ``ok`` and ``message``. ``spare``: for a
    single timed set, one more draw for each side (the reference's a copy
    of the program's), never timed, whose values the set's blocks take.
    ``draw`` picks the whole moves' pairs and blocks, ``fresh_draw`` the
    splices' blocks and checks."""

    def __init__(
        self,
        cand_sets: list[list[Any]],
        ref_sets: list[list[Any]],
        last: dict[str, Any],
        expected: Callable[[list], Any],
        compare: Callable[[Any, Any], dict[str, Any]],
        draw: Callable[[int], int] = secrets.randbelow,
        spare: Optional[tuple[list[Any], list[Any]]] = None,
        fresh_draw: Callable[[int], int] = secrets.randbelow,
    ) -> None:
        import torch

        self.torch = torch
        timed = len(cand_sets)
        if spare is not None and timed == 1 and len(ref_sets) == 1:
            cand_sets, ref_sets = [*cand_sets, spare[0]], [*ref_sets, spare[1]]
        self.sides = [list(cand_sets), list(ref_sets)]
        self.last = last
        self.expected = expected
        self.compare = compare
        self.draw = draw
        self.fresh_draw = fresh_draw
        n = len(cand_sets)
        self.enabled = n >= 2 and len(ref_sets) == n
        self.first = draw(FIRST_WITHIN)
        self.first_splice_check = fresh_draw(FIRST_WITHIN)
        # per change, last at the end: (whole move?, tensor position -> (start, length))
        self.moves: list[tuple[bool, dict[int, tuple[int, int]]]] = []
        self.pending: Optional[tuple[int, int, bool]] = None  # (pair changed at, candidate calls before, whole?)
        self.checked = 0
        #: whole moves made in all (undone ones included)
        self.moved = 0
        #: splices made in all (undone ones included), and how many were checked
        self.spliced = 0
        self.splice_checks = 0
        #: why the first checked call's output was wrong, or ""
        self.wrong = ""

    def summary(self) -> dict[str, int]:
        """What the timing did to its inputs (the outcome's ``input_moves``)."""
        return {"moves": self.moved, "splices": self.spliced, "checked": self.checked}

    # -- the hook --------------------------------------------------------------
    def __call__(self, pair: int) -> None:
        if not self.enabled:
            return
        if self.pending is not None:
            self._check()
        if self.wrong or not self.enabled:
            return
        whole = self.moved < MAX_ROTATIONS and (pair == self.first or (pair > self.first and self.draw(EVERY) == 0))
        self._move(whole)
        if whole:
            self.pending = (pair, int(self.last.get("calls", 0)), True)
        elif self.splice_checks < MAX_SPLICE_CHECKS and (
            pair == self.first_splice_check
            or (pair > self.first_splice_check and self.fresh_draw(SPLICE_CHECK_EVERY) == 0)
        ):
            self.splice_checks += 1
            self.pending = (pair, int(self.last.get("calls", 0)), False)

    def _check(self) -> None:
        assert self.pending is not None
        pair, _calls, whole = self.pending
        self.pending = None
        if "out" not in self.last:
            return
        # a candidate sample ran since the change (the hook runs before a pair,
        # never after the last): its last call's output is ``last["out"]``,
        # made by a Python call (eager) or refreshed by the replay of the CUDA
        # graph that captured that call (its output is the graph's own memory)
        args = list(self.last["args"])
        try:
            expected = self.expected(args)
        except Exception:  # noqa: BLE001 - the reference failed here (device memory): not the program's doing
            self.enabled = False  # no more changes; the ones made are undone by finish()
            return
        self.checked += 1
        try:
            res = self.compare(self.last["out"], expected)
        except Exception as exc:  # noqa: BLE001 - whatever the program returned
            res = {"ok": False, "message": f"its output could not be compared: {type(exc).__name__}: {exc}"}
        if not res.get("ok"):
            where = (f"sample pair {pair + 1}" if pair >= 0 else "the last timed call") + (
                "" if whole else f", new values in one block of at most {BLOCK} elements of each tensor"
            )
            self.wrong = (
                f"wrong output of a timed call after new values were moved into the timed input tensors "
                f"in place between samples (same objects, data pointers and version counters; {where}) "
                f"({res.get('message', '')}): the program returned a result cached from an earlier call "
                "while timed"
            )

    # -- the changes -----------------------------------------------------------
    def _splices(self, draw: Callable[[int], int]) -> dict[int, tuple[int, int]]:
        """Where each floating-point tensor of a set takes another set's
        values: position in the set -> (start, length). Never where the
        change before put its block (with two sets, a second splice there
        would undo the first: the values of two pairs before back)."""
        before = self.moves[-1][1] if self.moves else {}
        spots: dict[int, tuple[int, int]] = {}
        for pos, v in enumerate(self.sides[0][0]):
            if isinstance(v, self.torch.Tensor) and v.is_floating_point() and v.is_contiguous() and v.numel() > 1:
                length = min(BLOCK, max(1, v.numel() // 4))
                places = v.numel() - length + 1
                start = draw(places)
                if before.get(pos) == (start, length):
                    start = (start + 1) % places
                spots[pos] = (start, length)
        return spots

    def _move(self, whole: bool) -> None:
        spots = self._splices(self.draw if whole else self.fresh_draw)
        if not whole and not spots:
            return  # no floating-point tensor: nothing to splice
        (_shift if whole else _splice)(self.torch, self.sides, spots, forward=True)
        self.moves.append((whole, spots))
        if whole:
            self.moved += 1
        else:
            self.spliced += 1

    def finish(self, check: bool = True) -> None:
        """After the timing: the output of the last timed call, made on
        changed values, checked here on those values (a pending check first),
        then every change undone. The last call's record is dropped then (its
        output belongs to values the sets no longer hold), so the timed-output
        check does not compare it again."""
        if check and self.moves and not self.wrong:
            if self.pending is None:
                # the last sample's last call, on the values the last change left
                self.pending = (-1, 0, self.moves[-1][0])
            self._check()
        if self.moves:
            self.last.pop("out", None)
            self.last.pop("args", None)
        self.undo()

    def undo(self) -> None:
        """Every change undone, the last first: the sets hold what they were given."""
        while self.moves:
            whole, spots = self.moves.pop()
            (_shift if whole else _splice)(self.torch, self.sides, spots, forward=False)


def _block(t: Any, start: int, length: int) -> Any:
    """Elements ``start`` to ``start + length`` of ``t`` flattened, as a
    view: one view op (``as_strided``) for a contiguous tensor that holds
    them, else ``t.view(-1)[...]`` (which raises where that cannot be)."""
    if t.is_contiguous() and t.numel() >= start + length:
        return t.as_strided((length,), (1,), t.storage_offset() + start)
    return t.view(-1)[start : start + length]


def _gather(torch: Any, moves: list[tuple[Any, Any]]) -> list[tuple[list[Any], list[Any]]]:
    """For ``dst.copy_(src)`` over ``moves`` as if every source were read
    before any destination is written: the sources copied into one buffer
    per device and dtype (one ``cat`` each), and per buffer the
    destinations with their sources' parts of it, for :func:`_scatter`."""
    groups: dict[tuple[Any, Any], list[tuple[Any, Any]]] = {}
    for dst, src in moves:
        groups.setdefault((src.device, src.dtype), []).append((dst, src))
    staged = []
    for group in groups.values():
        stash = torch.cat([src for _dst, src in group]).split([src.numel() for _dst, src in group])
        staged.append(([dst for dst, _src in group], list(stash)))
    return staged


def _scatter(torch: Any, staged: list[tuple[list[Any], list[Any]]]) -> None:
    """:func:`_gather`'s destinations written from its buffers: one
    multi-tensor copy (``torch._foreach_copy_``) per buffer, or one copy per
    destination where this torch has none."""
    foreach_copy = getattr(torch, "_foreach_copy_", None)
    for dsts, srcs in staged:
        if foreach_copy is not None:
            foreach_copy(dsts, srcs)
        else:
            for dst, src in zip(dsts, srcs):
                dst.copy_(src)


def _tensor_positions(torch: Any, sets: list[list[Any]]) -> list[int]:
    """The positions where every set holds a tensor."""
    return [pos for pos in range(len(sets[0])) if all(isinstance(s[pos], torch.Tensor) for s in sets)]


def _shift(torch: Any, sides: list[list[list[Any]]], spots: dict[int, tuple[int, int]], forward: bool) -> None:
    """One whole move (or its inverse) of each side's sets' contents, in
    place, version counters kept: forward, set ``k`` takes set ``k+1``'s
    values, and at each splice set ``k+2``'s (the same permutation of whole
    sets, by one outside the splice and by two inside it; the inverse moves
    each back). The blocks of every side, position and set are gathered
    first (one ``cat`` per dtype) and written last (one multi-tensor copy
    per dtype); in between each tensor's cycle holds one copy of a tensor at
    a time (its first, whose values go to the last)."""
    step = 1 if forward else -1
    block_moves: list[tuple[Any, Any]] = []
    owners: list[Any] = []
    cycles: list[list[Any]] = []
    for sets in sides:
        n = len(sets)
        for pos in _tensor_positions(torch, sets):
            tensors = [s[pos] for s in sets]
            owners += tensors
            cycles.append(tensors)
            spot = spots.get(pos)
            if spot is not None:
                blocks = [_block(t, *spot) for t in tensors]
                block_moves += [(blocks[k], blocks[(k + 2 * step) % n]) for k in range(n)]
    with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(tuple(owners)):
        staged = _gather(torch, block_moves)
        for tensors in cycles:
            n = len(tensors)
            order = list(range(n)) if forward else list(range(n - 1, -1, -1))
            saved = tensors[order[0]].clone()  # the first overwritten: its values go to the last
            for i, k in enumerate(order):
                tensors[k].copy_(saved if i == n - 1 else tensors[(k + step) % n])
            del saved
        _scatter(torch, staged)


def _splice(torch: Any, sides: list[list[list[Any]]], spots: dict[int, tuple[int, int]], forward: bool) -> None:
    """One splice (or its inverse) on each side, in place, version counters
    kept: at each spot, set ``k``'s block takes set ``k+1``'s values there
    (a cyclic permutation of the blocks among the sets; the inverse takes
    set ``k-1``'s). Every side's, position's and set's block in one go: one
    ``cat`` of the blocks and one multi-tensor copy back per dtype (on a GPU
    two launches for the lot, not two per block), no host read. Holds the
    blocks' few elements only."""
    step = 1 if forward else -1
    moves: list[tuple[Any, Any]] = []
    owners: list[Any] = []
    for sets in sides:
        n = len(sets)
        for pos, (start, length) in spots.items():
            if not all(isinstance(s[pos], torch.Tensor) for s in sets):
                continue
            # a tensor the program re-homed (another size or layout: the
            # checks after the timing name it) is neither read nor written
            blocks = [
                _block(s[pos], start, length) if s[pos].is_contiguous() and s[pos].numel() >= start + length else None
                for s in sets
            ]
            for k in range(n):
                src = blocks[(k + step) % n]
                if blocks[k] is not None and src is not None:
                    moves.append((blocks[k], src))
                    owners.append(sets[k][pos])
    if not moves:
        return
    with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(tuple(owners)):
        _scatter(torch, _gather(torch, moves))


def recorded(fn: Callable[..., Any], last: dict[str, Any]) -> Callable[..., Any]:
    """``fn`` with the record of its last call that :class:`TimedRotation`
    checks (``last``: ``out``, ``args``, ``calls``)."""

    def call(*args: Any) -> Any:
        result = fn(*args)
        last["out"], last["args"] = result, args
        last["calls"] = last.get("calls", 0) + 1
        return result

    return call


def timed_with_moves(
    measure: Callable[[Callable[[int], None]], Any],
    cand_sets: list[list[Any]],
    ref_sets: list[list[Any]],
    last: dict[str, Any],
    expected: Callable[[list], Any],
    compare: Callable[[Any, Any], dict[str, Any]],
    spare: Optional[tuple[list[Any], list[Any]]] = None,
) -> tuple[Any, TimedRotation]:
    """One timing, ``measure(between_pairs)``, with both sides' input sets
    changed before every pair and the candidate's output checked after a few
    of the changes (:class:`TimedRotation`: a step's timing and the
    finalists' re-timing share it); every change undone when it ends, however
    it ends. The outcome (``details["input_moves"]``: what was done) and the
    hook, whose ``wrong`` says why the candidate's output was wrong, or is
    ""."""
    rotation = TimedRotation(cand_sets, ref_sets, last, expected, compare, spare=spare)
    finished = False
    try:
        o = measure(rotation)
        finished = True
    finally:
        # the last call checked on the values it had, then the sets as they
        # were given, for the checks after the timing
        rotation.finish(check=finished)
    o.details["input_moves"] = rotation.summary()
    return o, rotation


__all__ = ["TimedRotation", "MAX_ROTATIONS", "MAX_SPLICE_CHECKS", "BLOCK", "recorded", "timed_with_moves"]
