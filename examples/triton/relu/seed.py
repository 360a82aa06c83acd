import torch
import torch.nn as nn
import triton
import triton.language as tl


# EVOLVE-BLOCK-START
BLOCK = 1024  # tune: pow2(128, 8192)
NUM_WARPS = 4  # tune: [1, 2, 4, 8, 16]


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK, num_warps=NUM_WARPS)
        return y
# EVOLVE-BLOCK-END
