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
    # where the figures come from (a datasheet's address, or how they were
    # measured): a fraction of peak is only as good as its peak
    source: str = ""

    def peak_flops(self, dtype: str) -> float:
        if dtype not in self.flops:
            raise ValueError(f"no FLOP peak for dtype '{dtype}' on {self.name}; known: {sorted(self.flops)}")
        return self.flops[dtype]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flops"] = dict(self.flops)
        return d


_H100_SOURCE = (
    "NVIDIA H100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h100/ "
    "(dense figures: the datasheet's sparsity figures halved)"
)
_H200_SOURCE = (
    "NVIDIA H200 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h200/ "
    "(dense figures: the datasheet's sparsity figures halved)"
)

# Datasheet figures (dense, no sparsity). Keys are matched as substrings of
# torch.cuda.get_device_name() in this order.
PEAKS: dict[str, HardwarePeak] = {
    "H200": HardwarePeak(
        "H200",
        4.8e12,
        50 * 2**20,
        {"fp64": 67e12, "fp32": 494.7e12, "fp16": 989.4e12, "bf16": 989.4e12, "fp8": 1978.9e12},
        source=_H200_SOURCE,
    ),
    "H100 PCIe": HardwarePeak(
        "H100 PCIe",
        2.0e12,
        50 * 2**20,
        {"fp64": 51e12, "fp32": 378e12, "fp16": 756e12, "bf16": 756e12, "fp8": 1513e12},
        source=_H100_SOURCE + ", H100 PCIe column",
    ),
    "H100": HardwarePeak(
        "H100 SXM",
        3.35e12,
        50 * 2**20,
        {"fp64": 67e12, "fp32": 494.7e12, "fp16": 989.4e12, "bf16": 989.4e12, "fp8": 1978.9e12},
        source=_H100_SOURCE + ", H100 SXM column",
    ),
    "B200": HardwarePeak(
        "B200",
        8.0e12,
        126 * 2**20,
        {"fp64": 40e12, "fp32": 1100e12, "fp16": 2250e12, "bf16": 2250e12, "fp8": 4500e12},
        source="NVIDIA DGX B200 datasheet, https://www.nvidia.com/en-us/data-center/dgx-b200/ (per GPU, dense)",
    ),
    "A100-SXM4-80GB": HardwarePeak(
        "A100 80GB SXM",
        2.039e12,
        40 * 2**20,
        {"fp64": 19.5e12, "fp32": 156e12, "fp16": 312e12, "bf16": 312e12},
        source="NVIDIA A100 datasheet, https://www.nvidia.com/en-us/data-center/a100/",
    ),
    "A100": HardwarePeak(
        "A100 40GB",
        1.555e12,
        40 * 2**20,
        {"fp64": 19.5e12, "fp32": 156e12, "fp16": 312e12, "bf16": 312e12},
        source="NVIDIA A100 datasheet, https://www.nvidia.com/en-us/data-center/a100/",
    ),
    "L40S": HardwarePeak(
        "L40S",
        0.864e12,
        96 * 2**20,
        {"fp32": 183e12, "fp16": 362e12, "bf16": 362e12, "fp8": 733e12},
        source="NVIDIA L40S datasheet, https://www.nvidia.com/en-us/data-center/l40s/",
    ),
    "4090": HardwarePeak(
        "RTX 4090",
        1.008e12,
        72 * 2**20,
        {"fp32": 165e12, "fp16": 330e12, "bf16": 330e12, "fp8": 660e12},
        source="NVIDIA Ada GPU architecture whitepaper, "
        "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
    ),
}

#: Host CPUs (PoCL's OpenCL device, the Triton interpreter, PyTorch on the
#: host), matched as substrings of the CPU's model name (/proc/cpuinfo).
#: No vendor publishes a figure for a virtual machine's share of a socket,
#: so these are measured or declared, and their source says which.
HOST_PEAKS: dict[str, HardwarePeak] = {
    "AMD EPYC": HardwarePeak(
        "AMD EPYC host (2 vCPU)",
        6.4e9,
        32 * 2**20,
        {"fp32": 156.5e9, "fp64": 78.2e9},
        source="bandwidth measured on the development host (2-vCPU KVM guest, AMD EPYC family 25): "
        "torch copy of 256 MiB fp32, 2 threads, best of 10, read+write bytes = 6.4 GB/s; "
        "FLOPs declared: 2 cores x 2.445 GHz x 32 fp32 FLOP/cycle (two 256-bit FMA pipes), "
        "half that for fp64. Another host of this model name differs: measure it "
        "(kernelsmith.timing.sol.measure_host_peak)",
    ),
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
    table = {
        "float32": "fp32",
        "float": "fp32",
        "float16": "fp16",
        "half": "fp16",
        "bfloat16": "bf16",
        "float64": "fp64",
        "double": "fp64",
    }
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
    return RooflineCheck(floor, bw_floor, compute_floor, applied, measured_s, tolerance, suspicious, reason, peak.name)


@dataclass
class WorkEstimate:
    bytes_moved: int  # inputs + outputs, each counted once
    flops: int  # 0 when no counter is available
    dtype: str
    flop_counter: str  # "torch.utils.flop_counter" | "none"
    # ops that ran and do arithmetic the FLOP counter has no formula for
    # (decompositions, FFTs, ...): with any of them, ``flops`` undercounts
    # and the FLOP rate cannot be stated (speed_of_light says so)
    uncounted_ops: list = field(default_factory=list)

    @property
    def flops_known(self) -> bool:
        return self.flop_counter != "none" and not self.uncounted_ops

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: name prefixes of aten ops whose arithmetic is far above one operation per
#: byte and that torch.utils.flop_counter does not count (checked against its
#: registry at run time: an op it learns to count leaves this list's effect)
HEAVY_UNCOUNTED_PREFIXES = (
    "linalg_",
    "_linalg_",
    "cholesky",
    "triangular_solve",
    "lu_",
    "_lu_",
    "qr",
    "geqrf",
    "orgqr",
    "ormqr",
    "svd",
    "_svd",
    "eig",
    "_eig",
    "symeig",
    "inverse",
    "det",
    "logdet",
    "slogdet",
    "lstsq",
    "matrix_exp",
    "_fft_",
    "fft_",
    "stft",
    "istft",
    "cdist",
    "_cdist",
    "_euclidean_dist",
    "_cholesky",
    "cholesky_inverse",
    "cholesky_solve",
    "_linalg_solve",
    "linalg_solve",
    "ldl",
    "_weight_norm",
    "_convolution_double",
    "cudnn_convolution",
    "miopen_convolution",
    "mkldnn_convolution",
    "_nnpack_spatial_convolution",
    "slow_conv",
    "thnn_conv",
    "_slow_conv",
    "conv_depthwise",
    "_conv_depthwise",
)


def _uncounted(names: set[str], registry: Any) -> list[str]:
    counted = {getattr(k, "__name__", str(k)).split(".")[0] for k in registry}
    heavy = [n for n in names if n.startswith(HEAVY_UNCOUNTED_PREFIXES) and n not in counted]
    return sorted(f"aten.{n}" for n in heavy)


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
    the reference only: it executes fn once, in this process. The aten ops
    that ran are noted: those with much arithmetic that the FLOP counter
    cannot count make the FLOPs unknown (``uncounted_ops``)."""
    import torch

    flop_counter = "none"
    flops = 0
    uncounted: list[str] = []
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.flop_counter import FlopCounterMode, flop_registry

        seen: set[str] = set()

        # lazy: optional dependency (ImportError handled here)
        from .._torch_modes import flop_counter_without_dynamo, without_dynamo

        @without_dynamo  # and the counter's own mode: a worker's cold start without torch._dynamo (3.6 s)
        class _OpNames(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                seen.add(func.overloadpacket.__name__)
                return func(*args, **(kwargs or {}))

        flop_counter_without_dynamo()
        with FlopCounterMode(display=False) as counter:
            with _OpNames():
                with torch.no_grad():
                    out = fn(*args)
        flops = int(counter.get_total_flops())
        flop_counter = "torch.utils.flop_counter"
        uncounted = _uncounted(seen, flop_registry)
    except ImportError:
        with torch.no_grad():
            out = fn(*args)
    ins = _tensors(list(args))
    if isinstance(fn, torch.nn.Module):
        ins += list(fn.parameters()) + list(fn.buffers())
    outs = _tensors(out)
    seen_ptr: set = set()
    total = 0
    for t in ins + outs:
        key = (t.data_ptr(), t.numel(), t.dtype)
        if key in seen_ptr:
            continue
        seen_ptr.add(key)
        total += t.numel() * t.element_size()
    dtypes = [t.dtype for t in ins if t.is_floating_point()]
    return WorkEstimate(total, flops, dtype_class(dtypes[0]) if dtypes else "fp32", flop_counter, uncounted)
