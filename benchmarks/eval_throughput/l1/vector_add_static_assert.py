# Compile error (bad constexpr): the kernel asserts at compile time that its
# block fits one pass of 8 warps, and the launch asks for a larger one.
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 8192


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK <= 2048, "BLOCK must be at most 2048 (8 elements per thread of 8 warps)")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(a)
        add_kernel[(triton.cdiv(out.numel(), BLOCK),)](a, b, out, out.numel(), BLOCK=BLOCK, num_warps=8)
        return out
