"""A second timing shape for KernelBench files (kernelsmith/task_shapes.py)
and where bench and curate emit one (issue 30: a kernel fast on one shape
only is not rewarded as fast everywhere)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from kernelsmith.task_shapes import HALF, halvable_sizes, with_half_shape

HERE = Path(__file__).resolve().parent
RELU = HERE / "fixtures" / "tasks" / "kernelbench_level1_relu.py"
BMM = HERE / "fixtures" / "kb_honest" / "bmm" / "reference.py"

CONV = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3)

    def forward(self, x):
        return self.conv(x)


batch_size = 16
in_channels = 3
out_channels = 8
height = width = 32


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
"""


def _run(source: str) -> dict:
    scope: dict = {}
    exec(compile(source, "<reference>", "exec"), scope)  # noqa: S102 - our own fixtures
    return scope


def test_the_leading_sizes_only_get_inputs_reads_are_halved():
    assert halvable_sizes(RELU.read_text()) == ["batch_size"]
    assert halvable_sizes(BMM.read_text()) == ["batch_size"]  # m, k, n are not leading; a tuple assignment
    assert halvable_sizes(CONV) == ["batch_size"]  # in_channels shapes the model: never halved
    # M and K lead two tensors and nothing else reads them: both halved, the product still defined
    matmul = (
        "import torch\nM = 64\nK = 32\nN = 16\n\ndef get_inputs():\n"
        "    return [torch.randn(M, K), torch.randn(K, N)]\n\ndef get_init_inputs():\n    return []\n"
    )
    assert halvable_sizes(matmul) == ["M", "K"]
    scope = _run(with_half_shape(matmul))
    a, b = scope[HALF]()
    assert tuple(a.shape) == (32, 16) and tuple(b.shape) == (16, 16) and (a @ b).shape == (32, 16)


def test_no_second_shape_where_the_module_allows_none():
    literal = "import torch\n\ndef get_inputs():\n    return [torch.randn(16, 16)]\n"
    used_by_model = CONV.replace("nn.Conv2d(in_channels, out_channels, 3)", "nn.Linear(batch_size, out_channels)")
    for source in (literal, used_by_model, "def get_init_inputs():\n    return []\n", "not python ("):
        assert with_half_shape(source) is None
    once = with_half_shape(RELU.read_text())
    assert with_half_shape(once) is None  # a file that has one already


def test_the_half_shape_halves_and_leaves_the_module_as_it_was():
    scope = _run(with_half_shape(RELU.read_text()))
    (full,) = scope["get_inputs"]()
    (half,) = scope[HALF]()
    assert tuple(full.shape) == (8, 300) and tuple(half.shape) == (4, 300)
    assert scope["batch_size"] == 8 and tuple(scope["get_inputs"]()[0].shape) == (8, 300)


def test_bench_gives_a_kernelbench_file_a_task_with_two_timing_shapes(tmp_path):
    from kernelsmith.bench.runner import _task_source
    from kernelsmith.bench.suite import SuiteTask
    from kernelsmith.task import Task

    task = SuiteTask("level1/19_ReLU", 1, RELU)
    folder = _task_source(task, tmp_path, None)
    loaded = Task.load(folder)
    assert loaded.config.timing_shapes == ["get_inputs", HALF] and loaded.config.name == RELU.stem
    assert loaded.reference_source.startswith(RELU.read_text().rstrip("\n"))
    assert _task_source(task, tmp_path / "one", None, timing_shapes="one") == RELU  # as it is
    literal = tmp_path / "lit.py"
    literal.write_text("import torch\n\ndef get_inputs():\n    return [torch.randn(4, 4)]\n")
    assert _task_source(SuiteTask("lit", None, literal), tmp_path, None) == literal


def test_curate_times_the_largest_other_size_class_that_passed_its_check():
    from kernelsmith.curate.pipeline import timing_shape_for

    assert (
        timing_shape_for("medium", {"small": {"ok": True}, "default": {"ok": True}, "large": {"ok": True}}) == "large"
    )
    assert timing_shape_for("medium", {"small": {"ok": True}, "large": {"ok": None}}) == "small"
    assert timing_shape_for("medium", {}) is None


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="CPU test: the interpreter")
def test_both_shapes_are_timed_through_the_evaluator(tmp_path):
    from kernelsmith.bench.runner import _task_source
    from kernelsmith.bench.suite import SuiteTask
    from kernelsmith.evaluator import Evaluator
    from kernelsmith.task import Task

    task = Task.load(_task_source(SuiteTask("relu", None, RELU), tmp_path, None), backend="triton", trials=1)
    program = (HERE / "fixtures" / "degenerate" / "triton" / "relu.py").read_text()
    with Evaluator(backend="triton", workers=1, timeout_s=300, timing=True) as ev:
        result = ev.evaluate(task, program)
    assert result.correct and not result.hacked, (result.error, result.hack_reasons)
    shapes = (result.timing or {}).get("shapes") or []
    assert [row["shape"] for row in shapes] == ["get_inputs", HALF], result.timing
    assert all(row["speedup"] for row in shapes)
    assert yaml.safe_load((tmp_path / "tasks" / "relu" / "task.yaml").read_text())["timing_shapes"] == [
        "get_inputs",
        HALF,
    ]
