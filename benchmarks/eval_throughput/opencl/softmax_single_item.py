# OpenCL softmax, correct but deliberately slow: a single work-item walks every
# row (three passes each), so the device runs one thread.
import torch
import torch.nn as nn

from kernelsmith import opencl as ocl

SOURCE = r"""
__kernel void softmax_all(__global const float* x, __global float* y, int rows, int cols) {
    for (int row = 0; row < rows; ++row) {
        __global const float* xr = x + (size_t)row * cols;
        __global float* yr = y + (size_t)row * cols;
        float m = -INFINITY;
        for (int c = 0; c < cols; ++c) m = fmax(m, xr[c]);
        float s = 0.0f;
        for (int c = 0; c < cols; ++c) s += exp(xr[c] - m);
        for (int c = 0; c < cols; ++c) yr[c] = exp(xr[c] - m) / s;
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        cols = x.shape[-1]
        y = torch.empty_like(x)
        ocl.build(SOURCE).softmax_all(1, 1, x, y, x.numel() // cols, cols, inputs=[0])
        return y
