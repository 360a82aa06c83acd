"""The worker's side of the audit rounds (audit.py): after the timing, in a
timing slot of its own, the program called on fresh input sets changed
from the parent's nonce, its outputs hashed per chunk, the chunks the
parent asks for handed over. What the rounds prove is the parent's
(trusted/audit_check.py): this side only does the work the parent times.

A round calls the program as many times as the parent says
(``audit.calls_per_round`` of the time the worker reported), so that a
microsecond kernel's calls add up to more than the check's slack: on
``copies`` copies of the set (:func:`audit.copies`), ``replays`` times
(:func:`audit.round_layout`), the copies' inputs changed before each replay
(the round's nonce, then :func:`audit.replay_nonce`'s keys) and each
replay's outputs kept. On a CUDA device the copies' calls are captured once
in a CUDA graph before the first nonce and the graph replayed, as the
timing replays its own: the round's wall time is the calls' device time,
not their launches'. Where the capture fails the calls run eagerly, which
only lengthens the round.

A step audits its program after its timing (:func:`audit_timing`); the
finalists' re-timing audits each finalist it timed (:func:`audit_finalist`),
the same rounds (:func:`audit_rounds`) with every audit message naming the
finalist."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any, Callable, Optional

from .audit import (
    ROUNDS,
    Parts,
    change_inputs,
    chunk_bounds,
    copies,
    flat,
    l2_flusher,
    replay_nonce,
    replays_flush,
    round_digests,
    round_layout,
    stacked,
    tensor_bytes,
)
from .checks.base import Context
from .evidence import write_outputs


def audit_timing(ctx: Context) -> None:
    """ROUNDS audit rounds on each timed shape's generator, when the timing
    gave this program a speedup (nothing to audit otherwise): every shape's
    report counts in the combined speedup, so every one is bounded."""
    if ctx.out.get("category") != "ok" or ctx.out.get("speedup") is None or not ctx.checks_on:
        # nothing to audit; or the throughput benchmark's switch, which the
        # parent reads in its own environment too (trusted/audit_check.py)
        return
    for name in ctx.cfg.timed_shapes:
        audit_rounds(ctx, name, getattr(ctx.ref, name), ctx.out.setdefault("phases", {}))


def audit_finalist(
    chan: Any,
    comparison: str,
    model: Any,
    cmp: Any,
    backend: Any,
    make_inputs: Callable[[Any], list],
    init_seed_index: int,
    workdir: str,
    name: str,
    gen: Any,
    phases: dict[str, float],
) -> None:
    """A finalist's rounds in the finalists' re-timing (worker_timing.run_finalists),
    as a step's: ``model`` (built from the seed at ``init_seed_index``) on a
    fresh set of ``gen`` (the first timed shape, ``name``). Every audit
    message says ``comparison`` (its timing reports' name, ``"finalist
    3"``), so the parent sizes the rounds by that finalist's own report and
    judges its row by them."""
    view = SimpleNamespace(
        chan=_Tagged(chan, comparison),
        cmp=cmp,
        model_new=model,
        backend=backend,
        make_inputs=make_inputs,
        init_seed_index=init_seed_index,
        workdir=workdir,
    )
    audit_rounds(view, name, gen, phases, f"audit rounds of {comparison}")


class _Tagged:
    """A channel whose audit messages name a comparison (the finalist the
    rounds are of); every other message goes as it is."""

    def __init__(self, chan: Any, comparison: str) -> None:
        self._chan, self.comparison = chan, comparison

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._chan, attr)

    def audit_plan(self, call_bytes: int, shape: Optional[str] = None) -> int:
        return int(self._chan.audit_plan(call_bytes, comparison=self.comparison, shape=shape))

    def audit_start(self, set_name: str, input_seed_index: int, init_seed_index: int, calls: int = 1) -> int:
        return int(self._chan.audit_start(set_name, input_seed_index, init_seed_index, calls, self.comparison))


def audit_rounds(ctx: Any, name: str, gen: Any, phases: dict[str, float], stage: str = "audit rounds") -> None:
    """ROUNDS rounds on a fresh set of ``gen`` (the timed shape ``name``) in
    a timing slot of their own. ``ctx``: what the rounds read, a step's
    Context or :func:`audit_finalist`'s view of a finalist: ``chan``,
    ``cmp``, ``model_new``, ``backend``, ``make_inputs``,
    ``init_seed_index`` (the seed the program's model was built from),
    ``workdir`` (where the asked chunks are written for the parent)."""
    import torch

    ctx.chan.stage(stage)
    started = time.monotonic()
    index = ctx.chan.seeds_received
    inputs = ctx.make_inputs(gen)
    with torch.no_grad():
        # the copies, the graph's capture and the hash's compile before the
        # timing slot: the slot stops the device's other workers, and none
        # of this is timed
        calls = _Calls(ctx, inputs, name)
        waited = ctx.chan.timing_slot()
        phases["timing_wait"] = round(phases.get("timing_wait", 0.0) + waited, 4)
        slot = time.monotonic()
        try:
            for number in range(ROUNDS):
                if not _round(ctx, calls, name, index, number):
                    break
        finally:
            ctx.chan.timing_done({"release_only": True})
            # added up: a finalists' re-timing audits each finalist in turn
            phases["audit_slot"] = round(phases.get("audit_slot", 0.0) + time.monotonic() - slot, 4)
            phases["audit"] = round(phases.get("audit", 0.0) + time.monotonic() - started - waited, 4)


class _Calls:
    """A round's calls of the program: their input copies, on a CUDA device
    the graph that replays them, and where the round replays them more than
    once the buffers every replay's outputs are kept in."""

    def __init__(self, ctx: Any, inputs: list, shape: str) -> None:
        import torch

        self.ctx = ctx
        self.error = ""
        self.graph: Optional[Any] = None
        self.outputs: list[Any] = []
        # what the set-up before the slot took, part by part (sent with the
        # first round as the worker's word: a record, never judged)
        self.setup: dict[str, float] = {}
        mark = Parts(ctx.backend, self.setup)
        shapes: list[tuple[int, Any, Any]] = []  # each output's elements, dtype and device
        try:
            # one call first: the outputs' size, and the program warm on the
            # round's set (a lazy initialisation does not land in the graph)
            first = ctx.cmp.flatten_outputs(ctx.model_new(*inputs))
            ctx.backend.synchronize()
            call_bytes = tensor_bytes(inputs) + tensor_bytes(first)
            shapes = [(flat(o).numel(), flat(o).dtype, o.device) for o in first]
            del first
        except Exception as exc:  # noqa: BLE001 - the round says the call failed
            call_bytes, self.error = 0, f"{type(exc).__name__}: {exc}"
        mark("warm_s")
        # sized by the parent, from the time this worker reported
        self.count = ctx.chan.audit_plan(call_bytes, shape=shape)
        mark("plan_s")
        # a call that failed makes no copies: every round reports the failure
        self.copies, self.replays = (1, 1) if self.error else round_layout(self.count)
        self.buffers, self.sets = copies(inputs, self.copies)
        # the L2 flush after each replay's change (audit.replays_flush): in
        # the graph, before the calls, where there is one
        self.flusher = (
            l2_flusher(self.buffers) if not self.error and replays_flush(self.buffers, self.replays) else None
        )
        # each replay's outputs, one after another (one replay: the calls' own, none kept)
        self.kept = [
            torch.empty(n * self.copies * self.replays, dtype=dtype, device=device)
            for n, dtype, device in (shapes if self.replays > 1 else [])
        ]
        mark("copies_s")
        if not self.error and self.copies > 1 and ctx.backend.timing_device() == "cuda":
            try:
                self.graph, self.outputs = self._capture(torch)
            except Exception:  # noqa: BLE001 - eager calls instead: a longer round, never a shorter one
                self.graph, self.outputs = None, []
                torch.cuda.synchronize()
        mark("capture_s")
        if not self.error:
            # the hashes' kernel compiled for these sizes before the first
            # nonce, not in the first round
            for n, dtype, device in shapes:
                round_digests(torch.empty(n * self.count, dtype=dtype, device=device), 0)
            # ... and the input change's (audit_fused.fused_change: one per element type)
            tensors = [b for b in self.buffers if isinstance(b, torch.Tensor)]
            change_inputs([torch.zeros(1, dtype=b.dtype, device=b.device) for b in tensors], 0)
        mark("compile_s")

    def _capture(self, torch: Any) -> tuple[Any, list[Any]]:
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.ctx.model_new(*self.sets[0])
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            if self.flusher is not None:
                self.flusher.flush()
            outputs = stacked([self.ctx.cmp.flatten_outputs(self.ctx.model_new(*s)) for s in self.sets])
        # replayed once before the first nonce: the first replay of a graph
        # uploads it (on the H100 a first round of 4096 calls took twice the
        # later ones' 20 ms), which is no part of the calls' time
        graph.replay()
        torch.cuda.synchronize()
        return graph, outputs

    def call(self) -> list[Any]:
        """The copies' calls on their inputs as they are now, after the L2
        flush where the round has one: per output position the calls'
        outputs one after another, flat."""
        if self.graph is not None:
            self.graph.replay()  # the flush, where there is one, is its first node
            return self.outputs
        if self.flusher is not None:
            self.flusher.flush()
        return stacked([self.ctx.cmp.flatten_outputs(self.ctx.model_new(*s)) for s in self.sets])

    def run(self, nonce: int) -> list[Any]:
        """The round: before each replay the copies' inputs changed (the
        nonce's keys, :func:`audit.replay_nonce`), then their calls (on a GPU
        after the L2 flush, :func:`audit.replays_flush`); per output
        position every replay's outputs one after another, flat."""
        if self.replays == 1:
            change_inputs(self.buffers, nonce)
            return self.call()
        for replay in range(self.replays):
            change_inputs(self.buffers, replay_nonce(nonce, replay))
            outs = self.call()
            for kept, out in zip(self.kept, outs):
                kept[replay * out.numel() : (replay + 1) * out.numel()].copy_(out)
        return self.kept


def _round(ctx: Context, calls: _Calls, name: str, index: int, number: int) -> bool:
    """One round; False when the program's call failed (the parent marks
    the timing unaudited)."""
    import torch

    nonce = ctx.chan.audit_start(name, index, ctx.init_seed_index, calls.count)
    began = time.perf_counter()
    if calls.error:
        ctx.chan.audit_done(None, error=calls.error)
        return False
    try:
        outs = calls.run(nonce)
        ctx.backend.synchronize()
        hashed = time.perf_counter()
        digests = [round_digests(o, nonce) for o in outs]
    except Exception as exc:  # noqa: BLE001 - the parent says what it means for the timing
        ctx.chan.audit_done(None, error=f"{type(exc).__name__}: {exc}")
        return False
    # the worker's own view of the round (informational: the parent's check
    # never reads it; where the parent's clock sees more, the difference is
    # the round trip and the parent's own latency)
    done = time.perf_counter()
    seen = {
        "call_s": hashed - began,  # the inputs' changes with the calls
        "hash_s": done - hashed,
        "graph": 1.0 if calls.graph is not None else 0.0,
        "replays": float(calls.replays),
        **(calls.setup if number == 0 else {}),
    }
    picks = ctx.chan.audit_done(digests, seen=seen)
    chunks = []
    for o, c in picks:
        values = outs[o] if 0 <= o < len(outs) else None
        bounds = chunk_bounds(values.numel()) if values is not None else []
        lo, hi = bounds[c] if 0 <= c < len(bounds) else (0, 0)
        chunks.append(values[lo:hi] if values is not None else torch.empty(0))
    path = os.path.join(ctx.workdir, f"audit-{number}.bin")
    write_outputs(path, {"candidate": chunks})
    ctx.chan.audit_hand_over(os.path.basename(path))
    return True


__all__ = ["audit_finalist", "audit_rounds", "audit_timing"]
