"""The trusted referee's re-check of a correct result's trial outputs.

The worker hands over, per input set, the last trial's outputs (the
program's and the in-worker reference's: checks/referee_evidence.py); the
parent copied them out of the worker's reach (evidence.take_evidence). Here
the parent has the device's referee process (referee.py's client,
referee_process.py) rebuild the reference from the seeds the parent issued
and compare; a result whose trial outputs are missing, repeated, malformed
or wrong is not the program's own. The referee's own failure is not the
program's: the result stands, marked unchecked and its timing unreliable.
"""

from __future__ import annotations

import os
from typing import Any

from ...result import EvalResult
from ..evidence import copy_regular, evidence_info
from ..probes import set_names as probe_sets
from .base import TrustedCheck, TrustedContext, overrule


class RefereeRecheck(TrustedCheck):
    name = "referee"

    def reasons(self, result: EvalResult, ctx: TrustedContext) -> list[str]:
        return referee_reasons(result, evidence_info(ctx.evidence), ctx.seeds, ctx.task, ctx.workdir, ctx.referee)


def judge(result: EvalResult, info: Any, seeds: list[int], task: Any, workdir: str, referee: Any) -> None:
    """This check alone (tests, tools): have the referee check a correct
    result (``info``: what the worker said about its trial outputs, as
    evidence.evidence_info gives it, or one bare entry), and overrule the
    result when the referee disagrees."""
    overrule(result, referee_reasons(result, info, seeds, task, workdir, referee))


def checks_disabled() -> bool:
    """The throughput benchmark's switch for the v2 checks (KS_BENCH_NO_CENSUS=1),
    read in the parent's own environment, which its workers inherit."""
    return os.environ.get("KS_BENCH_NO_CENSUS", "") == "1"


def referee_reasons(
    result: EvalResult, info: Any, seeds: list[int], task: Any, workdir: str, referee: Any
) -> list[str]:
    """Why the referee's re-check rejects ``result`` (``info``: see
    :func:`judge`); notes ``census["referee_trials"]`` when every trial
    passed, and per trial ``census["referee"]``."""
    census = result.census if isinstance(result.census, dict) else {}
    result.census = census
    if result.category != "ok":
        return []
    if isinstance(info, dict) and info.get("repeated"):
        return [
            "the worker handed over the trial outputs for the trusted referee twice: the verdict "
            "was not the program's to write"
        ]
    if isinstance(info, dict) and info.get("commit_repeated"):
        return [
            "the worker asked twice for the key of an input set's large outputs, or committed to them twice: "
            "the verdict was not the program's to write"
        ]
    entries = info.get("trials") if isinstance(info, dict) and "trials" in info else [info]
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        # whether the checks are off is the parent's own setting (the worker
        # inherits it), never the worker's word: a forged result claimed
        # census.disabled to skip the referee (fixtures/pygpubench/fd_overwrite.py)
        if census.get("disabled") and checks_disabled():
            return []
        return [
            "the worker reported a correct result without the trial outputs the trusted referee "
            "checks: the verdict was not the program's to write"
        ]
    most = referee.most_trials(task)
    if len(entries) > most:
        return [
            f"the worker named {len(entries)} trials for the referee (at most {most}, one per "
            "input set): the verdict was not the program's to write"
        ]
    # a degenerate task's probe sets decide it: the worker must have run
    # each one the referee found to apply (probes.py)
    named = {str(e.get("set", "get_inputs")) for e in entries}
    missing = [s for s in referee.primed_probe_sets(task) if s not in named]
    if missing:
        return [
            f"the worker handed over no trial of the probe input set(s) {', '.join(missing)} "
            "that judge this degenerate task: the verdict was not the program's to write"
        ]
    commits = info.get("commits") if isinstance(info, dict) else None
    for entry in entries:
        if isinstance(commits, dict):
            entry = {**entry, "commit": commits.get(str(entry.get("set", "get_inputs")))}
        found = _trial_reasons(result, entry, seeds, task, workdir, referee, census)
        if found:
            return found
    census["referee_trials"] = len(entries)
    return []


def _trial_reasons(
    result: EvalResult,
    info: dict[str, Any],
    seeds: list[int],
    task: Any,
    workdir: str,
    referee: Any,
    census: dict[str, Any],
) -> list[str]:
    """One trial (the last of one input set) re-checked by the referee."""
    sets = task.config.check_sets + probe_sets()
    if str(info.get("set", "get_inputs")) not in sets:
        return [
            f"the worker named an input set the task does not have ({str(info.get('set'))[:80]}): "
            "the verdict was not the program's to write"
        ]
    try:
        if info.get("not_handed_over"):  # take_evidence could not copy it
            raise OSError(info["not_handed_over"])
        init_seed, input_seed = seeds[int(info["init_seed_index"])], seeds[int(info["input_seed_index"])]
        limit = referee.evidence_limit(task)
        # workdir holds the parent's copies (take_evidence): linked, not copied again
        copy = copy_regular(
            os.path.join(workdir, os.path.basename(str(info["file"]))), referee.workdir, limit, link=True
        )
    except (KeyError, ValueError, TypeError, IndexError, OSError) as exc:
        return [
            f"the worker named seeds or an outputs file the referee cannot use ({exc}): the "
            "verdict was not the program's to write"
        ]
    request = {
        "task": task.to_dict(),
        "init_seed": init_seed,
        "input_seed": input_seed,
        "set": str(info.get("set", "get_inputs")),
        "file": copy,
        "max_bytes": limit,
        # the large outputs' commitment (protocol.answer_commit): the
        # nonce, and the picked chunks with the hashes sent for them
        "commit": _picked(info.get("commit")),
    }
    answer = _ask(referee, request, copy)
    return _answer_reasons(result, answer, request, census)


def _answer_reasons(
    result: EvalResult, answer: dict[str, Any], request: dict[str, Any], census: dict[str, Any]
) -> list[str]:
    """The referee's answer on one trial as reasons (the result marked
    unchecked where the referee itself failed)."""
    if answer.get("malformed"):
        census["referee"] = "malformed outputs"
        return [
            f"the outputs file the worker wrote for the trusted referee cannot be read "
            f"({answer['malformed'][:300]}): the verdict was not the program's to write"
        ]
    if "error" in answer:
        # the referee's own failure (its reference raised, it died twice):
        # the worker's verdict stands, but a result nobody trusted checked
        # is never a run's best nor paid above 1 as a reward
        census["referee"] = f"not checked: {answer['error'][:500]}"
        result.warnings = list(result.warnings) + [
            f"the trusted referee could not check this result: {answer['error'][:300]}"
        ]
        result.timing_reliable = False
        result.unreliable_reasons = list(result.unreliable_reasons or []) + [
            "not checked by the trusted referee: " + answer["error"][:200]
        ]
        return []
    if answer.get("reference"):
        census["referee"] = "reference differs"
        return [
            "the reference computed next to the program differs from the one the trusted referee "
            f"computed from the same seeds ({answer['reference'][:400]}): the program tampered "
            "with the reference"
        ]
    if answer.get("commit"):
        census["referee"] = "committed chunks differ"
        return [
            f"the trial's large output, checked by the trusted referee in chunks the parent picked after the "
            f"worker sent the whole output's hashes: {answer['commit'][:400]}: the verdict was not the "
            "program's to write"
        ]
    if answer.get("candidate"):
        census["referee"] = "candidate differs"
        return [
            f"the trusted referee finds the program's outputs wrong ({answer['candidate'][:400]}) "
            "where the check next to the program passed them: the comparison was forged"
        ]
    census["referee"] = "agreed"
    if request["commit"] is not None:  # chunks of a large output the parent picked after its hashes
        census["referee_committed_chunks"] = census.get("referee_committed_chunks", 0) + len(request["commit"]["picks"])
    return []


def _picked(commit: Any) -> Any:
    """What the referee needs of a set's commitment: the nonce, the
    committed outputs, the picks and the hash sent for each pick (None:
    none was made, or it was malformed)."""
    if not isinstance(commit, dict) or commit.get("malformed") or "picks" not in commit:
        return None
    outputs, digests = commit["outputs"], commit["digests"]
    sent = []
    for o, c in commit["picks"]:
        row = digests[outputs.index(o)] if o in outputs else []
        sent.append(row[c] if 0 <= c < len(row) else None)
    return {
        "nonce": commit["nonce"],
        "outputs": outputs,
        "chunks": [len(d) for d in digests],
        "picks": commit["picks"],
        "digests": sent,
    }


def _ask(referee: Any, request: dict[str, Any], copy: str) -> dict[str, Any]:
    """The referee's answer to ``request``, asked again once where it died
    answering; the linked copy it read is removed either way."""
    try:
        answer: dict[str, Any] = referee.ask(request)
        if "error" in answer and referee.died_answering():
            # it died answering this one: the next request starts a new one.
            # (A timeout has restarted it already and would only wait again;
            # a reference that raises raises again.)
            answer = referee.ask(request)
    finally:
        try:
            os.unlink(copy)
        except OSError:
            pass
    return answer
