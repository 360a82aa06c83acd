"""Tasks: a reference PyTorch module plus how to check and time candidates.

Three formats load through :meth:`Task.load`:

* a plain KernelBench problem file (``Model``, ``get_inputs``,
  ``get_init_inputs``), taken as it is, with default settings;
* a KernelBench-X task file (a reference function, a separator line, its
  test harness), read by :mod:`kernelsmith.kernelbenchx`;
* a task directory: ``reference.py`` (KernelBench format), an optional
  ``seed.py`` (a first candidate defining ``ModelNew``) and an optional
  ``task.yaml`` (:class:`TaskConfig`).

The reference is only parsed here, never executed: it runs inside the
evaluator's workers, next to the candidate.
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .backends import DEFAULT_BACKEND
from .config import ConfigError, from_dict, load_yaml, to_dict
from ._astutil import parse as parse_source

#: dtypes a task may ask for; floating inputs and the modules are cast to it
DTYPES = ("float32", "float16", "bfloat16")

#: default (atol, rtol) per dtype; a task may override either
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 1e-2),
}

MAX_TRIALS = 100

#: keys of TaskConfig.comparison (evaluator/correctness.py compare_metrics)
COMPARISON_KEYS = ("cosine_sim", "l1_relative", "rmse")


@dataclass
class TimingConfig:
    """How a correct candidate is timed against the reference (task.yaml
    ``timing:``). Reference and candidate are measured in alternating pairs
    by kernelsmith.timing.compare (docs/timing.md); the result is a speedup
    with a confidence interval and a verdict."""

    # time candidate and reference after a correct verdict
    enabled: bool = True
    # untimed calls of each side before the harness's own warm-up (first-call
    # compilation, autotuning); the harness then warms up for warmup_s
    warmup: int = 1
    # minimum number of (reference, candidate) sample pairs
    repeats: int = 10
    # ... and on a GPU at least this many (the time budget still applies).
    # A few pairs can meet the CI target inside a short slow spell of the
    # GPU, which moves a tensor-core candidate and an FP32 reference by
    # different amounts: on the H200 a 0.12 ms GEMM timed in 3-78 pairs
    # spread 1.0-3.9% over ten fresh evaluations, in at least 50 pairs
    # 0.31% and 0.40% (benchmarks/results/h200_eval_throughput_s8.txt)
    gpu_min_pairs: int = 50
    # stop once the speedup's CI half-width is this fraction of the speedup ...
    target_rel_half_width: float = 0.005
    # ... or after this many pairs ...
    max_samples: int = 2000
    # ... or after this many seconds of sampling (warm-up and checks on top)
    time_budget_s: float = 5.0
    # CI level of the speedup
    confidence: float = 0.95
    # harness warm-up per side, seconds (at least 3 calls)
    warmup_s: float = 0.05
    # one sample lasts at least this long (sets launches per sample for tiny kernels)
    target_sample_s: float = 100e-6
    max_launches_per_sample: int = 1000
    # CUDA: flush L2 before every sample; capture samples in a CUDA graph
    # (eager fallback recorded); check for work hidden from the timed stream
    l2_flush: bool = True
    cuda_graph: bool = True
    check_hidden_work: bool = True
    # input sets from get_inputs() (fresh seeds) that the timed calls rotate over
    input_sets: int = 3
    # on a GPU, the timed calls rotate over this many sets: the fresh ones and
    # device copies of them, each placed anew in memory (bounded to 10% of the
    # free device memory; see worker_timing.placed_copies)
    gpu_input_sets: int = 8
    # flag times below the hardware floor (bytes and FLOPs estimated from the reference)
    roofline: bool = True
    # host-clock timing (CPU devices, Triton interpreter, PoCL): these caps
    # replace max_samples / time_budget_s so a CPU evaluation stays quick
    cpu_max_samples: int = 20
    cpu_time_budget_s: float = 0.5
    # ... and for each comparison of the finalists' re-timing at the end of
    # a run (Evaluator.confirm_best), on which the run's best rests: three
    # times the per-step caps (the CI floor below bounds what more pairs
    # could show; a re-timing under contention runs up to three times)
    cpu_finalist_max_samples: int = 60
    cpu_finalist_time_budget_s: float = 1.5
    # host-clock timing: the speedup's CI is at least +-this share wide. The
    # pairs of one timing do not see how much a CPU timing moves from one
    # session to the next (PoCL on a shared 2-core machine: 15%, measured by
    # tests_py/test_contention.py), and a narrower interval would claim a
    # precision the figure does not have
    cpu_ci_floor: float = 0.15
    # host-clock timing: the worker's threads are pinned to as many cores as
    # it has threads while it holds the timing slot (evaluator/affinity.py:
    # unpinned, the same programs re-timed alone moved by up to 35%)
    cpu_pin: bool = True

    def __post_init__(self) -> None:
        for key in ("warmup",):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 0:
                raise ConfigError(f"timing.{key}: must be an integer >= 0, got {getattr(self, key)!r}")
        for key in (
            "repeats",
            "gpu_min_pairs",
            "max_samples",
            "input_sets",
            "gpu_input_sets",
            "max_launches_per_sample",
            "cpu_max_samples",
            "cpu_finalist_max_samples",
        ):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise ConfigError(f"timing.{key}: must be an integer >= 1, got {getattr(self, key)!r}")
        for key in (
            "target_rel_half_width",
            "time_budget_s",
            "target_sample_s",
            "cpu_time_budget_s",
            "cpu_finalist_time_budget_s",
        ):
            value = getattr(self, key)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"timing.{key}: must be a number > 0, got {value!r}")
        if not isinstance(self.warmup_s, (int, float)) or self.warmup_s < 0:
            raise ConfigError(f"timing.warmup_s: must be a number >= 0, got {self.warmup_s!r}")
        if not 0.5 < self.confidence < 1:
            raise ConfigError(f"timing.confidence: must be in (0.5, 1), got {self.confidence!r}")
        if not isinstance(self.cpu_pin, bool):
            raise ConfigError(f"timing.cpu_pin: must be true or false, got {self.cpu_pin!r}")
        if self.repeats > self.max_samples:
            raise ConfigError(
                f"timing.repeats ({self.repeats}) must not exceed timing.max_samples ({self.max_samples})"
            )


@dataclass
class TaskConfig:
    # human-readable name; defaults to the directory or file name
    name: str = ""
    # evaluation backend (kernelsmith.backends.<name>)
    backend: str = DEFAULT_BACKEND
    # float32 | float16 | bfloat16: floating inputs and both modules are cast to it
    dtype: str = "float32"
    # absolute / relative tolerance; None = the dtype's default (fp32 1e-4, fp16/bf16 1e-2)
    atol: Optional[float] = None
    rtol: Optional[float] = None
    # correctness trials, each with fresh random inputs (1..100)
    trials: int = 5
    # names of functions in reference.py returning input lists with other
    # shapes; each is checked once more on top of the trials (defeats shape
    # specialisation)
    extra_inputs: list = field(default_factory=list)
    # torch ops the candidate's forward may run besides allocation/view ops,
    # e.g. ["aten.cat", "softmax"] (overload packet names, "aten." optional)
    allowed_torch_ops: list = field(default_factory=list)
    # integrity policy (evaluator/census.py): "strict" = forward's work is
    # done by the program's own kernels, only allocation/view/copy ops (and
    # allowed_torch_ops) besides; "partial" = foreign work (a vendor
    # convolution, PyTorch ops) is allowed and the result reports its
    # coverage, which must reach min_coverage
    policy: str = "strict"
    min_coverage: float = 0.5
    # hard wall-clock limit for one candidate's worker, seconds
    timeout_s: float = 300.0
    # device memory (evaluator/memory.py): an out-of-memory is the program's
    # (category oom, charged) only when its own allocations exceed this many
    # times the reference's measured peak during forward (at least 512 MiB);
    # otherwise it is the harness's, retried alone and never charged
    memory_margin: float = 2.0
    timing: TimingConfig = field(default_factory=TimingConfig)
    # free text shown in prompts
    description: str = ""
    # difficulty category (e.g. level1..level3, as curation assigns); used by
    # export's balanced sampling and suite tables, not by the evaluation
    difficulty: str = ""
    # operator category (KernelBench-X's folder: Activation, Fusion, ...);
    # used by suite tables, not by the evaluation
    category: str = ""
    # names of functions in reference.py returning the input sets to time
    # (performance shapes, KernelBench-X's golden_metrics); empty: get_inputs.
    # With several, each is timed on its own and the speedup is their
    # weighted geometric mean (evaluator/timing.py combine_shapes)
    timing_shapes: list = field(default_factory=list)
    # one positive weight per timing shape; empty: equal weights
    timing_weights: list = field(default_factory=list)
    # how outputs are compared: {} = elementwise atol/rtol; else an accuracy
    # contract over each output tensor (KernelBench-X's quantization tasks):
    # cosine_sim (at least), l1_relative and rmse (at most), all required
    comparison: dict = field(default_factory=dict)

    @property
    def check_sets(self) -> list:
        """The input functions correctness runs on: ``get_inputs`` (its
        trials) and every ``extra_inputs`` function; the worker hands the
        referee the last trial of each (and of a degenerate task's probes)."""
        return ["get_inputs", *[str(s) for s in self.extra_inputs]]

    @property
    def timed_shapes(self) -> list:
        """The input functions the timing measures: ``timing_shapes``, or
        ``get_inputs`` alone when none is declared."""
        return list(self.timing_shapes) or ["get_inputs"]

    @property
    def shape_weights(self) -> Optional[list]:
        """The timing shapes' weights, None for equal ones."""
        return list(self.timing_weights) or None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype: '{self.dtype}' is not one of {', '.join(DTYPES)}")
        if not isinstance(self.trials, int) or not 1 <= self.trials <= MAX_TRIALS:
            raise ConfigError(f"trials: must be an integer in 1..{MAX_TRIALS}, got {self.trials!r}")
        for key in ("atol", "rtol"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, (int, float)) or value < 0):
                raise ConfigError(f"{key}: must be a non-negative number, got {value!r}")
        if not isinstance(self.extra_inputs, list) or not all(isinstance(x, str) for x in self.extra_inputs):
            raise ConfigError("extra_inputs: must be a list of function names")
        if not isinstance(self.allowed_torch_ops, list):
            raise ConfigError("allowed_torch_ops: must be a list of op names")
        if self.timeout_s <= 0:
            raise ConfigError("timeout_s: must be positive")
        if (
            not isinstance(self.memory_margin, (int, float))
            or isinstance(self.memory_margin, bool)
            or self.memory_margin <= 0
        ):
            raise ConfigError(f"memory_margin: must be a number > 0, got {self.memory_margin!r}")
        if self.policy not in ("strict", "partial"):
            raise ConfigError(f"policy: must be 'strict' or 'partial', got {self.policy!r}")
        if not isinstance(self.min_coverage, (int, float)) or not 0.0 <= self.min_coverage <= 1.0:
            raise ConfigError(f"min_coverage: must be a number in 0..1, got {self.min_coverage!r}")
        if isinstance(self.timing, dict):
            self.timing = from_dict(TimingConfig, self.timing, "timing")
        if not isinstance(self.timing_shapes, list) or not all(isinstance(x, str) for x in self.timing_shapes):
            raise ConfigError("timing_shapes: must be a list of function names")
        if len(set(self.timing_shapes)) != len(self.timing_shapes):
            raise ConfigError("timing_shapes: each shape once")
        weights = self.timing_weights
        if not isinstance(weights, list) or not all(
            isinstance(w, (int, float)) and not isinstance(w, bool) and 0 < w < float("inf") for w in weights
        ):
            raise ConfigError(f"timing_weights: must be a list of positive numbers, got {weights!r}")
        if weights and len(weights) != len(self.timing_shapes):
            raise ConfigError(f"timing_weights: one per timing shape ({len(self.timing_shapes)}), got {len(weights)}")
        if not isinstance(self.comparison, dict):
            raise ConfigError("comparison: must be a mapping of cosine_sim, l1_relative, rmse to numbers")
        for key, value in self.comparison.items():
            if key not in COMPARISON_KEYS:
                raise ConfigError(f"comparison: unknown key '{key}'; known: {', '.join(COMPARISON_KEYS)}")
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"comparison.{key}: must be a number >= 0, got {value!r}")

    def tolerances(self) -> tuple[float, float]:
        atol, rtol = DEFAULT_TOLERANCES[self.dtype]
        return (atol if self.atol is None else float(self.atol), rtol if self.rtol is None else float(self.rtol))


class TaskError(ValueError):
    """A task cannot be loaded; the message names the file and what is missing."""


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        names.add(sub.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
    return names


def check_reference(source: str, filename: str, extra_inputs: list[str] | None = None) -> None:
    """Fail with a message naming what a KernelBench reference lacks."""
    try:
        tree = parse_source(source, filename=filename)
    except SyntaxError as exc:
        raise TaskError(f"{filename}: reference is not valid Python: {exc.msg} (line {exc.lineno})") from None
    names = _top_level_names(tree)
    missing = [n for n in ("Model", "get_inputs") if n not in names]
    missing += [n for n in (extra_inputs or []) if n not in names]
    if missing:
        raise TaskError(
            f"{filename}: the reference must define {', '.join(missing)} "
            "(KernelBench format: class Model(nn.Module), get_inputs(), get_init_inputs(); "
            "extra_inputs and timing_shapes in task.yaml must name functions of reference.py)"
        )


@dataclass
class Task:
    """A reference module with its evaluation settings."""

    reference_source: str
    config: TaskConfig = field(default_factory=TaskConfig)
    seed_source: Optional[str] = None
    # where it was loaded from (informational; not part of the id)
    path: Optional[str] = None

    def __post_init__(self) -> None:
        check_reference(
            self.reference_source,
            self.path or "<reference>",
            list(self.config.extra_inputs) + list(self.config.timing_shapes),
        )

    @property
    def name(self) -> str:
        return self.config.name or (Path(self.path).stem if self.path else self.id)

    @property
    def id(self) -> str:
        """Stable hash of the reference source and the normalized config."""
        config = to_dict(self.config)
        config.pop("name", None)  # renaming a task does not change what is evaluated
        config.pop("description", None)
        config.pop("difficulty", None)
        config.pop("category", None)
        for key in ("timing_shapes", "timing_weights", "comparison"):
            if not config.get(key):
                # added later: the default leaves the ids of existing tasks as they were
                config.pop(key, None)
        if config.get("memory_margin") == TaskConfig.memory_margin:
            # added later: the default leaves the ids of existing tasks as they were
            config.pop("memory_margin")
        blob = self.reference_source.replace("\r\n", "\n").strip() + "\n" + json.dumps(config, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @classmethod
    def load(cls, path: str | Path, backend: str | None = None, **overrides: Any) -> "Task":
        """Load a task directory or a plain KernelBench file.

        ``backend`` and ``overrides`` (TaskConfig fields, e.g. ``trials=10``)
        replace what the task's config says.
        """
        path = Path(path)
        if not path.exists():
            raise TaskError(f"{path}: no such task file or directory")
        seed = None
        from . import kernelbenchx  # lazy: cycle task -> kernelbenchx -> task

        if path.is_file() and kernelbenchx.is_task_file(path):  # a KernelBench-X file, read as it is
            return kernelbenchx.read_task(path, backend=backend, **overrides)
        if path.is_dir():
            ref_path = path / "reference.py"
            if not ref_path.exists():
                raise TaskError(f"{path}: a task directory needs reference.py (KernelBench format)")
            yaml_path = path / "task.yaml"
            config = load_yaml(TaskConfig, yaml_path) if yaml_path.exists() else TaskConfig()
            if not config.name:
                config.name = path.name
            seed_path = path / "seed.py"
            seed = seed_path.read_text() if seed_path.exists() else None
        else:
            ref_path = path
            config = TaskConfig(name=path.stem)
        data = to_dict(config)
        if backend is not None:
            data["backend"] = backend
        data.update({k: v for k, v in overrides.items() if v is not None})
        config = from_dict(TaskConfig, data)
        return cls(reference_source=ref_path.read_text(), config=config, seed_source=seed, path=str(ref_path))

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "reference_source": self.reference_source,
            "config": to_dict(self.config),
            "seed_source": self.seed_source,
            "path": self.path,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Task":
        return cls(
            reference_source=data["reference_source"],
            config=from_dict(TaskConfig, data.get("config") or {}),
            seed_source=data.get("seed_source"),
            path=data.get("path"),
        )
