"""One verdict vocabulary (issue 28): the evaluator sets a result's
``category`` where the error happens, and no consumer of a result
(rewards, exports, feedback, reports, bench tables, the server, the RL
environment, the loop) re-derives it from the error's text.

- A Triton kernel that does not compile fails at the program's first call
  (Triton builds on launch); the worker reports it as ``compile`` itself,
  and rewards score it from that field.
- The category is read from the whole chain of exceptions the feedback
  shows: a compiler's error wrapped or handled by the program is still a
  compile failure.
- A static scan keeps text parsing out of the consumers: no build-error
  marker list, no backend's error names, no ``... in result.error``.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from kernelsmith.backends import get_backend
from kernelsmith.evaluator.tracebacks import classify_exception
from kernelsmith.result import CATEGORIES

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "kernelsmith"
HERE = Path(__file__).parent
#: the modules that read results (not the evaluator, which writes them,
#: nor the backends, which answer for their own errors)
CONSUMERS = (
    "rewards",
    "export",
    "bench",
    "server",
    "env",
    "report",
    "evolve",
    "feedback.py",
    "kernelbench.py",
    "prompts",
    "daemon",
    "commands",
    "inplace",
    "trajectory.py",
)
#: error names and texts of the backends' compilers: what a consumer would
#: match if it parsed messages
COMPILER_TEXTS = ("CompilationError", "InterpreterError", "CL_BUILD_PROGRAM_FAILURE", "clBuildProgram")


def _consumer_files() -> list[Path]:
    files: list[Path] = []
    for name in CONSUMERS:
        path = PACKAGE / name
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def _is_error_text(node: ast.AST) -> bool:
    """``x.error``, ``x["error"]``, ``x.get("error")``: a result's error text."""
    if isinstance(node, ast.Attribute):
        return node.attr == "error"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "error"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "error"
    return False


def text_parsing(source: str, filename: str = "<module>") -> list[str]:
    """Where ``source`` decides something from a result's error text or
    names a compiler's error."""
    tree = ast.parse(source, filename=filename)
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{filename}:{getattr(node, 'lineno', '?')}"
        if (
            isinstance(node, ast.Compare)
            and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
            and any(_is_error_text(c) for c in node.comparators)
        ):
            found.append(f"{where}: tests the error text: {ast.unparse(node)[:120]}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith", "find", "index", "count")
            and _is_error_text(node.func.value)
        ):
            found.append(f"{where}: searches the error text: {ast.unparse(node)[:120]}")
        if (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("re.search", "re.match", "re.findall")
            and any(_is_error_text(a) for a in node.args)
        ):
            found.append(f"{where}: searches the error text: {ast.unparse(node)[:120]}")
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and any(t in node.value for t in COMPILER_TEXTS)
        ):
            found.append(f"{where}: names a compiler's error: {node.value[:80]!r}")
        name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", getattr(node, "name", ""))
        if isinstance(name, str) and "marker" in name.lower() and "error" in name.lower():
            found.append(f"{where}: an error marker list: {name}")
    return found


def test_the_scan_finds_text_parsing():
    """The scan itself, on what rewards did before (a marker list and a
    test of the error's text)."""
    before = """
def _build_error_markers(name):
    return get_backend(name).build_error_markers

def score(result):
    if result.category == "runtime" and any(m in result.error for m in _build_error_markers(result.backend)):
        return "compile-failed"
    if "CompilationError" in result.error or result.error.startswith("x") or "y" in r["error"]:
        return "compile-failed"
"""
    found = text_parsing(before)
    assert sum("marker" in f for f in found) >= 2, found
    assert sum("tests the error text" in f for f in found) == 3, found
    assert any("searches the error text" in f for f in found) and any("names a compiler" in f for f in found)
    assert text_parsing("def f(result):\n    return result.category == 'compile' or not result.compiled\n") == []


def test_no_consumer_of_a_result_parses_its_error_text():
    found = [f for path in _consumer_files() for f in text_parsing(path.read_text(), str(path.relative_to(PACKAGE)))]
    assert not found, "read the result's category, not its text:\n" + "\n".join(found)


def test_rewards_import_no_marker_list_and_backends_declare_none():
    """Rewards import nothing of the backends (the markers came from there)
    and no backend declares build-error markers any more."""
    for path in (PACKAGE / "rewards").rglob("*.py"):
        tree = ast.parse(path.read_text())
        imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [m for m in imported if "backends" in m], (path, imported)
    for name in ("triton", "opencl", "cuda"):
        assert not hasattr(type(get_backend(name)), "build_error_markers"), name


class CompilationError(Exception):
    """Named as Triton's and the CUDA backend's compiler errors are."""


def _raised(make):
    try:
        make()
    except BaseException as exc:  # noqa: BLE001 - the exception is the test's subject
        return exc
    raise AssertionError("nothing raised")


def _wrapped():
    try:
        raise CompilationError("at 3:4: undefined_name is not defined")
    except CompilationError as inner:
        raise RuntimeError("kernel launch failed") from inner


def _handled():
    try:
        raise CompilationError("at 3:4: undefined_name is not defined")
    except CompilationError:
        raise ValueError("the fallback failed too")


def test_a_compile_error_in_the_chain_is_compile():
    """The category is read from the chain of exceptions the feedback shows:
    a compiler's error wrapped by the program (``raise ... from``) or
    handled by it (an error raised in its ``except``) is a compile failure;
    one whose context is suppressed is not in the chain."""
    triton = get_backend("triton")
    assert triton.classify_exception(_raised(_wrapped)) == "compile"
    assert triton.classify_exception(_raised(_handled)) == "compile"

    def suppressed():
        try:
            raise CompilationError("hidden")
        except CompilationError:
            raise ValueError("nothing to do with it") from None

    assert triton.classify_exception(_raised(suppressed)) == "runtime"
    # without the backend's test, a compiler's error is not recognised by name
    assert classify_exception(_raised(_wrapped)) == "runtime"
    # out of memory and device faults keep their category
    assert classify_exception(MemoryError()) == "oom"
    assert set(("compile", "runtime", "oom", "crash")) <= set(CATEGORIES)


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
    reason="runs a Triton candidate on the CPU (set TRITON_INTERPRET=1)",
)
def test_triton_compile_error_at_first_call_is_compile_from_the_evaluator():
    """An undefined name inside a @triton.jit kernel: Triton builds it at
    the first call, and the worker reports "compile" (not compiled) with
    the kernel's line; rewards score it compile-failed from that field."""
    from kernelsmith.evaluator import Evaluator
    from kernelsmith.rewards import RewardConfig, compute_reward
    from kernelsmith.task import Task

    task = Task.load(HERE.parent / "examples" / "triton" / "relu")
    source = (HERE / "fixtures" / "candidates" / "compile_error.py").read_text()
    with Evaluator(backend="triton", workers=1, timeout_s=150, timing=False) as ev:
        result = ev.evaluate(task, source)
    assert result.category == "compile" and not result.compiled and not result.correct, result.error
    assert "first call" in result.error or "ModelNew.forward raised" in result.error, result.error
    assert "undefined_name" in result.error
    reward = compute_reward(result, 1.0, RewardConfig())
    assert reward.status == "compile-failed" and reward.reward == RewardConfig().compile_failed
    # and the same from its record
    assert compute_reward(result.to_dict(), 1.0, RewardConfig()).status == "compile-failed"
