"""The trusted referee's evidence (evaluator/evidence.py): per input set,
the last trial's outputs (the program's and the reference's, on the host, a
large output as a sample, with the chunks of it the parent picked after the
worker sent the whole output's hashes), handed to the parent before any
more of the program runs. The referee re-computes the reference from the same seeds in
a process of its own and judges them there (trusted/referee_check.py): this check's
reasons are the parent's, never found in the worker."""

from __future__ import annotations

import os

from typing import Any

from .base import HAND_OVER, TRIAL_DONE, Check, Context
from ..audit import chunk_bound, flat, round_digests
from ..evidence import EVIDENCE_FULL_ELEMENTS, evidence_copy, write_outputs


class RefereeEvidence(Check):
    name = "referee"
    points = (TRIAL_DONE, HAND_OVER)

    def reasons(self, at: str, ctx: Context) -> list[str]:
        # set name -> (input seed's index, program's outputs, reference's, committed chunks)
        kept = ctx.referee_trials
        if at == TRIAL_DONE:
            if ctx.last_of_set[ctx.set_name] == ctx.step:
                seed = ctx.chan.seeds[ctx.input_seed_index]
                kept[ctx.set_name] = (
                    ctx.input_seed_index,
                    evidence_copy(ctx.got, seed),
                    evidence_copy(ctx.expected, seed),
                    committed_chunks(ctx) if ctx.checks_on else [],
                )
            return []
        if not kept or not ctx.checks_on:
            return []
        # handed over now, before any more of the program runs: the parent
        # copies the files before it answers. (Kept here as bytes until after
        # the timing, the program's own forward rewrote them in place:
        # fixtures/hacks_v2/forged_reference_rewritten.py)
        handed = []
        for i, (set_name, (index, got, expected, chunks)) in enumerate(kept.items()):
            name = f"referee-outputs-{i}.bin"
            groups = {"candidate": got, "reference": expected, "chunks": chunks}
            write_outputs(os.path.join(ctx.workdir, name), groups)
            handed.append(
                {"file": name, "init_seed_index": ctx.init_seed_index, "input_seed_index": index, "set": set_name}
            )
        kept.clear()
        ctx.chan.hand_over(handed)
        return []


def committed_chunks(ctx: Context) -> list[Any]:
    """The program's outputs too large to hand over whole (sampled at
    positions the worker derives from its input seed: evidence_positions)
    hashed in chunks under a nonce the parent draws now, the hashes sent,
    and the chunks the parent then picks copied to the host whole
    (protocol.answer_commit): an output right only where the sample looks
    is wrong in the chunks picked after its hashes."""
    import torch

    outs = [flat(t.detach()) for t in ctx.got]
    big = [i for i, t in enumerate(outs) if t.numel() > EVIDENCE_FULL_ELEMENTS]
    if not big:
        return []
    nonce = ctx.chan.evidence_key(ctx.set_name)
    picks = ctx.chan.evidence_commit(ctx.set_name, big, [round_digests(outs[i], nonce) for i in big])
    chunks = []
    for o, c in picks:
        bounds = chunk_bound(outs[o].numel(), c) if o in big else None
        lo, hi = bounds if bounds is not None else (0, 0)
        chunks.append(outs[o][lo:hi].to("cpu", copy=True) if bounds is not None else torch.empty(0))
    return chunks
