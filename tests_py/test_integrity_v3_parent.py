"""Integrity v3, the parent's side: what the parent takes from the worker's
result is checked against what the parent itself saw, not the worker's word.

- The result's timing figures must be the ones the timing reported to the
  parent when it ended (``timing-done``, sent before more of the program
  runs): a speedup no timing reported (a result line the program wrote
  itself), or figures changed after the report (the outcome object rewritten
  by the program's code in the calls after the timing), are "hacked".
- Whether the v2 checks are off is the parent's own setting, never a
  ``census.disabled`` the result claims (which skipped the referee).

Unit tests on trusted.timing_reports.check_timing_reports and
trusted.referee_check.judge (each check alone); the forged result lines
of the fixtures go through a real pool in
test_integrity_v3_channel.py (channel_direct_forge) and
test_pygpubench_exploits.py (fd_overwrite, heap_sig_scan, event_array,
stack_sig_scan, file_struct; seccomp_trap, which rewrote its result line the
same way, is refused by the system-call filter before it can)."""

from __future__ import annotations

from types import SimpleNamespace

from kernelsmith.evaluator.trusted.base import TrustedContext
from kernelsmith.evaluator.trusted.referee_check import judge
from kernelsmith.evaluator.trusted.timing_reports import TimingReports, check_timing_reports
from kernelsmith.result import EvalResult
from kernelsmith.task import TaskConfig


def _timed(speedup: float = 1.25, ref: float = 2.5, cand: float = 2.0, lo: float = 1.2, hi: float = 1.3) -> EvalResult:
    return EvalResult(
        compiled=True,
        correct=True,
        category="ok",
        speedup=speedup,
        ref_runtime_ms=ref,
        runtime_ms=cand,
        speedup_ci_low=lo,
        speedup_ci_high=hi,
    )


def _report(speedup: float = 1.25, ref: float = 2.5, cand: float = 2.0, lo: float = 1.2, hi: float = 1.3) -> dict:
    return {"speedup": speedup, "ref_ms": ref, "cand_ms": cand, "ci_low": lo, "ci_high": hi, "cpu_s": 0.1}


def test_figures_the_timing_reported_stand():
    r = _timed()
    check_timing_reports(r, [_report(speedup=0.9), {"release_only": True}, _report()])  # the last timing decides
    assert r.category == "ok" and r.speedup == 1.25


def test_figures_changed_after_the_report_are_hacked():
    r = _timed(speedup=5.0, hi=5.5)
    check_timing_reports(r, [_report()])
    assert r.category == "hacked" and r.hacked and not r.correct and r.speedup is None
    assert "speedup 5.0 against 1.25" in r.hack_reasons[0] and "speedup_ci_high 5.5 against 1.3" in r.hack_reasons[0]
    assert "not the ones measured" in r.hack_reasons[0]


def test_a_speedup_no_timing_reported_is_hacked():
    for reports in ([], [{"release_only": True}], ["not a dict"]):
        r = _timed()
        check_timing_reports(r, reports)
        assert r.category == "hacked", reports
        assert "no timing reported any figures to the parent" in r.hack_reasons[0]


def test_untimed_or_failed_results_are_left_alone():
    untimed = EvalResult(compiled=True, correct=True, category="ok")
    check_timing_reports(untimed, [])
    assert untimed.category == "ok"
    wrong = EvalResult(compiled=True, category="incorrect", speedup=None)
    check_timing_reports(wrong, [])
    assert wrong.category == "incorrect"


def test_a_result_claiming_its_checks_off_does_not_skip_the_referee(monkeypatch):
    monkeypatch.delenv("KS_BENCH_NO_CENSUS", raising=False)
    r = EvalResult(compiled=True, correct=True, category="ok", census={"disabled": "KS_BENCH_NO_CENSUS=1"})
    judge(r, None, [], None, "/nonexistent", referee=None)  # no trial outputs handed over
    assert r.category == "hacked" and "without the trial outputs the trusted referee checks" in r.hack_reasons[0]
    # where the parent itself turned the checks off (the throughput benchmark), it is believed
    monkeypatch.setenv("KS_BENCH_NO_CENSUS", "1")
    r = EvalResult(compiled=True, correct=True, category="ok", census={"disabled": "KS_BENCH_NO_CENSUS=1"})
    judge(r, None, [], None, "/nonexistent", referee=None)
    assert r.category == "ok"


def test_a_speedup_where_no_timing_was_asked_is_hacked_even_with_a_report():
    """A report the program forged from the worker's own process passes the
    report check (hacks_v3/channel_forge_report.py); where the parent sent
    the job with timing off, or the task turns timing off, no harness timing
    ran, so any speedup is the program's."""

    def reasons(asked, enabled=True):
        cfg = TaskConfig()
        cfg.timing.enabled = enabled
        ctx = TrustedContext(
            task=SimpleNamespace(config=cfg),
            seeds=[],
            workdir="",
            referee=None,
            evidence={"timing_asked": asked, "timing_reports": [_report()]},
        )
        return TimingReports().reasons(_timed(), ctx)

    assert reasons(True) == []
    assert reasons(False) == [
        "the result has a speedup (1.25) but no timing was asked for (the job was sent with timing off): the "
        "verdict was not the program's to write"
    ]
    assert "the task's configuration turns timing off" in reasons(True, enabled=False)[0]
    untimed = EvalResult(compiled=True, correct=True, category="ok")
    ctx = TrustedContext(task=None, seeds=[], workdir="", referee=None, evidence={"timing_asked": False})
    assert TimingReports().reasons(untimed, ctx) == []
