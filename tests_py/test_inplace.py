"""In-place tasks (docs/in_place.md): config init, markers, patch output, and
the evaluation of candidate patches (passing, failing tests, wrong results,
crash) on a real tree (fixtures_inplace/scalepkg: a Triton kernel run by the
interpreter), with the real sandbox, the project's real pytest and the real
Evaluator."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kernelsmith.cli import main
from kernelsmith.config import ConfigError
from kernelsmith.inplace import (
    InplaceError,
    InplaceEvaluator,
    insert_markers,
    load_inplace,
    make_patch,
    render_summary,
    strip_markers,
)
from kernelsmith.inplace.source import absolute_imports, candidate_program

pytestmark = pytest.mark.usefixtures("triton_interpret")

FIXTURE = Path(__file__).resolve().parent / "fixtures_inplace"
TESTS = "python -m pytest -q -p no:cacheprovider tests/test_ops.py"


@pytest.fixture(scope="module")
def triton_interpret():
    mp = pytest.MonkeyPatch()
    mp.setenv("TRITON_INTERPRET", "1")
    yield
    mp.undo()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, triton_interpret):
    """A copy of the fixture tree (a git checkout, as a real project is) and
    the task written by ``kernelsmith task init`` with its check on the
    unmodified tree."""
    root = tmp_path_factory.mktemp("inplace")
    tree = root / "scalepkg"
    shutil.copytree(FIXTURE / "scalepkg", tree)
    shutil.copy(FIXTURE / "inputs.py", root / "inputs.py")
    for cmd in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "original"],
    ):
        subprocess.run(cmd, cwd=tree, check=True)
    return root


@pytest.fixture(scope="module")
def task_file(workspace):
    out = workspace / "inplace.yaml"
    rc = main(
        [
            "task",
            "init",
            "--tree",
            str(workspace / "scalepkg"),
            "--file",
            "scalepkg/ops.py",
            "--function",
            "scale_add",
            "--region",
            "GRID_DIV,_scale_add_kernel,scale_add",
            "--tests",
            TESTS,
            "--inputs",
            f"{workspace / 'inputs.py'}:make_inputs",
            "--bench-shapes",
            "1024",
            "--compare-shapes",
            "1,100,3x77",
            "--dtypes",
            "float32,float16",
            "-o",
            str(out),
        ]
    )
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def evaluator():
    with InplaceEvaluator(workers=1) as ev:
        yield ev


# -- config init ------------------------------------------------------------


def test_task_init_writes_a_config_that_loads_and_runs(task_file, workspace, capsys):
    text = task_file.read_text()
    assert "kind: inplace" in text and "tree: scalepkg" in text  # relative to the config's folder
    task = load_inplace(task_file)
    assert task.spec.module == "scalepkg.ops"
    assert task.spec.tree == (workspace / "scalepkg").resolve()
    # the seed: the file with kernelsmith's markers around the region, tunable inside
    seed = task.seed_source
    assert seed.index("# EVOLVE-BLOCK-START") < seed.index("GRID_DIV = 1") < seed.index("# EVOLVE-BLOCK-END")
    assert strip_markers(seed) == (workspace / "scalepkg" / "scalepkg" / "ops.py").read_text()
    assert task.config.extra_inputs == ["get_inputs_compare_0", "get_inputs_compare_1", "get_inputs_compare_2"]


def test_task_init_rejects_bad_input(workspace, tmp_path, capsys):
    common = [
        "task",
        "init",
        "--tree",
        str(workspace / "scalepkg"),
        "--file",
        "scalepkg/ops.py",
        "--tests",
        TESTS,
        "--inputs",
        f"{workspace / 'inputs.py'}:make_inputs",
        "--bench-shapes",
        "64",
    ]
    assert main(common + ["--function", "no_such_fn", "-o", str(tmp_path / "a.yaml"), "--no-check"]) == 2
    assert "no_such_fn" in capsys.readouterr().err
    assert (
        main(common + ["--function", "scale_add", "--region", "nope", "-o", str(tmp_path / "b.yaml"), "--no-check"])
        == 2
    )
    assert "no top-level definition named nope" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: a malformed shape
        main(common[:-1] + ["64xq", "--function", "scale_add", "-o", str(tmp_path / "c.yaml")])


def test_task_init_fails_when_the_unmodified_tree_fails_its_tests(workspace, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(workspace / "scalepkg", broken)
    test = broken / "tests" / "test_ops.py"
    test.write_text(test.read_text().replace("x * 2.0 + y)", "x * 3.0 + y)"))
    rc = main(
        [
            "task",
            "init",
            "--tree",
            str(broken),
            "--file",
            "scalepkg/ops.py",
            "--function",
            "scale_add",
            "--tests",
            TESTS,
            "--inputs",
            f"{workspace / 'inputs.py'}:make_inputs",
            "--bench-shapes",
            "64",
            "-o",
            str(tmp_path / "broken.yaml"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 1
    assert "project tests: FAILED" in out and "does not run on the unmodified tree" in out


def test_task_init_prints_each_check_step_with_its_time(workspace, tmp_path, capsys):
    rc = main(
        [
            "task",
            "init",
            "--tree",
            str(workspace / "scalepkg"),
            "--file",
            "scalepkg/ops.py",
            "--function",
            "scale_add",
            "--region",
            "GRID_DIV,_scale_add_kernel,scale_add",
            "--tests",
            TESTS,
            "--inputs",
            f"{workspace / 'inputs.py'}:make_inputs",
            "--bench-shapes",
            "64",
            "-o",
            str(tmp_path / "steps.yaml"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    steps = [line.strip() for line in out.splitlines() if line.startswith("  ")]
    names = [line.rsplit(": ", 1)[0] for line in steps]
    # in the order they ran, each with its time in seconds
    assert names[:2] == ["copy the tree", "project tests"], steps
    assert "comparison float32: load reference" in names and "comparison float32: timing" in names, steps
    # the referee primes the task (a new one) before a worker is taken, and says so then
    assert names.index("comparison float32: the referee runs the reference") < names.index(
        "comparison float32: waiting for a worker"
    ), steps
    assert all(line.endswith(" s") and float(line.rsplit(": ", 1)[1][:-2]) >= 0 for line in steps), steps
    assert "checked in " in out


def test_project_tests_past_their_limit_name_the_limit(task_file, tmp_path):
    import dataclasses

    task = load_inplace(task_file)
    spec = dataclasses.replace(task.spec, config=dataclasses.replace(task.spec.config, tests_timeout_s=3.0))
    task = dataclasses.replace(task, spec=spec)
    # the candidate's module sleeps at import, so the project's tests hang in their collection
    stuck = task.seed_source.replace("GRID_DIV = 1  # tune: [1, 2]", "GRID_DIV = __import__('time').sleep(60) or 1")
    assert stuck != task.seed_source
    from kernelsmith.evaluator.phases import PhaseLine

    with InplaceEvaluator(workers=1) as ev, PhaseLine("checking") as shown:
        started = __import__("time").monotonic()
        result = ev.evaluate(task, stuck)
    assert result.category == "timeout" and __import__("time").monotonic() - started < 30
    assert "the project's tests ran past their limit of 3 s (tests_timeout_s) and were killed" in result.error
    assert shown.durations[-1][0] == "project tests"


def test_config_errors_name_the_key(tmp_path):
    bad = tmp_path / "inplace.yaml"
    bad.write_text("kind: inplace\ntree: .\ntarget: {file: a.py, function: f}\ntests: 'true'\ninputs: i.py:g\n")
    with pytest.raises(ConfigError, match="benchmark.shapes"):
        load_inplace(bad)
    bad.write_text(
        "kind: inplace\ntree: nowhere\ntarget: {file: a.py, function: f}\ntests: 'true'\n"
        "inputs: i.py:g\nbenchmark: {shapes: [[4]]}\n"
    )
    with pytest.raises(InplaceError, match="not a folder"):
        load_inplace(bad)


# -- source handling and the patch -------------------------------------------


def test_markers_and_relative_imports():
    text = "import x\n\nA = 1  # tune: [1, 2]\n\n\n@deco\ndef f():\n    return A\n\n\ndef g():\n    pass\n"
    marked = insert_markers(text, ["A", "f"])
    lines = marked.splitlines()
    assert lines[2].startswith("# EVOLVE-BLOCK-START") and lines[3] == "A = 1  # tune: [1, 2]"
    assert lines[9].startswith("# EVOLVE-BLOCK-END") and lines[8] == "    return A"  # decorator inside
    assert strip_markers(marked) == text
    with pytest.raises(InplaceError, match="no top-level definition named h"):
        insert_markers(text, ["h"])
    assert (
        absolute_imports("from ._util import b\nfrom .. import c\n", "pkg.sub.ops")
        == "from pkg.sub._util import b\nfrom pkg import c\n"
    )
    program = candidate_program(
        "from __future__ import annotations\nfrom . import u\ndef f(x):\n    return x\n",
        module="pkg.ops",
        function="f",
        tree_paths=["/t"],
    )
    assert program.startswith("from __future__ import annotations\n")
    assert "from pkg import u" in program and "return f(*args)" in program


def test_annotate_gives_the_mutator_a_tunable(tmp_path):
    """Code without '# tune:' values (a published package) gets one for the
    offline mutator; the original file stays what is compared and checked."""
    from kernelsmith.inplace import save_config
    from kernelsmith.inplace.config import InplaceConfig
    from kernelsmith.config import from_dict
    from kernelsmith.proposers.mutate import parse_tunables

    shutil.copytree(FIXTURE / "scalepkg", tmp_path / "scalepkg")
    shutil.copy(FIXTURE / "inputs.py", tmp_path / "inputs.py")
    data = {
        "tree": "scalepkg",
        "tests": TESTS,
        "inputs": "inputs.py:make_inputs",
        "benchmark": {"shapes": [[64]]},
        "target": {
            "file": "scalepkg/ops.py",
            "function": "scale_add",
            "region": ["_scale_add_kernel", "scale_add"],
            "annotate": [
                {"line": "block = block_for(n)", "replace": "block = block_for(n)\nblock = 64  # tune: [32, 64, 128]"}
            ],
        },
    }
    task = load_inplace(save_config(from_dict(InplaceConfig, data), tmp_path / "inplace.yaml"))
    assert "    block = block_for(n)\n    block = 64  # tune: [32, 64, 128]\n" in task.seed_source
    assert [t.name for t in parse_tunables(task.seed_source)] == ["block"]  # GRID_DIV is outside this block
    assert "tune" not in task.spec.marked_original().split("EVOLVE-BLOCK-START")[1]
    # the file that goes into the tree (and the patch) has no '# tune:' comment of ours
    written = task.spec.file_text(task.seed_source.replace("block = 64  # tune", "block = 128  # tune"))
    assert "    block = 128\n" in written and "tune" not in written.split("def scale_add")[1]
    assert "GRID_DIV = 1  # tune: [1, 2]" in written  # the project's own annotation stays
    data["target"]["annotate"] = [{"line": "no such line", "replace": "x = 1  # tune: [1, 2]"}]
    with pytest.raises(InplaceError, match="found 0 times"):
        load_inplace(save_config(from_dict(InplaceConfig, data), tmp_path / "inplace.yaml"))
    data["target"]["annotate"] = [{"line": "block = block_for(n)", "replace": "block = 64"}]
    with pytest.raises(ConfigError, match="tune"):
        from_dict(InplaceConfig, data)


def test_project_code_before_the_block_is_not_judged_as_the_candidates():
    """A file that opens with a try/except import guard (as liger-kernel's
    swiglu.py does): the static checks see the block and what follows."""
    from kernelsmith.backends import get_backend

    text = (
        "import torch\nimport triton\nimport triton.language as tl\n"
        "try:\n    import torch.distributed.tensor  # noqa\nexcept ImportError:\n    pass\n\n"
        "SCALE = 2.0\n\n\n@triton.jit\ndef _k(x_ptr, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.arange(0, BLOCK)\n    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)\n\n\n"
        "def f(x):\n    _k[(1,)](x, x.numel(), BLOCK=64)\n    return x\n"
    )
    marked = insert_markers(text, ["_k", "f"])
    program = candidate_program(marked, module="pkg.ops", function="f", tree_paths=["/nowhere"])
    report = get_backend("triton").static_check(program)
    assert not report.hacks and not report.errors, report
    # module imports repeated, the rest from ctx
    assert "import torch\n" in program and re.search(r"from _ks_ctx_\w+ import .*\bSCALE\b", program)
    whole = candidate_program(text, module="pkg.ops", function="f", tree_paths=["/nowhere"])  # no block
    assert any("try/except" in h for h in get_backend("triton").static_check(whole).hacks)


def test_patch_applies_with_git(tmp_path):
    tree = tmp_path / "t"
    (tree / "pkg").mkdir(parents=True)
    original = "a = 1\nb = 2\n\n\ndef f():\n    return a + b\n"
    (tree / "pkg" / "m.py").write_text(original)
    changed = original.replace("b = 2", "b = 3")
    patch = make_patch(original, changed, "pkg/m.py")
    assert patch.startswith("diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n")
    (tmp_path / "p.patch").write_text(patch)
    subprocess.run(["git", "apply", "--check", str(tmp_path / "p.patch")], cwd=tree, check=True)
    subprocess.run(["git", "apply", str(tmp_path / "p.patch")], cwd=tree, check=True)
    assert (tree / "pkg" / "m.py").read_text() == changed
    assert make_patch(original, original, "pkg/m.py") == ""
    # a file without a final newline round-trips too
    patch = make_patch("x = 1", "x = 2\n", "pkg/n.py")
    (tree / "pkg" / "n.py").write_text("x = 1")
    (tmp_path / "q.patch").write_text(patch)
    subprocess.run(["git", "apply", str(tmp_path / "q.patch")], cwd=tree, check=True)
    assert (tree / "pkg" / "n.py").read_text() == "x = 2\n"


def test_summary_says_no_improvement_for_an_unchanged_program():
    text = render_summary(
        {
            "target": "a.py:f",
            "tree": "/t",
            "git_head": "",
            "tests": "pytest",
            "changed": False,
            "run": {"steps": 3, "stop_reason": "iterations", "wall_time_s": 10},
        }
    )
    assert "No improvement found" in text
    row = {
        "shape": [64],
        "dtype": "float32",
        "correct": True,
        "speedup": 1.02,
        "ci_low": 0.9,
        "ci_high": 1.15,
        "verdict": "indistinguishable",
        "runtime_ms": 1.0,
        "ref_runtime_ms": 1.02,
    }
    info = {
        "target": "a.py:f",
        "tree": "/t",
        "git_head": "",
        "tests": "pytest",
        "changed": True,
        "run": {},
        "what_changed": ["`A = 1` -> `A = 2`"],
        "shapes": [row],
        "patch_check": {"applies": True, "tests_passed": True},
    }
    text = render_summary(info)
    assert "No improvement found" in text and "| [64] | float32 |" in text and "[0.900, 1.150]" in text
    info["shapes"] = [row, {**row, "shape": [128], "speedup": 1.5, "ci_low": 1.3, "ci_high": 1.7, "verdict": "faster"}]
    assert "faster on 1 of 2 benchmark shapes" in render_summary(info)
    info["shapes"] = [{**row, "speedup": 0.5, "ci_low": 0.4, "ci_high": 0.6, "verdict": "slower"}]
    assert "do not merge it as a speed-up" in render_summary(info)


# -- evaluating candidates ----------------------------------------------------


def test_passing_candidate(task_file, evaluator):
    task = load_inplace(task_file)
    # a real change inside the block: a fixed block size of 128 for every n
    source = task.seed_source.replace("block = block_for(n)", "block = 128")
    result = evaluator.evaluate(task, source)
    assert result.correct and not result.hacked, result.error
    assert result.correctness["project_tests"]["passed"]
    assert result.correctness["dtypes"] == ["float32", "float16"]
    assert "get_inputs_compare_1" in result.correctness["input_sets"]
    assert result.speedup is not None and result.speedup_ci_low <= result.speedup <= result.speedup_ci_high


def test_failing_project_tests(task_file, evaluator):
    task = load_inplace(task_file)
    result = evaluator.evaluate(task, task.seed_source.replace("offs, x * alpha + y", "offs, x * alpha - y"))
    assert not result.correct and result.category == "incorrect"
    assert "the project's tests failed" in result.error and "test_scale_add" in result.error
    assert result.speedup is None  # never compared nor timed


def test_wrong_results_the_tests_miss(task_file, evaluator):
    task = load_inplace(task_file)
    # drops the tail: right for the tests' n = 128 (a multiple of 64), wrong for n = 100
    wrong = task.seed_source.replace("(triton.cdiv(n, block),)", "(n // block,)")
    result = evaluator.evaluate(task, wrong)
    assert result.correctness["project_tests"]["passed"]
    assert not result.correct and result.category == "incorrect", result.render_feedback()


def test_crashing_candidate(task_file, evaluator):
    task = load_inplace(task_file)
    crash = task.seed_source.replace(
        "GRID_DIV = 1", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\nGRID_DIV = 1"
    )
    result = evaluator.evaluate(task, crash)
    assert not result.correct and result.category == "crash", result.error
    syntax = evaluator.evaluate(task, task.seed_source.replace("def scale_add(", "def scale_add(("))
    assert syntax.category == "compile" and "syntax error" in syntax.error
    # code outside the EVOLVE block is the project's: a change there is refused before anything runs
    outside = evaluator.evaluate(task, task.seed_source.replace("import torch\n", "import torch\nimport os\n", 1))
    assert outside.category == "edit" and "outside the EVOLVE block" in outside.error


def test_a_hack_in_the_target_is_caught(task_file, evaluator):
    """The evaluator's integrity checks apply to the target's forward: a
    fallback to torch passes the project's tests but is rejected."""
    task = load_inplace(task_file)
    hack = task.seed_source.replace("    return out\n", "    return x * alpha + y\n")
    result = evaluator.evaluate(task, hack)
    assert result.correctness["project_tests"]["passed"]
    assert result.hacked and not result.correct, result.render_feedback()
