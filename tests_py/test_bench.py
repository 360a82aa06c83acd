"""Suites: metric definitions against hand-computed numbers, task discovery,
a real bench on a tiny suite (OpenCL on PoCL, mutate proposer), resumability,
tables and plots."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kernelsmith.bench import TaskResult, best_curve_mean, compute_metrics, discover, metrics_by_level
from kernelsmith.bench.tables import metrics_csv, metrics_markdown
from kernelsmith.trajectory import EvalStore

HERE = Path(__file__).resolve().parent
SUITE = HERE / "fixtures_bench" / "suite"
SEEDS = HERE / "fixtures_bench" / "seeds"


def _r(key, level, best, first=None, curve=None):
    return TaskResult(
        key=key,
        level=level,
        correct=best is not None,
        best_speedup=best,
        first_correct=first is not None,
        first_speedup=first,
        curve=curve or [],
    )


# Six hand-made tasks: best speedups 3.0, 1.2, 0.5 (correct but slower), 1.5 (exactly p=1.5),
# incorrect, 2.0 (exactly p=2); first candidates: 1.1 (fast), 0.9 (correct, slow), none...
RESULTS = [
    _r("a", 1, 3.0, first=1.1),
    _r("b", 1, 1.2, first=0.9),
    _r("c", 1, 0.5),
    _r("d", 2, 1.5, first=1.5),
    _r("e", 2, None),
    _r("f", 2, 2.0),
]


def test_metrics_by_hand():
    m = compute_metrics(RESULTS)
    assert m["n"] == 6
    assert m["correct_rate"] == pytest.approx(5 / 6)
    assert m["fast_0"] == pytest.approx(5 / 6)  # every correct task has speedup > 0
    assert m["fast_1"] == pytest.approx(4 / 6)  # 3.0, 1.2, 1.5, 2.0
    assert m["fast_1.5"] == pytest.approx(2 / 6)  # strictly greater: 3.0, 2.0 (not 1.5)
    assert m["fast_2"] == pytest.approx(1 / 6)  # 3.0 only (2.0 is not > 2)
    # amsr: 0.5 and the incorrect task count as 0, all six in the denominator
    assert m["avg_speedup"] == pytest.approx((3.0 + 1.2 + 0 + 1.5 + 0 + 2.0) / 6)
    assert m["fast1_first"] == pytest.approx(2 / 6)  # first candidates 1.1 and 1.5 are correct and > 1
    assert m["first_correct"] == pytest.approx(3 / 6)
    # geometric mean over the correct tasks only, slowdowns included
    assert m["geomean_speedup"] == pytest.approx((3.0 * 1.2 * 0.5 * 1.5 * 2.0) ** (1 / 5))


def test_metrics_per_level_and_empty():
    table = metrics_by_level(RESULTS)
    assert list(table) == ["level1", "level2", "overall"]
    assert table["level1"]["n"] == 3 and table["level1"]["fast_1"] == pytest.approx(2 / 3)
    assert table["level2"]["correct_rate"] == pytest.approx(2 / 3)
    assert table["level2"]["avg_speedup"] == pytest.approx((1.5 + 0 + 2.0) / 3)
    assert table["level1"]["geomean_speedup"] == pytest.approx(
        math.exp((math.log(3.0) + math.log(1.2) + math.log(0.5)) / 3)
    )
    empty = compute_metrics([])
    assert empty["n"] == 0 and empty["correct_rate"] is None and empty["geomean_speedup"] is None
    md, csv_text = metrics_markdown(table), metrics_csv(table)
    assert "| level1 | 3 | 100.0% | 100.0% | 66.7% | 33.3% | 33.3% | 1.400 |" in md
    assert csv_text.splitlines()[0].startswith("level,tasks,correct,fast_0,fast_1,fast_1.5,fast_2,")


def test_best_curve_mean_ends_at_amsr():
    results = [
        _r("a", 1, 3.0, curve=[[0, 0.0], [1, 0.5], [2, 3.0]]),  # 0.5 counts 0 until 3.0 at step 2
        _r("b", 1, 1.2, curve=[[0, 1.2]]),  # held at 1.2 after its run stopped
    ]
    assert best_curve_mean(results) == pytest.approx([0.6, 0.6, 2.1])
    assert best_curve_mean(results)[-1] == pytest.approx(compute_metrics(results)["avg_speedup"])


def test_discover_kernelbench_layout(tmp_path):
    tasks = discover(SUITE)
    assert [(t.key, t.level) for t in tasks] == [
        ("level1/1_Softmax", 1),
        ("level1/2_softmax_dir", 1),
        ("level2/1_Relu", 2),
    ]
    assert [t.key for t in discover(SUITE, levels=[2])] == ["level2/1_Relu"]
    # a level folder given directly keeps its level; numbered files sort numerically
    level = tmp_path / "level3"
    level.mkdir()
    for name in ("10_B.py", "2_A.py", "__init__.py"):
        (level / name).write_text((SUITE / "level2" / "1_Relu.py").read_text())
    assert [t.key for t in discover(level)] == ["level3/2_A", "level3/10_B"]
    with pytest.raises(FileNotFoundError, match="no tasks found"):
        discover(SUITE, levels=[7])


@pytest.mark.slow
def test_bench_runs_resumes_and_reports(tmp_path):
    from kernelsmith.cli import main

    out = tmp_path / "bench"
    args = [
        "bench",
        str(SUITE),
        "--seeds",
        str(SEEDS),
        "--backend",
        "opencl",
        "--iterations",
        "1",
        "--trials",
        "2",
        "--out",
        str(out),
        "--json",
    ]
    assert main(args) == 0
    runs = {key: out / "runs" / key for key in ("level1/1_Softmax", "level1/2_softmax_dir", "level2/1_Relu")}
    for run in runs.values():
        assert (run / "summary.json").exists() and (run / "trajectory.jsonl").exists()
    # the plain file was given its seed through a task directory built in the bench folder
    assert (out / "tasks" / "level1" / "1_Softmax" / "seed.py").exists()

    results = {r["key"]: r for r in json.loads((out / "results.json").read_text())}
    for key in ("level1/1_Softmax", "level1/2_softmax_dir"):
        assert results[key]["correct"]
        # a best only from a reliable timing: a machine too busy for any
        # (the gate's verdict in each record) has none
        store = EvalStore.load(runs[key])
        evals = [
            store.raw(json.loads(line).get("eval_key"))
            for line in (runs[key] / "trajectory.jsonl").read_text().splitlines()
        ]
        if any(e.get("category") == "ok" and e.get("timing_reliable") for e in evals):
            assert results[key]["best_speedup"] > 0
        else:
            assert results[key]["best_speedup"] is None
        assert results[key]["hardware"] and results[key]["ref_runtime_ms"] > 0
    assert not results["level2/1_Relu"]["correct"]  # no seed, mutate cannot translate the reference
    metrics = json.loads((out / "metrics.json").read_text())["metrics"]
    assert metrics["overall"]["n"] == 3 and metrics["overall"]["correct_rate"] == pytest.approx(2 / 3)
    assert metrics["level1"]["correct_rate"] == 1.0 and metrics["level2"]["correct_rate"] == 0.0
    expected = compute_metrics([TaskResult.from_dict(r) for r in results.values()])
    assert metrics["overall"]["avg_speedup"] == pytest.approx(expected["avg_speedup"])
    assert "| overall | 3 | 66.7% |" in (out / "metrics.md").read_text()
    assert (out / "tasks.csv").read_text().count("\n") == 4
    cache = json.loads((out / "reference_timings.json").read_text())
    assert len(cache) == 2 and all(e["ref_runtime_ms"] > 0 and "@" in k for k, e in cache.items())
    for name in ("best_vs_step.png", "task_curves.png", "speedup_distribution.png"):
        data = (out / "plots" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name

    # Second invocation: every task is finished, nothing is evaluated again.
    before = {k: (r / "trajectory.jsonl").read_text() for k, r in runs.items()}
    from kernelsmith.bench import run_suite
    from kernelsmith.evolve import load_evolve_config

    class NoEvaluations:
        def backend_for(self, task):
            from kernelsmith.backends import get_backend

            return get_backend(task.config.backend)

        async def evaluate_async(self, task, source, trials=None):
            raise AssertionError("a finished or resumable-from-checkpoint task was evaluated again")

        def close(self):
            pass

    config = load_evolve_config(None, iterations=1, backend="opencl", trials=2)
    report = run_suite(SUITE, out, config, seeds_dir=SEEDS, evaluator=NoEvaluations(), log=lambda m: None)
    assert report.ran == [] and len(report.skipped) == 3
    # An unfinished task (its summary lost, as after a crash) is resumed from its checkpoint:
    # the finished steps are not redone.
    (runs["level1/2_softmax_dir"] / "summary.json").unlink()
    report = run_suite(SUITE, out, config, seeds_dir=SEEDS, evaluator=NoEvaluations(), log=lambda m: None)
    assert report.ran == ["level1/2_softmax_dir"] and len(report.skipped) == 2
    assert (runs["level1/2_softmax_dir"] / "summary.json").exists()
    assert {k: (r / "trajectory.jsonl").read_text() for k, r in runs.items()} == before

    # Two configurations side by side (here the same bench twice, under two labels).
    from kernelsmith.bench import compare

    files = compare([out, out], tmp_path / "cmp", labels=["A", "B"])
    table = Path(files["comparison.md"]).read_text()
    assert "| A | overall | 3 |" in table and "| B | overall | 3 |" in table
    assert Path(files["best_vs_step.png"]).stat().st_size > 10_000
