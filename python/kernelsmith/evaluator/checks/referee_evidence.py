"""The trusted referee's evidence (evaluator/evidence.py): per input set,
the last trial's outputs (the program's and the reference's, on the host, a
large output as a sample), handed to the parent before any more of the
program runs. The referee re-computes the reference from the same seeds in
a process of its own and judges them there (trusted/referee_check.py): this check's
reasons are the parent's, never found in the worker."""

from __future__ import annotations

import os

from .base import HAND_OVER, TRIAL_DONE, Check, Context
from ..evidence import evidence_copy, write_outputs


class RefereeEvidence(Check):
    name = "referee"
    points = (TRIAL_DONE, HAND_OVER)

    def reasons(self, at: str, ctx: Context) -> list[str]:
        kept = ctx.referee_trials  # set name -> (input seed's index, program's outputs, reference's)
        if at == TRIAL_DONE:
            if ctx.last_of_set[ctx.set_name] == ctx.step:
                seed = ctx.chan.seeds[ctx.input_seed_index]
                kept[ctx.set_name] = (
                    ctx.input_seed_index,
                    evidence_copy(ctx.got, seed),
                    evidence_copy(ctx.expected, seed),
                )
            return []
        if not kept or not ctx.checks_on:
            return []
        # handed over now, before any more of the program runs: the parent
        # copies the files before it answers. (Kept here as bytes until after
        # the timing, the program's own forward rewrote them in place:
        # fixtures/hacks_v2/forged_reference_rewritten.py)
        handed = []
        for i, (set_name, (index, got, expected)) in enumerate(kept.items()):
            name = f"referee-outputs-{i}.bin"
            write_outputs(os.path.join(ctx.workdir, name), {"candidate": got, "reference": expected})
            handed.append(
                {"file": name, "init_seed_index": ctx.init_seed_index, "input_seed_index": index, "set": set_name}
            )
        kept.clear()
        ctx.chan.hand_over(handed)
        return []
