"""Speed of light: how far a timed program is from the hardware's limit.

From the reference's work (bytes moved and FLOPs, :func:`estimate_work`)
and a measured time, :func:`speed_of_light` gives the achieved bandwidth and
FLOP rate, their fractions of the device's peaks (:data:`roofline.PEAKS`,
:data:`roofline.HOST_PEAKS`, each with its source), the arithmetic intensity
against the ridge point (peak FLOPs / peak bandwidth), and so the bound that
applies: memory below the ridge, compute at or above it. The fraction that
matters is the one of the bound that applies.

Nothing is guessed: without a work estimate or a peak table entry the result
says the work "cannot be counted" and why; when the FLOP counter does not
know an op with much arithmetic (a decomposition, an FFT), the bandwidth is
still stated (the bytes are counted) but the FLOP rate and the bound are not.

The bytes are the inputs, outputs and parameters, each once: a floor on what
any program must move, not what a particular kernel moves (a kernel that
re-reads its input from DRAM moves more and is credited with less).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from .roofline import HOST_PEAKS, HardwarePeak, WorkEstimate, dtype_class, lookup_peak
from ..hardware import HardwareInfo

#: what :attr:`SpeedOfLight.method` says when the work was counted
BYTES_METHOD = "bytes: inputs, outputs and parameters of one reference call, each once"

#: bounds
BOUNDS = ("memory", "compute", "unknown")


@dataclass
class SpeedOfLight:
    """A timed program against its device's peaks (rates per second)."""

    #: False: the work or the peaks are unknown; ``reason`` says which
    counted: bool = False
    reason: str = ""
    device: str = ""
    peak_source: str = ""
    runtime_ms: Optional[float] = None
    bytes_moved: Optional[int] = None
    #: None when the FLOPs cannot be counted (see uncounted_ops)
    flops: Optional[int] = None
    dtype: str = ""
    #: how the work was counted
    method: str = ""
    uncounted_ops: list[str] = field(default_factory=list)
    achieved_bytes_per_s: Optional[float] = None
    achieved_flops_per_s: Optional[float] = None
    peak_bytes_per_s: Optional[float] = None
    peak_flops_per_s: Optional[float] = None
    bandwidth_fraction: Optional[float] = None
    compute_fraction: Optional[float] = None
    #: FLOPs per byte, and the device's ridge point (peak FLOPs / peak bytes)
    arithmetic_intensity: Optional[float] = None
    ridge_point: Optional[float] = None
    #: "memory", "compute", or "unknown" (FLOPs not countable)
    bound: str = "unknown"
    #: the fraction of the bound that applies (None when the bound is unknown)
    fraction: Optional[float] = None
    #: the same fraction for the reference's own time
    reference_fraction: Optional[float] = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Optional[Mapping[str, Any]]) -> "SpeedOfLight":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in names})


def speed_of_light(
    runtime_s: float,
    work: Optional[WorkEstimate],
    peak: Optional[HardwarePeak],
    *,
    reference_s: Optional[float] = None,
    device: str = "",
) -> SpeedOfLight:
    """The achieved rates of a call that took ``runtime_s`` and did ``work``,
    against ``peak`` (pure arithmetic; see the module docstring)."""
    if peak is None:
        return SpeedOfLight(
            reason=f"cannot be counted: no peak figures for device '{device}'",
            device=device,
            bytes_moved=int(work.bytes_moved) if work is not None else None,
            dtype=work.dtype if work is not None else "",
        )
    if work is None:
        return SpeedOfLight(
            reason="cannot be counted: no estimate of the work (bytes, FLOPs) was made",
            device=peak.name,
            peak_source=peak.source,
        )
    if not runtime_s or runtime_s <= 0:
        return SpeedOfLight(reason="cannot be counted: no positive time", device=peak.name, peak_source=peak.source)
    dtype = dtype_class(work.dtype)
    sol = SpeedOfLight(
        counted=True,
        device=peak.name,
        peak_source=peak.source,
        runtime_ms=runtime_s * 1e3,
        bytes_moved=int(work.bytes_moved),
        dtype=dtype,
        uncounted_ops=list(work.uncounted_ops),
        peak_bytes_per_s=float(peak.bandwidth_bytes_s),
    )
    sol.achieved_bytes_per_s = work.bytes_moved / runtime_s
    sol.bandwidth_fraction = sol.achieved_bytes_per_s / peak.bandwidth_bytes_s
    peak_flops = peak.flops.get(dtype)
    if work.flop_counter == "none":
        sol.method = BYTES_METHOD + "; FLOPs: no counter available"
        sol.reason = "FLOPs cannot be counted: torch.utils.flop_counter is not available"
        return sol
    sol.method = (
        BYTES_METHOD + f"; FLOPs: {work.flop_counter} (matmuls, convolutions, attention; elementwise ops count 0)"
    )
    if work.uncounted_ops:
        sol.reason = (
            "FLOPs cannot be counted: the FLOP counter does not know "
            + ", ".join(work.uncounted_ops)
            + "; the bound is not stated"
        )
        return sol
    sol.flops = int(work.flops)
    sol.achieved_flops_per_s = work.flops / runtime_s
    if peak_flops:
        sol.peak_flops_per_s = float(peak_flops)
        sol.compute_fraction = sol.achieved_flops_per_s / peak_flops
        sol.ridge_point = peak_flops / peak.bandwidth_bytes_s
    sol.arithmetic_intensity = work.flops / work.bytes_moved if work.bytes_moved else None
    if sol.ridge_point is None:
        sol.reason = f"no {dtype} FLOP peak for {peak.name}: the bound is not stated"
        return sol
    if sol.arithmetic_intensity is None:
        sol.reason = "no bytes counted: the bound is not stated"
        return sol
    sol.bound = "compute" if sol.arithmetic_intensity >= sol.ridge_point else "memory"
    sol.fraction = sol.compute_fraction if sol.bound == "compute" else sol.bandwidth_fraction
    if reference_s and reference_s > 0 and sol.fraction is not None:
        sol.reference_fraction = sol.fraction * runtime_s / reference_s
    return sol


def host_cpu_name() -> str:
    """The host CPU's model name (/proc/cpuinfo), "" where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def lookup_host_peak(cpu_name: Optional[str] = None) -> Optional[HardwarePeak]:
    """The :data:`HOST_PEAKS` entry whose key occurs in the CPU's model name."""
    name = (cpu_name if cpu_name is not None else host_cpu_name()).lower()
    for key, peak in HOST_PEAKS.items():
        if key.lower() in name:
            return peak
    return None


def peak_for(hardware: Any) -> tuple[Optional[HardwarePeak], str]:
    """(peak figures, device name) for a result's hardware (a HardwareInfo or
    its dict): a GPU by its name, a CPU device or the Triton interpreter by
    the host CPU's model name. ``KERNELSMITH_SOL_DEVICE`` names a table entry
    to use instead (a card whose name the table does not match)."""
    hw = HardwareInfo.of(hardware)
    forced = os.environ.get("KERNELSMITH_SOL_DEVICE", "")
    if forced:
        return lookup_peak(forced) or lookup_host_peak(forced), forced
    if hw.kind in ("cpu", "interpreter") or (not hw.kind and not hw.name):
        cpu = host_cpu_name()
        return lookup_host_peak(cpu), cpu or hw.name
    return lookup_peak(hw.name), hw.name


def measure_host_peak(threads: Optional[int] = None, mib: int = 256) -> dict[str, float]:
    """This host's copy bandwidth (bytes/s, read + write) and fp32 matmul
    rate (FLOP/s) through PyTorch, best of several: figures to declare in
    :data:`HOST_PEAKS` for a host the table does not know."""
    import time

    import torch

    if threads:
        torch.set_num_threads(int(threads))
    a = torch.rand(mib * 2**20 // 4)
    b = torch.empty_like(a)
    best = float("inf")
    for _ in range(10):
        t0 = time.perf_counter()
        b.copy_(a)
        best = min(best, time.perf_counter() - t0)
    m = torch.rand(2048, 2048)
    best_mm = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(m, m)
        best_mm = min(best_mm, time.perf_counter() - t0)
    return {"bandwidth_bytes_s": 2 * a.numel() * 4 / best, "fp32_flops": 2 * 2048**3 / best_mm}


__all__ = [
    "BOUNDS",
    "SpeedOfLight",
    "host_cpu_name",
    "lookup_host_peak",
    "measure_host_peak",
    "peak_for",
    "speed_of_light",
]
