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
    assert sorted(tf.key for tf, _ in read) == [
        "Activation/gelu_fp16",
        "Activation/relu",
        "Index/index_fill_",
        "Math/fftn",
        "Quantization/matmul_w8a8",
    ]
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
    assert len(suite) == 7 and {t.category for t in suite} == {
        "Activation",
        "Index",
        "Math",
        "Optimizer",
        "Quantization",
        "Random",
    }
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
    (folder / "twice.py").write_text(
        body + "n = int(torch.randint(1, 4, ()))\nfor _ in range(n):\n    twice(torch.ones(2))\n"
    )
    with pytest.raises(kx.UnreadableTask, match="cannot be counted"):
        kx.read_task(folder / "twice.py")
    # a list that grows before it is looped over is counted at its final length
    (folder / "twice.py").write_text(
        body + "sizes = []\nfor i in range(3):\n    sizes.append(2 ** i)\nfor s in sizes:\n    twice(torch.ones(s))\n"
    )
    task = kx.read_task(folder / "twice.py")
    assert task.config.extra_inputs == ["kbx_case_0", "kbx_case_1", "kbx_case_2"]
    assert _module(task).kbx_case_2()[0].shape == (4,)
    assert task.config.timing_shapes == []  # no golden_metrics: the last harness call is timed
    assert "harness's last call is timed" in task.reference_source


interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="runs Triton programs in the interpreter (set TRITON_INTERPRET=1)",
)


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
        return TaskResult(
            key=key, category=key.split("/")[0], correct=best is not None, best_speedup=best, best_sol=sol
        )

    results = [
        r("Activation/relu", 2.0, {"counted": True, "bound": "memory", "fraction": 0.40}),
        r("Activation/gelu", 1.0, {"counted": True, "bound": "memory", "fraction": 0.80}),
        r("MatrixMultiply/matmul", 0.5, {"counted": True, "bound": "compute", "fraction": 0.10}),
        r("Math/fftn", 1.5, {"counted": True, "bound": "unknown", "bandwidth_fraction": 0.2}),
        r("Math/svd", None, {}),
    ]
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


# -- benchmarks/bench_kernelbenchx.py on three upstream files (fixtures_kbx/bench) ------------------

BENCH_ROOT = HERE / "fixtures_kbx" / "bench" / "KernelBenchX"


def _bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_kernelbenchx", HERE.parent / "benchmarks" / "bench_kernelbenchx.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_kernelbenchx"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_bench_programs_and_references_against_themselves_load_and_pass_the_static_check():
    from kernelsmith.backends import get_backend

    bench = _bench()
    progs, selfs, unreadable, loaded = bench.load(BENCH_ROOT)
    assert len(loaded) == 3 and not unreadable
    # every fixture whose task is in this checkout, with its expected verdict
    assert sorted((it.key, it.kind, it.expected) for it in progs) == [
        ("Activation/sigmoid", "hack", "hacked"),
        ("Activation/sigmoid", "honest", "ok"),
        ("Loss/mse_loss", "honest", "ok"),
        ("Reduce/sum", "honest", "ok"),
    ]
    # one reference against itself per task, by category in turn, under the partial policy
    assert [it.key for it in selfs] == ["Activation/sigmoid", "Loss/mse_loss", "Reduce/sum"]
    assert all(it.task.config.policy == "partial" and it.task.config.min_coverage == 0.0 for it in selfs)
    assert all(it.task.config.timing.time_budget_s == bench.SELF_TIMING["time_budget_s"] for it in selfs)
    # the programs keep the task as read (strict policy, its own timing)
    assert all(it.task.config.policy == "strict" for it in progs)
    # its source is the reference function and Model, none of the harness; the static check passes
    backend = get_backend("triton")
    for _, task in kx.read_suite(BENCH_ROOT)[0] + kx.read_suite(ROOT)[0]:
        source = bench.self_source(task)
        assert "_KBX_HARNESS" not in source and "class ModelNew(Model)" in source
        report = backend.static_check(source)
        assert not report.errors and not report.hacks, (task.name, report)
    # a limit and a category filter; every fixture name parses
    assert [it.key for it in bench.load(BENCH_ROOT, categories=["Loss"], limit=1)[1]] == ["Loss/mse_loss"]
    for f in bench.PROGRAMS.glob("*.py"):
        kind, cat, name = bench.parse_program_name(f)
        assert cat in kx.CATEGORIES and kind in ("honest", "hack")
        assert f.read_text().startswith(f"# KernelBench-X data/kernelbenchx/{cat}/{name}.py"), f.name
    assert len({bench.parse_program_name(f)[1] for f in bench.PROGRAMS.glob("*.py")}) >= 5


def test_bench_stops_at_its_time_budget_and_lists_what_it_did_not_reach():
    bench = _bench()
    progs, selfs, unreadable, loaded = bench.load(BENCH_ROOT)
    facts = bench.run(progs + selfs, workers=1, time_budget_s=0.0, log=lambda s: None)
    assert facts["evaluated"] == 0 and len(facts["not_reached"]) == len(progs) + len(selfs)
    summary = bench.tables(progs + selfs, unreadable, loaded, [])
    assert summary["total"]["files"] == 3 and summary["total"]["loaded"] == 3
    assert summary["total"]["self_evaluated"] == 0
    assert "Not reached within the time budget (7)" in bench.markdown(summary, progs + selfs, unreadable, facts)


@interpreter
def test_bench_accepts_honest_programs_and_rejects_the_reference_caller_through_the_pool():
    """The benchmark's own path (load, run over one evaluator pool, the table) on two honest
    programs, the reference-calling one and a reference against itself."""
    bench = _bench()
    progs, selfs, unreadable, loaded = bench.load(BENCH_ROOT, first_shape=True, quick=True)
    # the honest sigmoid's 1024 x 1024 input sets take a minute in the interpreter: left to the benchmark
    items = [it for it in progs if not (it.key == "Activation/sigmoid" and it.kind == "honest")]
    items += [it for it in selfs if it.key == "Loss/mse_loss"]
    facts = bench.run(items, workers=2, timeout_s=300, time_budget_s=600, log=lambda s: None)
    assert facts["evaluated"] == 4 and not facts["not_reached"]
    rows = {(it.key, it.kind): it.row for it in items}
    for key in ("Loss/mse_loss", "Reduce/sum"):
        row = rows[(key, "honest")]
        assert row["got"] == "ok" and row["as_expected"], row
        assert (
            row["shapes"] and isinstance(row["speedup"], float) and row["speed_of_light"].startswith("Speed of light")
        )
    hack = rows[("Activation/sigmoid", "hack")]
    assert hack["got"] == "hacked" and "sigmoid" in hack["reason"], hack
    itself = rows[("Loss/mse_loss", "self")]
    assert itself["got"] == "ok" and itself["reference_runs"] and itself["reference_timed"], itself
    assert itself["shapes"][0]["ref_ms"] > 0
    summary = bench.tables(items, unreadable, loaded, [])
    assert summary["per_category"]["Loss"]["honest_accepted"] == 1
    assert summary["per_category"]["Activation"]["hack_rejected"] == 1
    assert summary["per_category"]["Loss"]["reference_timed"] == 1
    assert "| Loss | 1 | 1 | 1 | 1 | 1 | 1/1 | - |" in bench.markdown(summary, items, unreadable, facts)
