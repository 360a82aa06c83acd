# Naive OpenCL layer norm: one work-item per row, two passes for mean and
# variance, a third to normalise. Correct, slow (serial rows, no local memory).
import torch
import torch.nn as nn

from kernelsmith import opencl as ocl

WORK_GROUP = 32  # tune: [8, 16, 32, 64]

SOURCE = r"""
__kernel void layernorm_rows(__global const float* x, __global const float* weight,
                             __global const float* bias, __global float* y,
                             int rows, int cols, float eps) {
    int row = get_global_id(0);
    if (row >= rows) return;
    __global const float* xr = x + (size_t)row * cols;
    __global float* yr = y + (size_t)row * cols;
    float mean = 0.0f;
    for (int c = 0; c < cols; ++c) mean += xr[c];
    mean /= cols;
    float var = 0.0f;
    for (int c = 0; c < cols; ++c) { float d = xr[c] - mean; var += d * d; }
    var /= cols;
    float inv = rsqrt(var + eps);
    for (int c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * inv * weight[c] + bias[c];
}
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        # Same parameters as nn.LayerNorm(features): weight 1, bias 0, eps 1e-5.
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        cols = x.shape[-1]
        rows = x.numel() // cols
        y = torch.empty_like(x)
        program = ocl.build(SOURCE)
        program.layernorm_rows(
            ocl.round_up(rows, WORK_GROUP), WORK_GROUP,
            x, self.weight, self.bias, y, rows, cols, self.eps,
            inputs=[0, 1, 2],
        )
        return y
