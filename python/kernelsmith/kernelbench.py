"""A result in KernelBench's terms: the field names and units of its
``KernelExecResult`` (``compiled``, ``correctness`` as a bool, ``metadata``,
``runtime`` and ``ref_runtime`` in microseconds with ``*_stats``), so that
scripts written against KernelBench read kernelsmith's evaluations as they
are. ``kernelsmith eval --json --kernelbench`` prints it.

What KernelBench has no field for (hack detection, the speedup's confidence
interval, the timing verdict) is kept under ``metadata`` with kernelsmith's
names rather than dropped.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Union

from .hardware import HardwareInfo
from .result import EvalResult

US_PER_MS = 1000.0


def _us(value: Any) -> float:
    return float(value) * US_PER_MS if isinstance(value, (int, float)) and not isinstance(value, bool) else -1.0


def _stats(side: Mapping[str, Any], hardware: HardwareInfo, device: Optional[str]) -> dict[str, Any]:
    if not side:
        return {}
    out: dict[str, Any] = {
        key: round(_us(side[key]), 3) for key in ("mean", "std", "min", "max", "median") if key in side
    }
    if "n" in side:
        out["num_trials"] = int(side["n"])
    out["hardware"] = hardware.name
    out["device"] = device or ""
    return out


def to_kernelbench(result: Union[EvalResult, Mapping[str, Any]]) -> dict[str, Any]:
    """The KernelBench ``KernelExecResult`` fields of a result (times in us;
    -1.0 when not measured, as KernelBench writes them)."""
    if not isinstance(result, EvalResult):
        result = EvalResult.from_dict(dict(result))
    hardware = HardwareInfo.from_dict(result.hardware)
    device = str(hardware.properties.get("device_index", "") or hardware.name)
    metadata: dict[str, Any] = {"hardware": hardware.name, "device": device}
    checks = result.correctness or {}
    if "trials" in checks:
        passed = checks.get("passed_trials", checks["trials"] if result.correct else 0)
        metadata["correctness_trials"] = f"({passed} / {checks['trials']})"
    if "max_abs_err" in checks:
        metadata["max_difference"] = [str(checks["max_abs_err"])]
    if not result.compiled:
        metadata["compilation_error"] = result.error
    elif result.category in ("runtime", "timeout", "crash", "oom"):
        metadata["runtime_error"] = result.error
        metadata["runtime_error_name"] = result.category
    elif not result.correct:
        metadata["correctness_issue"] = result.error
    metadata["kernelsmith"] = {
        "category": result.category,
        "hacked": result.hacked,
        "hack_reasons": list(result.hack_reasons),
        "speedup": result.speedup,
        "speedup_ci": [result.speedup_ci_low, result.speedup_ci_high],
        "timing_verdict": result.timing_verdict,
        "suspicious": result.suspicious,
    }
    timing = result.timing or {}
    return {
        "compiled": bool(result.compiled),
        "correctness": bool(result.correct and not result.hacked),
        "metadata": metadata,
        "runtime": round(_us(result.runtime_ms), 3) if result.runtime_ms is not None else -1.0,
        "runtime_stats": _stats(timing.get("candidate") or {}, hardware, device),
        "ref_runtime": round(_us(result.ref_runtime_ms), 3) if result.ref_runtime_ms is not None else -1.0,
        "ref_runtime_stats": _stats(timing.get("reference") or {}, hardware, device),
    }
