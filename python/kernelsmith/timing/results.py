"""Result records of the timing harness: plain dataclasses with to_dict()/from_dict()."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

SCHEMA_VERSION = 1

#: verdicts of :func:`kernelsmith.timing.compare`; "rejected" means the
#: candidate's time cannot be trusted (hidden work), whatever its speed.
VERDICTS = ("faster", "slower", "indistinguishable", "rejected")


def verdict_of(low: Optional[float], high: Optional[float]) -> str:
    """The timing verdict a speedup CI implies (1.0x = PyTorch); "" where
    either end is missing."""
    if low is None or high is None:
        return ""
    if low > 1.0:
        return "faster"
    if high < 1.0:
        return "slower"
    return "indistinguishable"


def _from_dict(cls: Any, data: Mapping[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{cls.__name__}.from_dict: unknown keys {unknown}; allowed: {sorted(names)}")
    return cls(**dict(data))


@dataclass
class HiddenWorkCheck:
    """Event time on the timed stream vs. device-synchronized wall time of the
    same launches. Work that finishes after the timed stream's end event (on
    another stream) shows up as wall time the events did not see."""

    event_s: float
    wall_s: float
    overhead_s: float  # wall - event of an empty region (sync and launch latency)
    unexplained_s: float  # wall - overhead - event
    rel_tol: float
    abs_tol_s: float
    suspected: bool
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "HiddenWorkCheck":
        return _from_dict(cls, data)


@dataclass
class Measurement:
    """One timed callable. Times are seconds per call (a sample of several
    launches is divided by launches_per_sample)."""

    median_s: float
    ci_low_s: float
    ci_high_s: float
    rel_half_width: float
    mean_s: float
    stddev_s: float
    cv: float
    mad_s: float
    min_s: float
    max_s: float
    n_samples: int  # kept after outlier rejection
    n_outliers: int
    stop_reason: str  # target_reached | max_samples | time_budget
    elapsed_s: float
    timer: str  # cuda_event | perf_counter | external
    device: str = "cpu"
    launches_per_sample: int = 1
    cuda_graph: Optional[bool] = None  # None: not applicable (CPU, external)
    graph_fallback_reason: str = ""
    l2_flush: bool = False
    input_sets: int = 1
    hidden_work: Optional[HiddenWorkCheck] = None
    suspicious: bool = False
    suspicious_reasons: list[str] = field(default_factory=list)
    gpu_state: dict[str, Any] = field(default_factory=dict)  # clocks/temperature before and after
    samples_s: list[float] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    @property
    def median_ms(self) -> float:
        return self.median_s * 1e3

    @property
    def median_us(self) -> float:
        return self.median_s * 1e6

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Measurement":
        data = dict(data)
        if isinstance(data.get("hidden_work"), Mapping):
            data["hidden_work"] = HiddenWorkCheck.from_dict(data["hidden_work"])
        return _from_dict(cls, data)


@dataclass
class Comparison:
    """Reference vs. candidate measured in alternating pairs. speedup is
    reference time / candidate time (> 1: the candidate is faster)."""

    speedup: float
    speedup_low: float
    speedup_high: float
    rel_half_width: float
    verdict: str  # one of VERDICTS
    stop_reason: str  # target_reached | max_samples | time_budget | decided
    n_pairs: int
    n_outlier_pairs: int
    reference_median_s: float
    candidate_median_s: float
    elapsed_s: float
    timer: str
    device: str = "cpu"
    method: str = "pair_ratio"
    launches_per_sample: int = 1
    reference_cuda_graph: Optional[bool] = None
    candidate_cuda_graph: Optional[bool] = None
    graph_fallback_reasons: dict[str, str] = field(default_factory=dict)
    l2_flush: bool = False
    input_sets: int = 1
    rejected_reason: str = ""
    hidden_work: dict[str, HiddenWorkCheck] = field(default_factory=dict)  # "reference"/"candidate"
    suspicious: bool = False
    suspicious_reasons: list[str] = field(default_factory=list)
    gpu_state: dict[str, Any] = field(default_factory=dict)
    # per-side summaries of the paired samples (seconds per call): median with
    # CI, mean, stddev, cv, mad, min, max, n_samples, n_outliers
    reference_stats: dict[str, Any] = field(default_factory=dict)
    candidate_stats: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @property
    def decided(self) -> bool:
        return self.verdict in ("faster", "slower")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Comparison":
        data = dict(data)
        hw = data.get("hidden_work") or {}
        data["hidden_work"] = {
            k: (HiddenWorkCheck.from_dict(v) if isinstance(v, Mapping) else v) for k, v in hw.items()
        }
        return _from_dict(cls, data)
