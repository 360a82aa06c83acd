# ReLU, correct but deliberately slow: a single program walks the whole tensor
# in 256-element blocks, so one SM does all the work while the rest idle.
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 256


@triton.jit
def relu_serial_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        relu_serial_kernel[(1,)](x, y, x.numel(), BLOCK=BLOCK, num_warps=1)
        return y
