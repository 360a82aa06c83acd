# OpenCL softmax over the last dimension, with two strategies the offline
# mutator can switch between:
#   "row_per_item":  one work-item per row, three serial passes (naive: few
#                    work-items, each walking its row alone);
#   "group_per_row": one work-group per row; its work-items stride over the
#                    columns and combine max and sum through local memory.
# Every combination of the tunables below is correct; which is fastest depends
# on the device and the shape.
import torch
import torch.nn as nn

from kernelsmith import opencl as ocl

# EVOLVE-BLOCK-START
STRATEGY = "row_per_item"  # tune: ["row_per_item", "group_per_row"]
WORK_GROUP = 64  # tune: [16, 32, 64, 128, 256]
FAST_EXP = 0  # tune: [0, 1]

SOURCE = r"""
#if FAST_EXP
#define EXP(v) native_exp(v)
#else
#define EXP(v) exp(v)
#endif

__kernel void row_per_item(__global const float* x, __global float* y, int rows, int cols) {
    int row = get_global_id(0);
    if (row >= rows) return;
    __global const float* xr = x + (size_t)row * cols;
    __global float* yr = y + (size_t)row * cols;
    float m = -INFINITY;
    for (int c = 0; c < cols; ++c) m = fmax(m, xr[c]);
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += EXP(xr[c] - m);
    float inv = 1.0f / s;
    for (int c = 0; c < cols; ++c) yr[c] = EXP(xr[c] - m) * inv;
}

__kernel void group_per_row(__global const float* x, __global float* y, int rows, int cols,
                            __local float* scratch) {
    int row = get_group_id(0);
    int lid = get_local_id(0);
    int size = get_local_size(0);
    if (row >= rows) return;  // uniform across the group: no barrier is skipped by part of it
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
    for (int c = lid; c < cols; c += size) s += EXP(xr[c] - m);
    scratch[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = size / 2; step > 0; step /= 2) {
        if (lid < step) scratch[lid] += scratch[lid + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float inv = 1.0f / scratch[0];
    for (int c = lid; c < cols; c += size) yr[c] = EXP(xr[c] - m) * inv;
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
        program = ocl.build(SOURCE, options=f"-DFAST_EXP={FAST_EXP}")
        if STRATEGY == "group_per_row":
            program.group_per_row(rows * WORK_GROUP, WORK_GROUP, x, y, rows, cols,
                                  ocl.LocalMemory(4 * WORK_GROUP), inputs=[0])
        else:
            program.row_per_item(ocl.round_up(rows, WORK_GROUP), WORK_GROUP, x, y, rows, cols, inputs=[0])
        return y
# EVOLVE-BLOCK-END
