# OpenCL softmax, one work-group per row: its work-items stride over the
# columns and combine the max and the sum through local memory (the fast
# strategy of the softmax example).
import torch
import torch.nn as nn

from kernelsmith import opencl as ocl

WORK_GROUP = 64

SOURCE = r"""
__kernel void softmax_rows(__global const float* x, __global float* y, int cols, __local float* scratch) {
    int row = get_group_id(0);
    int lid = get_local_id(0);
    int size = get_local_size(0);
    __global const float* xr = x + (size_t)row * cols;
    __global float* yr = y + (size_t)row * cols;
    float m = -INFINITY;
    for (int c = lid; c < cols; c += size) m = fmax(m, xr[c]);
    scratch[lid] = m;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = size / 2; step > 0; step /= 2) {
        if (lid < step) scratch[lid] = fmax(scratch[lid], scratch[lid + step]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    m = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    float s = 0.0f;
    for (int c = lid; c < cols; c += size) s += exp(xr[c] - m);
    scratch[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = size / 2; step > 0; step /= 2) {
        if (lid < step) scratch[lid] += scratch[lid + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float inv = 1.0f / scratch[0];
    for (int c = lid; c < cols; c += size) yr[c] = exp(xr[c] - m) * inv;
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
        ocl.build(SOURCE).softmax_rows(
            rows * WORK_GROUP, WORK_GROUP, x, y, cols, ocl.LocalMemory(4 * WORK_GROUP), inputs=[0]
        )
        return y
