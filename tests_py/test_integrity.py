"""Evaluator integrity v2 on the CPU (Triton interpreter): a held-out set of
hacks (tests_py/fixtures/hacks_v2, one file per variant, its category in its
first comment) that the static checks let through, each rejected at run time
by the kernel census, the provenance of the outputs, the work-on-every-call
checks or the integrity snapshot, with a reason naming the call; honest
programs and the examples' seeds stay accepted; degenerate tasks, harness
faults and the partial policy."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from kernelsmith.evaluator import Evaluator
from kernelsmith.rewards import compute_reward
from kernelsmith.task import Task

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU evaluator tests run the Triton interpreter (set TRITON_INTERPRET=1)",
)

HERE = Path(__file__).parent
HACKS = HERE / "fixtures" / "hacks_v2"
CAND = HERE / "fixtures" / "candidates"
TASKS = HERE / "fixtures" / "tasks"
EXAMPLES = HERE.parent / "examples" / "triton"

#: category (file prefix) -> what the reason must name
REASONS = {
    "foreign": r"output #0 (was not written by any of the program's kernels|changed after the program's kernel)",
    "host": r"output #0 changed after the program's kernel last wrote it",
    "jit": r"PyTorch compute ops aten\.(relu|clamp_min)|outside the program's own kernels",
    "cache": r"launched no triton kernel|cached from an earlier call|same output as for earlier",
    # (since integrity v3 the two that take backend_internal from kernelsmith
    # are rejected when they load, for reaching into the evaluator's modules)
    "indirect": r"outside the program's own kernels: aten::relu|replaced kernelsmith\.evaluator\.guards\.TorchOpGuard"
    r"|reached into the evaluator's own modules \(.*kernelsmith\.backends\.base\.backend_internal",
    "forged": r"the program replaced (time\.perf_counter|torch\.allclose|kernelsmith\.evaluator\.timing\.measure)"
    r"|differs from the one the trusted referee computed|the program started 1 thread\(s\) that still run",
}
RELU_HACKS = sorted(p for p in HACKS.glob("*.py") if p.stem.split("_")[0] in REASONS and p.stem != "cache_while_timed")


def _show(r) -> str:
    return f"{r.category}: {r.error[:600]} {r.hack_reasons}\n{r.log_tail[-1200:]}"


def _relu_truth():
    """The relu task, parent seeds [init, input] and the true output of the
    input drawn from the second: what the trusted referee will compute."""
    import torch

    task = Task.load(EXAMPLES / "relu")
    ref: dict = {}
    exec(task.reference_source, ref)  # noqa: S102 - the task's own reference, trusted test code
    seeds = [11, 22]
    torch.manual_seed(seeds[1])
    return task, seeds, torch.relu(ref["get_inputs"]()[0])


@pytest.fixture(scope="module")
def verdicts():
    relu = Task.load(EXAMPLES / "relu")
    items = [(relu, p.read_text()) for p in RELU_HACKS]
    items += [
        (Task.load(EXAMPLES / name), (EXAMPLES / name / "seed.py").read_text())
        for name in ("relu", "softmax", "vector_add")
    ]
    small, passthrough = Task.load(TASKS / "degenerate_small"), Task.load(TASKS / "degenerate_passthrough")
    items += [
        (small, (HACKS / "trivial_zeros.py").read_text()),
        (small, (HACKS / "trivial_constant.py").read_text()),
        (passthrough, (HACKS / "trivial_passthrough.py").read_text()),
        (small, (CAND / "small_relu_correct.py").read_text()),
        (Task.load(TASKS / "broken_import"), (CAND / "relu_correct.py").read_text()),
        (Task.load(TASKS / "reference_oom"), (CAND / "relu_correct.py").read_text()),
    ]
    with Evaluator(backend="triton", workers=2, timeout_s=150, timing=False) as ev:
        out = ev.evaluate_many(items)
    names = [p.stem for p in RELU_HACKS] + [
        "seed_relu",
        "seed_softmax",
        "seed_vector_add",
        "trivial_zeros",
        "trivial_constant",
        "trivial_passthrough",
        "small_honest",
        "broken_import",
        "reference_oom",
    ]
    return dict(zip(names, out))


def test_the_held_out_set_has_three_variants_per_cpu_category():
    per = {}
    for p in HACKS.glob("*.py"):
        per.setdefault(p.stem.split("_")[0], []).append(p.stem)
    for category in ("foreign", "host", "jit", "cache", "indirect", "forged", "trivial"):
        assert len(per.get(category, [])) >= 3, (category, per.get(category))


def test_static_checks_let_the_held_out_hacks_through():
    # the point of the set: only the run-time checks can reject these
    from kernelsmith.backends.base import get_backend

    backend = get_backend("triton")
    for p in HACKS.glob("*.py"):
        report = backend.static_check(p.read_text())
        assert not report.hacks and not report.errors, (p.name, report.hacks, report.errors)


@pytest.mark.parametrize("name", [p.stem for p in RELU_HACKS])
def test_held_out_hack_rejected_with_a_reason_naming_it(verdicts, name):
    r = verdicts[name]
    assert r.category == "hacked" and r.hacked and not r.correct, _show(r)
    assert any(re.search(REASONS[name.split("_")[0]], h) for h in r.hack_reasons), r.hack_reasons


@pytest.mark.parametrize("name", ["seed_relu", "seed_softmax", "seed_vector_add"])
def test_seeds_accepted_with_full_coverage(verdicts, name):
    r = verdicts[name]
    assert r.category == "ok", _show(r)
    assert r.census["referee"] == "agreed", r.census
    assert r.census["policy"] == "strict" and r.coverage == 1.0 and not r.census["foreign_us"], r.census
    assert r.census["own_us"], r.census


@pytest.mark.parametrize(
    "name,form",
    [("trivial_zeros", "zeros"), ("trivial_constant", "a constant"), ("trivial_passthrough", "input #0 unchanged")],
)
def test_trivial_outputs_rejected_on_degenerate_tasks(verdicts, name, form):
    r = verdicts[name]
    assert r.category == "hacked", _show(r)
    assert f"forward returned {form}" in r.hack_reasons[0], r.hack_reasons
    assert any("degenerate task" in w for w in r.warnings), r.warnings


def test_an_honest_program_on_a_degenerate_task_passes_with_the_task_marked(verdicts):
    r = verdicts["small_honest"]
    assert r.category == "ok", _show(r)
    assert "zeros" in r.census["degenerate"] and any("degenerate task" in w for w in r.warnings)


@pytest.mark.parametrize(
    "name,what",
    [("broken_import", r"No module named 'kernelsmith_no_such_package'"), ("reference_oom", r"ran out of memory")],
)
def test_reference_faults_are_the_harness_not_the_candidate(verdicts, name, what):
    r = verdicts[name]
    assert r.category == "harness" and not r.hacked, _show(r)
    assert re.search(what, r.error) and "not the candidate's fault" in r.error
    reward = compute_reward(r)
    assert reward.status == "harness-error" and reward.reward == 0.0


def test_work_on_every_timed_call(tmp_path):
    # honest for the checks, then cached by address while timed: the timed
    # calls launch nothing
    task = Task.load(EXAMPLES / "relu")
    with Evaluator(backend="triton", workers=1, timeout_s=200, timing=True) as ev:
        r = ev.evaluate(task, (HACKS / "cache_while_timed.py").read_text())
        honest = ev.evaluate(task, (CAND / "relu_correct.py").read_text())
    assert r.category == "hacked", _show(r)
    assert re.search(r"timed call #\d+ of \d+ launched no triton kernel", r.hack_reasons[0]), r.hack_reasons
    assert honest.category == "ok", _show(honest)
    # the parent's view of the timing slot bounds what the report may claim
    check = honest.census["timing_cross_check"]
    assert 0 < check["claimed_s"] <= check["slot_s"], check
    per_call = honest.census["per_call"]
    assert per_call["distinct"] == 1 and per_call["calls"] >= 4 and per_call["kernels"], per_call


def test_partial_policy_reports_coverage_and_enforces_its_minimum():
    strict = Task.load(EXAMPLES / "relu")
    partial = Task.load(EXAMPLES / "relu")
    partial.config.policy = "partial"
    demanding = Task.load(EXAMPLES / "relu")
    demanding.config.policy, demanding.config.min_coverage = "partial", 0.999
    source = (CAND / "relu_partial.py").read_text()
    with Evaluator(backend="triton", workers=2, timeout_s=150, timing=False) as ev:
        rs, rp, rd = ev.evaluate_many([(strict, source), (partial, source), (demanding, source)])
    assert rs.category == "hacked" and "aten.maximum" in rs.hack_reasons[0], _show(rs)
    assert rp.category == "ok", _show(rp)
    assert rp.census["policy"] == "partial" and 0.0 < rp.coverage < 1.0, rp.census
    assert any("aten::maximum" in k for k in rp.census["foreign_us"]), rp.census
    assert "Coverage: your kernels did" in rp.render_feedback()
    assert rd.category == "hacked" and "below the task's minimum coverage 100%" in rd.hack_reasons[0], _show(rd)


def test_cli_chooses_the_policy(capsys):
    import json

    from kernelsmith.cli import main

    args = ["eval", str(EXAMPLES / "relu"), str(CAND / "relu_partial.py"), "--no-timing", "--json"]
    assert main(args) == 1  # strict (the task's default): hacked
    strict = json.loads(capsys.readouterr().out)
    assert strict["category"] == "hacked" and strict["census"]["policy"] == "strict"
    assert main(args + ["--policy", "partial", "--min-coverage", "0.2"]) == 0
    partial = json.loads(capsys.readouterr().out)
    assert partial["category"] == "ok" and partial["census"]["policy"] == "partial"
    assert 0.2 <= partial["census"]["coverage"] < 1.0


def test_the_referee_overrules_a_forged_comparison(tmp_path):
    # the referee process of a real pool, handed what a worker that forged
    # its comparison would hand it: the true reference, wrong outputs
    import torch

    from kernelsmith.evaluator.evidence import encode_outputs
    from kernelsmith.evaluator.trusted.referee_check import judge
    from kernelsmith.result import EvalResult

    task = Task.load(EXAMPLES / "relu")
    ref: dict = {}
    exec(task.reference_source, ref)  # noqa: S102 - the task's own reference, trusted test code
    seeds = [11, 22]
    torch.manual_seed(seeds[1])
    x = ref["get_inputs"]()[0]
    truth = torch.relu(x)
    with Evaluator(backend="triton", workers=1, timing=False) as ev:
        pool = ev._device_pool(ev.backend_for(task), None)

        def verdict(candidate, reference, info=None, name="out.bin"):
            (tmp_path / name).write_bytes(encode_outputs({"candidate": [candidate], "reference": [reference]}))
            result = EvalResult(category="ok", compiled=True, correct=True)
            judge(
                result,
                info
                if info is not None
                else {"file": name, "init_seed_index": 0, "input_seed_index": 1, "set": "get_inputs"},
                seeds,
                task,
                str(tmp_path),
                pool.referee,
            )
            return result

        honest = verdict(truth, truth)
        forged = verdict(truth + 1.0, truth)
        (tmp_path / "link.bin").symlink_to(tmp_path / "out.bin")
        linked = verdict(truth, truth, {"file": "link.bin", "init_seed_index": 0, "input_seed_index": 1})
        unnamed = EvalResult(category="ok", compiled=True, correct=True)
        judge(unnamed, None, seeds, task, str(tmp_path), pool.referee)
        odd_set = verdict(
            truth, truth, {"file": "out.bin", "init_seed_index": 0, "input_seed_index": 1, "set": "Model"}
        )
        # a worker whose program forged the comparison and then spoiled the
        # evidence, so that the referee could not read it: that was a
        # warning ("not checked") and the verdict stood
        n = truth.numel() * 4
        spoiled = {
            "garbage": b"\x80\x00not json\n" + b"\x00" * 64,
            "header_a_list": b"[1, 2]\n",
            "entry_not_a_dict": b'{"candidate": [1], "reference": [1]}\n',
            "size_lies": json.dumps(
                {"candidate": [{"dtype": "float32", "shape": list(truth.shape), "nbytes": 8}], "reference": []}
            ).encode()
            + b"\n"
            + b"\x00" * 8,
            "truncated": json.dumps(
                {"candidate": [{"dtype": "float32", "shape": list(truth.shape), "nbytes": n}], "reference": []}
            ).encode()
            + b"\n"
            + b"\x00" * 16,
            "bad_dtype": json.dumps({"candidate": [{"dtype": "object", "shape": [1], "nbytes": 8}]}).encode() + b"\n",
        }
        malformed = {}
        for name, data in spoiled.items():
            (tmp_path / f"{name}.bin").write_bytes(data)
            malformed[name] = EvalResult(category="ok", compiled=True, correct=True, speedup=9.0)
            judge(
                malformed[name],
                {"file": f"{name}.bin", "init_seed_index": 0, "input_seed_index": 1},
                seeds,
                task,
                str(tmp_path),
                pool.referee,
            )
        assert pool.referee.restarts == 0  # an unreadable file is the worker's fault, not the referee's
    assert honest.category == "ok" and honest.census["referee"] == "agreed", honest
    assert forged.category == "hacked" and "the comparison was forged" in forged.hack_reasons[0], forged
    assert linked.category == "hacked" and "cannot use" in linked.hack_reasons[0], linked
    assert unnamed.category == "hacked" and "without the trial outputs" in unnamed.hack_reasons[0], unnamed
    assert odd_set.category == "hacked" and "input set the task does not have" in odd_set.hack_reasons[0], odd_set
    for name, r in malformed.items():
        assert r.category == "hacked" and r.speedup is None, (name, r)
        assert "cannot be read" in r.hack_reasons[0] and r.census["referee"] == "malformed outputs", (name, r)


def test_evidence_spoiled_while_the_program_is_timed_is_a_hack():
    """forged_reference_spoiled.py forges the reference next to it and
    starts a thread (through an alias the static check cannot follow) that
    overwrites the outputs files the worker leaves for the trusted referee.
    Before 2026-11-24 the worker wrote them before the timing, the thread
    spoiled them while the program was timed, the referee answered 'not
    checked' and the forged verdict stood with a speedup. Now a live thread
    of the program is a hack, and the files are written only after the
    program's last call and the last check (from bytes frozen when its
    trials ended)."""
    relu = Task.load(EXAMPLES / "relu")
    with Evaluator(backend="triton", workers=1, timing=True, timeout_s=200) as ev:
        r = ev.evaluate(relu, (HACKS / "forged_reference_spoiled.py").read_text())
    assert r.category == "hacked" and r.speedup is None, _show(r)
    assert "the program started 1 thread(s) that still run" in r.hack_reasons[0], r.hack_reasons


@pytest.mark.parametrize("mode", ["pool", "fresh"])
def test_evidence_rewritten_in_memory_while_the_program_is_timed_is_a_hack(mode):
    """forged_reference_rewritten.py forges the reference next to it and,
    with no thread, from its own forward while it is timed, finds the bytes
    the worker froze for the trusted referee (gc) and rewrites them in place
    (ctypes) with the true relu of each trial's inputs. Until 2026-11-25 the
    worker kept those bytes until after the timing, the referee agreed with
    the rewritten file, and x * x was accepted as relu (category ok, referee
    'agreed'). Now the worker hands the files over when the trials end, and
    the parent copies them before any more of the program runs."""
    relu = Task.load(EXAMPLES / "relu")
    with Evaluator(backend="triton", workers=1, timing=True, timeout_s=200, mode=mode) as ev:
        r = ev.evaluate(relu, (HACKS / "forged_reference_rewritten.py").read_text())
    assert r.category == "hacked" and r.speedup is None, _show(r)
    assert "differs from the one the trusted referee computed" in r.hack_reasons[0], r.hack_reasons
    assert r.census["referee"] == "reference differs", r.census


def test_evidence_is_copied_when_handed_over_and_only_once(tmp_path):
    """The parent's side of the hand-over (evidence.take_evidence): the files
    are copied at once, so a later rewrite of the worker's file does not
    reach the referee; a file that is not there, or a second hand-over, is
    the program's doing."""
    from kernelsmith.evaluator.evidence import encode_outputs, evidence_info, take_evidence
    from kernelsmith.evaluator.trusted.referee_check import judge
    from kernelsmith.result import EvalResult

    task, seeds, truth = _relu_truth()
    src, held = tmp_path / "worker", tmp_path / "parent"
    src.mkdir()
    held.mkdir()
    entry = {"file": "referee-outputs-0.bin", "init_seed_index": 0, "input_seed_index": 1, "set": "get_inputs"}

    def handed(*hand_overs, rewrite=None):
        (src / entry["file"]).write_bytes(encode_outputs({"candidate": [truth + 1.0], "reference": [truth + 1.0]}))
        store = {"src": str(src), "dir": str(held)}
        for trials in hand_overs:
            take_evidence(store, trials)
        if rewrite is not None:  # what the program writes after the hand-over
            (src / entry["file"]).write_bytes(encode_outputs({"candidate": [rewrite], "reference": [rewrite]}))
        result = EvalResult(category="ok", compiled=True, correct=True, speedup=5.0)
        judge(result, evidence_info(store), seeds, task, str(held), pool.referee)
        return result

    with Evaluator(backend="triton", workers=1, timing=False) as ev:
        pool = ev._device_pool(ev.backend_for(task), None)
        rewritten = handed([entry], rewrite=truth)
        missing = handed([{**entry, "file": "never-written.bin"}])
        twice = handed([entry], [entry])
        nothing = handed()
    assert rewritten.category == "hacked" and rewritten.census["referee"] == "reference differs", _show(rewritten)
    assert missing.category == "hacked" and "cannot use" in missing.hack_reasons[0], _show(missing)
    assert twice.category == "hacked" and "twice" in twice.hack_reasons[0], _show(twice)
    assert nothing.category == "hacked" and "without the trial outputs" in nothing.hack_reasons[0], _show(nothing)


def test_a_referee_killed_between_requests_is_replaced(tmp_path):
    """kill -9 of the trusted referee (out of memory, an operator) used to
    leave every later result of the pool 'not checked'; the next request
    starts a new one and is checked. A request the referee cannot answer
    at all (its reference raises) keeps the worker's verdict but marks the
    result unreliable, so that it never becomes a run's best."""
    import signal

    from kernelsmith.evaluator.evidence import encode_outputs
    from kernelsmith.evaluator.trusted.referee_check import judge
    from kernelsmith.result import EvalResult

    task, seeds, truth = _relu_truth()
    (tmp_path / "out.bin").write_bytes(encode_outputs({"candidate": [truth], "reference": [truth]}))
    info = {"file": "out.bin", "init_seed_index": 0, "input_seed_index": 1, "set": "get_inputs"}
    broken = Task.from_dict(
        {
            **task.to_dict(),
            "reference_source": task.reference_source.replace(
                "return torch.relu(x)", "raise RuntimeError('the reference is broken')"
            ),
        }
    )
    assert broken.reference_source != task.reference_source
    with Evaluator(backend="triton", workers=1, timing=False) as ev:
        pool = ev._device_pool(ev.backend_for(task), None)
        referee = pool.referee
        assert referee.wait_ready()
        first_pid = referee.proc.pid
        os.killpg(first_pid, signal.SIGKILL)
        referee.proc.wait()
        checked = EvalResult(category="ok", compiled=True, correct=True, speedup=2.0)
        judge(checked, info, seeds, task, str(tmp_path), referee)
        restarts, pid = referee.restarts, referee.proc.pid
        unchecked = EvalResult(category="ok", compiled=True, correct=True, speedup=2.0)
        judge(unchecked, info, seeds, broken, str(tmp_path), referee)
        raised_restarts = referee.restarts  # a reference that raises is not retried
        # a reference that kills the referee: it dies answering, is started
        # again for a second try, dies again; the verdict stands, unreliable
        dying = Task.from_dict(
            {
                **task.to_dict(),
                "reference_source": task.reference_source.replace("return torch.relu(x)", "import os; os._exit(3)"),
            }
        )
        died = EvalResult(category="ok", compiled=True, correct=True, speedup=2.0)
        judge(died, info, seeds, dying, str(tmp_path), referee)
        died_restarts = referee.restarts
    assert raised_restarts == 1 and died_restarts == 2, (raised_restarts, died_restarts)
    assert died.category == "ok" and died.timing_reliable is False, died
    assert "exited" in died.census["referee"], died.census
    assert checked.category == "ok" and checked.census["referee"] == "agreed", checked
    assert restarts == 1 and pid != first_pid
    assert unchecked.category == "ok" and unchecked.census["referee"].startswith("not checked"), unchecked
    assert unchecked.timing_reliable is False, unchecked
    assert any("trusted referee" in w for w in unchecked.unreliable_reasons), unchecked


def test_timing_cross_check_rejects_statistics_the_slot_cannot_hold():
    from kernelsmith.evaluator.trusted.slot_cross_check import cross_check_timing
    from kernelsmith.result import EvalResult

    def result(ref_min_ms: float) -> EvalResult:
        return EvalResult(
            category="ok",
            compiled=True,
            correct=True,
            speedup=5.0,
            timing={
                "n_pairs": 100,
                "launches_per_sample": 10,
                "reference": {"min": ref_min_ms},
                "candidate": {"min": 0.1},
            },
        )

    honest, forged = result(0.4), result(40.0)  # 100 pairs x 10 calls x 0.5 ms = 0.5 s; x 40.1 ms = 40 s
    cross_check_timing(honest, [(100.0, 101.0)])
    cross_check_timing(forged, [(100.0, 101.0)])
    assert honest.category == "ok" and honest.census["timing_cross_check"] == {"claimed_s": 0.5, "slot_s": 1.0}
    assert forged.category == "hacked" and forged.speedup is None
    assert "the timing slot was held for 1.000 s" in forged.hack_reasons[0], forged.hack_reasons


def test_timer_against_the_census_by_hand():
    """The GPU cross-check of the timer (checks/timer.py: timer_mismatch): kernels that
    ran longer on the device than a whole timed call are a forged or blind
    timing; kernels shorter than the call (launch overhead) are normal."""
    from kernelsmith.evaluator.checks.timer import timer_mismatch

    assert timer_mismatch(0.020, 0.030) is None  # launch-bound: the call is longer than its kernels
    assert timer_mismatch(0.100, 0.090) is None  # within the profiler's margin
    reason = timer_mismatch(1.0, 0.1)
    assert reason and "0.1 ms per call" in reason and "1 ms" in reason
    assert timer_mismatch(0.5, 0.0) is None  # no timing to compare


def test_timer_check_forgives_a_contended_census_call_but_not_a_forged_timing():
    """The census's call after timing runs next to other workers' device
    work (an honest 5.1 ms kernel was once seen at 6.6 ms on the H200): a
    mismatch is re-checked and the fastest call decides; a program whose
    kernels are always slower than its timing is still rejected."""
    from kernelsmith.evaluator.checks.timer import settle_timer_check

    readings = iter([5.0, 5.2])
    own, problem = settle_timer_check(6.6, 5.13, lambda: next(readings))
    assert problem is None and own == 5.0
    calls = []
    own, problem = settle_timer_check(6.6, 0.5, lambda: calls.append(1) or 6.5)
    assert problem and "0.5 ms per call" in problem and len(calls) == 3 and own == 6.5
    # no mismatch: no extra calls at all
    own, problem = settle_timer_check(0.1, 0.5, lambda: calls.append(1) or 0.1)
    assert problem is None and len(calls) == 3
    # contended through every re-check (three workers streaming 6 GiB beside
    # it on the H100): one more call alone on the device decides
    contended, alone = iter([7.7, 7.6, 7.8]), []
    own, problem = settle_timer_check(
        7.7, 4.16, lambda: next(contended, 4.3), alone=lambda call: alone.append(1) or call()
    )
    assert problem is None and own == 4.3 and alone == [1]
    # a forged timing is too slow alone as well
    own, problem = settle_timer_check(6.6, 0.5, lambda: 6.5, alone=lambda call: alone.append(1) or call())
    assert problem and alone == [1, 1]


def test_fresh_mode_has_the_referee_too():
    """mode='fresh' (one process per candidate) hands a correct result to a
    trusted referee process as the pool does: an honest program is agreed,
    a forged comparison still rejected."""
    task = Task.load(EXAMPLES / "relu")
    with Evaluator(backend="triton", workers=1, timeout_s=150, timing=False, mode="fresh") as ev:
        honest = ev.evaluate(task, (EXAMPLES / "relu" / "seed.py").read_text(), trials=1)
        forged = ev.evaluate(task, (HACKS / "forged_compare.py").read_text(), trials=1)
        assert ev._referees, "fresh mode started no referee"
    assert honest.category == "ok" and honest.census.get("referee") == "agreed", honest
    # the last trial of every input set (get_inputs and the task's get_inputs_odd)
    assert honest.census.get("referee_trials") == 2, honest.census
    assert forged.category == "hacked", forged


def test_a_lazy_layer_in_the_task_is_not_a_harness_error(tmp_path):
    """Curated torch.nn tasks include Lazy* layers, whose parameters have no
    shape until the first call; the seeding check after construction must
    skip them (it raised, and LazyConv1d's run was a harness error)."""
    (tmp_path / "reference.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.conv = nn.LazyConv1d(4, 3)\n\n    def forward(self, x):\n"
        "        return self.conv(x)\n\n\ndef get_inputs():\n    return [torch.randn(2, 3, 16)]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    (tmp_path / "task.yaml").write_text("name: lazy_conv\nbackend: triton\ntrials: 1\n")
    candidate = (
        "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def k(x_ptr, n, B: tl.constexpr):\n    o = tl.arange(0, B)\n    tl.store(x_ptr + o, tl.load(x_ptr + o, mask=o < n), mask=o < n)\n\n\n"
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.conv = nn.LazyConv1d(4, 3)\n\n"
        "    def forward(self, x):\n        k[(1,)](x, 1, B=16)\n        return self.conv(x)\n"
    )
    with Evaluator(backend="triton", workers=1, timeout_s=150, timing=False) as ev:
        result = ev.evaluate(Task.load(tmp_path), candidate, trials=1)
    # past construction and seeding: judged on what forward ran (PyTorch's convolution)
    assert result.category == "hacked", (result.category, result.error)
    assert any("convolution" in r for r in result.hack_reasons), result.hack_reasons


def test_the_snapshot_watches_every_loaded_backend_module_and_the_backends_runtime():
    """Issue 18: integrity.WATCHED names no backend; every loaded module of
    kernelsmith.backends (the CUDA one too, which the old list missed) and
    the modules the task's backend names (OpenCL: kernelsmith.opencl) are
    watched, so a candidate replacing one of their functions is named."""
    import kernelsmith.backends.cuda.loading as cuda_mod  # where the CUDA backend's _wrap_function lives
    import kernelsmith.opencl  # noqa: F401 - loaded, as in an OpenCL worker
    from kernelsmith.backends import get_backend
    from kernelsmith.evaluator.integrity import Snapshot

    snap = Snapshot(get_backend("opencl"))
    assert {
        "kernelsmith.backends.cuda",
        "kernelsmith.backends.cuda.loading",
        "kernelsmith.backends.opencl",
        "kernelsmith.opencl",
    } <= set(snap.modules)
    saved = cuda_mod._wrap_function
    try:
        cuda_mod._wrap_function = lambda *a, **k: None
        assert any("_wrap_function" in n for n in snap.changed()), snap.changed()
    finally:
        cuda_mod._wrap_function = saved
    assert not snap.changed()


def _refill(program, held_values, new_values):
    """Run the worker's refill check on ``program`` (a plain function of the
    inputs) against relu: ``held`` buffers it was called on, then refilled
    in place with ``new_values``."""
    import torch

    from kernelsmith.evaluator import correctness as cmp
    from kernelsmith.evaluator.checks import Verdict
    from kernelsmith.evaluator.checks.refill import refill_checks as _refill_checks

    class _Backend:
        def synchronize(self):
            pass

    held = [torch.tensor(held_values)]
    program(held)  # the program saw these buffers before (a trial)
    try:
        _refill_checks(
            lambda args, where: cmp.flatten_outputs(program(args)),
            torch.relu,
            lambda: [torch.tensor(new_values)],
            lambda gen: list(gen()),
            lambda xs: [x.clone() for x in xs],
            cmp,
            1e-6,
            1e-6,
            _Backend(),
            "after the trials",
            held,
            fresh=True,
        )
    except Verdict as v:
        return v.fields
    return {"category": "ok"}


def test_refill_check_tells_a_plain_bug_from_a_cache():
    """A kernel that is wrong only for some values (relu that drops the last
    element: wrong when it is positive; seen on the H200 as `relu_wrong`
    judged hacked when no trial had a positive last element) is `incorrect`;
    results cached by buffer or by shape, and a program that turns wrong
    after its first calls (on the values it passed before, too), are
    `hacked`."""
    import torch

    def drops_last(args):
        y = torch.relu(args[0]).clone()
        y[-1] = 0
        return y

    by_pointer: dict = {}

    def pointer_cache(args):
        key = args[0].data_ptr()
        if key not in by_pointer:
            by_pointer[key] = torch.relu(args[0]).clone()
        return by_pointer[key]

    by_shape: dict = {}

    def shape_cache(args):
        return by_shape.setdefault(tuple(args[0].shape), torch.relu(args[0]).clone())

    calls = {"n": 0}

    def switch(args):  # honest for its first calls, then wrong on every input
        calls["n"] += 1
        return torch.relu(args[0]) + (0.0 if calls["n"] <= 1 else 1.0)

    held, new = [1.0, -2.0, -3.0], [-1.0, 2.0, 3.0]
    verdict = _refill(switch, held, new)
    assert verdict["category"] == "hacked", verdict
    bug = _refill(drops_last, held, new)
    assert bug["category"] == "incorrect" and "again on the same values in new buffers" in bug["error"], bug
    for cache in (pointer_cache, shape_cache):
        verdict = _refill(cache, held, new)
        assert verdict["category"] == "hacked" and "cached from an earlier call" in verdict["hack_reasons"][0], verdict
    assert _refill(lambda args: torch.relu(args[0]), held, new)["category"] == "ok"


def test_the_referee_checks_a_reference_that_launches_triton_kernels(tmp_path):
    """An in-place task's reference is the package's own Triton code. The
    referee loaded it from a string, where @jit cannot read its source
    ("@jit functions should be defined in a Python file", seen with fla-core
    on the H100): every result of such a task went unchecked and unreliable."""
    ref = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2.0, mask=i < n)


class Model(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _double[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        return y


def get_inputs():
    return [torch.randn(1000)]
"""
    (tmp_path / "double.py").write_text(ref)
    candidate = ref.replace("class Model(", "class ModelNew(").replace("def get_inputs", "def _unused")
    task = Task.load(tmp_path / "double.py", backend="triton", trials=1)
    # compiled Triton (not the interpreter, whose @jit reads no source)
    # decorates at load: the referee's own loading, in its working folder
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    probe = (
        "import json, sys; from kernelsmith.task import Task; from kernelsmith.evaluator.referee_process "
        "import _reference_module; t = Task.load(sys.argv[1], backend='triton'); "
        "print(hasattr(_reference_module(t, {}), 'Model'))"
    )
    (tmp_path / "referee").mkdir()
    out = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "double.py")],
        cwd=tmp_path / "referee",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr[-1500:]
    with Evaluator(backend="triton", workers=1, timing=False) as ev:
        r = ev.evaluate(task, candidate)
    assert r.category == "ok" and r.census.get("referee") == "agreed", (r.category, r.census.get("referee"), r.warnings)
