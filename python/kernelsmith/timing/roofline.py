"""Roofline sanity check: a measured time below what the hardware can
possibly do marks the result as suspicious (a cached output, skipped work,
hidden streams), not as fast.

floor = max(bytes_moved / peak_bandwidth, flops / peak_flops). The peaks are
vendor datasheet figures for dense math (the highest rate any precision of
that dtype class could reach, so the floor is a true lower bound). The
bandwidth floor is only applied when the working set does not fit in L2: a
small working set legitimately runs from cache between back-to-back launches.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence


@dataclass(frozen=True)
class HardwarePeak:
    name: str
    bandwidth_bytes_s: float  # DRAM (HBM/GDDR)
    l2_bytes: int
    # dense peaks per dtype class; fp32 includes TF32 tensor cores, because a
    # candidate may use them and the floor must stay a lower bound
    flops: Mapping[str, float] = field(default_factory=dict)

    def peak_flops(self, dtype: str) -> float:
        if dtype not in self.flops:
            raise ValueError(f"no FLOP peak for dtype '{dtype}' on {self.name}; known: {sorted(self.flops)}")
        return self.flops[dtype]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flops"] = dict(self.flops)
        return d


# Datasheet figures (dense, no sparsity). Keys are matched as substrings of
# torch.cuda.get_device_name() in this order.
PEAKS: dict[str, HardwarePeak] = {
    "H200": HardwarePeak("H200", 4.8e12, 50 * 2**20,
                         {"fp64": 67e12, "fp32": 494.7e12, "fp16": 989.4e12, "bf16": 989.4e12, "fp8": 1978.9e12}),
    "H100 PCIe": HardwarePeak("H100 PCIe", 2.0e12, 50 * 2**20,
                              {"fp64": 51e12, "fp32": 378e12, "fp16": 756e12, "bf16": 756e12, "fp8": 1513e12}),
    "H100": HardwarePeak("H100 SXM", 3.35e12, 50 * 2**20,
                         {"fp64": 67e12, "fp32": 494.7e12, "fp16": 989.4e12, "bf16": 989.4e12, "fp8": 1978.9e12}),
    "B200": HardwarePeak("B200", 8.0e12, 126 * 2**20,
                         {"fp64": 40e12, "fp32": 1100e12, "fp16": 2250e12, "bf16": 2250e12, "fp8": 4500e12}),
    "A100-SXM4-80GB": HardwarePeak("A100 80GB SXM", 2.039e12, 40 * 2**20,
                                   {"fp64": 19.5e12, "fp32": 156e12, "fp16": 312e12, "bf16": 312e12}),
    "A100": HardwarePeak("A100 40GB", 1.555e12, 40 * 2**20,
                         {"fp64": 19.5e12, "fp32": 156e12, "fp16": 312e12, "bf16": 312e12}),
    "L40S": HardwarePeak("L40S", 0.864e12, 96 * 2**20,
                         {"fp32": 183e12, "fp16": 362e12, "bf16": 362e12, "fp8": 733e12}),
    "4090": HardwarePeak("RTX 4090", 1.008e12, 72 * 2**20,
                         {"fp32": 165e12, "fp16": 330e12, "bf16": 330e12, "fp8": 660e12}),
}


def lookup_peak(device_name: str) -> Optional[HardwarePeak]:
    """The table entry whose key occurs in ``device_name``, or None."""
    for key, peak in PEAKS.items():
        if key.lower() in device_name.lower():
            return peak
    return None


def dtype_class(dtype: Any) -> str:
    """'fp32', 'fp16', 'bf16', 'fp64' or 'fp8' from a torch dtype or a string."""
    s = str(dtype).replace("torch.", "")
    table = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16",
             "bfloat16": "bf16", "float64": "fp64", "double": "fp64"}
    if s in table:
        return table[s]
    if s.startswith("float8"):
        return "fp8"
    if s in ("fp32", "fp16", "bf16", "fp64", "fp8"):
        return s
    return "fp32"  # integer and other work: compare against fp32 rates


@dataclass
class RooflineCheck:
    floor_s: float
    bandwidth_floor_s: float
    compute_floor_s: float
    bandwidth_floor_applied: bool
    measured_s: float
    tolerance: float
    suspicious: bool
    reason: str
    hardware: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def roofline_check(
    measured_s: float,
    *,
    bytes_moved: float,
    flops: float,
    peak: HardwarePeak,
    dtype: Any = "fp32",
    tolerance: float = 0.9,
) -> RooflineCheck:
    """Flag ``measured_s`` below ``tolerance * floor``. tolerance < 1 leaves
    room for datasheet rounding and clock boost above the nominal figure."""
    if measured_s <= 0:
        raise ValueError(f"roofline_check: measured_s must be > 0, got {measured_s}")
    if bytes_moved < 0 or flops < 0:
        raise ValueError(f"roofline_check: bytes_moved and flops must be >= 0, got {bytes_moved}, {flops}")
    applied = bytes_moved > peak.l2_bytes
    bw_floor = bytes_moved / peak.bandwidth_bytes_s
    compute_floor = flops / peak.peak_flops(dtype_class(dtype)) if flops else 0.0
    floor = max(bw_floor if applied else 0.0, compute_floor)
    suspicious = measured_s < tolerance * floor
    reason = ""
    if suspicious:
        which = "memory bandwidth" if (applied and bw_floor >= compute_floor) else "compute"
        reason = (
            f"measured {measured_s * 1e6:.2f} us is below the {which} floor of "
            f"{floor * 1e6:.2f} us on {peak.name} ({bytes_moved:.3g} bytes, {flops:.3g} FLOPs)"
        )
    return RooflineCheck(floor, bw_floor, compute_floor, applied, measured_s, tolerance,
                         suspicious, reason, peak.name)


@dataclass
class WorkEstimate:
    bytes_moved: int  # inputs + outputs, each counted once
    flops: int  # 0 when no counter is available
    dtype: str
    flop_counter: str  # "torch.utils.flop_counter" | "none"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tensors(obj: Any) -> list:
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


def estimate_work(fn: Callable[..., Any], args: Sequence[Any]) -> WorkEstimate:
    """Bytes moved (inputs + outputs; parameters of an nn.Module count as
    inputs) and FLOPs of one call of a *reference* ``fn(*args)``. Run it on
    the reference only: it executes fn once, in this process."""
    import torch

    flop_counter = "none"
    flops = 0
    try:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            with torch.no_grad():
                out = fn(*args)
        flops = int(counter.get_total_flops())
        flop_counter = "torch.utils.flop_counter"
    except ImportError:
        with torch.no_grad():
            out = fn(*args)
    ins = _tensors(list(args))
    if isinstance(fn, torch.nn.Module):
        ins += list(fn.parameters()) + list(fn.buffers())
    outs = _tensors(out)
    seen: set = set()
    total = 0
    for t in ins + outs:
        key = (t.data_ptr(), t.numel(), t.dtype)
        if key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    dtypes = [t.dtype for t in ins if t.is_floating_point()]
    return WorkEstimate(total, flops, dtype_class(dtypes[0]) if dtypes else "fp32", flop_counter)
