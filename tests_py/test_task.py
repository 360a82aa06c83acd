"""Task loading: directories, plain KernelBench files, ids, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelsmith.config import ConfigError
from kernelsmith.task import Task, TaskConfig, TaskError

HERE = Path(__file__).parent
FIX = HERE / "fixtures" / "tasks"
EXAMPLES = HERE.parent / "examples" / "triton"


def test_load_directory_reads_reference_seed_and_config():
    task = Task.load(EXAMPLES / "layernorm")
    assert task.name == "layernorm"
    assert "class Model" in task.reference_source
    assert task.seed_source is not None and "class ModelNew" in task.seed_source
    assert task.config.extra_inputs == ["get_inputs_3d"]
    assert task.config.timing.repeats == 3
    assert task.config.tolerances() == (1e-4, 1e-4)


def test_plain_kernelbench_file_is_a_task_with_defaults():
    task = Task.load(FIX / "kernelbench_level1_relu.py", backend="triton")
    assert task.name == "kernelbench_level1_relu"
    assert task.seed_source is None
    assert task.config.trials == 5
    assert task.config.backend == "triton"


def test_id_is_stable_and_depends_on_reference_and_config():
    a = Task.load(EXAMPLES / "relu")
    b = Task.load(EXAMPLES / "relu")
    assert a.id == b.id and len(a.id) == 16
    assert Task.load(EXAMPLES / "relu", trials=7).id != a.id
    changed = Task(reference_source=a.reference_source + "\n# changed\n", config=a.config)
    assert changed.id != a.id
    renamed = Task(reference_source=a.reference_source, config=TaskConfig(**{**a.config.__dict__, "name": "other"}))
    assert renamed.id == a.id  # the name is not part of what is evaluated


def test_round_trip_keeps_id():
    task = Task.load(EXAMPLES / "softmax")
    again = Task.from_dict(task.to_dict())
    assert again.id == task.id and again.config == task.config


def test_missing_model_is_named():
    with pytest.raises(TaskError, match="must define Model"):
        Task.load(FIX / "bad_no_model")


def test_missing_get_inputs_is_named(tmp_path):
    ref = tmp_path / "p.py"
    ref.write_text("import torch.nn as nn\nclass Model(nn.Module):\n    pass\n")
    with pytest.raises(TaskError, match="get_inputs"):
        Task.load(ref)


def test_unknown_yaml_key_rejected_by_name():
    with pytest.raises(ConfigError, match="tolerance"):
        Task.load(FIX / "bad_yaml")


def test_extra_input_generator_must_exist(tmp_path):
    (tmp_path / "reference.py").write_text((EXAMPLES / "relu" / "reference.py").read_text())
    (tmp_path / "task.yaml").write_text("extra_inputs: [get_inputs_missing]\n")
    with pytest.raises(TaskError, match="get_inputs_missing"):
        Task.load(tmp_path)


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("dtype", "float64", "dtype"),
        ("trials", 0, "trials"),
        ("trials", 101, "trials"),
        ("atol", -1.0, "atol"),
    ],
)
def test_bad_config_values(key, value, match):
    with pytest.raises(ConfigError, match=match):
        TaskConfig(**{key: value})


def test_default_tolerances_per_dtype():
    assert TaskConfig().tolerances() == (1e-4, 1e-4)
    assert TaskConfig(dtype="float16").tolerances() == (1e-2, 1e-2)
    assert TaskConfig(dtype="bfloat16", atol=0.05).tolerances() == (0.05, 1e-2)


def test_difficulty_is_accepted_and_not_part_of_the_id(tmp_path):
    import shutil
    from pathlib import Path

    from kernelsmith.task import Task

    src = Path(__file__).parent.parent / "examples" / "opencl" / "softmax"
    dst = tmp_path / "softmax"
    shutil.copytree(src, dst)
    base = Task.load(dst)
    (dst / "task.yaml").write_text((dst / "task.yaml").read_text() + "difficulty: level1\n")
    tagged = Task.load(dst)
    assert tagged.config.difficulty == "level1" and tagged.id == base.id
