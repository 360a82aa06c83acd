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

Now, at a few pairs drawn at random (the first among the first four pairs,
then one pair in eight, at most :data:`MAX_ROTATIONS`), before the pair
starts and outside every timed window, the timed input sets' contents move
one set on, in place: set ``k``'s tensors take set ``k+1``'s values
(through their memory, version counters kept: the same objects, data
pointers and versions as the calls before, as refill.refill_in_place does),
and in each floating-point tensor a block of at most :data:`BLOCK` elements
at a random place takes set ``k+2``'s values at the same positions. Every
set is then a draw of the task's generator but for a small splice from
another draw, a vector no call has seen. The reference's own copies move
the same way, so both sides keep timing the same values. Before the next
pair the candidate's last output (of a call on the moved values) is
compared with the reference's output for those values; the first mismatch
is kept for the timed-output check (checks/timed_output.py). A cache keyed
on the buffer (``data_ptr``, ``id``, a weak reference, the version) returns
the old set's output; one keyed on a sample of the values misses the
splice unless its sample falls on it; either one's output is wrong at the
splice. After the timing every move is undone in reverse order, so the
checks after it (timed inputs against the reference's copies) see the sets
as they were given.

Cost: per move, two copies of every timed input set on each side; per
check, one reference call and one comparison, none of them inside a timed
window. On a GPU the comparison synchronises the device between two
samples (the L2 flush before the next sample keeps the idle device out of
its events).
"""
from __future__ import annotations

import secrets
from typing import Any, Callable, Optional

#: the most moves in one timing (each costs copies and one reference call)
MAX_ROTATIONS = 8
#: the splice's largest length, in elements
BLOCK = 64
#: after the first move (among the first FIRST_WITHIN pairs), one pair in EVERY moves
FIRST_WITHIN = 4
EVERY = 8


class TimedRotation:
    """The ``between_pairs`` hook of one timing (timing.measure): moves new
    values into both sides' timed input sets at a few random pairs and
    checks the candidate's output of the call after each move.
    ``last`` is the worker's record of the candidate's last timed call
    (``out``, ``args``, ``calls``); ``expected(args)`` the reference's
    outputs for ``args`` (on clones); ``compare(got, expected)`` the task's
    comparison, a dict with ``ok`` and ``message``."""

    def __init__(self, cand_sets: list[list[Any]], ref_sets: list[list[Any]], last: dict[str, Any],
                 expected: Callable[[list], Any], compare: Callable[[Any, Any], dict[str, Any]],
                 draw: Callable[[int], int] = secrets.randbelow) -> None:
        import torch

        self.torch = torch
        self.sides = [cand_sets, ref_sets]
        self.last = last
        self.expected = expected
        self.compare = compare
        self.draw = draw
        n = len(cand_sets)
        self.enabled = n >= 2 and len(ref_sets) == n
        self.first = draw(FIRST_WITHIN)
        self.moves: list[dict[int, tuple[int, int]]] = []  # per move: tensor position -> (start, length)
        self.pending: Optional[tuple[int, int]] = None  # (pair moved at, candidate calls before it)
        self.checked = 0
        #: moves made in all (undone ones included)
        self.moved = 0
        #: why the first checked call's output was wrong, or ""
        self.wrong = ""

    # -- the hook --------------------------------------------------------------
    def __call__(self, pair: int) -> None:
        if not self.enabled:
            return
        if self.pending is not None:
            self._check()
        if self.wrong or not self.enabled or len(self.moves) >= MAX_ROTATIONS:
            return
        if pair == self.first or (pair > self.first and self.draw(EVERY) == 0):
            self._move()
            self.pending = (pair, int(self.last.get("calls", 0)))

    def _check(self) -> None:
        assert self.pending is not None
        pair, _calls = self.pending
        self.pending = None
        if "out" not in self.last:
            return
        # a candidate sample ran since the move (the hook runs before a pair,
        # never after the last): its last call's output is ``last["out"]``,
        # made by a Python call (eager) or refreshed by the replay of the CUDA
        # graph that captured that call (its output is the graph's own memory)
        args = list(self.last["args"])
        try:
            expected = self.expected(args)
        except Exception:  # noqa: BLE001 - the reference failed here (device memory): not the program's doing
            self.enabled = False  # no more moves; the ones made are undone by finish()
            return
        self.checked += 1
        try:
            res = self.compare(self.last["out"], expected)
        except Exception as exc:  # noqa: BLE001 - whatever the program returned
            res = {"ok": False, "message": f"its output could not be compared: {type(exc).__name__}: {exc}"}
        if not res.get("ok"):
            self.wrong = (f"wrong output of a timed call after new values were moved into the timed input tensors "
                          f"in place between samples (same objects, data pointers and version counters; "
                          f"{f'sample pair {pair + 1}' if pair >= 0 else 'the last timed call'}) "
                          f"({res.get('message', '')}): the program returned a result cached from an earlier call "
                          "while timed")

    # -- the moves -------------------------------------------------------------
    def _splices(self) -> dict[int, tuple[int, int]]:
        """Where each floating-point tensor of a set takes the values of the
        set after next: position in the set -> (start, length)."""
        spots: dict[int, tuple[int, int]] = {}
        for pos, v in enumerate(self.sides[0][0]):
            if isinstance(v, self.torch.Tensor) and v.is_floating_point() and v.is_contiguous() and v.numel() > 1:
                length = min(BLOCK, max(1, v.numel() // 4))
                spots[pos] = (self.draw(v.numel() - length + 1), length)
        return spots

    def _move(self) -> None:
        spots = self._splices()
        for sets in self.sides:
            _shift(self.torch, sets, spots, forward=True)
        self.moves.append(spots)
        self.moved += 1

    def finish(self, check: bool = True) -> None:
        """After the timing: the output of the last timed call, made on moved
        values, checked here on those values (a pending check first), then
        every move undone. The last call's record is dropped then (its output
        belongs to values the sets no longer hold), so the timed-output
        check does not compare it again."""
        if check and self.moves and not self.wrong:
            if self.pending is None:
                self.pending = (-1, 0)  # the last sample's last call, on the values the last move left
            self._check()
        if self.moves:
            self.last.pop("out", None)
            self.last.pop("args", None)
        self.undo()

    def undo(self) -> None:
        """Every move undone, the last first: the sets hold what they were given."""
        while self.moves:
            spots = self.moves.pop()
            for sets in self.sides:
                _shift(self.torch, sets, spots, forward=False)


def _shift(torch: Any, sets: list[list[Any]], spots: dict[int, tuple[int, int]], forward: bool) -> None:
    """One move (or its inverse) of ``sets``' contents, in place, version
    counters kept: forward, set ``k`` takes set ``k+1``'s values, and at each
    splice set ``k+2``'s (the same permutation of whole sets, by one outside
    the splice and by two inside it; the inverse moves each back). Holds one
    tensor's copy and the splices' few elements at a time."""
    n = len(sets)
    step = 1 if forward else -1
    order = list(range(n)) if forward else list(range(n - 1, -1, -1))
    with torch.no_grad():
        for pos in range(len(sets[0])):
            if not all(isinstance(s[pos], torch.Tensor) for s in sets):
                continue
            spot = spots.get(pos)
            blocks = ([s[pos].view(-1)[spot[0]:spot[0] + spot[1]].clone() for s in sets] if spot is not None
                      else [])
            saved = sets[order[0]][pos].clone()  # the first overwritten: its values go to the last
            for i, k in enumerate(order):
                dst = sets[k][pos]
                src = saved if i == n - 1 else sets[(k + step) % n][pos]
                with torch.autograd._unsafe_preserve_version_counter(dst):
                    dst.copy_(src)
                    if spot is not None:
                        dst.view(-1)[spot[0]:spot[0] + spot[1]].copy_(blocks[(k + 2 * step) % n])
            del saved, blocks


__all__ = ["TimedRotation", "MAX_ROTATIONS", "BLOCK"]
