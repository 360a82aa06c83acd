"""benchmarks/bench_eval_throughput.py: its manifests and a real run of the
script against today's evaluator (fresh mode, Triton interpreter)."""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelsmith.backends.base import get_backend

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "bench_eval_throughput.py"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(SCRIPT.parent))  # the script imports its sibling _verdicts
    spec = importlib.util.spec_from_file_location("bench_eval_throughput", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_triton_manifest_is_the_issue_mix(bench):
    backend, cands = bench.load_manifest(bench.MANIFESTS["triton"])
    assert backend == "triton"
    assert len(cands) == 32
    assert collections.Counter(c.expected for c in cands) == {
        "ok": 15,
        "incorrect": 4,
        "compile": 3,
        "runtime": 2,
        "crash": 2,
        "timeout": 1,
        "hacked": 5,
    }
    assert collections.Counter(c.group for c in cands) == {"l1": 16, "l2": 16}
    l2_tasks = {c.task.name for c in cands if c.group == "l2"}
    assert l2_tasks == {"linear_relu", "gemm_scale_residual", "linear_gelu", "matmul_softmax"}


@pytest.mark.parametrize("which", ["triton", "opencl"])
def test_every_candidate_reaches_a_worker(bench, which):
    # the static checks decide without a worker in milliseconds; a candidate
    # they catch would measure nothing of the evaluator's throughput
    backend, cands = bench.load_manifest(bench.MANIFESTS[which])
    checker = get_backend(backend)
    for c in cands:
        report = checker.static_check(c.file.read_text())
        assert not report.errors and not report.hacks, (c.name, report.errors, report.hacks)


def test_l2_references_shrink_with_ks_bench_small(bench, monkeypatch):
    _, cands = bench.load_manifest(bench.MANIFESTS["triton"])
    for task_dir in sorted({c.task for c in cands if c.group == "l2"}):
        shapes = {}
        for small in ("", "1"):
            monkeypatch.setenv("KS_BENCH_SMALL", small)
            ref: dict = {}
            exec(compile((task_dir / "reference.py").read_text(), str(task_dir), "exec"), ref)  # our own task
            shapes[small] = ref["get_inputs"]()[0].shape
            model = ref["Model"](*ref["get_init_inputs"]())
            if small:  # the full shapes are for a GPU; run the small ones
                assert model(*ref["get_inputs_ragged"]()).shape[0] == 37
        assert shapes["1"].numel() * 100 < shapes[""].numel(), (task_dir.name, shapes)


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"task": "examples/triton/relu", "expected": "ok", "group": "l1"}, "candidate #1: missing key(s) file"),
        (
            {"file": "examples/triton/relu/seed.py", "task": "examples/triton/relu", "expected": "fast", "group": "l1"},
            "expected category fast is not one of",
        ),
        (
            {"file": "nope.py", "task": "examples/triton/relu", "expected": "ok", "group": "l1"},
            "file nope.py does not exist",
        ),
        (
            {
                "file": "examples/triton/relu/seed.py",
                "task": "examples/triton/relu",
                "expected": "ok",
                "group": "l1",
                "speed": 1,
            },
            "unknown key(s) speed",
        ),
    ],
)
def test_manifest_errors_name_the_entry(bench, tmp_path, entry, message):
    path = tmp_path / "manifest.yaml"
    path.write_text(json.dumps({"backend": "triton", "candidates": [entry]}))
    with pytest.raises(bench.ManifestError, match=message.replace("(", r"\(").replace(")", r"\)")):
        bench.load_manifest(path)


def test_duplicate_names_are_rejected(bench, tmp_path):
    entry = {"file": "examples/triton/relu/seed.py", "task": "examples/triton/relu", "expected": "ok", "group": "l1"}
    path = tmp_path / "manifest.yaml"
    path.write_text(json.dumps({"candidates": [entry, entry]}))
    with pytest.raises(bench.ManifestError, match="name seed is used twice"):
        bench.load_manifest(path)


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    import kernelsmith

    # the package under test, wherever it is imported from (installed in CI, the source tree in development)
    package_root = str(Path(kernelsmith.__file__).resolve().parent.parent)
    env = dict(
        os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )


def test_fresh_run_prints_rates_and_flags_a_wrong_verdict(tmp_path):
    # two real evaluations: a correct seed, and a segfault listed as "ok" on
    # purpose, which must be flagged and make the exit status 1
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(
        json.dumps(
            {
                "backend": "triton",
                "candidates": [
                    {
                        "name": "relu_seed",
                        "file": "examples/triton/relu/seed.py",
                        "task": "examples/triton/relu",
                        "expected": "ok",
                        "group": "l1",
                    },
                    {
                        "file": "benchmarks/eval_throughput/l1/relu_segfault.py",
                        "task": "examples/triton/relu",
                        "expected": "ok",
                        "group": "l1",
                    },
                ],
            }
        )
    )
    out = tmp_path / "out.json"
    proc = _run(["--modes", "fresh", "--manifest", str(manifest), "--timeout", "120", "--json", str(out)], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = {
        line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith(("relu_seed", "relu_segfault"))
    }
    assert rows["relu_seed"].split()[3] == "ok"
    assert "crash !!" in rows["relu_segfault"]
    assert "1/2 candidates as expected" in proc.stdout
    assert "relu_segfault: expected ok, got fresh crash" in proc.stdout
    data = json.loads(out.read_text())
    stats = data["stats"]["fresh"]["l1"]
    assert stats["n"] == 2 and stats["n_ok"] == 1 and stats["evals_per_min"] > 0
    walls = [c["results"]["fresh"]["wall_s"] for c in data["candidates"]]
    assert stats["median_wall_s"] == pytest.approx(sum(walls) / 2, abs=1e-3)
    assert data["candidates"][0]["results"]["fresh"]["speedup"] > 0


def test_repeat_one_prints_the_speedup_spread(tmp_path):
    proc = _run(["--modes", "fresh", "--repeat-one", "2", "relu_seed", "--timeout", "120"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = [line for line in proc.stdout.splitlines() if line.startswith("fresh  run")]
    assert len(runs) == 2 and all(" ok " in line for line in runs)
    assert "fresh: relu_seed x2: speedup min" in proc.stdout and "spread max/min" in proc.stdout


def test_phase_medians_take_what_the_results_carry(bench):
    from kernelsmith.result import EvalResult

    # today's EvalResult has no `phases`; the pool's will: both must print
    older = EvalResult(category="ok")
    first, second = EvalResult(category="ok"), EvalResult(category="crash")
    first.phases = {"startup": 1.0, "compile": 0.25, "timing": None, "custom": 0.5}
    second.phases = {"startup": 3.0, "queue": 0.1}
    medians = bench.phase_medians([older, first, second])
    # issue 13's phases first, in its order, then the rest; a phase that did not happen is skipped
    assert list(medians) == ["queue", "startup", "compile", "custom"]
    assert medians == {"queue": 0.1, "startup": 2.0, "compile": 0.25, "custom": 0.5}
    assert bench.phase_medians([older]) == {}
