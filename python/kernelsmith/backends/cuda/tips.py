"""The CUDA backend's advice for the system prompt."""

from __future__ import annotations

from ...hardware import HardwareInfo


def cuda_prompt_tips(hw: HardwareInfo) -> str:
    """Advice for the system prompt; the device part from
    :meth:`CudaBackend.hardware_info` (no device name gives the generic part)."""
    tips = [
        "Write CUDA C++ in KernelBench's format: a string `cuda_sources` with your __global__ kernels and host "
        "wrappers taking and returning torch::Tensor, a string `cpp_sources` declaring those wrappers, and "
        "`ext = load_inline(name=..., cpp_sources=..., cuda_sources=..., functions=[...])` at module level; "
        "ModelNew.forward calls ext.<function>(...). Every output must be computed by your kernels.",
        "Launch with kernel<<<grid, block>>>(...) (or <<<grid, block, shared_bytes>>>): launches run on PyTorch's "
        "current stream. Do not create streams, call cuBLAS/cuDNN, or launch through the driver API.",
        "Allocate outputs in the wrapper (torch::empty(sizes, x.options())), check x.is_contiguous() or call "
        ".contiguous(), read sizes at run time (x.size(0), x.numel()): the program is checked on other shapes.",
        "Guard the tail (if (i < n)), use grid-stride loops for large tensors, accumulate reductions in float, "
        "and keep one thread block's shared memory within the device's limit.",
        "Compile errors come back with nvcc's messages at your program's lines; fix exactly those lines. "
        "Tunable launch parameters: `#define BLOCK 256  // tune: [128, 256, 512]` in the CUDA string, or "
        "`THREADS = 256  # tune: [128, 256, 512]` in Python, passed to the wrapper.",
        "No try/except, threads, NumPy or torch compute ops in forward or in the C++ wrappers; torch::empty, "
        "views and .contiguous() are fine.",
    ]
    if hw.name:
        cc = hw.compute_capability or "?"
        sm = hw.compute_units
        smem = hw.properties.get("shared_memory_per_block_optin_kb")
        l2 = hw.properties.get("l2_cache_mb")
        tips.append(
            f"Target: {hw.name} (compute capability {cc}"
            + (f", {sm} SMs" if sm else "")
            + (f", up to {smem} KiB shared memory per block with cudaFuncSetAttribute" if smem else "")
            + (f", {l2} MiB L2" if l2 else "")
            + f", built for {hw.arch or 'its architecture'}). Use 128-256 threads per block and at least "
            + (f"{2 * sm}" if sm else "two blocks per SM")
            + " blocks; vectorised loads (float4) on 16-byte aligned data; for matmuls tile through shared "
            "memory and use tensor cores (mma / wmma with half or bf16 inputs, float accumulation) when the "
            "task's tolerance allows."
        )
    return "\n".join(f"- {t}" for t in tips)
