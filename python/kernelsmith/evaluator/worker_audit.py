"""The worker's side of the audit rounds (audit.py): after the timing, in a
timing slot of its own, the program called on a fresh input set changed
from the parent's nonce, its outputs hashed per chunk, the chunks the
parent asks for handed over. What the rounds prove is the parent's
(trusted/audit_check.py): this side only does the work the parent times."""

from __future__ import annotations

import os
import time
from .audit import ROUNDS, change_inputs, chunk_bounds, chunk_digests, flat
from .checks.base import Context
from .evidence import write_outputs


def audit_timing(ctx: Context) -> None:
    """ROUNDS audit rounds on the first timed shape's generator, when the
    timing gave this program a speedup (nothing to audit otherwise)."""
    import torch

    if ctx.out.get("category") != "ok" or ctx.out.get("speedup") is None or not ctx.checks_on:
        # nothing to audit; or the throughput benchmark's switch, which the
        # parent reads in its own environment too (trusted/audit_check.py)
        return
    name = ctx.cfg.timed_shapes[0]
    gen = getattr(ctx.ref, name)
    ctx.chan.stage("audit rounds")
    waited = ctx.chan.timing_slot()
    started = time.monotonic()
    phases = ctx.out.setdefault("phases", {})
    phases["timing_wait"] = round(phases.get("timing_wait", 0.0) + waited, 4)
    try:
        index = ctx.chan.seeds_received
        inputs = ctx.make_inputs(gen)
        with torch.no_grad():
            for number in range(ROUNDS):
                if not _round(ctx, inputs, name, index, number):
                    break
    finally:
        ctx.chan.timing_done({"release_only": True})
        phases["audit"] = round(time.monotonic() - started, 4)


def _round(ctx: Context, inputs: list, name: str, index: int, number: int) -> bool:
    """One round; False when the program's call failed (the parent marks
    the timing unaudited)."""
    import torch

    nonce = ctx.chan.audit_start(name, index, ctx.init_seed_index)
    began = time.perf_counter()
    change_inputs(inputs, nonce)
    try:
        ctx.backend.synchronize()
        called = time.perf_counter()
        outs = ctx.cmp.flatten_outputs(ctx.model_new(*inputs))
        ctx.backend.synchronize()
        hashed = time.perf_counter()
        digests = [chunk_digests(o, nonce) for o in outs]
    except Exception as exc:  # noqa: BLE001 - the parent says what it means for the timing
        ctx.chan.audit_done(None, error=f"{type(exc).__name__}: {exc}")
        return False
    # the worker's own view of the round (informational: the parent's check
    # never reads it; where the parent's clock sees more, the difference is
    # the round trip and the parent's own latency)
    done = time.perf_counter()
    seen = {"change_s": called - began, "call_s": hashed - called, "hash_s": done - hashed}
    picks = ctx.chan.audit_done(digests, seen=seen)
    chunks = []
    for o, c in picks:
        values = flat(outs[o]) if 0 <= o < len(outs) else None
        bounds = chunk_bounds(values.numel()) if values is not None else []
        lo, hi = bounds[c] if 0 <= c < len(bounds) else (0, 0)
        chunks.append(values[lo:hi] if values is not None else torch.empty(0))
    path = os.path.join(ctx.workdir, f"audit-{number}.bin")
    write_outputs(path, {"candidate": chunks})
    ctx.chan.audit_hand_over(os.path.basename(path))
    return True


__all__ = ["audit_timing"]
