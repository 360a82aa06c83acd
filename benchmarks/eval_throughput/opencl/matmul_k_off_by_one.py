# Incorrect (off by one): the dot-product loop stops at K - 1, dropping the last
# product of every output.
import torch
import torch.nn as nn

from kernelsmith import opencl as ocl

SOURCE = r"""
__kernel void matmul(__global const float* A, __global const float* B, __global float* C,
                     int M, int N, int K) {
    int col = get_global_id(0);
    int row = get_global_id(1);
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K - 1; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = acc;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        A = A.contiguous()
        B = B.contiguous()
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), dtype=A.dtype)
        ocl.build(SOURCE).matmul((ocl.round_up(N, 8), ocl.round_up(M, 8)), (8, 8), A, B, C, M, N, K, inputs=[0, 1])
        return C
