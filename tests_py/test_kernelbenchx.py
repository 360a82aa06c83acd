"""The KernelBench-X reader on a few of its task files (fixtures_kbx, Apache-2.0,
see fixtures_kbx/NOTICE): layout and categories, the unreadable ones with
their reasons, the harness's calls as input sets (counted statically, checked
here by running the harness), performance shapes, dtype, the quantization
contract in the output comparison, and, with the Triton interpreter, an honest
program accepted and timed while one calling the reference's op is rejected."""
from __future__ import annotations

import os
import re
import sys
import types
from pathlib import Path

import pytest
import torch

from kernelsmith import kernelbenchx as kx
from kernelsmith.task import Task

HERE = Path(__file__).resolve().parent
ROOT = HERE / "fixtures_kbx" / "KernelBenchX"
TASKS = ROOT / "data" / "kernelbenchx"
PROGRAMS = HERE / "fixtures_kbx" / "programs"


def _module(task: Task) -> types.ModuleType:
    """The generated reference as the worker loads it."""
    mod = types.ModuleType("ks_reference")
    mod.__file__ = str(task.path)
    sys.modules["ks_reference"] = mod
    exec(compile(task.reference_source, str(task.path), "exec", dont_inherit=True), mod.__dict__)
    return mod


def _harness_calls(mod: types.ModuleType) -> int:
    """How many calls the harness really makes (it runs to the end)."""
    with pytest.raises(RuntimeError) as info:
        mod._kbx_run(mod._KBX_HARNESS, 10**9)
    return int(re.search(r"made (\d+) calls", str(info.value)).group(1))


def test_layout_categories_and_unreadable_files_with_reasons():
    for path in (ROOT, ROOT / "data", TASKS, TASKS / "Activation"):
        assert kx.is_suite(path), path
    assert not kx.is_suite(HERE / "fixtures")
    assert kx.find_root(TASKS / "Activation" / "relu.py") == ROOT
    read, unreadable = kx.read_suite(ROOT)
    assert sorted(tf.key for tf, _ in read) == ["Activation/gelu_fp16", "Activation/relu", "Index/index_fill_",
                                                 "Math/fftn", "Quantization/matmul_w8a8"]
    assert all(t.config.category == tf.category and tf.category in kx.CATEGORIES for tf, t in read)
    why = {u.key: u.reason for u in unreadable}
    assert set(why) == {"Optimizer/SGD", "Random/rand"}
    assert "no function SGD()" in why["Optimizer/SGD"]
    assert "*args" in why["Random/rand"]
    # one category folder alone
    assert [tf.key for tf in kx.discover(TASKS / "Activation")] == ["Activation/gelu_fp16", "Activation/relu"]
    # the bench's discovery sees the same tasks, with their categories
    from kernelsmith.bench.suite import discover

    suite = discover(ROOT)
    assert len(suite) == 7 and {t.category for t in suite} == {"Activation", "Index", "Math", "Optimizer",
                                                               "Quantization", "Random"}
    assert all(t.level is None and t.key.startswith(t.category + "/") for t in suite)


def test_relu_reads_as_a_task_whose_inputs_are_the_harness_calls():
    path = TASKS / "Activation" / "relu.py"
    task = Task.load(path)  # the KernelBench-X layout is recognised by Task.load
    assert task.config.category == "Activation" and task.config.dtype == "float32" and task.name == "relu"
    assert task.config.description.startswith("KernelBench-X task Activation/relu")
    mod = _module(task)
    # the harness's calls, counted without running it, are the calls it makes
    assert len(task.config.extra_inputs) == _harness_calls(mod) == 10
    # the shapes of golden_metrics/relu_perf.py: 2^12 .. 2^27 elements, each an
    # input function; three of them timed, from the first to the last
    assert all(callable(getattr(mod, f"kbx_shape_{k}", None)) for k in range(16)) and not hasattr(mod, "kbx_shape_16")
    assert task.config.timing_shapes == ["kbx_shape_0", "kbx_shape_8", "kbx_shape_15"]
    model = mod.Model()
    torch.manual_seed(0)
    first = mod.kbx_case_0()
    assert torch.equal(first[0], torch.tensor([-1.0, 0.0, 1.0])) and first[1] is False
    third = mod.kbx_case_2()  # relu(input3_clone, inplace=True)
    assert third[1] is True
    before = third[0].clone()
    out = model(*third)
    assert torch.equal(third[0], before), "Model must not write the caller's tensor with inplace=True"
    assert torch.equal(out, torch.relu(before))
    random_case = mod.kbx_case_9()
    assert random_case[0].shape == (256, 256)
    shape = mod.get_inputs()
    assert shape[0].shape == (2**12,) and shape[0].dtype == torch.float32
    assert mod.kbx_shape_3()[0].shape == (2**15,)
    assert torch.equal(model(*shape), torch.relu(shape[0]))
    # the reader's id is stable and survives the run directory's copy
    assert Task.load(path).id == task.id


def test_run_copy_is_a_task_directory_with_the_same_id(tmp_path):
    task = Task.load(TASKS / "Quantization" / "matmul_w8a8.py")
    folder = kx.write_task_dir(task, tmp_path / "task")
    again = Task.load(folder)
    assert again.id == task.id and again.config.comparison == task.config.comparison
    assert again.config.timing_shapes == task.config.timing_shapes and again.config.category == "Quantization"


def test_dtype_in_place_and_complex_outputs():
    gelu = Task.load(TASKS / "Activation" / "gelu_fp16.py")
    assert gelu.config.dtype == "float16"
    mod = _module(gelu)
    assert len(gelu.config.extra_inputs) == _harness_calls(mod)
    fill = Task.load(TASKS / "Index" / "index_fill_.py")
    mod = _module(fill)
    args = mod.kbx_case_0()  # index_fill_(0, zeros(3, 3), [0, 2], 5)
    x = args[1].clone()
    out = mod.Model()(*args)
    assert torch.equal(args[1], x), "an in-place task's Model works on copies"
    assert out[0].tolist() == [5.0, 5.0, 5.0] and out[1].tolist() == [0.0, 0.0, 0.0]
    fft = Task.load(TASKS / "Math" / "fftn.py")
    mod = _module(fft)
    args = mod.kbx_case_0()
    out = mod.Model()(*args)
    assert not out.is_complex() and out.shape == (4, 4, 2)
    assert torch.allclose(torch.view_as_complex(out.contiguous()), torch.fft.fftn(args[0]))


def test_quantization_contract_is_the_comparison():
    from kernelsmith.evaluator import correctness as cmp

    task = Task.load(TASKS / "Quantization" / "matmul_w8a8.py")
    # from data/kernelbenchx_v1.json
    assert task.config.comparison == {"cosine_sim": 0.95, "l1_relative": 0.05, "rmse": 0.1}
    assert "cosine similarity >= 0.95" in task.config.description
    mod = _module(task)
    assert len(task.config.extra_inputs) == _harness_calls(mod) == 8
    assert hasattr(mod, "kbx_shape_3") and not hasattr(mod, "kbx_shape_4")
    assert task.config.timing_shapes == ["kbx_shape_0", "kbx_shape_2", "kbx_shape_3"]
    # a symmetric int8 quantization of both sides, as a kernel would do it
    torch.manual_seed(1)
    a, w = torch.randn(64, 32), torch.randn(32, 64)
    expected = mod.Model()(a, w)
    sa, sw = a.abs().amax(dim=1, keepdim=True) / 127, w.abs().amax(dim=0, keepdim=True) / 127
    quantized = ((a / sa).round() @ (w / sw).round()) * sa * sw
    atol, rtol = task.config.tolerances()
    try:
        cmp.set_comparison({})
        assert not cmp.compare([quantized], [expected], atol, rtol)["ok"]  # atol/rtol would reject it
        cmp.set_comparison(task.config.comparison)
        res = cmp.compare([quantized], [expected], atol, rtol)
        assert res["ok"], res
        m = res["metrics"][0]
        assert m["cosine_sim"] > 0.999 and m["l1_relative"] < 0.05 and m["rmse"] < 0.1
        wrong = cmp.compare([expected * 0.5], [expected], atol, rtol)
        assert not wrong["ok"] and "relative L1 0.5 > 0.05" in wrong["message"]
        assert not cmp.compare([torch.zeros_like(expected)], [expected], atol, rtol)["ok"]
        assert not cmp.compare([expected[:, :2]], [expected], atol, rtol)["ok"]  # shapes still checked
    finally:
        cmp.set_comparison({})


def test_precision_metrics_by_hand():
    from kernelsmith.evaluator.correctness import precision_metrics

    # got (1, 1), expected (1, 0): cosine 1/sqrt(2), L1 |0|+|1| / 1 = 1, RMSE sqrt(1/2)
    m = precision_metrics(torch.tensor([1.0, 1.0]), torch.tensor([1.0, 0.0]))
    assert m["cosine_sim"] == pytest.approx(2**-0.5) and m["l1_relative"] == pytest.approx(1.0)
    assert m["rmse"] == pytest.approx(0.5**0.5)
    assert precision_metrics(torch.zeros(3), torch.zeros(3))["cosine_sim"] == 1.0


def test_counting_refuses_what_it_cannot_know(tmp_path):
    folder = tmp_path / "data" / "kernelbenchx" / "Math"
    folder.mkdir(parents=True)
    body = "import torch\n\ndef twice(x):\n    return 2 * x\n\n" + kx.SEPARATOR + "\n"
    (folder / "twice.py").write_text(body + "n = int(torch.randint(1, 4, ()))\nfor _ in range(n):\n"
                                            "    twice(torch.ones(2))\n")
    with pytest.raises(kx.UnreadableTask, match="cannot be counted"):
        kx.read_task(folder / "twice.py")
    # a list that grows before it is looped over is counted at its final length
    (folder / "twice.py").write_text(body + "sizes = []\nfor i in range(3):\n    sizes.append(2 ** i)\n"
                                            "for s in sizes:\n    twice(torch.ones(s))\n")
    task = kx.read_task(folder / "twice.py")
    assert task.config.extra_inputs == ["kbx_case_0", "kbx_case_1", "kbx_case_2"]
    assert _module(task).kbx_case_2()[0].shape == (4,)
    assert task.config.timing_shapes == []  # no golden_metrics: the last harness call is timed
    assert "harness's last call is timed" in task.reference_source


interpreter = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
                                 reason="runs Triton programs in the interpreter (set TRITON_INTERPRET=1)")


@interpreter
def test_a_reference_calling_program_is_rejected():
    from kernelsmith.evaluator import Evaluator

    task = Task.load(TASKS / "Activation" / "relu.py", trials=1)
    with Evaluator(backend="triton", workers=1, timing=False) as ev:
        r = ev.evaluate(task, (PROGRAMS / "relu_calls_reference.py").read_text())
    assert r.category == "hacked" and any("relu" in reason for reason in r.hack_reasons), r.to_dict()


@interpreter
def test_an_honest_triton_program_is_accepted_and_timed_with_its_speed_of_light(capsys, tmp_path):
    import yaml

    from kernelsmith.cli import main
    from kernelsmith.timing.sol import lookup_host_peak

    # the task as the reader makes it, timed on its two smallest shapes (the
    # reader's three run up to 2^27 elements: minutes each in the interpreter)
    task = Task.load(TASKS / "Activation" / "relu.py")
    config = task.to_dict()["config"]
    config.update(timing_shapes=["kbx_shape_0", "kbx_shape_1"])
    (tmp_path / "relu").mkdir()
    (tmp_path / "relu" / "reference.py").write_text(task.reference_source)
    (tmp_path / "relu" / "task.yaml").write_text(yaml.safe_dump(config))
    code = main(["eval", str(tmp_path / "relu"), str(PROGRAMS / "relu_triton.py"), "--no-daemon", "--trials", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Verdict: CORRECT" in out and "Runtime:" in out
    assert "Per timing shape" in out and "kbx_shape_0" in out and "kbx_shape_1" in out
    sol_line = next(line for line in out.splitlines() if line.startswith("Speed of light:"))
    if lookup_host_peak() is not None:  # a host the peak table knows: counted, memory-bound
        assert "memory-bound" in sol_line and "the reference reaches" in sol_line
        assert "Speed-of-light peaks" in out
    else:
        assert "no peak figures" in sol_line


def test_bench_tables_by_category_with_speed_of_light():
    from kernelsmith.bench import TaskResult
    from kernelsmith.bench.metrics import compute_metrics, metrics_by_category
    from kernelsmith.bench.tables import metrics_markdown, tasks_csv, tasks_markdown

    def r(key, best, sol):
        return TaskResult(key=key, category=key.split("/")[0], correct=best is not None, best_speedup=best,
                          best_sol=sol)

    results = [r("Activation/relu", 2.0, {"counted": True, "bound": "memory", "fraction": 0.40}),
               r("Activation/gelu", 1.0, {"counted": True, "bound": "memory", "fraction": 0.80}),
               r("MatrixMultiply/matmul", 0.5, {"counted": True, "bound": "compute", "fraction": 0.10}),
               r("Math/fftn", 1.5, {"counted": True, "bound": "unknown", "bandwidth_fraction": 0.2}),
               r("Math/svd", None, {})]
    table = metrics_by_category(results)
    assert list(table) == ["Activation", "Math", "MatrixMultiply", "overall"]
    assert table["Activation"]["median_sol"] == pytest.approx(0.60) and table["Activation"]["sol_counted"] == 2
    assert table["Math"]["median_sol"] is None and table["Math"]["correct_rate"] == 0.5
    assert table["overall"]["median_sol"] == pytest.approx(0.40) and table["overall"]["sol_counted"] == 3
    assert compute_metrics(results)["n"] == 5
    md = metrics_markdown(table, key="category")
    assert md.startswith("| category |") and "| Activation | 2 | 100.0% |" in md and "60.0%" in md
    tasks = tasks_markdown(results)
    assert "| 40.0% memory | memory |" in tasks and "10.0% compute" in tasks
    assert "20.0% of bandwidth (bound not counted)" in tasks
    assert "speed of light" in tasks_csv(results).splitlines()[0]
    assert metrics_by_category([TaskResult(key="level1/x", level=1)]) == {}


@interpreter
def test_evolve_keeps_the_task_it_read_and_resumes(tmp_path):
    """A run on a KernelBench-X file keeps the task it read as a task
    directory (the file alone would lose its shapes and contract) and resumes
    from it with the same task id."""
    import asyncio

    import yaml

    from kernelsmith.evolve import load_evolve_config
    from kernelsmith.evolve.session import evolve

    path = TASKS / "Activation" / "relu.py"
    cfg = load_evolve_config(None, iterations=0, model="mutate", backend="triton", trials=1)
    asyncio.run(evolve(path, cfg, tmp_path / "run"))
    copy = tmp_path / "run" / "task"
    assert sorted(p.name for p in copy.iterdir()) == ["reference.py", "task.yaml"]
    recorded = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["task"]["id"]
    assert Task.load(copy, backend="triton", trials=1).id == recorded == Task.load(path, backend="triton", trials=1).id
    summary = asyncio.run(evolve(None, None, resume=tmp_path / "run"))
    assert summary.stop_reason == "iterations"
