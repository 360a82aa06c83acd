"""The reward of one completion, as a pure function of its evaluation.

reward = shaped(speedup over the parent) [+ correct_bonus]   when correct
         [+ peak_weight * fraction of peak + coverage_weight * coverage]
       = the penalty of the failure                          otherwise

The speedup paid follows the evaluator's confidence interval (``ci``): by
default a speedup whose interval contains 1 is paid as 1, so timing noise
does not rank completions that are equally fast.

Speedup over the parent is ``parent_runtime_ms / runtime_ms``. When no parent
runtime is known (or with ``baseline="relative"``), it is the child's speedup over
the reference divided by the parent's speedup over the reference: each was
measured next to the reference in its own evaluation, which cancels most of
the difference between the machine that recorded the parent and the one
scoring the child.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from ..config import ConfigError
from ..result import EvalResult
from ..config import from_dict

SHAPINGS = ("linear", "log", "log2")
BASELINES = ("auto", "runtime", "relative")
CI_MODES = ("snap", "lower", "point")
GROUP_MODES = ("independent", "shared")

#: statuses a reward can have (edit failures come from applying the completion)
#: "harness-error": the task's reference failed, the program was not judged;
#: its reward is 0.0 and a trainer should mask the sample (not the model's doing)
STATUSES = (
    "correct",
    "edit-failed",
    "compile-failed",
    "runtime-error",
    "incorrect",
    "hacked",
    "untimed",
    "harness-error",
)


@dataclass
class RewardConfig:
    #: speedup term: linear (s), log (ln s) or log2 (log2 s)
    shaping: str = "linear"
    #: clip the shaped speedup term into [clip_min, clip_max]; None = no bound
    clip_min: Optional[float] = None
    clip_max: Optional[float] = 10.0
    #: added to the reward of every correct completion
    correct_bonus: float = 0.0
    #: penalties (rewards of failures); ordered so that getting further is better
    edit_failed: float = -1.0
    compile_failed: float = -0.5
    runtime_error: float = -0.3  # runtime error, timeout, crash, out of memory
    incorrect: float = -0.2
    hacked: float = -1.0
    #: a correct completion without timing (timing disabled or failed)
    untimed: float = 0.0
    #: "runtime": parent_runtime_ms / runtime_ms; "relative": ratio of the
    #: two speedups over the reference (use it when the parent was timed on
    #: another machine); "auto": runtime when the parent's runtime is known,
    #: else relative
    baseline: str = "auto"
    #: how the evaluator's confidence interval of the speedup is used:
    #: "snap" (a speedup over the parent whose interval contains 1 counts as
    #: exactly 1: within noise, the completion is as fast as its parent),
    #: "lower" (the interval's lower end: only a speedup the measurement
    #: supports is paid), "point" (the point estimate, ignoring the interval)
    ci: str = "snap"
    #: how a batch's completions of the same task and parent are timed:
    #: "independent" (each against the reference measured in its own
    #: evaluation), or "shared" (GRPO groups: after the evaluations, the
    #: group's correct completions and the parent are re-timed head to head
    #: in one worker, on the same inputs, against one reference, and the
    #: speedup over the parent is the ratio of those runtimes; one extra
    #: evaluation per group)
    group: str = "independent"
    #: off by default. Added to a correct completion's reward: this weight
    #: times the fraction of the device's peak its timed call reached, the
    #: bound that applies (EvalResult.speed_of_light: bandwidth for a
    #: memory-bound call, FLOP/s for a compute-bound one); nothing where the
    #: work or the peaks could not be counted
    peak_weight: float = 0.0
    #: off by default. Added to a correct completion's reward: this weight
    #: times the census's coverage, the share of forward's device time spent
    #: in the program's own kernels (EvalResult.coverage), against "lazy
    #: optimization" (a kernel for the easy part, PyTorch for the rest: Dr.
    #: Kernel's profiling-based reward); nothing where the census measured none
    coverage_weight: float = 0.0

    def __post_init__(self) -> None:
        for key in ("peak_weight", "coverage_weight"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"{key} must be a finite number >= 0, got {value!r}")
        if self.shaping not in SHAPINGS:
            raise ConfigError(f"shaping must be one of {', '.join(SHAPINGS)}, got '{self.shaping}'")
        if self.baseline not in BASELINES:
            raise ConfigError(f"baseline must be one of {', '.join(BASELINES)}, got '{self.baseline}'")
        if self.group not in GROUP_MODES:
            raise ConfigError(f"group must be one of {', '.join(GROUP_MODES)}, got '{self.group}'")
        if self.ci not in CI_MODES:
            raise ConfigError(f"ci must be one of {', '.join(CI_MODES)}, got '{self.ci}'")
        if self.clip_min is not None and self.clip_max is not None and self.clip_min > self.clip_max:
            raise ConfigError(f"clip_min ({self.clip_min}) must be <= clip_max ({self.clip_max})")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "RewardConfig":
        return from_dict(cls, dict(data or {}), "reward")


@dataclass
class Reward:
    """A reward with how it came about."""

    reward: float
    status: str
    speedup: Optional[float] = None  # over the parent, as paid (after the ci rule)
    speedup_ci: Optional[tuple[float, float]] = None  # its confidence interval, when measured
    runtime_ms: Optional[float] = None
    parent_runtime_ms: Optional[float] = None
    detail: str = ""
    result: Optional[dict[str, Any]] = field(default=None, repr=False)
    #: the terms of RewardConfig.peak_weight / coverage_weight, when measured
    fraction_of_peak: Optional[float] = None
    coverage: Optional[float] = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _positive(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value > 0 and math.isfinite(value) else None


def shape(speedup: float, config: RewardConfig) -> float:
    if config.shaping == "log":
        value = math.log(speedup)
    elif config.shaping == "log2":
        value = math.log2(speedup)
    else:
        value = speedup
    if config.clip_min is not None:
        value = max(config.clip_min, value)
    if config.clip_max is not None:
        value = min(config.clip_max, value)
    return value


def speedup_ratio(
    runtime_ms: Any, speedup: Any, parent_runtime_ms: Any, parent_speedup: Any, baseline: str = "auto"
) -> Optional[float]:
    """The one rule for a speedup over the parent, from a child's runtime and
    speedup over the reference and its parent's: the parent's runtime over
    the child's when both were measured (``baseline`` auto or runtime), else
    the ratio of the two speedups over the reference, each measured next to
    the reference in its own evaluation (auto or relative). None when
    neither pair is known (numbers that are not positive and finite count
    as unknown). The reward and the exports both call it."""
    runtime, child_speedup = _positive(runtime_ms), _positive(speedup)
    parent_rt, parent_sp = _positive(parent_runtime_ms), _positive(parent_speedup)
    if baseline in ("auto", "runtime") and parent_rt and runtime:
        return parent_rt / runtime
    if baseline in ("auto", "relative") and parent_sp and child_speedup:
        return child_speedup / parent_sp
    return None


def speedup_over_parent(
    result: EvalResult, parent_runtime_ms: Optional[float], parent_speedup: Optional[float], baseline: str = "auto"
) -> Optional[float]:
    """A result's speedup over its parent (:func:`speedup_ratio`)."""
    return speedup_ratio(result.runtime_ms, result.speedup, parent_runtime_ms, parent_speedup, baseline)


def speedup_interval(result: EvalResult, speedup: float) -> Optional[tuple[float, float]]:
    """The confidence interval of a speedup over the parent.

    The evaluator measures the child against the reference in alternation and
    reports the interval of that speedup; the parent's runtime is a fixed
    number here, so the ratio to the parent carries the same relative
    interval."""
    point, low, high = _positive(result.speedup), _positive(result.speedup_ci_low), _positive(result.speedup_ci_high)
    if not (point and low and high) or not low <= point <= high:
        return None
    return speedup * low / point, speedup * high / point


def apply_ci(speedup: float, interval: Optional[tuple[float, float]], mode: str) -> float:
    if interval is None or mode == "point":
        return speedup
    low, high = interval
    if mode == "lower":
        return low
    return 1.0 if low <= 1.0 <= high else speedup


def compute_reward(
    result: Union[EvalResult, Mapping[str, Any], None],
    parent_runtime_ms: Optional[float] = None,
    config: Optional[RewardConfig] = None,
    *,
    parent_speedup: Optional[float] = None,
    edit_error: Optional[str] = None,
) -> Reward:
    """Reward of one evaluated completion (pure: no I/O, no evaluation).

    ``result`` is the EvalResult (or its dict), None when the completion
    could not be applied to the parent (pass the edit error). The parent is
    described by its runtime and/or its speedup over the reference (see
    :class:`RewardConfig` ``baseline``).

    The status comes from the result's own fields (``category``,
    ``compiled``, ``hacked``, ``correct``), which the evaluator sets where
    the error happened; the error text is never read to decide it (records
    written before the evaluator did so are normalised when loaded:
    :meth:`EvalResult.from_dict`).
    """
    config = config or RewardConfig()
    if result is None or edit_error is not None:
        return Reward(config.edit_failed, "edit-failed", detail=(edit_error or "no program")[:2000])
    if isinstance(result, Mapping):
        result = EvalResult.from_dict(dict(result))
    brief = result.to_dict()
    if result.category == "harness":
        return Reward(0.0, "harness-error", detail=result.error[-2000:], result=brief)
    if result.hacked or result.category == "hacked":
        return Reward(config.hacked, "hacked", detail="; ".join(result.hack_reasons)[:2000], result=brief)
    if not result.compiled or result.category == "compile":
        return Reward(config.compile_failed, "compile-failed", detail=result.error[-2000:], result=brief)
    if result.category in ("runtime", "timeout", "crash", "oom"):
        return Reward(
            config.runtime_error, "runtime-error", detail=f"{result.category}: {result.error[-2000:]}", result=brief
        )
    if not result.correct:
        return Reward(config.incorrect, "incorrect", detail=result.error[-2000:], result=brief)
    extra, terms = profile_terms(result, config)
    speedup = speedup_over_parent(result, parent_runtime_ms, parent_speedup, config.baseline)
    if speedup is None:
        return Reward(
            config.untimed + config.correct_bonus + extra,
            "untimed",
            runtime_ms=result.runtime_ms,
            parent_runtime_ms=parent_runtime_ms,
            detail="correct, but no runtime to compare",
            result=brief,
            fraction_of_peak=terms["fraction_of_peak"],
            coverage=terms["coverage"],
        )
    interval = speedup_interval(result, speedup)
    paid = apply_ci(speedup, interval, config.ci)
    return Reward(
        shape(paid, config) + config.correct_bonus + extra,
        "correct",
        speedup=paid,
        speedup_ci=interval,
        runtime_ms=result.runtime_ms,
        parent_runtime_ms=parent_runtime_ms,
        result=brief,
        fraction_of_peak=terms["fraction_of_peak"],
        coverage=terms["coverage"],
    )


def profile_terms(result: EvalResult, config: RewardConfig) -> tuple[float, dict[str, Optional[float]]]:
    """The profiling terms of a correct completion's reward (both off by
    default): ``peak_weight`` x the fraction of the bound that applies and
    ``coverage_weight`` x the census's coverage, each only where measured.
    Returns (their sum, the measured values)."""
    sol = result.speed_of_light or {}
    fraction = _positive(sol.get("fraction")) if sol.get("counted") else None
    coverage = result.coverage
    coverage = (
        float(coverage)
        if isinstance(coverage, (int, float))
        and not isinstance(coverage, bool)
        and math.isfinite(coverage)
        and coverage >= 0
        else None
    )
    extra = 0.0
    if config.peak_weight and fraction is not None:
        extra += config.peak_weight * fraction
    if config.coverage_weight and coverage is not None:
        extra += config.coverage_weight * coverage
    return extra, {"fraction_of_peak": fraction, "coverage": coverage}
