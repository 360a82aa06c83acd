"""Audit rounds in the finalists' re-timing (Evaluator.confirm_best ->
worker_timing.run_finalists): every finalist is loaded in one worker, so its
import-time code runs there and its head-to-head figures are that process's
word, as a step's are. Each finalist with a speedup now runs a step's audit
rounds, tagged with its comparison ("finalist <i>"); the parent sizes them by
that finalist's own last report and judges its row against them
(trusted/audit_check.audit_finalists).

The parent's side first (no worker): the messages' tags, the plan per
finalist, the rounds' bound per comparison, the rows' verdicts and what
finalists.reliable, apply_verdicts and hold_to_alone make of them. Then real
pools on the CPU: report_patch_send (the channel's send wrapped at import,
every report's program time divided by 20) is caught by its rounds in the
finalists' worker; since it rewrites every report of that process, the honest
seed next to it is caught too, and re-timed alone (confirm_best's default)
the seed is cleared and the forger is not."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from kernelsmith.evaluator import Evaluator
from kernelsmith.evaluator import audit as A
from kernelsmith.evaluator.finalists import apply_verdicts, hold_to_alone, reliable
from kernelsmith.evaluator.protocol import AUDIT_PLAN, AUDIT_REQUEST, CALLS, NONCE, answer_audit
from kernelsmith.evaluator.trusted.audit_check import audit_finalists
from kernelsmith.evaluator.trusted.base import TrustedContext
from kernelsmith.result import EvalResult
from kernelsmith.task import Task

HERE = Path(__file__).parent
HACKS = HERE / "fixtures" / "hacks_v3"
RELU = HERE.parent / "examples" / "triton" / "relu"

needs_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU evaluator tests run the Triton interpreter (set TRITON_INTERPRET=1)",
)

#: the rounds' reason for a forged report (as in test_integrity_v3_audit.py)
FORGED = (
    r"^the timing reported [\d.e-]+ ms per call of the program and [\d.e-]+ ms of the reference; the parent's own "
    r"clock saw the program's (?:call|\d+ calls) take at least [\d.e-]+ ms \(the fastest of 3 audit rounds"
)


# ------------------------------------------------- the parent's side of it


def _report(comparison, cand_ms, ref_ms=0.03):
    return {"speedup": ref_ms / cand_ms, "cand_ms": cand_ms, "ref_ms": ref_ms, "comparison": comparison}


def test_reported_times_keep_one_comparisons_reports():
    reports = [_report("reference", 1.0), _report("finalist 0", 2.0), _report("finalist 1", 0.5), _report(None, 4.0)]
    assert A.reported_times(reports) == (4.0, 0.03)  # a step's own: untagged
    assert A.reported_times(reports, comparison="finalist 0") == (2.0, 0.03)
    assert A.reported_times(reports, comparison="finalist 1") == (0.5, 0.03)
    assert A.reported_times(reports, comparison="finalist 2") is None


def test_each_finalists_plan_is_sized_by_its_own_report_and_its_rounds_are_tagged():
    store: dict = {
        "audit_comparisons": ["finalist 0", "finalist 1"],
        "timing_reports": [_report("finalist 0", 5.0), _report("finalist 1", 0.01)],
    }
    plans = {}
    for tag in ("finalist 0", "finalist 1"):
        plans[tag] = answer_audit({"type": AUDIT_PLAN, "call_bytes": 1024, "comparison": tag}, store)[CALLS]
        for _ in range(A.ROUNDS):
            answer_audit({"type": AUDIT_REQUEST, "set": "get_inputs", "calls": plans[tag], "comparison": tag}, store)
    # 5 ms of calls at each one's reported time
    assert plans == {"finalist 0": 1, "finalist 1": 500}
    rounds = store["audits"]
    assert [a["comparison"] for a in rounds] == ["finalist 0"] * A.ROUNDS + ["finalist 1"] * A.ROUNDS
    assert [a["planned"] for a in rounds] == [1] * A.ROUNDS + [500] * A.ROUNDS
    assert not store.get("audits_refused")


def test_a_steps_rounds_are_as_before_and_other_names_are_refused():
    store: dict = {"timing_reports": [_report(None, 1.0)]}
    assert answer_audit({"type": AUDIT_PLAN, "call_bytes": 1024}, store)[CALLS] == 5
    answer_audit({"type": AUDIT_REQUEST, "set": "get_inputs", "calls": 5}, store)
    assert "comparison" not in store["audits"][0] and store["audits"][0]["planned"] == 5
    assert store["audit_plan"] == {"calls": 5, "call_bytes": 1024, "host_clock": True}
    # a step's job has no finalist: a round named as one is not kept
    answer_audit({"type": AUDIT_REQUEST, "set": "get_inputs", "comparison": "finalist 0"}, store)
    assert len(store["audits"]) == 1 and store["audits_refused"] and store["audits_refused_for"] == ["finalist 0"]
    # a finalists' job: no untagged round, no finalist it was not sent
    store = {"audit_comparisons": ["finalist 0"]}
    for tag in (None, "finalist 1"):
        assert isinstance(answer_audit({"type": AUDIT_REQUEST, "set": "s", "comparison": tag}, store)[NONCE], int)
    assert store["audits"] == [] and store["audits_refused_for"] == [None, "finalist 1"]


def test_the_rounds_are_bounded_per_finalist():
    store: dict = {"audit_comparisons": ["finalist 0", "finalist 1"]}
    for _ in range(4 * A.ROUNDS + 2):
        answer_audit({"type": AUDIT_REQUEST, "set": "s", "comparison": "finalist 0"}, store)
    assert len(store["audits"]) == 4 * A.ROUNDS and store["audits_refused_for"] == ["finalist 0"]
    # the other finalist's rounds are still its own
    answer_audit({"type": AUDIT_REQUEST, "set": "s", "comparison": "finalist 1"}, store)
    assert store["audits"][-1]["comparison"] == "finalist 1"


class _Referee:
    """The referee's side as the check sees it (the real one runs in the
    pool tests below): every round right, the reference 0.012 ms a call."""

    def __init__(self, workdir):
        self.workdir, self.asked = str(workdir), []

    def evidence_limit(self, task):
        return 1 << 20

    def ask(self, request):
        self.asked.append(request)
        rounds = [{"wrong": [], "forged": [], "overhead_s": 0.001, "reference_s": 1.2e-5} for _ in request["rounds"]]
        return {"rounds": rounds, "call_bytes": 1 << 16}


def _rounds(tmp_path, tag, walls, calls=1, error=None):
    out = []
    for number, wall in enumerate(walls):
        chunk = tmp_path / f"{tag.replace(' ', '-')}-{number}.bin"
        chunk.write_bytes(b"x")
        out.append(
            {
                "set": "get_inputs",
                "input_seed_index": 3,
                "init_seed_index": 0,
                "nonce": 7 + number,
                "calls": calls,
                "planned": calls,
                "wall_s": wall,
                "digests": [[11, 12, 13, 14]],
                "picks": [[0, 1], [0, 3]],
                "file": str(chunk),
                "comparison": tag,
                **({"error": error} if error and number == len(walls) - 1 else {}),
            }
        )
    return out


def _row(index, cand_ms, ref_ms=0.03):
    return {
        "index": index,
        "correct": True,
        "speedup": ref_ms / cand_ms,
        "speedup_ci_low": ref_ms / cand_ms * 0.9,
        "speedup_ci_high": ref_ms / cand_ms * 1.1,
        "runtime_ms": cand_ms,
        "ref_runtime_ms": ref_ms,
        "verdict": "faster",
        "suspicious": False,
    }


def _judge_rows(tmp_path, rows, audits, reports, refused_for=()):
    store = {
        "audits": audits,
        "timing_reports": reports,
        "audit_comparisons": [f"finalist {i}" for i in range(len(rows))],
    }
    if refused_for:
        store["audits_refused"], store["audits_refused_for"] = True, list(refused_for)
    result = EvalResult(compiled=True, correct=True, category="ok", timing={"finalists": rows, "device": "cpu"})
    referee = _Referee(tmp_path)
    ctx = TrustedContext(
        task=Task.load(RELU), seeds=[5, 6, 8, 9], workdir=str(tmp_path), referee=referee, evidence=store
    )
    audit_finalists(result, ctx)
    return {r["index"]: r for r in rows}, referee


def test_each_finalists_row_is_judged_by_its_own_rounds(tmp_path):
    rows = [_row(0, 10.0), _row(1, 0.5), _row(2, 10.0), _row(3, 10.0), {"index": 4, "correct": False, "error": "x"}]
    audits = (
        # honest: 10 ms reported, the fastest round 12 ms (11 ms work, 1 ms other)
        _rounds(tmp_path, "finalist 0", (0.013, 0.012, 0.014))
        # forged: 0.5 ms reported a call, 20 calls of 10 ms each seen
        + _rounds(tmp_path, "finalist 1", (0.205, 0.204, 0.206), calls=20)
        # finalist 2 has no rounds at all; finalist 3's call failed in its last round
        + _rounds(tmp_path, "finalist 3", (0.013, 0.012, 0.014), error="RuntimeError: no")
    )
    reports = [_report(f"finalist {i}", cand) for i, cand in enumerate((10.0, 0.5, 10.0, 10.0))]
    rows[1]["audit"] = {"excess": 0.1}  # the worker's word on a parent's field is dropped
    got, referee = _judge_rows(tmp_path, rows, audits, reports)
    honest = got[0]
    assert honest["correct"] and not honest.get("hacked") and honest["speedup"] == pytest.approx(0.003), honest
    assert honest["audit"]["rounds"] == A.ROUNDS and honest["audit"]["excess"] < 2, honest["audit"]
    assert "timing_reliable" not in honest  # the gate's verdict comes next (apply_verdicts)
    forged = got[1]
    assert not forged["correct"] and forged["hacked"] and forged["audit_hacked"], forged
    assert forged.get("speedup") is None and forged.get("runtime_ms") is None, forged
    assert re.search(FORGED, forged["error"]) and forged["audit"]["excess"] > 4, forged
    missing = got[2]
    assert not missing["correct"] and missing["hacked"], missing
    assert "no audit round ran under the parent's clock" in missing["error"]
    unaudited = got[3]
    assert unaudited["correct"] and unaudited["timing_reliable"] is False, unaudited
    assert unaudited["unreliable_reasons"] == ["the audit rounds did not complete (RuntimeError: no)"]
    assert got[4] == {"index": 4, "correct": False, "error": "x"}
    # one request per finalist's set, with the finalists' seeds (the same
    # init seed for all: every model there is built from it)
    assert [r["init_seed"] for r in referee.asked] == [5, 5] and len(referee.asked[0]["rounds"]) == A.ROUNDS
    # the gate's verdicts keep the audit's: no row the rounds refuted can be a best
    load = {"attempts": [{"comparison": f"finalist {i}", "reasons": []} for i in range(4)]}
    apply_verdicts(rows, load)
    assert reliable(got[0]) and not reliable(got[1]) and not reliable(got[2]) and not reliable(got[3])
    assert got[3]["unreliable_reasons"] == ["the audit rounds did not complete (RuntimeError: no)"]
    assert reliable({**got[0], "hacked": True}) is False


def test_a_row_forged_apart_from_its_report_is_caught(tmp_path):
    # the report honest (the rounds pass it), the row's program time divided
    # by 20: the row's figure is what a run takes, so it must be the reported one
    rows = [_row(0, 0.5)]
    got, _ = _judge_rows(
        tmp_path, rows, _rounds(tmp_path, "finalist 0", (0.013, 0.012, 0.014)), [_report("finalist 0", 10.0)]
    )
    assert got[0]["hacked"] and got[0]["audit"]["excess"] < 2, got[0]
    assert "the result's timing figures are not the ones measured" in got[0]["error"], got[0]["error"]
    assert "runtime_ms 0.5 against 10.0" in got[0]["error"], got[0]["error"]


def test_a_speedup_written_apart_from_the_reported_one_is_caught(tmp_path):
    # times honest (the rounds pass), the row's speedup times 20: what a run
    # ranks by is the speedup, so it must be the reported one
    rows = [{**_row(0, 10.0), "speedup": 0.06}]
    got, _ = _judge_rows(
        tmp_path, rows, _rounds(tmp_path, "finalist 0", (0.013, 0.012, 0.014)), [_report("finalist 0", 10.0)]
    )
    assert got[0]["hacked"] and got[0]["audit"]["excess"] < 2, got[0]
    assert "the result's timing figures are not the ones measured" in got[0]["error"], got[0]["error"]


def test_refused_rounds_hack_their_finalist_or_every_one_when_nobodys(tmp_path):
    audits = _rounds(tmp_path, "finalist 0", (0.013, 0.012, 0.014)) + _rounds(tmp_path, "finalist 1", (0.013,) * 3)
    reports = [_report("finalist 0", 10.0), _report("finalist 1", 10.0)]
    got, _ = _judge_rows(tmp_path, [_row(0, 10.0), _row(1, 10.0)], audits, reports, refused_for=["finalist 1"])
    assert got[0]["correct"] and not got[1]["correct"] and "more audit rounds" in got[1]["error"]
    got, _ = _judge_rows(tmp_path, [_row(0, 10.0), _row(1, 10.0)], audits, reports, refused_for=[None])
    assert not got[0]["correct"] and not got[1]["correct"], got


def test_a_row_hacked_next_to_others_is_decided_alone():
    rows = [
        {"index": 0, "correct": False, "hacked": True, "audit_hacked": True, "error": "forged next to it"},
        {"index": 1, "correct": False, "hacked": True, "audit_hacked": True, "error": "forged"},
    ]
    alone = {
        0: {**_row(0, 10.0), "timing_reliable": True, "unreliable_reasons": [], "audit": {"excess": 0.9}},
        1: {"index": 0, "correct": False, "hacked": True, "error": "forged alone"},
    }
    asked = []

    def retime_alone(index):
        asked.append(index)
        return alone[index]

    hold_to_alone(rows, retime_alone)
    cleared, forger = rows
    # re-timed once each: the cleared one's figures are already its alone ones
    assert asked == [0, 1], asked
    assert cleared["correct"] and cleared["hacked"] is False and reliable(cleared), cleared
    assert cleared["hacked_next_to_others"] == "forged next to it" and cleared["audit"] == {"excess": 0.9}
    assert cleared["speedup"] == pytest.approx(0.003) and "error" not in cleared and "audit_hacked" not in cleared
    assert not forger["correct"] and forger["hacked"] and forger["alone"] == {"error": "forged alone"}


def test_the_scorers_shared_timing_takes_no_hacked_row():
    from kernelsmith.rewards.scorer import LocalScorer

    class Stub:
        def confirm_best(self, task, sources, alone=True):
            return {
                "finalists": [
                    {**_row(0, 0.5), "timing_reliable": True},
                    # correct by the worker's word, hacked by the parent's
                    {**_row(1, 2.0), "timing_reliable": True, "hacked": True},
                ]
            }

    relu = Task.load(RELU)
    result = EvalResult(compiled=True, correct=True, category="ok", runtime_ms=3.0, ref_runtime_ms=0.03, speedup=0.01)
    items = [{"source": "a", "parent_runtime_ms": 1.0}, {"source": "b", "parent_runtime_ms": 1.0}]
    shared = LocalScorer(evaluator=Stub())._shared_timing(
        items, [(relu, "a", None), (relu, "b", None)], {0: result, 1: result}, {}
    )
    assert list(shared) == [0] and shared[0][0].runtime_ms == 0.5


# ------------------------------------------------------------- real pools


@pytest.fixture(scope="module")
def confirmed():
    relu = Task.load(RELU)
    seed = (RELU / "seed.py").read_text()
    forger = (HACKS / "report_patch_send.py").read_text()
    with Evaluator(backend="triton", workers=2, timeout_s=150, timing=True) as ev:
        started = time.monotonic()
        honest = ev.confirm_best(relu, [seed, seed], alone=False)
        shared = ev.confirm_best(relu, [seed, forger], alone=False)
        alone = ev.confirm_best(relu, [seed, forger])
        took = time.monotonic() - started
    return honest, shared, alone, took


def _rows(out):
    return {e["index"]: e for e in out["finalists"]}


def _busy_and_unreliable(row) -> bool:
    """A forger's row whose rounds the parent measured on a busy host (a
    test run beside another): its figures past the threshold leave it
    unreliable with the reason, not hacked (the rule:
    test_integrity_v3_audit.test_a_busy_host_leaves_figures_past_the_threshold_unreliable_not_hacked)."""
    if row.get("hacked") or not (row.get("audit") or {}).get("busy"):
        return False
    assert row.get("timing_reliable") is False, row
    assert any("ran on a busy host" in u for u in row.get("unreliable_reasons") or []), row
    return True


@needs_interpreter
def test_honest_finalists_pass_their_own_rounds(confirmed):
    honest, _, _, took = confirmed
    assert took < 150, took
    for i, row in _rows(honest).items():
        assert row["correct"] and not row.get("hacked") and row.get("speedup") is not None, row
        audit = row["audit"]
        assert audit["rounds"] == A.ROUNDS and audit["excess"] < 2 and audit["referee_reference_ms"] > 0, audit
        # whatever the gate says of a busy host, no reason is the rounds'
        assert not any("audit" in r for r in row.get("unreliable_reasons") or []), row


@needs_interpreter
def test_a_report_forged_in_the_finalists_worker_is_caught_by_its_rounds(confirmed):
    _, shared, _, _ = confirmed
    rows = _rows(shared)
    forger = rows[1]
    if _busy_and_unreliable(forger):
        assert not any(reliable(r) for r in rows.values())
        return
    assert not forger["correct"] and forger["hacked"] and forger.get("speedup") is None, forger
    assert re.search(FORGED, forger["error"]) and forger["audit"]["excess"] > 4, forger
    # the forger rewrote every report of the process: the seed's too
    assert not rows[0]["correct"] and rows[0]["hacked"] and re.search(FORGED, rows[0]["error"]), rows[0]
    assert not any(reliable(r) for r in rows.values())
    if shared["head_to_head"]:
        assert "audit rounds found its figures forged" in shared["head_to_head"]["error"], shared["head_to_head"]


@needs_interpreter
def test_alone_the_seed_is_cleared_and_the_forger_is_not(confirmed):
    _, _, alone, _ = confirmed
    rows = _rows(alone)
    seed, forger = rows[0], rows[1]
    if _busy_and_unreliable(forger) or _busy_and_unreliable(forger.get("alone") or {}):
        assert not reliable(forger)
        return
    assert seed["correct"] and seed["hacked"] is False and seed.get("speedup") is not None, seed
    assert re.search(FORGED, seed["hacked_next_to_others"]), seed
    assert seed["audit"]["rounds"] == A.ROUNDS and seed["audit"]["excess"] < 2, seed["audit"]
    assert not any("audit" in r for r in seed.get("unreliable_reasons") or []), seed
    assert not forger["correct"] and forger["hacked"] and forger.get("speedup") is None, forger
    assert re.search(FORGED, forger["error"]) and re.search(FORGED, forger["alone"]["error"]), forger


def test_a_finalists_row_past_its_rounds_below_the_threshold_is_paid_what_they_allow(tmp_path):
    # 7 ms reported where the fastest round saw at least 12 - 1 - 3 = 8 ms
    # (a side of 8 / 7.25): reliable, but paid at the parent's figure
    rows = [_row(0, 10.0), _row(1, 7.0)]
    audits = _rounds(tmp_path, "finalist 0", (0.013, 0.012, 0.014)) + _rounds(
        tmp_path, "finalist 1", (0.013, 0.012, 0.014)
    )
    got, _ = _judge_rows(tmp_path, rows, audits, [_report("finalist 0", 10.0), _report("finalist 1", 7.0)])
    assert got[0]["speedup"] == pytest.approx(0.003) and "clipped" not in got[0]["audit"], got[0]
    side = 8 / 7.25
    assert got[1]["correct"] and not got[1].get("hacked") and "timing_reliable" not in got[1], got[1]
    assert got[1]["runtime_ms"] == pytest.approx(7.0 * side) and got[1]["speedup"] == pytest.approx(0.03 / 7 / side)
    assert got[1]["speedup_ci_low"] == pytest.approx(0.03 / 7 * 0.9 / side)
    assert got[1]["audit"]["clipped"]["reported"]["runtime_ms"] == 7.0
