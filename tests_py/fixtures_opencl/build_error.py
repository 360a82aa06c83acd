# A kernel with a compile error (undeclared identifier): the build log must
# come back as feedback.
import torch
import torch.nn as nn

from kernelsmith import opencl as ocl

SOURCE = r"""
__kernel void softmax_rows(__global const float* x, __global float* y, int rows, int cols) {
    int row = get_global_id(0);
    if (row >= rows) return;
    y[row] = exp(x[row] - row_maximum);
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cols = x.shape[-1]
        rows = x.numel() // cols
        y = torch.empty_like(x)
        ocl.build(SOURCE).softmax_rows(ocl.round_up(rows, 16), 16, x, y, rows, cols, inputs=[0])
        return y
