"""A timed result's figures against the audit rounds: the program's call
under the parent's own clock, on inputs it could not know before that
clock started, its output checked by the trusted referee (audit.py).

The worker's timing runs in the program's process, so a program that
reproduces the protocol reports what it likes (hacks_v3/
channel_forge_report.py, report_patch_send.py). Here the parent asks:

* did the rounds run at all (a report with a speedup and no audit round
  under the parent's clock is not the harness's);
* are the chunks handed over the ones hashed before the clock stopped, and
  are they right (the referee, on the rounds' inputs rebuilt from the
  set's seed and the nonces): a program that skipped the work under the
  clock and computed the asked chunks afterwards is caught here;
* could the reported figures have been measured: the program's reported
  time against its audited call (the fastest round, the rounds' other work
  and a slack taken off: a lower bound), the reported reference time
  against the referee's own call of it (with an allowance), and both
  together. Past ``HACKED_FACTOR`` it is `hacked`, past
  ``UNRELIABLE_FACTOR`` the timing is marked unreliable (never a run's
  best): the audited call is one eager call on inputs just written, the
  timed ones are graph replays on flushed caches, so an honest program's
  figures differ by some part.

A round the program's call failed in, or one the referee could not check,
leaves the timing unaudited: unreliable, not hacked.

One timing's rounds are judged by :func:`judge_rounds`: a step's result
(:class:`AuditCheck`), and each row of a finalists' re-timing against the
rounds tagged with its name (:func:`audit_finalists`).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from ...result import EvalResult
from ...timing.results import verdict_of
from ..audit import MOST_CALLS, ROUNDS, calls_per_round, reported_times
from ..contention import busy_host
from ..evidence import copy_regular
from ..finalists import FIGURES
from .base import TrustedCheck, TrustedContext
from .referee_check import checks_disabled
from .timing_reports import timing_report_reasons

#: the reported speedup against the one the audit allows: hacked past this
HACKED_FACTOR = 4.0
#: ... and unreliable past this
UNRELIABLE_FACTOR = 2.0
#: taken off the program's audited call before comparing: the round trip,
#: the parent's own latency reading the message (a thread of a busy
#: parent waits for the interpreter's lock), the eager call's launches, and
#: a share of the rounds' other work (its noise). On the H100 with four
#: workers an honest round's wall time exceeded the referee's measure of
#: the other work by 0 to 1.83 ms (24 programs, 2026-11-27)
SLACK_S = 2.5e-3
SLACK_SHARE = 0.5
#: ... on a GPU, where the other work is a few memory-bound kernels of
#: known sizes (the input change, the stacking, the hashes) whose cost the
#: referee's own run of them gives closely: on the H100 at KernelBench's
#: upstream sizes (other work 2-30 ms beside one call of 2-12 ms) an honest
#: round's wall time exceeded the referee's other work and the reported
#: calls by at most 1.63 ms, within SLACK_S alone (16 programs, 2026-11-27,
#: h100_kernelbench_zoo_2026-11-27_session22.txt), where half of 30 ms of
#: other work left the rounds no bound on a 4 ms call at all (13 of the 16
#: had a candidate's side of 0). The host clock (CPU backends) keeps
#: SLACK_SHARE: there the hashes run the torch path on a busy 2-core host
DEVICE_SLACK_SHARE = 0.1
#: the program's reported time is compared with a margin added: a bound a
#: few tenths of a millisecond over the slack says nothing of a
#: microsecond kernel
CANDIDATE_MARGIN_S = 2.5e-4
#: added to the referee's reference time before comparing: its inputs were
#: just written (warm in cache) where the timed calls' caches are flushed,
#: so the timed reference may take longer than the referee's by a part
REFERENCE_SHARE = 1.0
REFERENCE_SLACK_S = 1e-5
#: ... and on the host clock (CPU backends) more: the timed calls carry the
#: harness's per-call host work (the synchronisation and clock reads around
#: each), the referee's back-to-back calls do not. The honest relu seed under
#: the interpreter: 0.036 ms timed against the referee's 0.006 ms
#: (2026-11-27), a reference side of 1.6 with only REFERENCE_SLACK_S
HOST_REFERENCE_SLACK_S = 1e-4
#: the reported reference against the referee's own measure of it taken the
#: way the worker's timing takes it (referee_process._timed_reference: the
#: same harness, its L2 flush, CUDA graphs and samples): it may be this part
#: longer before its side counts. The bound above, calls back to back, is
#: several times a microsecond kernel's timed call on a GPU (each call's
#: launch from Python): on the H100 the Triton table's honest reference
#: sides against it were 0.027-0.39 (2026-11-27, session 23), so a report
#: could multiply such a reference by 3 to 37 and be paid in full; against
#: the timed measure it gains at most 1 + this share
TIMED_REFERENCE_SHARE = 0.25
#: ... plus this much per call. On the H100 (session 23, two runs) the
#: honest reports were 0.94-1.49 times the referee's timed measure on the
#: Triton table, the widest on references of 2-5 us (1.49: 2.65 us
#: reported, 1.78 us measured, a side of 0.97 with 0.5 us of slack), and
#: 0.43-1.015 at KernelBench's upstream sizes. With 1 us the widest honest
#: side is 0.84, and report_inflate_reference's 8 times on a 2.3 us relu is
#: 4.67, `hacked` (59f2794); a report on a 2 us reference is paid in full up to
#: about 1.75 times the referee's measure, on a 10 us one 1.35 times
TIMED_REFERENCE_SLACK_S = 1e-6


class AuditCheck(TrustedCheck):
    name = "audit rounds"

    def reasons(self, result: EvalResult, ctx: TrustedContext) -> list[str]:
        store = ctx.evidence or {}
        if result.category != "ok" or result.speedup is None or checks_disabled():
            # a finalists' re-timing has no speedup of its own: its rows are
            # judged by audit_finalists
            return []
        census = result.census if isinstance(result.census, dict) else {}
        result.census = census
        audits = [a for a in store.get("audits") or [] if isinstance(a, dict) and a.get("comparison") is None]
        timing = result.timing if isinstance(result.timing, dict) else {}
        judged = judge_shapes(
            audits,
            bool(store.get("audits_refused")),
            ctx,
            _shapes(ctx.task),
            lambda name, several: _reported_cand_ms(result, store, name, several),
            timing.get("device") == "cuda",
            lambda name, several: timing_busy(result.load, name if several else None, None),
            _weights(ctx.task),
        )
        if judged.record is not None:
            census["audit"] = judged.record
        if not judged.hacked:
            _clip_result(result, judged, census)
        if judged.unreliable:
            result.timing_reliable = False
            result.unreliable_reasons = list(result.unreliable_reasons or []) + judged.unreliable
        return judged.hacked


def _weights(task: Any) -> Optional[list[float]]:
    """The task's timed shapes' weights in the combined speedup (None: alike)."""
    found = getattr(getattr(task, "config", None), "shape_weights", None)
    return [float(w) for w in found] if found else None


def _shapes(task: Any) -> list[str]:
    """The task's timed shapes (TaskConfig.timed_shapes): each one's rounds
    are judged against its own report."""
    return [str(n) for n in getattr(getattr(task, "config", None), "timed_shapes", None) or []] or ["get_inputs"]


def judge_shapes(
    audits: list[dict[str, Any]],
    refused: bool,
    ctx: TrustedContext,
    shapes: list[str],
    reported: Any,
    on_gpu: bool,
    busy: Any = None,
    weights: Optional[list[float]] = None,
) -> Judged:
    """One timing's rounds on each of its timed shapes (``audits``: its
    records, in order; ``reported(name, several)``: the (candidate,
    reference) ms the timing reported for the shape), each shape judged by
    :func:`judge_rounds` against its own report: every shape's report
    counts in the combined speedup, so a shape with no rounds, or rounds
    that find its report forged, makes the whole timing hacked. The record
    is the first shape's, with every shape's under ``shapes`` when there
    are several. ``busy(name, several)``: why the shape's timing ran on a
    busy host, as the parent measured it ("" when it did not).
    ``weights``: the shapes' in the combined speedup (the task's; None:
    alike), by which the shapes' clips combine."""
    several = len(shapes) > 1

    def judge(name: str, mine: list[dict[str, Any]]) -> Judged:
        why = busy(name, several) if busy is not None else ""
        return judge_rounds(mine, refused, ctx, reported(name, several), on_gpu, why)

    if not several:  # the parent refused rounds on any other set (protocol.answer_audit)
        return judge(shapes[0], audits)
    verdicts = [(name, judge(name, [a for a in audits if a.get("set") == name])) for name in shapes]
    judged = Judged(record=dict(verdicts[0][1].record or {}))
    # the speedup and both runtimes are the shapes' weighted geometric means
    # (timing.combine_shapes): so is each side's clip
    judged.clip = (
        _weighted_mean([v.clip[0] for _, v in verdicts], weights),
        _weighted_mean([v.clip[1] for _, v in verdicts], weights),
    )
    judged.record["shapes"] = {name: v.record for name, v in verdicts if v.record is not None}  # type: ignore[index]
    for name, v in verdicts:
        judged.hacked += [f"timing shape {name}: {why}" for why in v.hacked]
        judged.unreliable += [f"timing shape {name}: {why}" for why in v.unreliable]
    return judged


def audit_finalists(result: EvalResult, ctx: TrustedContext) -> None:
    """A finalists' re-timing (worker_timing.run_finalists): each row with a
    speedup judged against its own audit rounds (tagged ``"finalist <i>"``,
    as its timing reports are) as a step's result is against its rounds.
    A row the rounds find hacked loses its figures and is ``correct: False,
    hacked: True`` with the reason as its ``error`` (finalists.reliable
    never takes it); one they leave unaudited or past the unreliable
    threshold is ``timing_reliable: False`` with the reason; the figures go
    in the row's ``audit``. The worker's word on those fields is dropped
    first (the row is its own, its verdict the parent's)."""
    timing = result.timing if isinstance(result.timing, dict) else {}
    rows = timing.get("finalists")
    if result.category != "ok" or not isinstance(rows, list) or checks_disabled():
        return
    store = ctx.evidence or {}
    audits = [a for a in store.get("audits") or [] if isinstance(a, dict)]
    refused = list(store.get("audits_refused_for") or [])
    # the names the parent allowed this job's rounds (protocol.converse, from its own job)
    allowed = list(store.get("audit_comparisons") or [])
    names = _shapes(ctx.task)
    for row in rows:
        if not isinstance(row, dict):
            continue
        for key in ("audit", "audit_hacked", "hacked_next_to_others", "timing_reliable", "unreliable_reasons"):
            row.pop(key, None)
        if row.get("speedup") is None or not row.get("correct"):
            continue
        tag = f"finalist {row.get('index')}"
        # a refused round of this finalist, or of a name no finalist of the
        # job has: a program of this process chose rounds of its own
        alien = any(c not in allowed for c in refused)
        judged = judge_shapes(
            [a for a in audits if a.get("comparison") == tag],
            tag in refused or alien,
            ctx,
            names,
            lambda name, several, row=row, tag=tag: _claimed(
                row, reported_times(store.get("timing_reports"), name if several else None, tag), several
            ),
            timing.get("device") == "cuda",
            lambda name, several, tag=tag: timing_busy(result.load, name if several else None, tag),
            _weights(ctx.task),
        )
        if judged.record is not None:
            row["audit"] = judged.record
        if not judged.hacked:
            # the row's own figures, the speedup and its CI too, must be the
            # ones its timing reported (the step's timing_reports check, per
            # finalist): the rounds bound the times, not a speedup written apart
            judged.hacked = _row_against_reports(row, store.get("timing_reports"), tag, ctx.task)
        if judged.hacked:
            for key in FIGURES:
                row.pop(key, None)
            row.update(correct=False, hacked=True, error=judged.hacked[0], audit_hacked=True)
            continue
        clipped = clip(row, judged.clip)
        if clipped is not None:
            row.setdefault("audit", {})["clipped"] = clipped
        if judged.unreliable:
            row.update(timing_reliable=False, unreliable_reasons=judged.unreliable)


def _weighted_mean(values: list[float], weights: Optional[list[float]]) -> float:
    """The weighted geometric mean (timing.combine_shapes' combination)."""
    import math

    w = [float(x) for x in weights] if weights and len(weights) == len(values) else [1.0] * len(values)
    return math.exp(sum(wi * math.log(v) for wi, v in zip(w, values)) / sum(w))


#: the figures :func:`clip` brings back to the parent's
CLIPPED = ("speedup", "speedup_ci_low", "speedup_ci_high", "runtime_ms", "ref_runtime_ms")
#: ... and the verdict its CI implies (a result's ``timing_verdict``, a
#: finalist row's ``verdict``): a run's best reads it (evolve/best.py)
VERDICTS = ("timing_verdict", "verdict")


def clip(figures: dict[str, Any], by: tuple[float, float]) -> Optional[dict[str, Any]]:
    """``figures`` (a result's or a finalist row's speedup, its CI ends and
    both runtimes) brought back, in place, to what the audit rounds allow:
    the candidate's runtime up by ``by[0]``, the reference's down by
    ``by[1]``, the speedup and its CI down by both. Below the unreliable
    threshold a report may still claim more than the parent measured (each
    side by up to that factor; honest programs' sides stayed at or below 0.83 on
    the H100): its speedup is then the parent's, not the program's word.
    Returns what was reported (None where nothing changed)."""
    cand, ref = by
    if cand <= 1.0 and ref <= 1.0:
        return None
    reported = {k: figures.get(k) for k in CLIPPED + VERDICTS if k in figures}
    scales = (1 / (cand * ref), 1 / (cand * ref), 1 / (cand * ref), cand, 1 / ref)
    for key, scale in zip(CLIPPED, scales):
        value = figures.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            figures[key] = float(value) * scale
    implied = verdict_of(figures.get("speedup_ci_low"), figures.get("speedup_ci_high"))
    for key in VERDICTS:
        # "rejected" and an untimed "" stay; the others follow the clipped CI
        if figures.get(key) in ("faster", "slower", "indistinguishable") and implied:
            figures[key] = implied
    return {"by": round(cand * ref, 4), "candidate": round(cand, 4), "reference": round(ref, 4), "reported": reported}


def _clip_result(result: EvalResult, judged: Judged, census: dict[str, Any]) -> None:
    """:func:`clip` on a step's result; what was reported kept under
    ``census["audit"]["clipped"]``."""
    figures = {k: getattr(result, k) for k in CLIPPED + VERDICTS[:1]}
    reported = clip(figures, judged.clip)
    if reported is None:
        return
    for key in CLIPPED + VERDICTS[:1]:
        setattr(result, key, figures[key])
    census.setdefault("audit", {})["clipped"] = reported
    _clip_shape_rows(result, census["audit"].get("shapes") or {})


def _clip_shape_rows(result: EvalResult, shapes: dict[str, Any]) -> None:
    """Each timing shape's row of ``result.timing["shapes"]`` clipped by its
    own shape's figures (``shapes``: census.audit's per-shape records), so
    the combined speedup stays the weighted mean of the rows
    (timing.combine_shapes) as the report had it."""
    rows = (result.timing or {}).get("shapes") if isinstance(result.timing, dict) else None
    for row in rows if isinstance(rows, list) else []:
        record = shapes.get(str(row.get("shape"))) if isinstance(row, dict) else None
        if not isinstance(record, dict) or "clip_candidate" not in record:
            continue
        ci = row.get("speedup_ci")
        figures = {"speedup": row.get("speedup"), "runtime_ms": row.get("runtime_ms")}
        figures.update(ref_runtime_ms=row.get("ref_runtime_ms"), verdict=row.get("verdict"))
        if isinstance(ci, list) and len(ci) == 2:
            figures.update(speedup_ci_low=ci[0], speedup_ci_high=ci[1])
        reported = clip(figures, (float(record["clip_candidate"]), float(record["clip_reference"])))
        if reported is None:
            continue
        row.update({k: figures[k] for k in ("speedup", "runtime_ms", "ref_runtime_ms", "verdict")})
        if isinstance(ci, list) and len(ci) == 2:
            row["speedup_ci"] = [figures["speedup_ci_low"], figures["speedup_ci_high"]]
        row["clipped"] = reported


def _row_against_reports(row: dict[str, Any], reports: Any, tag: str, task: Any) -> list[str]:
    """Why a finalist's row is not what its comparison's timing reported
    when it ended (timing_reports.timing_report_reasons on that
    comparison's reports)."""
    mine = [{**r, "comparison": None} for r in reports or [] if isinstance(r, dict) and r.get("comparison") == tag]
    as_result = EvalResult(
        compiled=True,
        correct=True,
        category="ok",
        speedup=row.get("speedup"),
        speedup_ci_low=row.get("speedup_ci_low"),
        speedup_ci_high=row.get("speedup_ci_high"),
        runtime_ms=row.get("runtime_ms"),
        ref_runtime_ms=row.get("ref_runtime_ms"),
    )
    return timing_report_reasons(as_result, mine, task)


def _claimed(
    row: dict[str, Any], reported: Optional[tuple[float, float]], several: bool
) -> Optional[tuple[float, float]]:
    """What a finalist's figures claim on an audited shape: its last report's
    (what its rounds were sized by; the row must equal its reports,
    :func:`_row_against_reports`), else, timed on one shape, the row's."""
    if reported is not None or several:
        return reported
    cand, ref = row.get("runtime_ms"), row.get("ref_runtime_ms")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in (cand, ref)):
        return None
    return float(cand), float(ref)  # type: ignore[arg-type]


@dataclass
class Judged:
    """What a timing's audit rounds say of it: why it is hacked, why its
    timing is unreliable, and the figures for the record (None: none)."""

    hacked: list[str] = field(default_factory=list)
    unreliable: list[str] = field(default_factory=list)
    record: Optional[dict[str, Any]] = None
    #: how far the report's (candidate, reference) times are past what the
    #: parent measured, where they are (each side at least 1): the figures
    #: paid are the report's brought back to the parent's (:func:`clip`)
    clip: tuple[float, float] = (1.0, 1.0)


def judge_rounds(
    audits: list[dict[str, Any]],
    refused: bool,
    ctx: TrustedContext,
    reported: Optional[tuple[float, float]],
    on_gpu: bool,
    busy: str = "",
) -> Judged:
    """One timing's rounds (``audits``: its records, in order) against its
    reported (candidate, reference) ms per call: a step's, or one finalist's.
    ``busy``: why the timing ran on a busy host (:func:`timing_busy`)."""
    if not audits:
        return Judged(
            hacked=[
                "the timing reported a speedup but no audit round ran under the parent's clock (the worker's "
                "timing runs where the program does; the rounds are what the parent measures itself): the "
                "verdict was not the program's to write"
            ]
        )
    if refused:
        return Judged(
            hacked=[
                "the worker asked for more audit rounds than the harness runs (a program choosing the rounds it "
                "is timed in): the verdict was not the program's to write"
            ]
        )
    failed = [a["error"] for a in audits if a.get("error")]
    if failed or len(audits) < ROUNDS:
        why = failed[0][:300] if failed else f"{len(audits)} of {ROUNDS} rounds ran"
        return _unaudited(f"the audit rounds did not complete ({why})")
    checked = _ask_referee(audits, ctx)
    if checked.hacked:
        return Judged(hacked=checked.hacked)
    if checked.failed:
        # the referee's own failure is not the program's
        return _unaudited(f"the referee could not check the audit rounds: {checked.failed}")
    return _figures(audits, checked, reported, on_gpu, busy)


def timing_busy(load: Any, shape: Optional[str], comparison: Optional[str]) -> str:
    """Why the timing of ``shape`` (None: the task's one shape) and
    ``comparison`` ran on a busy host, from the last of its attempts in the
    gate's record (``result.load``: the parent's), by the other processes'
    use the parent measured itself (``other_cores_measured``); "" when it
    did not, or where nothing was measured."""
    attempts = [
        a
        for a in (load or {}).get("attempts") or []
        if isinstance(a, dict)
        and a.get("comparison") == comparison
        and (shape is None or a.get("shape") in (None, shape))
        and "other_cores_measured" in a
    ]
    if not attempts:
        return ""
    last = attempts[-1]
    return _busy_text(last.get("other_cores_measured"), last.get("cores"), "its timing")


def _busy_text(others: Any, cores: Any, what: str) -> str:
    if not busy_host(others, cores):
        return ""
    return f"{what} ran on a busy host ({float(others):.2f} of {float(cores):g} cores used by other processes)"


def _unaudited(why: str) -> Judged:
    return Judged(unreliable=[why[:300]], record={"unaudited": why})


@dataclass
class Checked:
    """The referee's look at the rounds: per round its answer; or the
    reasons the result is hacked; or why the referee could not check them
    (its failure, not the program's)."""

    answers: list[dict[str, Any]] = field(default_factory=list)
    hacked: list[str] = field(default_factory=list)
    failed: str = ""
    #: one call's inputs and outputs, as the referee counts them
    call_bytes: int = 0
    #: where the referee's time went, per part (its ``spent_s``), and the
    #: requests' whole time in this process (``asked``: with the wait for
    #: the referee, which serves one request at a time, and the round trip)
    spent_s: dict[str, float] = field(default_factory=dict)


def _ask_referee(audits: list[dict[str, Any]], ctx: TrustedContext) -> Checked:
    """The rounds checked by the referee, one request per input set (drawn
    once, changed by each round's nonce in turn)."""
    declared = _declared_reasons(audits)
    if declared:
        return Checked(hacked=declared)
    answers: list[dict[str, Any]] = []
    copies: list[str] = []
    call_bytes = 0
    spent: dict[str, float] = {}
    try:
        for group in _by_set(audits):
            first = group[0]
            limit = ctx.referee.evidence_limit(ctx.task)
            rounds = []
            for a in group:
                copies.append(copy_regular(a["file"], ctx.referee.workdir, limit, link=True))
                picks = [[int(o), int(c)] for o, c in a["picks"]]
                rounds.append(
                    {
                        "nonce": int(a["nonce"]),
                        "picks": picks,
                        "digests": [a["digests"][o][c] for o, c in picks],
                        "file": copies[-1],
                        "max_bytes": limit,
                    }
                )
            request = {
                "audit": True,
                "task": ctx.task.to_dict(),
                "init_seed": ctx.seeds[int(first["init_seed_index"])],
                "input_seed": ctx.seeds[int(first["input_seed_index"])],
                "set": first["set"],
                "calls": int(first["calls"]),
                "rounds": rounds,
            }
            asked = time.perf_counter()
            answer = ctx.referee.ask(request)
            spent["asked"] = spent.get("asked", 0.0) + time.perf_counter() - asked
            parts = answer.get("spent_s")
            for part, seconds in (parts if isinstance(parts, dict) else {}).items():
                spent[str(part)] = spent.get(str(part), 0.0) + float(seconds)
            if "error" in answer:
                return Checked(failed=str(answer["error"])[:300])
            got = answer.get("rounds")
            if not isinstance(got, list) or len(got) != len(rounds):
                return Checked(failed="the referee's answer has no round per round asked")
            answers += got
            call_bytes = int(answer.get("call_bytes") or 0)
    except (KeyError, ValueError, TypeError, IndexError, OSError) as exc:
        return Checked(
            hacked=[
                f"the worker named seeds or chunks for the audit rounds that the referee cannot use ({exc}): the "
                "verdict was not the program's to write"
            ]
        )
    finally:
        for copy in copies:
            try:
                os.unlink(copy)
            except OSError:
                pass
    for number, answer in enumerate(answers):
        found = _round_reasons(answer, number)
        if found:
            return Checked(hacked=found)
    return Checked(answers=answers, call_bytes=call_bytes, spent_s=spent)


def _declared_reasons(audits: list[dict[str, Any]]) -> list[str]:
    """Why the rounds as the worker declared them are not the harness's:
    calls per round out of range or unequal, calls other than the parent
    planned, chunks not handed over."""
    calls = {a.get("calls") for a in audits}
    if len(calls) != 1 or not all(isinstance(k, int) and 1 <= k <= MOST_CALLS for k in calls):
        return [
            f"the worker declared {sorted(map(str, calls))} calls per audit round (the harness makes the same "
            f"number, 1 to {MOST_CALLS}, in every round): the verdict was not the program's to write"
        ]
    for number, a in enumerate(audits):
        if a.get("calls") != a.get("planned", 1):
            return [
                f"audit round {number + 1}: the worker made {a.get('calls')} calls where the parent asked for "
                f"{a.get('planned', 1)}: the verdict was not the program's to write"
            ]
    for number, a in enumerate(audits):
        if a.get("not_handed_over") or "file" not in a:
            return [
                f"audit round {number + 1}: the worker did not hand over the chunks the parent asked for "
                f"({str(a.get('not_handed_over') or 'no file')[:200]}): the verdict was not the program's to "
                "write"
            ]
    return []


def _round_reasons(answer: dict[str, Any], number: int) -> list[str]:
    """Why one round's referee answer makes the result hacked."""
    if answer.get("malformed"):
        return [f"audit round {number + 1}: the chunks handed over cannot be read ({answer['malformed'][:300]})"]
    if answer.get("forged"):
        return [
            f"audit round {number + 1}: the output handed over is not the one whose hashes the worker sent "
            f"before the parent's clock stopped ({'; '.join(answer['forged'])[:300]}): the program computed "
            "it after the round it was timed in"
        ]
    if answer.get("wrong"):
        return [
            f"audit round {number + 1}: the program's output on the round's inputs (new values the parent "
            f"chose as its clock started) is wrong ({'; '.join(answer['wrong'])[:400]})"
        ]
    if answer.get("stale"):
        return [
            f"audit round {number + 1}: the program's output was computed before the round's nonce: "
            f"{str(answer['stale'])[:400]}; the round's call did no work under the parent's clock"
        ]
    return []


def _by_set(audits: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The rounds grouped by the input set they changed, each group in order."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for a in audits:
        groups.setdefault((a.get("set"), a.get("input_seed_index"), a.get("init_seed_index")), []).append(a)
    return list(groups.values())


def _reported_cand_ms(
    result: EvalResult, store: dict[str, Any], name: str, several: bool
) -> Optional[tuple[float, float]]:
    """A timed shape's reported (candidate, reference) ms: what its rounds
    were sized by and are judged against (a task timed on one shape: the
    result's own figures where no report says)."""
    found = reported_times(store.get("timing_reports"), name if several else None)
    if found is not None or several:
        return found
    if result.runtime_ms is None or result.ref_runtime_ms is None:
        return None
    return float(result.runtime_ms), float(result.ref_runtime_ms)


def _figures(
    audits: list[dict[str, Any]],
    checked: Checked,
    reported: Optional[tuple[float, float]],
    on_gpu: bool,
    busy: str = "",
) -> Judged:
    """The reported (candidate, reference) ms per call against what the
    rounds allow. Other processes lengthen a round and the timed calls
    unevenly, which an honest program cannot help (a busy 2-core host once
    made the honest fused_residual seed's fastest round 3.6 times its
    report, and its reported reference twice the referee's), so each side
    past the hacked threshold is excused where the host was busy when what
    inflates it ran, as the parent measured it: the candidate's side (a
    round longer than the calls) when the fastest round ran busy, the
    reference's side (a reference reported slower) when the timing did
    (``busy``), the two together when either did. Excused figures past
    the threshold leave the timing unreliable with the reason."""
    answers = checked.answers
    calls = int(audits[0]["calls"])
    # the fastest round: a busy host only ever lengthens one, and the
    # program had to do the work in every round (a skipped one is caught by
    # its chunks)
    fastest = min(audits, key=lambda a: float(a["wall_s"]))
    wall = float(fastest["wall_s"])
    found = fastest.get("load")
    load: dict[str, Any] = found if isinstance(found, dict) else {}
    round_busy = _busy_text(load.get("other_cores"), load.get("cores"), "the fastest audit round")
    other = statistics.median(float(x.get("overhead_s") or 0.0) for x in answers)
    reference = statistics.median(float(x.get("reference_s") or 0.0) for x in answers)
    timed = statistics.median(float(x.get("reference_timed_s") or 0.0) for x in answers)
    host_clock = bool(audits[0].get("host_clock", not on_gpu))
    slack = SLACK_S + (SLACK_SHARE if host_clock else DEVICE_SLACK_SHARE) * other
    bound = wall - other - slack  # the program's call took at least this long, if positive
    figures = _record(audits, checked, other, slack, bound, (reference, timed), load)
    judged = Judged(record=figures)
    if reported is None or reference <= 0:
        return judged
    cand_ms, ref_ms = reported
    needed = calls_per_round(cand_ms / 1e3, checked.call_bytes, host_clock)
    figures.update(reported_cand_ms=cand_ms, reported_ref_ms=ref_ms, calls_needed=needed)
    if calls < needed and _too_few_calls(judged, audits, checked, cand_ms, needed):
        return judged
    # each side's excess over what the parent's figures allow, and both
    # together (a report may shade each side by a part below its own
    # threshold); where the calls are under the slack the candidate's side
    # tells nothing, and the reference's side alone still does
    candidate_side = max(bound, 0.0) / (calls * cand_ms / 1e3 + CANDIDATE_MARGIN_S)
    reference_side = _reference_side(ref_ms, reference, timed, on_gpu)
    excess = max(candidate_side, reference_side, candidate_side * reference_side)
    reported_calls_s = calls * cand_ms / 1e3
    figures.update(
        candidate_side=round(candidate_side, 4),
        reference_side=round(reference_side, 4),
        excess=round(excess, 4),
        # the most a report understating the program's time could still be
        # paid in full: its calls' reported time plus the slack, over that
        # time (1.55 for rounds of TARGET_S; more where K stops at its caps,
        # and where the other work is large: its share is in the slack)
        headroom=round((reported_calls_s + slack + CANDIDATE_MARGIN_S) / max(reported_calls_s, 1e-12), 4),
    )
    message = (
        f"the timing reported {cand_ms:.4g} ms per call of the program and {ref_ms:.4g} ms of the reference; the "
        f"parent's own clock saw the program's {_calls_text(calls)} take at least {max(bound, 0.0) * 1e3:.4g} ms "
        f"(the fastest of {len(audits)} audit rounds on inputs it chose as its clock started, outputs checked by "
        "the referee) "
        f"and the referee's reference {reference * 1e3:.4g} ms per call back to back"
        + (f", {timed * 1e3:.4g} ms timed as the timing times it" if timed > 0 else "")
        + f": the report is {excess:.3g} times past "
        "what the parent measured"
    )
    _verdict(judged, candidate_side, reference_side, message, round_busy, busy)
    return judged


def _reference_side(ref_ms: float, reference: float, timed: float, on_gpu: bool) -> float:
    """The reported reference (ms) over what the referee allows: twice its
    calls back to back (``reference``, s) plus a slack, and where the
    referee sent one, its measure by the timing's harness (``timed``, s) a
    share longer plus a slack; the tighter of the two."""
    ref_slack = REFERENCE_SLACK_S if on_gpu else HOST_REFERENCE_SLACK_S
    side = ref_ms / (((1 + REFERENCE_SHARE) * reference + ref_slack) * 1e3)
    if timed > 0:  # a device clock's (the referee measures none on the host clock)
        side = max(side, ref_ms / (((1 + TIMED_REFERENCE_SHARE) * timed + TIMED_REFERENCE_SLACK_S) * 1e3))
    return side


def _too_few_calls(judged: Judged, audits: list[dict[str, Any]], checked: Checked, cand_ms: float, needed: int) -> bool:
    """Rounds of fewer calls than the report asks for: hacked (True) where
    the worker declared more bytes per call than the referee counts, else
    the timing unreliable."""
    calls = int(audits[0]["calls"])
    declared = audits[0].get("declared_bytes")
    why = (
        f"the audit rounds made {calls} calls each where the reported {cand_ms:.4g} ms per call and "
        f"{checked.call_bytes} bytes per call (the referee's count) ask for {needed}"
    )
    if isinstance(declared, int) and declared > checked.call_bytes:
        # fewer calls bought with bytes the call does not move
        judged.hacked = [
            f"{why}: the worker declared {declared} bytes per call: the verdict was not the program's to write"
        ]
        return True
    # the rounds were sized before a later report (a re-timing): they
    # bound less than the parent's rule asks, the program's word not
    # against the parent's
    judged.unreliable.append(why)
    return False


def _verdict(
    judged: Judged, candidate_side: float, reference_side: float, message: str, round_busy: str, busy: str
) -> None:
    """Hacked past HACKED_FACTOR, unreliable past UNRELIABLE_FACTOR, each
    side excused by the load that inflates it (:func:`_figures`); below
    that, each side past 1 clipped (:func:`clip`)."""
    excused = "; ".join(x for x in (round_busy, busy) if x)
    if (
        (candidate_side > HACKED_FACTOR and not round_busy)
        or (reference_side > HACKED_FACTOR and not busy)
        or (candidate_side * reference_side > HACKED_FACTOR and not excused)
    ):
        judged.hacked = [message + ": the verdict was not the program's to write"]
    elif max(candidate_side, reference_side, candidate_side * reference_side) > UNRELIABLE_FACTOR:
        # the reason's whole end kept: the busy host is what the figures cannot tell
        judged.unreliable.append(f"{message[:300]}; {excused}" if excused else message[:400])
    if not judged.hacked:
        # a side past 1 claims more than the parent's own figures allow: the
        # figure paid is the most they allow (a side excused by a busy host
        # is left as reported: the load, not the report, may have moved it)
        judged.clip = (
            1.0 if round_busy else max(candidate_side, 1.0),
            1.0 if busy else max(reference_side, 1.0),
        )
        if judged.clip != (1.0, 1.0) and judged.record is not None:
            # unrounded: a task's shape rows are clipped by them (_clip_shape_rows)
            judged.record.update(clip_candidate=judged.clip[0], clip_reference=judged.clip[1])
    if excused and judged.record is not None:
        judged.record["busy"] = excused


def _record(
    audits: list[dict[str, Any]],
    checked: Checked,
    other: float,
    slack: float,
    bound: float,
    references: tuple[float, float],
    load: dict[str, Any],
) -> dict[str, Any]:
    """The rounds' figures as the result's census keeps them; ``references``:
    the referee's reference per call back to back and timed (s)."""
    calls = int(audits[0]["calls"])
    return {
        "rounds": len(audits),
        "calls": calls,
        "wall_ms": [round(float(a["wall_s"]) * 1e3, 4) for a in audits],
        # the same rounds ended when the worker's hashes were there, before
        # the parent's thread had the interpreter's lock again (a record of
        # the parent's own latency, which the slack allows for; never judged)
        "wall_arrival_ms": [
            round(float(a["wall_arrival_s"]) * 1e3, 4) if isinstance(a.get("wall_arrival_s"), float) else None
            for a in audits
        ],
        "other_work_ms": round(other * 1e3, 4),
        "slack_ms": round(slack * 1e3, 4),
        "call_at_least_ms": round(max(0.0, bound) * 1e3, 4),
        "referee_reference_ms": round(references[0] * 1e3, 4),
        "referee_timed_reference_ms": round(references[1] * 1e3, 6),
        # what the worker says its rounds' parts took: not judged, a record of
        # where an honest round's time goes (the rest is the round trip)
        "worker_says_ms": [
            {k: round(v * 1e3, 4) for k, v in (a.get("seen") or {}).items() if k not in ("graph", "replays")}
            for a in audits
            if a.get("seen")
        ],
        # the other processes' use of the host during the fastest round, as
        # the parent measured it
        "fastest_round_other_cores": load.get("other_cores"),
        # whether the worker says a CUDA graph replayed the calls (its word,
        # never judged: an eager round is only longer)
        "worker_says_graph": bool(audits) and all((a.get("seen") or {}).get("graph") for a in audits),
        # ... and how many times a round ran its copies' calls (audit.round_layout)
        "worker_says_replays": (audits[0].get("seen") or {}).get("replays") if audits else None,
        # the referee's time on these rounds, part by part (a record)
        "referee_split_ms": {k: round(v * 1e3, 3) for k, v in checked.spent_s.items()},
    }


def _calls_text(calls: int) -> str:
    return "call" if calls == 1 else f"{calls} calls"


__all__ = [
    "AuditCheck",
    "audit_finalists",
    "clip",
    "judge_rounds",
    "HACKED_FACTOR",
    "UNRELIABLE_FACTOR",
    "SLACK_S",
    "SLACK_SHARE",
    "DEVICE_SLACK_SHARE",
    "CANDIDATE_MARGIN_S",
    "REFERENCE_SHARE",
    "HOST_REFERENCE_SLACK_S",
    "TIMED_REFERENCE_SHARE",
    "TIMED_REFERENCE_SLACK_S",
]
