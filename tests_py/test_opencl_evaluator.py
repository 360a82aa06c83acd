"""OpenCL candidates through the evaluator (sandboxed workers, PoCL in CI):
correct seeds pass and are timed, a wrong kernel fails correctness, a forward
that launches nothing is flagged, a build failure returns the compiler log,
host NumPy compute is rejected statically."""

from __future__ import annotations

from pathlib import Path

import pytest

# The evaluator lands from its own branch; this suite runs once both are merged.
import kernelsmith.evaluator as evaluator
from kernelsmith.task import Task  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures_opencl"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "opencl"

CASES = [
    ("softmax_seed", "softmax", EXAMPLES / "softmax" / "seed.py"),
    ("layernorm_seed", "layernorm", EXAMPLES / "layernorm" / "seed.py"),
    ("matmul_seed", "matmul", EXAMPLES / "matmul" / "seed.py"),
    ("wrong_kernel", "softmax", FIXTURES / "wrong_kernel.py"),
    ("no_launch", "softmax", FIXTURES / "no_launch.py"),
    ("build_error", "softmax", FIXTURES / "build_error.py"),
    ("numpy_compute", "softmax", FIXTURES / "numpy_compute.py"),
]


@pytest.fixture(scope="module")
def results() -> dict:
    with evaluator.Evaluator(backend="opencl", workers=2, timeout_s=240) as ev:
        items = [(Task.load(EXAMPLES / task, trials=2), path.read_text()) for _, task, path in CASES]
        out = ev.evaluate_many(items)
    return {name: r for (name, _, _), r in zip(CASES, out)}


@pytest.mark.parametrize("name", ["softmax_seed", "layernorm_seed", "matmul_seed"])
def test_seeds_are_correct_and_timed(results: dict, name: str) -> None:
    r = results[name]
    assert r.category == "ok", r.error or r.hack_reasons
    assert r.runtime_ms and r.runtime_ms > 0 and r.ref_runtime_ms and r.ref_runtime_ms > 0


def test_wrong_kernel_fails_correctness(results: dict) -> None:
    r = results["wrong_kernel"]
    assert r.category == "incorrect" and not r.correct


def test_forward_without_launch_is_flagged(results: dict) -> None:
    r = results["no_launch"]
    assert r.hacked
    assert any("launched no opencl kernel" in reason for reason in r.hack_reasons), r.hack_reasons


def test_build_failure_returns_the_compiler_log(results: dict) -> None:
    r = results["build_error"]
    assert not r.correct
    assert "CL_BUILD_PROGRAM_FAILURE" in r.error and "row_maximum" in r.error, r.error


def test_host_numpy_compute_is_rejected(results: dict) -> None:
    r = results["numpy_compute"]
    assert r.hacked and any("np.exp" in reason for reason in r.hack_reasons), r.hack_reasons
