# OpenCL build failure: a vector initialises a scalar (float from float4), which
# the OpenCL C compiler rejects; the build log is the feedback.
import torch
import torch.nn as nn

from kernelsmith import opencl as ocl

SOURCE = r"""
__kernel void softmax_rows(__global const float* x, __global float* y, int rows, int cols) {
    int row = get_global_id(0);
    if (row >= rows) return;
    __global const float* xr = x + (size_t)row * cols;
    float m = (float4)(-INFINITY);
    for (int c = 0; c < cols; ++c) m = fmax(m, xr[c]);
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += exp(xr[c] - m);
    for (int c = 0; c < cols; ++c) y[(size_t)row * cols + c] = exp(xr[c] - m) / s;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        cols = x.shape[-1]
        rows = x.numel() // cols
        y = torch.empty_like(x)
        ocl.build(SOURCE).softmax_rows(ocl.round_up(rows, 16), 16, x, y, rows, cols, inputs=[0])
        return y
