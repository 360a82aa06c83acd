# Runtime error: forward views each row as groups of 4 columns for vector
# loads, which fails (RuntimeError) for a width that is not a multiple of 4.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows, cols = x.shape
        x4 = x.contiguous().view(rows, cols // 4, 4)
        y = torch.empty_like(x4)
        softmax_kernel[(rows,)](x4, y, cols, cols, BLOCK=triton.next_power_of_2(cols), num_warps=4)
        return y.view(rows, cols)
