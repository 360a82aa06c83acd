"""Degenerate tasks judged on probe inputs (evaluator/probes.py).

KernelBench draws level-1 inputs with torch.rand (U[0, 1)), so ReLU,
LeakyReLU, ELU and HardTanh return their input unchanged, and the
trivial-output rule judged every honest kernel for them `hacked`. Here:
small copies of the four (tests_py/fixtures/degenerate/kb_small) with
honest Triton (interpreter) and OpenCL (PoCL) kernels accepted and timed,
a copy kernel and a constant rejected (`incorrect`), a program returning its
input without a kernel `hacked`; a task whose probe is undefined (sqrt just
above 1) has it skipped and reported, with the trivial-output rule kept;
`kernelsmith task check` output and exit codes; the referee insists on the
probe trial."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest

from kernelsmith.evaluator import Evaluator
from kernelsmith.task import Task

HERE = Path(__file__).parent
DEG = HERE / "fixtures" / "degenerate"
KB = {"relu": "19_ReLU", "leaky_relu": "20_LeakyReLU", "elu": "31_ELU", "hardtanh": "32_HardTanh"}

interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="CPU evaluator tests run the Triton interpreter (set TRITON_INTERPRET=1)",
)


def _kb(name: str, backend: str = "triton") -> Task:
    return Task.load(DEG / "kb_small" / f"{KB[name]}.py", backend=backend, trials=2)


def _task(name: str, backend: str = "triton") -> Task:
    return Task.load(DEG / "tasks" / f"{name}.py", backend=backend, trials=2)


def _program(backend: str, name: str) -> str:
    return (DEG / backend / f"{name}.py").read_text()


def _show(r) -> str:
    return f"{r.category}: {r.error[:800]} {r.hack_reasons} {r.warnings}\n{r.log_tail[-800:]}"


# -- the assessment itself (no worker) -------------------------------------------------------------------------


def _assess(task: Task) -> tuple[list[str], dict]:
    """What the referee's priming decides, run here on the task's trusted reference."""
    import torch

    from kernelsmith.evaluator import correctness as cmp
    from kernelsmith.evaluator.probes import assess
    from kernelsmith.evaluator.checks.trivial_output import trivial_outputs as _trivial_outputs
    from kernelsmith.evaluator.task_inputs import init_inputs

    ref = types.ModuleType("ks_test_reference")
    exec(task.reference_source, ref.__dict__)  # noqa: S102 - the fixture task's own reference
    torch.manual_seed(0)
    model = ref.Model(*init_inputs(ref)).eval()
    torch.manual_seed(0)
    inputs = ref.get_inputs()
    with torch.no_grad():
        outputs = cmp.flatten_outputs(model(*inputs))
    atol, rtol = task.config.tolerances()
    forms = _trivial_outputs(cmp, outputs, inputs, atol, rtol)
    return forms, assess(model, forms, inputs, outputs, atol, rtol, lambda: None)


@pytest.mark.parametrize("name", sorted(KB))
def test_the_kernelbench_activations_over_rand_are_degenerate_and_the_normal_probe_decides(name):
    forms, probes = _assess(_kb(name))
    assert forms == ["input #0 unchanged"], forms
    assert probes == {"sets": ["probe:normal"], "decided": ["input #0 unchanged"], "kept": [], "skipped": {}}, probes


def test_a_probe_where_the_reference_is_undefined_is_skipped_and_the_rule_kept():
    forms, probes = _assess(_task("sqrt_near_one"))
    assert sorted(forms) == ["a constant", "input #0 unchanged"], forms
    assert probes["sets"] == [] and probes["kept"] == ["a constant", "input #0 unchanged"], probes
    assert "undefined on it" in probes["skipped"]["normal"] and "NaN or inf" in probes["skipped"]["normal"], probes


def test_a_probe_that_tells_nothing_apart_is_skipped_and_a_task_that_is_not_degenerate_has_none():
    forms, probes = _assess(Task.load(HERE / "fixtures" / "tasks" / "degenerate_small"))
    assert probes["sets"] == [] and probes["kept"] == ["a constant", "zeros"], probes
    assert "tells none of the trivial forms apart" in probes["skipped"]["normal"], probes
    forms, probes = _assess(Task.load(HERE.parent / "examples" / "triton" / "relu"))  # torch.randn inputs
    assert forms == [] and probes["sets"] == [], (forms, probes)


def test_probe_inputs_come_from_the_seed_are_sign_symmetric_and_leave_integers_alone():
    import torch

    from kernelsmith.evaluator.probes import input_generator

    ref = types.SimpleNamespace(get_inputs=lambda: [torch.rand(64, 64), torch.randint(0, 5, (8,)), 3])
    gen = input_generator(ref, "probe:normal")
    torch.manual_seed(7)
    a = gen()
    torch.manual_seed(7)
    b = gen()
    torch.manual_seed(7)
    own = ref.get_inputs()
    assert torch.equal(a[0], b[0]) and a[0].shape == own[0].shape and a[0].dtype == own[0].dtype
    assert (a[0] < 0).float().mean() > 0.4 and (a[0] > 0).float().mean() > 0.4  # negative values too
    assert torch.equal(a[1], own[1]) and a[2] == 3
    assert input_generator(ref, "probe:nonesuch") is None and input_generator(ref, "get_inputs") is ref.get_inputs


# -- through the evaluator: Triton interpreter ------------------------------------------------------------------


@pytest.fixture(scope="module")
def triton_verdicts():
    items = {f"{name}/honest": (_kb(name), _program("triton", name)) for name in KB}
    items.update({f"{name}/copy": (_kb(name), _program("triton", "copy")) for name in KB})
    items["relu/identity"] = (_kb("relu"), _program("triton", "identity"))
    items["relu/constant"] = (_kb("relu"), _program("triton", "constant"))
    items["shifted_relu/honest"] = (_task("shifted_relu"), _program("triton", "shifted_relu"))
    items["shifted_relu/zeros"] = (_task("shifted_relu"), _program("triton", "zeros"))
    items["shifted_relu/constant"] = (_task("shifted_relu"), _program("triton", "tiny_constant"))
    items["sqrt/honest"] = (_task("sqrt_near_one"), _program("triton", "sqrt"))
    items["sqrt/copy"] = (_task("sqrt_near_one"), _program("triton", "copy"))
    with Evaluator(backend="triton", workers=2, timeout_s=240, timing=True) as ev:
        out = ev.evaluate_many(list(items.values()))
    return dict(zip(items, out))


@interpreter
@pytest.mark.parametrize("name", sorted(KB))
def test_honest_triton_kernels_are_accepted_and_timed_on_the_degenerate_kernelbench_tasks(triton_verdicts, name):
    r = triton_verdicts[f"{name}/honest"]
    assert r.category == "ok" and r.correct and not r.hacked, _show(r)
    assert r.runtime_ms and r.runtime_ms > 0 and r.ref_runtime_ms and r.speedup, r.timing
    assert r.census["referee"] == "agreed" and r.census["referee_trials"] == 2, r.census  # own set and probe
    assert r.census["degenerate"] == ["input #0 unchanged"], r.census
    assert r.census["probes"]["sets"] == ["probe:normal"] and r.correctness["input_sets"][-1] == "probe:normal"
    assert any(w.startswith("degenerate task: input #0 unchanged") and "probe inputs" in w for w in r.warnings)


@interpreter
@pytest.mark.parametrize("name", sorted(KB))
def test_a_copy_kernel_fails_the_probe_as_incorrect(triton_verdicts, name):
    r = triton_verdicts[f"{name}/copy"]
    assert r.category == "incorrect" and not r.hacked and not r.correct, _show(r)
    assert r.error.startswith("input set 'probe:normal'") and "passed the task's own inputs" in r.error, r.error
    assert r.correctness["first_mismatch"]["input_set"] == "probe:normal", r.correctness


@interpreter
def test_identity_and_constant_programs_are_rejected(triton_verdicts):
    identity, constant = triton_verdicts["relu/identity"], triton_verdicts["relu/constant"]
    assert identity.category == "hacked" and not identity.correct, _show(identity)  # no kernel at all
    # a constant is not one of ReLU's trivial forms: wrong on the task's own inputs already
    assert constant.category == "incorrect" and constant.error.startswith("input set 'get_inputs'"), _show(constant)


@interpreter
def test_zeros_and_a_constant_that_pass_the_own_inputs_fail_the_probe(triton_verdicts):
    honest = triton_verdicts["shifted_relu/honest"]
    assert honest.category == "ok" and honest.census["referee"] == "agreed", _show(honest)
    assert honest.census["probes"]["decided"] == ["a constant", "zeros"], honest.census
    for name in ("shifted_relu/zeros", "shifted_relu/constant"):
        r = triton_verdicts[name]
        # the same output for the probe as for the own inputs: an output that
        # ignores its input, judged a wrong answer (not a replayed one)
        assert r.category == "incorrect" and r.error.startswith("input set 'probe:normal'"), (name, _show(r))


@interpreter
def test_where_the_probe_is_skipped_the_trivial_rule_still_decides(triton_verdicts):
    honest, copy = triton_verdicts["sqrt/honest"], triton_verdicts["sqrt/copy"]
    assert honest.category == "ok" and honest.census["referee"] == "agreed", _show(honest)
    assert honest.correctness["input_sets"] == ["get_inputs"], honest.correctness
    assert "probe normal skipped: the reference is undefined on it" in " ".join(honest.warnings), honest.warnings
    assert copy.category == "hacked" and "forward returned input #0 unchanged" in copy.hack_reasons[0], _show(copy)


@interpreter
def test_fresh_mode_and_a_worker_without_the_referees_word():
    """Fresh mode: the referee primes the task before the job, as the pool
    does. A worker without its word (no referee) assesses the task itself
    and runs the same probe."""
    from kernelsmith.backends.base import get_backend
    from kernelsmith.evaluator.sandbox import Limits, run_worker

    task = _kb("leaky_relu")
    with Evaluator(backend="triton", workers=1, timeout_s=240, timing=False, mode="fresh") as ev:
        honest, copy = ev.evaluate_many([(task, _program("triton", "leaky_relu")), (task, _program("triton", "copy"))])
    assert honest.category == "ok" and honest.census["referee"] == "agreed", _show(honest)
    assert honest.census["referee_trials"] == 2 and honest.census["probes"]["sets"] == ["probe:normal"]
    assert copy.category == "incorrect" and copy.error.startswith("input set 'probe:normal'"), _show(copy)
    alone = {
        name: run_worker(
            task=task,
            source=_program("triton", name),
            backend=get_backend("triton"),
            trials=2,
            timing=False,
            limits=Limits(timeout_s=240),
            device=None,
        )
        for name in ("leaky_relu", "copy")
    }
    assert alone["leaky_relu"].category == "ok", _show(alone["leaky_relu"])
    assert alone["leaky_relu"].correctness["input_sets"] == ["get_inputs", "probe:normal"]
    assert alone["copy"].category == "incorrect" and alone["copy"].error.startswith("input set 'probe:normal'")


@interpreter
def test_the_referee_insists_on_the_probe_trial(tmp_path):
    """A worker that hands over the task's own trial but not the probe's
    (its program made it skip the probe set) is overruled."""
    import torch

    from kernelsmith.evaluator.evidence import encode_outputs
    from kernelsmith.evaluator.trusted.referee_check import judge
    from kernelsmith.result import EvalResult

    task = _kb("relu")
    ref = types.ModuleType("ks_test_reference")
    exec(task.reference_source, ref.__dict__)  # noqa: S102 - the fixture task's own reference
    seeds = [11, 22]
    torch.manual_seed(seeds[1])
    x = ref.get_inputs()[0]
    (tmp_path / "own.bin").write_bytes(encode_outputs({"candidate": [x], "reference": [torch.relu(x)]}))
    with Evaluator(backend="triton", workers=1, timing=False) as ev:
        referee = ev._device_pool(ev.backend_for(task), None).referee
        assert referee.probes(task)["sets"] == ["probe:normal"]  # primed, as before the task's first job
        result = EvalResult(category="ok", compiled=True, correct=True, speedup=3.0)
        judge(
            result,
            {
                "trials": [{"file": "own.bin", "init_seed_index": 0, "input_seed_index": 1, "set": "get_inputs"}],
                "repeated": False,
            },
            seeds,
            task,
            str(tmp_path),
            referee,
        )
    assert result.category == "hacked" and result.speedup is None, result
    assert "no trial of the probe input set(s) probe:normal" in result.hack_reasons[0], result.hack_reasons


# -- OpenCL (PoCL) ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def opencl_verdicts():
    items = {f"{name}/honest": (_kb(name, "opencl"), _program("opencl", name)) for name in KB}
    items["relu/copy"] = (_kb("relu", "opencl"), _program("opencl", "copy"))
    items["elu/copy"] = (_kb("elu", "opencl"), _program("opencl", "copy"))
    items["relu/constant"] = (_kb("relu", "opencl"), _program("opencl", "constant"))
    items["sqrt/honest"] = (_task("sqrt_near_one", "opencl"), _program("opencl", "sqrt"))
    items["sqrt/copy"] = (_task("sqrt_near_one", "opencl"), _program("opencl", "copy"))
    with Evaluator(backend="opencl", workers=2, timeout_s=240, timing=True) as ev:
        out = ev.evaluate_many(list(items.values()))
    return dict(zip(items, out))


@pytest.mark.parametrize("name", sorted(KB))
def test_honest_opencl_kernels_are_accepted_and_timed(opencl_verdicts, name):
    r = opencl_verdicts[f"{name}/honest"]
    assert r.category == "ok" and r.census["referee"] == "agreed" and r.census["referee_trials"] == 2, _show(r)
    assert r.runtime_ms and r.runtime_ms > 0 and r.census["probes"]["decided"] == ["input #0 unchanged"], r.census


def test_opencl_copy_constant_and_the_skipped_probe(opencl_verdicts):
    for name in ("relu/copy", "elu/copy"):
        r = opencl_verdicts[name]
        assert r.category == "incorrect" and r.error.startswith("input set 'probe:normal'"), (name, _show(r))
    constant = opencl_verdicts["relu/constant"]
    assert constant.category == "incorrect" and constant.error.startswith("input set 'get_inputs'"), _show(constant)
    honest, copy = opencl_verdicts["sqrt/honest"], opencl_verdicts["sqrt/copy"]
    assert honest.category == "ok" and "normal" in honest.census["probes"]["skipped"], _show(honest)
    assert copy.category == "hacked" and "forward returned input #0 unchanged" in copy.hack_reasons[0], _show(copy)


# -- kernelsmith task check ---------------------------------------------------------------------------------------


def test_task_check_reports_a_degenerate_task_and_its_probes(capsys):
    from kernelsmith.cli import main

    assert main(["task", "check", str(DEG / "kb_small" / "19_ReLU.py")]) == 0
    out = capsys.readouterr().out
    assert "DEGENERATE: on the task's own inputs its tolerance cannot tell input #0 unchanged" in out, out
    assert "probe normal applies (input set probe:normal" in out and "skipped" not in out, out
    assert "every trivial form is judged by a probe" in out, out

    assert main(["task", "check", str(DEG / "tasks" / "sqrt_near_one.py")]) == 0
    out = capsys.readouterr().out
    assert "DEGENERATE" in out and "probe normal skipped: the reference is undefined on it" in out, out
    assert "still rejected as trivial outputs (no probe tells them apart): a constant, input #0 unchanged" in out


def test_task_check_on_a_task_that_is_not_degenerate_and_on_a_bad_path(capsys, tmp_path):
    import json

    from kernelsmith.cli import main

    assert main(["task", "check", str(HERE.parent / "examples" / "triton" / "relu")]) == 0
    assert "not degenerate" in capsys.readouterr().out
    assert main(["task", "check", "--json", str(DEG / "kb_small" / "32_HardTanh.py")]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["degenerate"] == ["input #0 unchanged"] and answer["probes"]["sets"] == ["probe:normal"], answer
    assert main(["task", "check", str(tmp_path / "no_such_task")]) == 2
    assert "no such task" in capsys.readouterr().err


@interpreter
def test_eval_warns_about_a_degenerate_task(capsys):
    from kernelsmith.cli import main

    rc = main(
        [
            "eval",
            str(DEG / "kb_small" / "20_LeakyReLU.py"),
            str(DEG / "triton" / "leaky_relu.py"),
            "--no-timing",
            "--trials",
            "1",
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0 and "Verdict: CORRECT" in captured.out, captured
    assert "kernelsmith eval: warning: degenerate task: input #0 unchanged" in captured.err, captured.err
    assert "judged on probe inputs too (normal)" in captured.err, captured.err
