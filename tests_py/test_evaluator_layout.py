"""The evaluator's layout (issue 28): functions short enough to read, the
wire protocol's names in one module, every hack check a registered unit."""

from __future__ import annotations

from typing import Optional

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

EVALUATOR = Path(__file__).resolve().parent.parent / "python" / "kernelsmith" / "evaluator"
MAX_LINES = 80


def test_no_function_in_the_evaluator_is_over_80_lines():
    long = []
    for path in sorted(EVALUATOR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{path.relative_to(EVALUATOR)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "functions over 80 lines: " + "; ".join(long)


def test_the_protocol_names_its_messages_once():
    """Both sides use protocol.py's constants; no message name is spelled as
    a string literal in the worker or the parent's modules."""
    from kernelsmith.evaluator import protocol

    names = {getattr(protocol, n) for n in protocol.__all__ if n.isupper()}
    for module in ("worker.py", "trials.py", "worker_timing.py", "sandbox.py", "pool.py"):
        tree = ast.parse((EVALUATOR / module).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "type" and isinstance(node.value, ast.Constant):
                raise AssertionError(f"{module}: message type {node.value.value!r} spelled out")
            if isinstance(node, ast.Compare) and any(
                isinstance(c, ast.Constant) and c.value in names for c in node.comparators
            ):
                raise AssertionError(f"{module}:{node.lineno}: a message name compared as a literal")


def test_every_check_module_is_registered_once():
    """Each file of evaluator/checks/ (but the interface) defines a check,
    and that check is in CHECKS exactly once."""
    from kernelsmith.evaluator import checks
    from kernelsmith.evaluator.checks.base import Check

    registered = [type(c) for c in checks.CHECKS]
    assert len(registered) == len(set(registered))
    for info in pkgutil.iter_modules(checks.__path__):
        if info.name == "base":
            continue
        module = importlib.import_module(f"kernelsmith.evaluator.checks.{info.name}")
        own = [
            v
            for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, Check) and v.__module__ == module.__name__
        ]
        assert own, f"checks/{info.name}.py defines no Check"
        for cls in own:
            assert cls in registered, f"{cls.__name__} (checks/{info.name}.py) is not in checks.CHECKS"
            assert cls.points and cls.name, cls.__name__


def test_checks_at_one_point_join_or_end_it(monkeypatch):
    """The composer: reasons of joining checks are added to the first
    finding, a non-joining check after a finding does not run, and the
    first finding's check decides the verdict's fields."""
    from kernelsmith.evaluator import checks
    from kernelsmith.evaluator.checks.base import FACTS, Check, Context

    # points are declared with their facts (checks.base.FACTS); these are the test's
    monkeypatch.setitem(FACTS, "test point", frozenset({"fact"}))
    monkeypatch.setitem(FACTS, "another point", frozenset())

    ran = []

    class Finds(Check):
        name, points, verdict = "finds", ("test point",), {"correct": False}

        def reasons(self, at, ctx):
            ran.append(self.name)
            return [f"{self.name} at {at}"]

    class Joins(Finds):
        name, joins = "joins", True

    class Ends(Finds):
        name = "ends"

    saved = list(checks.CHECKS)
    try:
        checks.CHECKS[:] = [Finds(), Joins(), Ends()]
        reasons, fields = checks.findings("test point", Context(), fact=1)
        assert reasons == ["finds at test point", "joins at test point"] and fields == {"correct": False}
        assert ran == ["finds", "joins"]
        try:
            checks.enforce("test point", Context(), fact=2)
        except checks.Verdict as v:
            assert v.fields["category"] == "hacked" and v.fields["hacked"] and v.fields["compiled"]
            assert v.fields["correct"] is False and len(v.fields["hack_reasons"]) == 2
        else:
            raise AssertionError("no verdict")
        assert checks.findings("another point", Context()) == ([], {})
    finally:
        checks.CHECKS[:] = saved


def test_a_moments_facts_are_not_kept_past_it(monkeypatch):
    from kernelsmith.evaluator import checks
    from kernelsmith.evaluator.checks.base import FACTS, Context

    monkeypatch.setitem(FACTS, "nothing looks here", frozenset({"got", "expected"}))
    ctx = Context(out={})
    checks.findings("nothing looks here", ctx, got=[1], expected=[2])
    assert "got" not in vars(ctx) and ctx.out == {}
    with pytest.raises(AttributeError, match="'got'"):  # strict facts: reading it after its point raises
        _ = ctx.got
    try:
        checks.findings("nothing looks here", ctx, out={})
    except TypeError as exc:
        assert "out" in str(exc)
    else:
        raise AssertionError("a fact replaced the context's own")


def test_the_timer_check_with_a_device_level_census():
    """checks/timer.py's path that only a GPU census reaches, with stand-ins:
    the program's own kernels took longer in one checked call than the timer
    says a whole call takes; re-checked calls that stay slow, then one alone
    in the timing slot, reject it; a call within the timing passes."""
    import torch

    from kernelsmith.evaluator import correctness as cmp
    from kernelsmith.evaluator.checks.base import AFTER_TIMING, Context
    from kernelsmith.evaluator.checks.timer import TimerAgreement

    class Call:
        device_level = True

        def __init__(self, us: float) -> None:
            self.own = {"relu_kernel": us}

    class Census:
        readings = [5000.0]

        @property
        def last(self) -> Call:
            return Call(self.readings[-1])

    class Chan:
        slots = 0

        def timing_slot(self) -> float:
            self.slots += 1
            return 0.0

        def timing_done(self, report: dict) -> bool:
            return False

    class Backend:
        def synchronize(self) -> None:
            pass

    class Outcome:
        runtime_ms = 1.0

    census, chan = Census(), Chan()
    ctx = Context(
        checks_on=True,
        census=census,
        chan=chan,
        out={},
        model=torch.relu,
        backend=Backend(),
        cmp=cmp,
        make_inputs=lambda gen: list(gen()),
        clone=lambda xs: [x.clone() for x in xs],
        atol=1e-6,
        rtol=1e-6,
        run_checked=lambda args, where: cmp.flatten_outputs(torch.relu(*args)),
    )
    facts = dict(gen=lambda: [torch.randn(8)], held=[torch.randn(8)], first_outcome=Outcome())
    (reason,) = TimerAgreement().reasons(AFTER_TIMING, ctx.update(**facts))
    assert reason.startswith("the timing says 1 ms per call, but the program's own kernels ran 5 ms"), reason
    assert chan.slots == 1 and ctx.out["census"]["own_device_ms_per_call"] == 5.0
    census.readings.append(900.0)  # within 1.25x of the timed 1 ms
    assert TimerAgreement().reasons(AFTER_TIMING, ctx.update(**facts)) == []
    assert ctx.out["census"]["own_device_ms_per_call"] == 0.9


def test_every_trusted_check_module_is_registered_once():
    """Each file of evaluator/trusted/ (but the interface) defines a
    parent-side check, and that check is in TRUSTED_CHECKS exactly once,
    in today's order: the referee's re-check, the timing's reports, the
    timing slot."""
    from kernelsmith.evaluator import trusted
    from kernelsmith.evaluator.trusted.base import TrustedCheck

    registered = [type(c) for c in trusted.TRUSTED_CHECKS]
    assert len(registered) == len(set(registered))
    modules = [info.name for info in pkgutil.iter_modules(trusted.__path__) if info.name != "base"]
    assert modules
    for name in modules:
        module = importlib.import_module(f"kernelsmith.evaluator.trusted.{name}")
        own = [
            v
            for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, TrustedCheck) and v.__module__ == module.__name__
        ]
        assert own, f"trusted/{name}.py defines no TrustedCheck"
        for cls in own:
            assert cls in registered, f"{cls.__name__} (trusted/{name}.py) is not in trusted.TRUSTED_CHECKS"
            assert cls.name, cls.__name__
    today = ["referee", "timing reports", "timing slot"]  # a later check may join anywhere, these keep their order
    assert [c.name for c in trusted.TRUSTED_CHECKS if c.name in today] == today


def test_trusted_checks_the_first_finding_decides(monkeypatch):
    """The parent's composer: the first check that finds a reason overrules
    the result with its reasons and no later check runs; a hacked result
    keeps no figure, whichever side (the worker's, these) said so."""
    from kernelsmith.evaluator import trusted
    from kernelsmith.evaluator.trusted.base import TrustedCheck
    from kernelsmith.result import EvalResult

    ran = []

    class Quiet(TrustedCheck):
        name = "quiet"

        def reasons(self, result, ctx):
            ran.append(self.name)
            result.census["quiet"] = "looked"
            return []

    class Finds(Quiet):
        name = "finds"

        def reasons(self, result, ctx):
            ran.append(self.name)
            return ["found one", "and another"]

    class Later(Quiet):
        name = "later"

    def correct():
        return EvalResult(
            category="ok", compiled=True, correct=True, speedup=3.0, speedup_ci_low=2.5, speedup_ci_high=3.5
        )

    monkeypatch.setattr(trusted, "TRUSTED_CHECKS", [Quiet(), Finds(), Later()])
    r = correct()
    trusted.trusted_checks(r, None, [], None, "/nonexistent", referee=None)
    assert ran == ["quiet", "finds"]
    assert r.category == "hacked" and r.hacked and not r.correct and r.hack_reasons == ["found one", "and another"]
    assert r.speedup is None and r.speedup_ci_low is None and r.speedup_ci_high is None
    assert r.census == {"quiet": "looked"}

    monkeypatch.setattr(trusted, "TRUSTED_CHECKS", [Quiet(), Later()])
    ran.clear()
    honest = correct()
    trusted.trusted_checks(honest, None, [], None, "/nonexistent", referee=None)
    assert ran == ["quiet", "later"] and honest.category == "ok" and honest.speedup == 3.0

    # the worker's own hacked verdict: no check finds more, its figures go
    worker_said = EvalResult(category="hacked", compiled=True, hacked=True, speedup=9.0, hack_reasons=["worker"])
    trusted.trusted_checks(worker_said, None, [], None, "/nonexistent", referee=None)
    assert worker_said.speedup is None and worker_said.hack_reasons == ["worker"]


def test_the_timer_check_on_the_cpu_records_host_time_and_judges_the_clock():
    """checks/timer.py on a CPU census (host ranges): the least host time of
    the censused calls (the profiler's span of each) is recorded beside the
    program's kernels' own, never judged: the profiler's overhead inside the
    calls it measures put an honest 0.16 ms OpenCL call at 0.85 ms (5.3x) in
    the full suite, beyond what got_patch showed. What rejects a slowed clock
    is the clock check: the timed calls' intervals on the timing's clock
    against the raw system call's, reported by the timing (clock_check)."""
    import torch

    from kernelsmith.evaluator import correctness as cmp
    from kernelsmith.evaluator.checks.base import AFTER_TIMING, Context
    from kernelsmith.evaluator.checks.timer import TimerAgreement

    class Call:
        device_level = False

        def __init__(self, us: float) -> None:
            self.own = {"relu_kernel": us / 2}
            self.span = us

    class Census:
        def __init__(self, calls_ms: list[float]) -> None:
            self.span_ms = list(calls_ms)
            self.own_ms = [ms / 2 for ms in calls_ms]

        @property
        def last(self) -> Call:
            return Call(self.span_ms[-1] * 1000.0)

    class Chan:
        slots = 0

        def timing_slot(self) -> float:
            self.slots += 1
            return 0.0

        def timing_done(self, report: dict) -> bool:
            return False

    class Backend:
        def synchronize(self) -> None:
            pass

    def outcome(ms: float, clock: Optional[dict] = None) -> object:
        return type("Outcome", (), {"runtime_ms": ms, "details": {"clock_check": clock} if clock else {}})()

    def judge(calls_ms: list[float], timed_ms: float, clock: Optional[dict] = None) -> tuple[list[str], dict, int]:
        chan = Chan()
        ctx = Context(
            checks_on=True,
            census=Census(calls_ms),
            chan=chan,
            out={},
            model=torch.relu,
            backend=Backend(),
            cmp=cmp,
            make_inputs=lambda gen: list(gen()),
            clone=lambda xs: [x.clone() for x in xs],
            atol=1e-6,
            rtol=1e-6,
            run_checked=lambda args, where: cmp.flatten_outputs(torch.relu(*args)),
        )
        facts = dict(gen=lambda: [torch.randn(8)], held=[torch.randn(8)], first_outcome=outcome(timed_ms, clock))
        return TimerAgreement().reasons(AFTER_TIMING, ctx.update(**facts)), ctx.out, chan.slots

    # the fastest of the censused calls (0.85 ms) against 0.16 ms timed, as the
    # honest OpenCL program: recorded, not judged, no re-check in the slot
    reasons, out, slots = judge([1.2, 0.85, 0.9], 0.16)
    assert reasons == [] and slots == 0
    assert out["census"]["call_host_ms_per_call"] == 0.85 and out["census"]["own_host_ms_per_call"] == 0.425
    # a clock slowed to a fifth inside forward: the clock check's reason
    slowed = {"calls": 400, "timer_ms": 800.0, "raw_ms": 4000.0}
    (reason,), out, slots = judge([1.2], 2.0, clock=slowed)
    assert reason.startswith("the timing's clock measured 800 ms over the 400 timed calls"), reason
    assert judge([1.2], 2.0, clock={"calls": 400, "timer_ms": 3990.0, "raw_ms": 4000.0})[0] == []

    from kernelsmith.evaluator.checks.timer import clock_mismatch

    # honest: the timing's intervals lie inside the raw ones
    assert clock_mismatch({"calls": 400, "timer_ms": 3990.0, "raw_ms": 4000.0}) is None
    assert clock_mismatch(None) is None and clock_mismatch({"calls": 0, "timer_ms": 0, "raw_ms": 0}) is None
    # a fifth of the time, as got_patch's clock inside forward
    forged = clock_mismatch({"calls": 400, "timer_ms": 800.0, "raw_ms": 4000.0})
    assert forged is not None and forged.startswith("the timing's clock measured 800 ms over the 400 timed calls"), (
        forged
    )
    assert "the program changed the clock the timing reads" in forged
    # under a millisecond in all: too little to judge
    assert clock_mismatch({"calls": 4, "timer_ms": 0.1, "raw_ms": 0.5}) is None
