"""End-to-end evaluator tests on the CPU (TRITON_INTERPRET=1): real Triton
candidates in sandboxed workers; correct ones pass, each kind of hack is
rejected with its reason, crashes and hangs become structured failures."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from kernelsmith.evaluator import EvalResult, Evaluator, bwrap_status
from kernelsmith.hardware import HardwareInfo
from kernelsmith.task import Task

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU evaluator tests run the Triton interpreter (set TRITON_INTERPRET=1)",
)

HERE = Path(__file__).parent
CAND = HERE / "fixtures" / "candidates"
EXAMPLES = HERE.parent / "examples" / "triton"

RUNTIME_CASES = [
    # (name, task dir, candidate file)
    ("seed_relu", "relu", EXAMPLES / "relu" / "seed.py"),
    ("seed_vector_add", "vector_add", EXAMPLES / "vector_add" / "seed.py"),
    ("seed_softmax", "softmax", EXAMPLES / "softmax" / "seed.py"),
    ("seed_layernorm", "layernorm", EXAMPLES / "layernorm" / "seed.py"),
    ("crash_segfault", "relu", CAND / "crash_segfault.py"),
    ("crash_exit", "relu", CAND / "crash_exit.py"),
    ("crash_illegal_address", "relu", CAND / "crash_illegal_address.py"),
    ("oom", "relu", CAND / "oom.py"),
    ("relu_correct", "relu", CAND / "relu_correct.py"),
    ("relu_off_by_one", "relu", CAND / "relu_off_by_one.py"),
    ("shape_specialised", "softmax", CAND / "softmax_shape_specialised.py"),
    ("no_kernel", "relu", CAND / "hack_no_kernel.py"),
    ("torch_op", "relu", CAND / "hack_torch_op.py"),
    ("input_mutation", "relu", CAND / "hack_input_mutation.py"),
    ("replay", "relu", CAND / "hack_replay.py"),
    ("ref_buffer", "relu", CAND / "hack_ref_buffer.py"),
    ("wrong_signature", "relu", CAND / "wrong_signature.py"),
    ("compile_error", "relu", CAND / "compile_error.py"),
    ("raises", "relu", CAND / "raises.py"),
    ("env_leak", "relu", CAND / "env_leak.py"),
    ("fs_write", "relu", CAND / "fs_write.py"),
    ("print_inputs", "relu", CAND / "print_inputs.py"),
    ("print_inputs_again", "relu", CAND / "print_inputs.py"),
]


@pytest.fixture(scope="module")
def escape_path(tmp_path_factory):
    return tmp_path_factory.mktemp("escape") / "escaped.txt"


@pytest.fixture(scope="module")
def results(escape_path):
    """Evaluate all runtime cases in one batch over two workers."""
    saved = {
        k: os.environ.get(k) for k in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "KS_TEST_TOKEN", "KS_TEST_ESCAPE_PATH")
    }
    os.environ.update(
        OPENAI_API_KEY="sk-test-secret",
        ANTHROPIC_API_KEY="sk-ant-secret",
        KS_TEST_TOKEN="tok",
        KS_TEST_ESCAPE_PATH=str(escape_path),
    )
    try:
        with Evaluator(backend="triton", workers=2, timeout_s=150, timing=False) as ev:
            items = [(Task.load(EXAMPLES / task), Path(path).read_text()) for _, task, path in RUNTIME_CASES]
            out = ev.evaluate_many(items)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {name: r for (name, _, _), r in zip(RUNTIME_CASES, out)}


def _show(r: EvalResult) -> str:
    return f"{r.category}: {r.error} {r.hack_reasons}\n{r.log_tail[-1500:]}"


@pytest.mark.parametrize("name", ["seed_relu", "seed_vector_add", "seed_softmax", "seed_layernorm", "relu_correct"])
def test_correct_candidates_pass(results, name):
    r = results[name]
    assert r.category == "ok", _show(r)
    assert r.compiled and r.correct and not r.hacked
    assert r.kernels_launched, "the launch hook saw no kernel"
    c = r.correctness
    assert c["trials"] == 5 + 1  # five trials plus the task's extra input set
    assert c["max_abs_err"] <= c["atol"] + c["rtol"] * 10
    hw = HardwareInfo.from_dict(r.hardware)
    assert hw.backend == "triton" and hw.versions["triton"] and hw.versions["torch"] and hw.name


def test_wrong_kernel_is_incorrect_with_first_mismatch(results):
    # relu_off_by_one is wrong on every input (relu_wrong.py, zero-filled, is
    # wrong only when the last input is positive: the evaluator's seeds are
    # secret and random, so where it first fails cannot be asserted)
    r = results["relu_off_by_one"]
    assert r.category == "incorrect" and r.compiled and not r.correct, _show(r)
    fm = r.correctness["first_mismatch"]
    assert fm["input_set"] == "get_inputs" and fm["trial"] == 0, fm
    assert fm["index"] == [15, 1023] and fm["got"] == -1.0 and fm["expected"] >= 0, fm
    assert r.correctness["max_abs_err"] > 1e-3
    assert "index [" in r.error


def test_shape_specialisation_caught_by_extra_inputs(results):
    r = results["shape_specialised"]
    assert r.category == "incorrect", _show(r)
    assert r.correctness["first_mismatch"]["input_set"] == "get_inputs_wide"
    assert "do not hard-code sizes" in r.error


@pytest.mark.parametrize(
    "name,reason",
    [
        ("no_kernel", r"launched no triton kernel"),
        ("torch_op", r"PyTorch compute ops aten\.relu"),
        ("input_mutation", r"modified its input #0"),
        # a replayed output was written by no kernel of this call: the census's
        # provenance check names it before the replay check compares outputs
        ("replay", r"same output as for earlier, different inputs|not written by any of the program's kernels"),
    ],
)
def test_runtime_hacks_rejected_with_reason(results, name, reason):
    r = results[name]
    assert r.category == "hacked" and r.hacked and not r.correct, _show(r)
    assert any(re.search(reason, h) for h in r.hack_reasons), r.hack_reasons


def test_returning_uninitialised_memory_is_rejected(results):
    # the candidate runs before the reference in every trial, so a freed
    # reference output is never there to be picked up
    r = results["ref_buffer"]
    assert not r.correct and r.category in ("incorrect", "hacked"), _show(r)


def test_wrong_signature_is_compile_error(results):
    r = results["wrong_signature"]
    assert r.category == "compile" and not r.compiled, _show(r)
    assert "ModelNew.forward(x, scale) does not match Model.forward(x)" in r.error


def test_kernel_compile_error_points_at_kernel_line(results):
    r = results["compile_error"]
    assert r.category == "compile", _show(r)
    assert 'File "candidate.py", line 12, in relu_kernel' in r.error
    assert "undefined_name" in r.error
    assert "kernelsmith/evaluator" not in r.error  # harness frames trimmed


def test_runtime_error_keeps_only_candidate_frames(results):
    r = results["raises"]
    assert r.category == "runtime" and r.compiled, _show(r)
    frames = re.findall(r'File "([^"]+)"', r.error)
    assert frames == ["candidate.py", "candidate.py"], r.error
    assert "not_a_method" in r.error


def test_segfault_is_structured_crash(results):
    r = results["crash_segfault"]
    assert r.category == "crash" and not r.correct, _show(r)
    assert "segmentation fault" in r.error
    assert 'File "candidate.py", line 25' in r.error  # faulthandler location


def test_os_exit_is_structured_crash(results):
    r = results["crash_exit"]
    assert r.category == "crash", _show(r)
    assert "before reporting a result" in r.error


def test_wild_pointer_in_kernel_is_structured_crash(results):
    r = results["crash_illegal_address"]
    assert r.category == "crash" and not r.correct, _show(r)


def test_oom_is_structured(results):
    r = results["oom"]
    assert r.category == "oom", _show(r)
    assert "allocate" in r.error


def test_env_scrubbed_of_keys(results):
    # env_leak returns a wrong result when it can see any key or token
    r = results["env_leak"]
    assert r.category == "ok", _show(r)


def test_bwrap_isolation_reported_and_filesystem_read_only(results, escape_path):
    usable, note = bwrap_status()
    r = results["fs_write"]
    if not usable:
        assert r.isolation == "process" and note
        pytest.skip(f"bwrap unusable here ({note}); the plain-process fallback is reported")
    # pool workers run as root here, so each also drops to its own uid: the
    # write fails on the read-only mount or for want of permission
    assert r.isolation.startswith("bwrap"), _show(r)
    assert r.category == "runtime" and ("Read-only file system" in r.error or "Permission denied" in r.error), _show(r)
    assert not escape_path.exists()
    assert all(res.isolation.startswith("bwrap") for res in results.values() if res.isolation != "none (static check)")


def test_inputs_fresh_per_trial_and_per_evaluation(results):
    # print goes to the log, not the protocol; every call sees new inputs
    def fingerprints(r: EvalResult) -> list[str]:
        return re.findall(r"INPUT (\S+) \(16, 1024\)", r.log_tail)

    a, b = results["print_inputs"], results["print_inputs_again"]
    assert a.category == "ok" and b.category == "ok", _show(a) + _show(b)
    fa, fb = fingerprints(a), fingerprints(b)
    # two candidate calls per trial (before and after the reference) on the
    # same inputs (the refill check reuses the last input set's buffers, the
    # task's extra set of another shape, which this pattern does not match)
    assert len(fa) == 10 and len(set(fa)) == 5
    assert not set(fa) & set(fb)


def test_result_json_round_trip_and_feedback(results):
    for r in results.values():
        again = EvalResult.from_dict(json.loads(json.dumps(r.to_dict())))
        assert again == r
    text = results["torch_op"].render_feedback()
    assert "REJECTED" in text and "aten.relu" in text
    assert "first mismatch" in results["relu_off_by_one"].render_feedback()


def test_static_rejections_need_no_worker():
    ev = Evaluator(backend="triton")
    task = Task.load(EXAMPLES / "relu")
    cases = {
        "hack_try_except": "try/except",
        "hack_thread": "threading",
        "hack_stream": "torch.cuda.Stream",
        "hack_timer_patch": "time.perf_counter",
    }
    for name, reason in cases.items():
        r = ev.evaluate(task, (CAND / f"{name}.py").read_text())
        assert r.category == "hacked" and any(reason in h for h in r.hack_reasons), (name, r.hack_reasons)
        assert r.wall_s < 5
    r = ev.evaluate(task, (CAND / "syntax_error.py").read_text())
    assert r.category == "compile" and "SyntaxError" in r.error and "line 21" in r.error
    r = ev.evaluate(task, (CAND / "no_modelnew.py").read_text())
    assert r.category == "compile" and "No class ModelNew" in r.error
    ev.close()


def test_hang_killed_by_wall_clock_and_evaluator_goes_on():
    task = Task.load(EXAMPLES / "relu", trials=1)
    with Evaluator(backend="triton", workers=2, timeout_s=12, timing=False) as ev:
        hang, ok = ev.evaluate_many(
            [(task, (CAND / "hang.py").read_text()), (task, (CAND / "relu_correct.py").read_text())]
        )
    assert hang.category == "timeout" and "wall-clock limit of 12 s" in hang.error, _show(hang)
    assert "trial 0" in hang.error
    assert ok.category == "ok", _show(ok)


def test_plain_process_isolation_also_works():
    # what runs where bwrap is missing (e.g. the GPU host)
    task = Task.load(EXAMPLES / "relu", trials=1)
    with Evaluator(backend="triton", workers=2, isolation="process", timing=False) as ev:
        ok, crash = ev.evaluate_many(
            [(task, (CAND / "relu_correct.py").read_text()), (task, (CAND / "crash_segfault.py").read_text())]
        )
    # as root a pool worker also gets its own uid and network namespace
    assert ok.category == "ok" and ok.isolation.split("+")[0] == "process", _show(ok)
    assert crash.category == "crash" and "segmentation fault" in crash.error, _show(crash)


def test_cpu_time_limit():
    task = Task.load(EXAMPLES / "relu", trials=1)
    with Evaluator(backend="triton", timeout_s=120, cpu_limit_s=2, timing=False) as ev:
        r = ev.evaluate(task, (CAND / "hang.py").read_text())
    assert r.category == "timeout" and "CPU time limit" in r.error, _show(r)
    assert r.wall_s < 60


def test_allowed_torch_ops_configurable():
    task = Task.load(EXAMPLES / "relu", trials=2, allowed_torch_ops=["aten.relu"])
    with Evaluator(backend="triton", timing=True) as ev:
        r = ev.evaluate(task, (CAND / "hack_torch_op.py").read_text())
    assert r.category == "ok", _show(r)
    assert "relu" in r.torch_ops
    # timing ran: paired comparison with the reference, a speedup with its CI
    # and a verdict (the interpreter is far slower than torch.relu)
    assert r.runtime_ms and r.runtime_ms > 0 and r.ref_runtime_ms and r.ref_runtime_ms > 0
    assert r.speedup_ci_low <= r.speedup <= r.speedup_ci_high
    assert r.timing_verdict == "slower" and r.speedup < 1
    assert r.timing["candidate"]["n"] >= 3 and r.timing["input_sets"] == 3 and r.timing["timer"] == "perf_counter"


def test_program_that_changes_when_timed_is_hacked():
    task = Task.load(EXAMPLES / "relu")
    with Evaluator(backend="triton", timing=True) as ev:
        r = ev.evaluate(task, (CAND / "hack_timing_switch.py").read_text())
    # honest for its first 12 calls: the refill checks after the trials (or
    # the output of the timed calls) catch the switch
    assert r.category == "hacked" and re.search(
        r"behaves differently when timed|cached from an earlier call", r.hack_reasons[0]
    ), _show(r)


def test_cli_eval_exit_codes(capsys):
    from kernelsmith.cli import main

    assert main(["eval", str(EXAMPLES / "relu"), "seed", "--trials", "1", "--no-timing", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["category"] == "ok" and out["correctness"]["trials"] == 2
    assert main(["eval", str(EXAMPLES / "relu"), str(CAND / "hack_try_except.py")]) == 1
    assert "REJECTED" in capsys.readouterr().out
    assert main(["eval", str(HERE / "fixtures" / "tasks" / "bad_no_model"), str(CAND / "relu_correct.py")]) == 2
    assert "must define Model" in capsys.readouterr().err


async def _async_eval(ev: Evaluator, task: Task, source: str) -> EvalResult:
    return await ev.evaluate_async(task, source)


def test_async_api():
    import asyncio

    task = Task.load(EXAMPLES / "relu", trials=1)
    # device_env.py is only correct when its worker got CUDA_VISIBLE_DEVICES=7
    with Evaluator(backend="triton", devices=[7], timing=False) as ev:
        r = asyncio.run(_async_eval(ev, task, (CAND / "device_env.py").read_text()))
        wrong = ev.evaluate(task, (CAND / "device_env.py").read_text().replace('!= "7"', '!= "8"'))
    assert r.category == "ok", _show(r)
    assert wrong.category == "incorrect", _show(wrong)
