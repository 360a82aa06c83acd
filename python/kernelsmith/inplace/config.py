"""The in-place task's configuration (``inplace.yaml``): a source tree, the
target inside it, the project's own correctness command and a benchmark.

Relative paths (``tree``, ``inputs``) are relative to the folder of the YAML
file; paths inside the tree (``target.file``, ``python_path``) are relative to
the tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from ..backends import DEFAULT_BACKEND
from ..config import ConfigError, from_dict, to_dict
from ..task import DTYPES, TaskError

#: the file name ``kernelsmith task init`` writes and ``evolve`` recognises
CONFIG_NAME = "inplace.yaml"
KIND = "inplace"


class InplaceError(TaskError):
    """An in-place task cannot be set up; the message names the file and what is wrong."""


@dataclass
class TargetConfig:
    # the file holding the code to evolve, relative to the tree
    file: str = ""
    # the entry point compared with the original and timed: a top-level
    # function of ``file`` called as function(*inputs)
    function: str = ""
    # top-level names (functions, classes, assignments such as tunables) the
    # EVOLVE block spans, from the first to the last; empty: ``function``
    # alone. Ignored when the file already holds EVOLVE-BLOCK markers.
    region: list = field(default_factory=list)
    # tunables for the offline mutator in code that has none: each entry
    # {line: "the exact text of a line in the block", replace: "its
    # replacement, with a '# tune:' annotation"} (the replacement may add
    # lines, e.g. "num_warps = 4  # tune: [2, 4, 8, 16]" after a computed
    # value). The search then starts from the annotated program, the original
    # stays the reference it is compared and timed against.
    annotate: list = field(default_factory=list)


@dataclass
class CompareConfig:
    """Our own randomized comparison of the target against the original."""

    # input shapes passed to the inputs generator; each is checked once per
    # evaluation on top of the trials (more shapes than the project's tests)
    shapes: list = field(default_factory=list)
    # dtypes the comparison runs in; the first is the one timed
    dtypes: list = field(default_factory=lambda: ["float32"])
    # trials with fresh random inputs on the first benchmark shape
    trials: int = 2
    # tolerances; None: the dtype's default (fp32 1e-4, fp16/bf16 1e-2)
    atol: Optional[float] = None
    rtol: Optional[float] = None


@dataclass
class BenchmarkConfig:
    # shapes timed paired against the original (the first one scores the
    # search, all of them go into the summary)
    shapes: list = field(default_factory=list)
    # optional: the project's own benchmark command, run in the tree; it
    # prints a time that ``time_regex`` (first group, in ``unit``) picks up
    command: str = ""
    time_regex: str = r"([0-9]+(?:\.[0-9]+)?)\s*ms"
    unit: str = "ms"
    # (original, candidate) runs of the command in the summary
    repeats: int = 3


@dataclass
class InplaceConfig:
    kind: str = KIND
    name: str = ""
    # the source tree: a git checkout, a package's folder, site-packages/<pkg>
    tree: str = ""
    # folders of the tree put first on PYTHONPATH (tests, comparison)
    python_path: list = field(default_factory=lambda: ["."])
    target: TargetConfig = field(default_factory=TargetConfig)
    # the project's correctness command, run in a copy of the tree with the
    # candidate applied (e.g. "python -m pytest -q tests/test_x.py"); exit 0 = pass
    tests: str = ""
    tests_timeout_s: float = 600.0
    # "FILE.py:FUNCTION": FUNCTION(shape, dtype) returns the target's
    # positional arguments (fresh random tensors of that shape and dtype)
    inputs: str = ""
    compare: CompareConfig = field(default_factory=CompareConfig)
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    backend: str = DEFAULT_BACKEND
    # torch ops the target may run besides allocation and views (see task.yaml)
    allowed_torch_ops: list = field(default_factory=list)
    timeout_s: float = 300.0
    description: str = ""

    def __post_init__(self) -> None:
        if self.kind != KIND:
            raise ConfigError(f"kind: must be '{KIND}', got {self.kind!r}")
        for key, value in (
            ("tree", self.tree),
            ("target.file", self.target.file),
            ("target.function", self.target.function),
            ("tests", self.tests),
            ("inputs", self.inputs),
        ):
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{key}: required (see docs/in_place.md)")
        if ":" not in self.inputs:
            raise ConfigError(f"inputs: must be 'FILE.py:FUNCTION', got {self.inputs!r}")
        if not self.benchmark.shapes:
            raise ConfigError("benchmark.shapes: give at least one input shape to time")
        for key, shapes in (("compare.shapes", self.compare.shapes), ("benchmark.shapes", self.benchmark.shapes)):
            for shape in shapes:
                if not isinstance(shape, list) or not shape or not all(isinstance(d, int) and d > 0 for d in shape):
                    raise ConfigError(f"{key}: each shape is a list of positive integers, got {shape!r}")
        if not self.compare.dtypes or any(d not in DTYPES for d in self.compare.dtypes):
            raise ConfigError(f"compare.dtypes: each one of {', '.join(DTYPES)}, got {self.compare.dtypes!r}")
        if not isinstance(self.compare.trials, int) or not 1 <= self.compare.trials <= 100:
            raise ConfigError(f"compare.trials: an integer in 1..100, got {self.compare.trials!r}")
        if not isinstance(self.target.region, list) or not all(isinstance(n, str) for n in self.target.region):
            raise ConfigError("target.region: a list of top-level names")
        for i, entry in enumerate(self.target.annotate):
            if (
                not isinstance(entry, dict)
                or set(entry) != {"line", "replace"}
                or not all(isinstance(v, str) and v.strip() for v in entry.values())
            ):
                raise ConfigError(f"target.annotate[{i}]: a mapping with the keys line and replace (strings)")
            if "tune:" not in entry["replace"]:
                raise ConfigError(f"target.annotate[{i}].replace: must hold a '# tune:' annotation")
        if self.benchmark.repeats < 1:
            raise ConfigError("benchmark.repeats: must be >= 1")


def load_config(path: str | Path) -> tuple[InplaceConfig, Path]:
    """(config, folder its relative paths start from). ``path``: the YAML
    file or a folder holding ``inplace.yaml``."""
    path = Path(path)
    if path.is_dir():
        path = path / CONFIG_NAME
    if not path.is_file():
        raise InplaceError(f"{path}: no such in-place task file")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    config = from_dict(InplaceConfig, data)
    if not config.name:
        config.name = f"{Path(config.target.file).stem}-{config.target.function}"
    return config, path.parent.resolve()


def save_config(config: InplaceConfig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# kernelsmith in-place task (docs/in_place.md)\n"
        + yaml.safe_dump(to_dict(config), sort_keys=False, default_flow_style=None)
    )
    return path


def is_inplace(path: str | Path | None) -> bool:
    """True for an ``inplace.yaml`` (or a folder holding one) with ``kind: inplace``."""
    if path is None:
        return False
    path = Path(path)
    if path.is_dir():
        path = path / CONFIG_NAME
    if not path.is_file() or path.suffix not in (".yaml", ".yml"):
        return False
    try:
        data: Any = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, OSError):
        return False
    return isinstance(data, dict) and data.get("kind") == KIND
